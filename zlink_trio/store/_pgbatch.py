"""Batched field CAS: concurrent CAS of different rows go to PostgreSQL as ONE statement.

A field CAS (``set_membership``, ``set_recovery``, ``set_relocation``, ``begin_closing``)
joins the *open* batch of its statement when there is one, else it leads a new batch:
it lets the rest of the current scheduler tick run (one checkpoint: trio runs the tasks
runnable in a tick as one batch, so every CAS issued in that tick joins), takes a
connection slot, queues the batch on the loop thread and sleeps on the batch's doorbell;
CAS issued until the loop thread starts the statement and *seals* the batch (also while
the leader waits for a free connection) join it too. A lone caller — no batch in flight
and the last :data:`LONE_STREAK` batches had a single entry each — skips the checkpoint
(it would only add a scheduler pass to its round trip) and the batch itself: its CAS goes
straight to the loop thread as one call (:func:`_run_lone`, a batch of one without the
entry, seal lock and open batch), so a CAS issued meanwhile leads its own batch; the first
tick of a burst after such a quiet spell may then go as two statements. At most one entry
per key: a second CAS of a key already in the batch starts the next one. One statement
(``UPDATE … FROM unnest(…) WITH ORDINALITY … RETURNING u.i, …``, :class:`._pgsql.FieldCas`)
then applies every entry whose row matches, one commit for all; entries missing from its
result are re-read in a second statement on the same connection (a fresh snapshot) and
answered as lost with the current row. A lone entry uses the plain single-row
``UPDATE``. When every entry's caller holds the row at its expected version, the
statement returns only the new versions (``slim``) and each caller rebuilds its row.

What cannot be answered per entry falls back to one-by-one: a statement that never left
(connection found closed, reconnect failed) or that the server refused as a whole (any
error response; a deadlock) changed nothing, so each caller runs its own CAS again
through :meth:`._pgconn.PgConnections.call` (:data:`FALLBACK`). A connection lost while
the statement was in flight leaves every entry's outcome unknown
(``StoreOutcomeUnknown``). Rows the UPDATE changed are final even if the re-read of the
lost ones fails (those fall back, they were not applied).

Cancellation stays as safe as for one call (docs/decisions.md, "PostgreSQL store"): a
caller cancelled before the batch was sealed is taken out of it (nothing of it is sent);
after that its outcome is unknown, so it waits until the statement is settled and then
raises ``trio.Cancelled``. The statement itself is cancelled (asyncpg cancel request,
connection closed gracefully, as for one call) once every caller in the batch was
cancelled, or ``cancel_grace`` seconds after the first one was while others still wait
(a frozen backend never holds a cancelled caller longer); the callers still waiting then
get ``StoreOutcomeUnknown`` (unless the statement finished before the cancel landed: then
everybody gets the real answer). The leader sends, waits on the doorbell and hands every
caller its answer; its own cancellation only makes it wait shielded like any other
cancelled caller. Nobody holds a cancel scope while nothing is cancelled (a trio cancel
scope costs more than a scheduler pass): a cancelled caller takes one for its grace and
gives the statement up itself (:meth:`._aiobridge.LoopThread.cancel`).
"""

from __future__ import annotations

import threading
from typing import Any, Final, final

import outcome
import trio

from ..errors import StoreOutcomeUnknown
from ._aiobridge import _Call
from ._pgconn import NotSent, PgConnections, Slot, discard_if_broken
from ._pgsql import FieldCas
from ._pqfast import FastConnection, FastLost, FastNotSent, FastRefused

__all__ = ["APPLIED_FULL", "APPLIED_SLIM", "FALLBACK", "LOST", "FieldBatcher"]

MAX_BATCH: Final = 256
"""Entries per statement at most (a bigger burst becomes several statements)."""

LONE_STREAK: Final = 16
"""Single-entry batches in a row after which a new batch goes without waiting for the end
of its scheduler tick (nobody else has been issuing CAS here)."""

APPLIED_SLIM: Final = 0
"""``(APPLIED_SLIM, new_version)``: applied; the caller rebuilds the row."""
APPLIED_FULL: Final = 1
"""``(APPLIED_FULL, record)``: applied; the row after it (authority columns)."""
LOST: Final = 2
"""``(LOST, record or None)``: not applied; the current row (None: Missing)."""


class _Fallback:
    __slots__ = ()

    def __repr__(self) -> str:
        return "FALLBACK"


FALLBACK: Final = _Fallback()
"""Nothing of this entry was applied and the batch cannot say more: run it alone."""


