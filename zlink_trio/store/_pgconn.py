"""A fixed set of dedicated asyncpg connections, used from Trio through a loop thread.

The PostgreSQL store runs every operation as ONE statement on one of ``size`` dedicated
connections (no ``asyncpg.Pool``: its reset query on release costs a round trip). A Trio
semaphore hands out the connections; the statement itself runs on the asyncio loop thread
(:mod:`._aiobridge`).

What happens when a statement is interrupted (docs/decisions.md, "PostgreSQL store"):

* Trio cancellation: the bridge cancels the asyncio task; asyncpg sends a cancel request,
  and :func:`_execute` then closes the connection gracefully, which waits until the server
  acknowledged the cancel (bounded by ``cancel_grace``, then the socket is aborted). Only
  then does ``trio.Cancelled`` propagate. The connection is never reused (trap 3 of
  notes/postgres-under-trio.md): the slot reconnects on its next use.
* Connection lost mid-statement: the outcome is unknown. Mutations raise
  :class:`~zlink_trio.errors.StoreOutcomeUnknown`; idempotent calls reconnect and retry,
  and an idempotent *mutation* that runs out of retries after such a loss raises
  ``StoreOutcomeUnknown`` too (the lost attempt may have committed).
* Connection found closed before the statement was sent, or a reconnect failing: nothing
  was sent, so every call may reconnect and retry, for at most ``retry_window`` seconds
  (then :class:`~zlink_trio.errors.Unavailable`).
* Deadlock / serialization failure: the statement was rolled back; every call retries.

A lost connection starts an *outage*: the connection generation moves on, so every other
connection is replaced before its next use too, and the first successful reconnect ends
the outage and increments :attr:`PgConnections.recovery_epoch` (a reconnect begun on an
older generation, before the outage started, does not count).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, final

import asyncpg
import trio

from ..errors import StoreOutcomeUnknown, Unavailable
from ._aiobridge import LoopThread
from ._pqfast import FastConnection

__all__ = ["Method", "NotSent", "PgConnections", "Slot", "discard_if_broken"]

Method = Literal["fetch", "fetchrow", "fetchval", "execute"]
Then = tuple[Any, ...] | None
"""``(sql, *args)`` of a follow-up ``fetchrow`` run when the first statement returned None."""

ROLLED_BACK_SQLSTATES: Final = frozenset({"40001", "40P01"})
"""serialization_failure, deadlock_detected: the statement surely did not commit."""

_BACKOFF_INITIAL: Final = 0.01
_BACKOFF_MAX: Final = 0.5


class NotSent(Exception):
    """Loop side: the connection was already closed; the statement never left."""


class _ConnectFailed(Exception):
    """Trio side: (re)connecting failed; ``__cause__`` says why."""


@final
class Slot:
    """One dedicated connection. ``conn`` is an ``asyncpg.Connection`` only ever touched on
    the loop thread; the Trio side only tests it for None (set to None by the loop side
    when the connection was discarded)."""

    __slots__ = ("conn", "generation")

    def __init__(self) -> None:
        self.conn: Any = None
        self.generation = -1


# ----- loop thread -----------------------------------------------------------------------
async def _connect_into(slot: Slot, kwargs: Mapping[str, Any], generation: int) -> None:
    """Connect and install the connection in ``slot`` here, on the loop thread: a value
    returned to a caller that was cancelled meanwhile would be dropped (and leak)."""
    conn = await asyncpg.connect(**kwargs)
    try:
        if conn.get_server_version().major >= 14:
            # A backend notices a vanished client within 1 s even mid-statement.
            await conn.execute("SET client_connection_check_interval = '1s'")
    except BaseException:
        conn.terminate()
        raise
    slot.conn = conn
    slot.generation = generation


async def _close_gracefully(conn: Any, grace: float) -> None:
    """Close a connection whose last statement may still be in flight.

    asyncpg's ``close()`` first waits for an in-flight cancel request to be acknowledged
    (or cancels the running statement itself), so once it returns the server has settled
    the statement: committed or rolled back, never still running. After ``grace`` seconds,
    or on any error, the socket is aborted instead.
    """
    try:
        # Our own bound too: before asyncpg 0.32 (#1356) close() could wait for a cancel
        # acknowledgement forever, outside its timeout.
        async with asyncio.timeout(grace):
            await conn.close(timeout=grace)
    except (Exception, asyncio.CancelledError):
        conn.terminate()


async def _execute(
    slot: Slot, grace: float, method: Method, sql: str, args: tuple[Any, ...], then: Then
) -> Any:
    conn = slot.conn
    if conn is None or conn.is_closed():
        raise NotSent
    try:
        result = await getattr(conn, method)(sql, *args)
        if result is None and then is not None:
            result = await conn.fetchrow(*then)
        return result
    except BaseException as exc:
        await discard_if_broken(slot, conn, exc, grace)
        raise


async def discard_if_broken(slot: Slot, conn: Any, exc: BaseException, grace: float) -> None:
    """Loop side, after a statement on ``slot``'s ``conn`` raised ``exc``: drop the
    connection unless the server answered with an ordinary error (the session is fine).

    A connection the server ended is terminated (``slot.conn`` None: the statement was
    lost in flight); a cancelled statement, or one that failed in an unknown state, is
    closed gracefully (settled server-side first) and never reused."""
    task = asyncio.current_task()
    cancelled = task is not None and task.cancelling() > 0
    while task is not None and task.cancelling():
        task.uncancel()  # let the graceful close below run its own timeout
    severity = getattr(exc, "severity", None) if isinstance(exc, asyncpg.PostgresError) else None
    if conn.is_closed() or severity in ("FATAL", "PANIC"):  # the server ended the session
        slot.conn = None
        conn.terminate()
    elif cancelled or not isinstance(exc, asyncpg.PostgresError | asyncpg.InterfaceError):
        # Cancelled (whatever asyncpg raised for it: trap 4), or failed in an unknown
        # state: never reuse this connection.
        slot.conn = None
        await _close_gracefully(conn, grace)


# ----- Trio side ---------------------------------------------------------------------------
@final
class PgConnections:
    """``size`` dedicated connections to one PostgreSQL database (see module docstring)."""

    def __init__(
        self,
        bridge: LoopThread,
        connect_kwargs: Mapping[str, Any],
        size: int,
        *,
        cancel_grace: float,
        retry_window: float,
        fast: bool = False,
    ) -> None:
        self._bridge = bridge
        self._kwargs = dict(connect_kwargs)
        self.fast: FastConnection | None = None
        """The Trio-native connection of the lone field CAS (:mod:`._pqfast`), when asked
        for (``fast``): one connection more than ``size``, opened by the first lone CAS
        (a store under steady concurrent load batches and never opens it), used only
        while a slot is held."""
        if fast:
            self.fast = FastConnection(
                self._kwargs["dsn"],
                self._kwargs["server_settings"]["application_name"],
                grace=cancel_grace,
            )
        self._slots = [Slot() for _ in range(size)]
        self._free = list(self._slots)
        self._limiter = trio.Semaphore(size)
        self._grace = cancel_grace
        self._retry_window = retry_window
        self._generation = 0
        self._outage = False
        self._closed = False
        self.recovery_epoch = 0

    async def open(self) -> None:
        """Connect every slot; raises Unavailable when the server cannot be reached."""
        failures: list[BaseException] = []

        async def connect(slot: Slot) -> None:
            try:
                await self._reconnect(slot)
            except _ConnectFailed as exc:
                failures.append(exc.__cause__ or exc)

        async with trio.open_nursery() as nursery:
            for slot in self._slots:
                nursery.start_soon(connect, slot)
        self._outage = False
        if failures:
            await self.aclose()
            raise Unavailable(f"cannot connect to PostgreSQL: {failures[0]!r}") from failures[0]

    async def aclose(self) -> None:
        """Wait for calls in flight, then close every connection (not cancellable)."""
        self._closed = True
        with trio.CancelScope(shield=True):
            for _ in self._slots:
                await self._limiter.acquire()
            if self.fast is not None:  # idle: every slot is held here
                self.fast.close()
            for slot in self._slots:
                conn, slot.conn = slot.conn, None
                if conn is not None:
                    await self._bridge.run(_close_gracefully, conn, self._grace)

    async def call(
        self,
        method: Method,
        sql: str,
        args: Sequence[object],
        *,
        idempotent: bool,
        mutation: bool = True,
        then: Then = None,
    ) -> Any:
        """Run one statement (and ``then`` when it returned None, on the same connection
        in the same round of the bridge). Raises StoreOutcomeUnknown (non-idempotent call,
        connection lost mid-flight; or an idempotent ``mutation`` that ran out of retries
        after an attempt was lost mid-flight), Unavailable (no connection for
        ``retry_window``), the ``asyncpg.PostgresError`` the server reported, or
        ``trio.Cancelled``."""
        slot = await self.acquire()  # no schedule point when one is free (bridge.run has one)
        try:
            return await self._call_on(slot, method, sql, tuple(args), idempotent, mutation, then)
        finally:
            self.release(slot)

    # --- one slot held across a caller-driven call (the batched CAS, ._pgbatch) -------
    @property
    def bridge(self) -> LoopThread:
        return self._bridge

    @property
    def cancel_grace(self) -> float:
        return self._grace

    def try_acquire(self) -> Slot | None:
        """A free connection slot without a schedule point, or None when all are busy."""
        if self._closed:
            raise trio.ClosedResourceError("the PostgreSQL store is closed")
        try:
            self._limiter.acquire_nowait()
        except trio.WouldBlock:
            return None
        return self._free.pop()

    async def acquire(self) -> Slot:
        """A free connection slot (waits while all are busy); give it back with
        :meth:`release`."""
        slot = self.try_acquire()
        if slot is None:
            await self._limiter.acquire()
            slot = self._free.pop()
        return slot

    def release(self, slot: Slot) -> None:
        self._free.append(slot)
        self._limiter.release()

    def ready(self, slot: Slot) -> bool:
        """``slot`` has a connection of the current generation (no reconnect needed)."""
        return slot.conn is not None and slot.generation == self._generation

    async def connected(self, slot: Slot) -> bool:
        """Make sure ``slot`` has a connection of the current generation (reconnecting
        once if needed); False when reconnecting failed (the caller falls back to
        :meth:`call`, which retries for ``retry_window``)."""
        if slot.conn is not None and slot.generation == self._generation:
            return True
        try:
            await self._reconnect(slot)
        except _ConnectFailed:
            return False
        return True

    @property
    def generation(self) -> int:
        """The connection generation (it moves on when a connection breaks)."""
        return self._generation

    def fast_usable(self) -> FastConnection | None:
        """The Trio-native connection, when there is one and no outage is on (during an
        outage every call goes through the bridge, whose reconnect ends it)."""
        return None if self._outage or self._closed else self.fast

    def fast_broken(self, generation: int) -> None:
        """The Trio-native connection opened in ``generation`` was found broken (closed
        before the statement was sent, or lost in flight): an outage starts, as for a
        slot."""
        if generation == self._generation:
            self._generation += 1
            self._outage = True

    def broken(self, slot: Slot) -> None:
        """A caller-driven call found ``slot``'s connection broken (closed before the
        statement was sent, or lost in flight): an outage starts, as in :meth:`call`."""
        self._lost(slot)

    async def _call_on(
        self,
        slot: Slot,
        method: Method,
        sql: str,
        args: tuple[Any, ...],
        idempotent: bool,
        mutation: bool,
        then: Then,
    ) -> Any:
        first_failure: float | None = None
        lost_in_flight = False  # an attempt may have committed
        backoff = _BACKOFF_INITIAL
        while True:
            try:
                if slot.conn is None or slot.generation != self._generation:
                    await self._reconnect(slot)
                return await self._bridge.run(_execute, slot, self._grace, method, sql, args, then)
            except NotSent as exc:  # found closed before sending: safe to retry
                self._lost(slot)
                failure: BaseException = exc
            except _ConnectFailed as exc:
                failure = exc.__cause__ or exc
            except Exception as exc:
                if slot.conn is not None:  # the server answered: the outcome is known
                    if (
                        isinstance(exc, asyncpg.PostgresError)
                        and exc.sqlstate in ROLLED_BACK_SQLSTATES
                    ):
                        failure = exc
                    else:
                        raise
                else:  # the connection broke while the statement was in flight
                    self._lost(slot)
                    if not idempotent:
                        raise StoreOutcomeUnknown(
                            f"PostgreSQL connection lost during a Store mutation ({exc!r}); "
                            "it may or may not have committed: re-read before deciding"
                        ) from exc
                    failure = exc
                    lost_in_flight = True
            now = trio.current_time()
            if first_failure is None:  # the first retry goes at once (usually a reconnect)
                first_failure = now
                continue
            if now - first_failure >= self._retry_window:
                if mutation and lost_in_flight:
                    raise StoreOutcomeUnknown(
                        f"PostgreSQL store unavailable after a connection was lost during an "
                        f"idempotent Store mutation ({failure!r}); an attempt may have "
                        "committed: re-read before deciding"
                    ) from failure
                raise Unavailable(f"PostgreSQL store unavailable: {failure!r}") from failure
            await trio.sleep(backoff)
            backoff = min(backoff * 2, _BACKOFF_MAX)

    async def _reconnect(self, slot: Slot) -> None:
        old, slot.conn = slot.conn, None
        if old is not None:  # replaced after an outage elsewhere
            await self._bridge.run(_close_gracefully, old, self._grace)
        try:
            await self._bridge.run(_connect_into, slot, self._kwargs, self._generation)
        except Exception as exc:
            if not self._outage:
                self._generation += 1
                self._outage = True
            raise _ConnectFailed from exc
        finally:
            # Only a connect of the current generation proves recovery: one begun before
            # the outage started may have got in just before the server went down.
            if (
                slot.conn is not None and self._outage and slot.generation == self._generation
            ):  # (even if we were cancelled)
                self._outage = False
                self.recovery_epoch += 1

    def _lost(self, slot: Slot) -> None:
        """A connection of the current generation broke: an outage starts (once)."""
        if slot.generation == self._generation:
            self._generation += 1
            self._outage = True