@final
class _Entry:
    """One caller's CAS in a batch."""

    __slots__ = ("args", "delivered", "key", "left", "parked", "slim", "task")

    def __init__(self, key: tuple[str, bytes], args: tuple[Any, ...], slim: bool) -> None:
        self.key = key
        self.args = args
        """``(namespace, object_id, expected, *fields)``."""
        self.slim = slim
        """Its caller holds the row at the expected version (can rebuild it)."""
        self.task = trio.lowlevel.current_task()
        self.parked = False
        """Its caller sleeps in :meth:`FieldBatcher._park`."""
        self.delivered: outcome.Outcome[Any] | None = None
        """Its answer, when it came while its caller was not parked."""
        self.left = False
        """Taken out of the batch before the seal (nothing of it was sent)."""


@final
class _Batch:
    __slots__ = (
        "call",
        "cancelled",
        "entries",
        "keys",
        "live",
        "lock",
        "lost_sql",
        "sealed",
        "statements",
    )

    def __init__(self, statements: FieldCas, lost_sql: str) -> None:
        self.statements = statements
        self.lost_sql = lost_sql
        self.entries: list[_Entry] = []
        self.keys: set[tuple[str, bytes]] = set()
        self.lock = threading.Lock()
        self.sealed = False
        """Set on the loop thread when the statement starts (or by the leader when it
        gives up before sending): nobody joins or leaves after that."""
        self.live = 0
        """Entries whose callers were not cancelled."""
        self.call: _Call[Any] | None = None
        """The statement queued on the loop thread."""
        self.cancelled = False
        """We asked the loop thread to cancel the statement."""

    def join(self, entry: _Entry) -> bool:
        with self.lock:
            if self.sealed or entry.key in self.keys or len(self.entries) >= MAX_BATCH:
                return False
            self.entries.append(entry)
            self.keys.add(entry.key)
        self.live += 1
        return True

    def seal(self) -> list[_Entry]:
        """Close the batch (idempotent); its entries in key order, the order the statement
        changes the rows in (so two batches never lock two rows in opposite orders)."""
        with self.lock:
            if not self.sealed:
                self.sealed = True
                self.entries.sort(key=_by_key)
            return self.entries

    def leave(self, entry: _Entry) -> bool:
        """Take ``entry`` out of a batch not sealed yet (True), else False."""
        with self.lock:
            if self.sealed:
                return False
            self.entries.remove(entry)
            self.keys.discard(entry.key)
        self.live -= 1
        return True


def _by_key(entry: _Entry) -> tuple[str, bytes]:
    return entry.key


# ----- loop thread ---------------------------------------------------------------------------
async def _run_batch(slot: Slot, grace: float, batch: _Batch) -> list[Any]:
    """Seal ``batch`` and run it on ``slot``'s connection; one ``(status, value)`` or
    FALLBACK per entry, in entry order."""
    entries = batch.seal()
    conn = slot.conn
    if conn is None or conn.is_closed():
        raise NotSent
    statements = batch.statements
    slim = all(e.slim for e in entries)
    results: list[Any] = [None] * len(entries)
    try:
        if len(entries) == 1:
            args = entries[0].args
            if slim:
                version = await conn.fetchval(statements.single_slim, *args)
                if version is not None:
                    results[0] = (APPLIED_SLIM, version)
            else:
                record = await conn.fetchrow(statements.single_full, *args)
                if record is not None:
                    results[0] = (APPLIED_FULL, record[1:])
        else:
            columns = [list(column) for column in zip(*(e.args for e in entries), strict=True)]
            if slim:
                for i, version in await conn.fetch(statements.batch_slim, *columns):
                    results[i - 1] = (APPLIED_SLIM, version)
            else:
                for record in await conn.fetch(statements.batch_full, *columns):
                    results[record[0] - 1] = (APPLIED_FULL, record[1:])
    except BaseException as exc:
        await discard_if_broken(slot, conn, exc, grace)
        raise
    lost = [i for i, r in enumerate(results) if r is None]
    if lost:
        try:
            records = await conn.fetch(
                batch.lost_sql,
                [entries[i].key[0] for i in lost],
                [entries[i].key[1] for i in lost],
            )
        except BaseException as exc:
            # The changed rows are final; the lost ones were not applied: run them alone.
            await discard_if_broken(slot, conn, exc, grace)
            if isinstance(exc, Exception):
                for i in lost:
                    results[i] = FALLBACK
                return results
            raise
        for record in records:
            current = record[1:]
            results[lost[record[0] - 1]] = (LOST, None if current[0] is None else current)
    return results


async def _run_lone(
    slot: Slot, grace: float, statements: FieldCas, lost_sql: str, args: tuple[Any, ...], slim: bool
) -> Any:
    """:func:`_run_batch` of a batch of one, without the batch: ``(status, value)`` or
    FALLBACK for the single CAS ``args`` on ``slot``'s connection."""
    conn = slot.conn
    if conn is None or conn.is_closed():
        raise NotSent
    try:
        if slim:
            version = await conn.fetchval(statements.single_slim, *args)
            if version is not None:
                return (APPLIED_SLIM, version)
        else:
            record = await conn.fetchrow(statements.single_full, *args)
            if record is not None:
                return (APPLIED_FULL, record[1:])
    except BaseException as exc:
        await discard_if_broken(slot, conn, exc, grace)
        raise
    try:
        records = await conn.fetch(lost_sql, [args[0]], [args[1]])
    except BaseException as exc:
        # Not applied: run it alone.
        await discard_if_broken(slot, conn, exc, grace)
        if isinstance(exc, Exception):
            return FALLBACK
        raise
    current = records[0][1:]
    return (LOST, None if current[0] is None else current)


# ----- Trio side -------------------------------------------------------------------------------
@final
class FieldBatcher:
    """The open batch of each field CAS statement of one store (see module docstring)."""

    __slots__ = ("_alone", "_conns", "_inflight", "_lost_sql", "_open")

    def __init__(self, conns: PgConnections, lost_sql: str) -> None:
        self._conns = conns
        self._lost_sql = lost_sql
        self._open: dict[str, _Batch] = {}
        self._inflight = 0
        """Batches sent and not answered yet."""
        self._alone = 0
        """Batches in a row that had a single entry."""

    async def cas(self, statements: FieldCas, args: tuple[Any, ...], *, slim: bool) -> Any:
        """Run one field CAS ``(namespace, object_id, expected, *fields)`` in a batch;
        ``(status, value)`` or :data:`FALLBACK`. Raises ``StoreOutcomeUnknown``,
        ``trio.ClosedResourceError`` or ``trio.Cancelled``."""
        await trio.lowlevel.checkpoint_if_cancelled()
        batch = self._open.get(statements.name)
        if batch is None and not self._inflight and self._alone >= LONE_STREAK:
            slot = self._conns.try_acquire()
            if slot is not None:
                return await self._lone(slot, statements, args, slim)
        entry = _Entry((args[0], args[1]), args, slim)
        if batch is not None and batch.join(entry):
            return await self._follow(batch, entry)
        return await self._lead(statements, entry)

    async def _lone(
        self, slot: Slot, statements: FieldCas, args: tuple[Any, ...], slim: bool
    ) -> Any:
        """A lone caller's CAS (nothing in flight, the last batches single): a batch of one
        without the batch (no entry, no seal lock, no open batch to join: a CAS issued
        meanwhile leads its own). Answers and cancellation as for a batch of one: cancelled
        before the loop thread started it, nothing is sent; after that the statement is
        given up at once (nobody else waits for it) and settled before ``Cancelled``."""
        conns = self._conns
        if slim:
            fast = conns.fast_usable()
            if fast is not None:
                return await self._lone_fast(fast, slot, statements, args)
        if not conns.ready(slot):  # (re)connect on the batch path
            conns.release(slot)
            return await self._lead(statements, _Entry((args[0], args[1]), args, slim))
        bridge = conns.bridge
        try:
            call = bridge.submit(
                _run_lone, slot, conns.cancel_grace, statements, self._lost_sql, args, slim
            )
        except BaseException:
            conns.release(slot)
            raise
        self._inflight += 1
        try:
            await call.wait()
        except BaseException:
            try:
                await bridge.cancel_and_settle(call)  # shielded: settled before we go on
            finally:
                self._inflight -= 1
                self._alone += 1
                conns.release(slot)
            raise
        self._inflight -= 1
        self._alone += 1
        conns.release(slot)
        result = bridge.result_of(call)
        if isinstance(result, outcome.Value):
            return result.value
        assert isinstance(result, outcome.Error)
        error = result.error
        if isinstance(error, NotSent):
            conns.broken(slot)
            return FALLBACK
        if isinstance(error, Exception) and not isinstance(error, trio.ClosedResourceError):
            if slot.conn is not None:  # the server answered: nothing was applied
                return FALLBACK
            conns.broken(slot)
            raise _unknown(error)
        raise _copy(error)

    async def _lone_fast(
        self, fast: FastConnection, slot: Slot, statements: FieldCas, args: tuple[Any, ...]
    ) -> Any:
        """:meth:`_lone` of a caller holding the row, on the Trio-native connection (no
        thread hand-off; :mod:`._pqfast`), ``slot`` held meanwhile. Not applied (no row
        matched) or refused by the server: FALLBACK (nothing was applied, and a version
        never comes back, so the bridge's run of it answers the same: lost with the
        current row, or the typed error). Connection broken: an outage starts; FALLBACK
        if nothing was sent, else ``StoreOutcomeUnknown``. Cancelled in flight: settled
        server-side and closed first (:mod:`._pqfast`)."""
        conns = self._conns
        self._inflight += 1
        try:
            generation = conns.generation
            if (not fast.connected or fast.generation != generation) and not await fast.connect(
                generation
            ):
                return FALLBACK
            version = await fast.fetch_version(statements.single_slim, statements.oids, args)
        except FastNotSent:
            conns.fast_broken(fast.generation)
            return FALLBACK
        except FastRefused:
            return FALLBACK
        except FastLost as exc:
            conns.fast_broken(fast.generation)
            raise _unknown(exc) from exc
        finally:
            self._inflight -= 1
            self._alone += 1
            conns.release(slot)
        return FALLBACK if version is None else (APPLIED_SLIM, version)

    async def _follow(self, batch: _Batch, entry: _Entry) -> Any:
        try:
            result = await self._park(entry, batch)
        except BaseException:
            if not entry.left:  # sent: unknown until settled, so wait for it first
                await self._settle_cancelled(batch, entry)
            raise
        return result.unwrap()

    async def _park(self, entry: _Entry, batch: _Batch | None = None) -> outcome.Outcome[Any]:
        """Sleep until the leader delivers ``entry``'s answer. Cancellable: a caller
        cancelled before ``batch`` was sealed is taken out of it (``entry.left``)."""
        if entry.delivered is not None:
            return entry.delivered

        def abort(_: Any) -> trio.lowlevel.Abort:
            entry.parked = False
            if batch is not None and batch.leave(entry):
                entry.left = True
            return trio.lowlevel.Abort.SUCCEEDED

        entry.parked = True
        answer: outcome.Outcome[Any] = await trio.lowlevel.wait_task_rescheduled(abort)
        return answer

    def _deliver(self, entry: _Entry, answer: outcome.Outcome[Any]) -> None:
        if entry.parked:
            entry.parked = False
            trio.lowlevel.reschedule(entry.task, outcome.Value(answer))
        else:
            entry.delivered = answer

    def _give_up(self, batch: _Batch) -> None:
        """Cancel the batch's statement (its asyncio task): the leader wakes once the loop
        thread settled it (asyncpg cancel request, connection closed gracefully)."""
        if not batch.cancelled and batch.call is not None:
            batch.cancelled = True
            self._conns.bridge.cancel(batch.call)

    async def _settle_cancelled(self, batch: _Batch, entry: _Entry) -> None:
        """A follower cancelled after the seal: wait (shielded) for its answer, giving the
        statement up once nobody waits for it any more, or ``cancel_grace`` from now."""
        batch.live -= 1
        with trio.CancelScope(shield=True) as scope:
            if batch.live <= 0:
                self._give_up(batch)
            else:
                scope.deadline = trio.current_time() + self._conns.cancel_grace
            await self._park(entry)
        if scope.cancelled_caught:
            self._give_up(batch)
            with trio.CancelScope(shield=True):
                await self._park(entry)

    async def _lead(self, statements: FieldCas, entry: _Entry) -> Any:
        conns = self._conns
        batch = _Batch(statements, self._lost_sql)
        batch.join(entry)
        self._open[statements.name] = batch
        try:
            submitted = await self._submit(batch)
        except BaseException:
            self._dissolve(batch, entry)
            raise
        if submitted is None:
            self._dissolve(batch, entry)
            return FALLBACK
        call, slot = submitted
        self._inflight += 1
        try:
            mine = await self._wait(batch, call)
        finally:
            self._inflight -= 1
            self._alone = self._alone + 1 if len(batch.entries) == 1 else 0
            self._close(batch)
            conns.release(slot)
        mine_result: outcome.Outcome[Any] | None = None
        for entry_, result in zip(batch.entries, self._outcomes(batch, call, slot), strict=True):
            if entry_ is entry:
                mine_result = result
            else:
                self._deliver(entry_, result)
        if mine is not None:
            raise mine
        assert mine_result is not None
        if len(batch.entries) > 1:
            # Resume with the callers just woken (next tick), not before them: their next
            # CAS and ours are then issued in one tick and go as one batch again.
            await trio.lowlevel.cancel_shielded_checkpoint()
        return mine_result.unwrap()

    async def _submit(self, batch: _Batch) -> tuple[_Call[Any], Slot] | None:
        """A connection for ``batch`` (joiners keep coming while we wait for one) and the
        batch queued on the loop thread; None when no connection could be had at once."""
        conns = self._conns
        if self._inflight or self._alone < LONE_STREAK:
            # CAS run concurrently here: let the rest of this scheduler tick join first
            # (every task runnable now runs before this one resumes: trio runs a tick's
            # tasks as one batch). A lone caller goes at once.
            await trio.lowlevel.checkpoint()
        slot = await conns.acquire()
        try:
            if not await conns.connected(slot):
                conns.release(slot)
                return None
            batch.call = conns.bridge.submit(_run_batch, slot, conns.cancel_grace, batch)
            return batch.call, slot
        except BaseException:
            conns.release(slot)
            raise

    def _close(self, batch: _Batch) -> None:
        name = batch.statements.name
        if self._open.get(name) is batch:
            del self._open[name]

    def _dissolve(self, batch: _Batch, leader: _Entry) -> None:
        """Nothing was sent: the callers that joined run their CAS alone."""
        self._close(batch)
        for entry in batch.seal():
            if entry is not leader:
                self._deliver(entry, outcome.Value(FALLBACK))

    async def _wait(self, batch: _Batch, call: _Call[Any]) -> BaseException | None:
        """Sleep on the batch's doorbell until the statement settled; returns the leader's
        own cancellation (to re-raise). No cancel scope on this path (one costs more than a
        scheduler pass): only a cancelled leader takes one, to wait shielded like any
        cancelled caller (statement given up when nobody waits for it, or after the
        grace)."""
        try:
            await call.wait()
            return None
        except BaseException as exc:  # the leader was cancelled (or interrupted)
            mine = exc
        batch.live -= 1
        with trio.CancelScope(shield=True) as scope:
            if batch.live <= 0:
                self._give_up(batch)
            else:
                scope.deadline = trio.current_time() + self._conns.cancel_grace
            await call.wait()
        if scope.cancelled_caught:
            self._give_up(batch)
            with trio.CancelScope(shield=True):
                await call.wait()
        return mine

    def _outcomes(self, batch: _Batch, call: _Call[Any], slot: Slot) -> list[outcome.Outcome[Any]]:
        """What each entry's caller gets, in entry order."""
        n = len(batch.entries)
        result = self._conns.bridge.result_of(call)
        if isinstance(result, outcome.Value):  # finished before any cancel landed
            return [outcome.Value(value) for value in result.value]
        assert isinstance(result, outcome.Error)
        if batch.cancelled:
            return [
                outcome.Error(
                    StoreOutcomeUnknown(
                        "a batched Store CAS was cancelled in flight (its other callers gave "
                        "up): it may or may not have committed: re-read before deciding"
                    )
                )
                for _ in range(n)
            ]
        error = result.error
        if isinstance(error, NotSent):
            self._conns.broken(slot)
            return [outcome.Value(FALLBACK) for _ in range(n)]
        if isinstance(error, Exception) and not isinstance(error, trio.ClosedResourceError):
            if slot.conn is not None:  # the server answered: nothing was applied
                return [outcome.Value(FALLBACK) for _ in range(n)]
            self._conns.broken(slot)
            return [outcome.Error(_unknown(error)) for _ in range(n)]
        return [outcome.Error(_copy(error)) for _ in range(n)]


def _unknown(cause: BaseException) -> StoreOutcomeUnknown:
    exc = StoreOutcomeUnknown(
        f"PostgreSQL connection lost during a Store mutation ({cause!r}); it may or may "
        "not have committed: re-read before deciding"
    )
    exc.__cause__ = cause
    return exc


def _copy(error: BaseException) -> BaseException:
    """A fresh exception like ``error`` for each caller (one instance raised in several
    tasks would share and mangle its traceback)."""
    if isinstance(error, trio.ClosedResourceError):
        exc: BaseException = trio.ClosedResourceError(*error.args)
    else:  # pragma: no cover - nothing else reaches here
        exc = RuntimeError(f"batched Store CAS failed: {error!r}")
    exc.__cause__ = error
    return exc
