"""One Trio-native libpq connection for the store's hottest statement (docs/decisions.md,
"PostgreSQL store: the lone CAS on a Trio-native connection").

Every other statement runs on asyncpg connections behind the loop-thread bridge
(:mod:`._aiobridge`), which costs two thread wake-ups per call. A lone field CAS whose
caller holds the row (:attr:`._pgsql.FieldCas.single_slim`: it returns only the new
``store_version``) is latency-bound on exactly those, so it runs here instead: psycopg's
``pq`` module (its public libpq wrapper) in non-blocking mode, driven from the Trio thread
with ``trio.lowlevel.wait_readable`` / ``wait_writable`` on the connection's socket. The
statement is prepared once per connection, parameters and result go in binary.

Outcomes (the caller, :class:`._pgbatch.FieldBatcher`, maps them like the bridge's):

* ``int`` / ``None``: the new version, or no row matched (not applied);
* :class:`FastNotSent`: the connection was unusable before the statement left;
* :class:`FastRefused`: the server answered with an error; the session is fine and
  nothing was applied;
* :class:`FastLost`: the connection broke while the statement was in flight (unknown).

Cancellation keeps the store's rule (traps 1, 3, 4 of notes/postgres-under-trio.md): a
statement interrupted in flight is cancelled server-side (a libpq cancel request, sent
without blocking) and its result waited for, shielded, for at most ``grace`` seconds; only
then does ``trio.Cancelled`` propagate. A connection whose statement did not settle within
``grace`` is closed; one that settled (ready for the next query, no transaction) is kept.
"""

from __future__ import annotations

import select
import struct
from collections.abc import Callable, Sequence
from typing import Final, final

import trio
from psycopg import Error as PsycopgError, NotSupportedError, pq
from psycopg.conninfo import make_conninfo

__all__ = ["FastConnection", "FastLost", "FastNotSent", "FastRefused", "type_oids"]

_OIDS: Final = {"text": 25, "bytea": 17, "bigint": 20, "boolean": 16}
_INT8: Final = struct.Struct("!q")
_TRUE: Final = b"\x01"
_FALSE: Final = b"\x00"

_CONNECT_TIMEOUT: Final = 5.0
_RETRY_INITIAL: Final = 1.0
_RETRY_MAX: Final = 30.0


def type_oids(types: Sequence[str]) -> tuple[int, ...]:
    """The parameter type OIDs of a statement whose parameters are ``types``."""
    return tuple(_OIDS[t] for t in types)


class FastNotSent(Exception):
    """The connection was unusable before the statement left: nothing was sent."""


class FastRefused(Exception):
    """The server answered with an error; nothing was applied, the session is fine."""


class FastLost(Exception):
    """The connection broke while the statement was in flight: its outcome is unknown."""


def _encode(oid: int, value: object) -> bytes | None:
    if value is None:
        return None
    if oid == 20:
        return _INT8.pack(value)
    if oid == 17:
        assert isinstance(value, bytes | bytearray | memoryview)
        return bytes(value)
    if oid == 25:
        return str(value).encode("utf-8")
    return _TRUE if value else _FALSE


@final
class FastConnection:
    """One libpq connection used from the Trio thread by one caller at a time."""

    __slots__ = (
        "_conninfo",
        "_grace",
        "_pg",
        "_poller",
        "_prepared",
        "_retry_after",
        "_retry_at",
        "generation",
        "statements",
    )

    def __init__(self, dsn: str, application_name: str, *, grace: float) -> None:
        self._conninfo = make_conninfo(dsn, application_name=application_name).encode()
        self._grace = grace
        self._pg: pq.abc.PGconn | None = None
        self._poller = select.poll()
        self._prepared: dict[str, bytes] = {}
        self._retry_at = -float("inf")
        self._retry_after = _RETRY_INITIAL
        self.generation = -1
        """The store's connection generation this connection was opened in."""
        self.statements = 0
        """Statements sent on it (all connections of this object's life)."""

    @property
    def connected(self) -> bool:
        return self._pg is not None

    async def connect(self, generation: int) -> bool:
        """Open a connection (closing one of an older generation); False when that failed
        or a recent failure says not to try yet (the caller uses the bridge instead)."""
        self.close()
        now = trio.current_time()
        if now < self._retry_at:
            return False
        pg: pq.abc.PGconn | None = None
        try:
            with trio.move_on_after(_CONNECT_TIMEOUT):
                pg = await _open(self._conninfo)
                if pg.server_version >= 140000:
                    # A backend notices a vanished client within 1 s even mid-statement.
                    pg.send_query(b"SET client_connection_check_interval = '1s'")
                    # One short round trip, never left running: a caller cancelled here
                    # must not leave its backend busy behind it (grace-bounded).
                    with trio.CancelScope(shield=True), trio.fail_after(self._grace):
                        results = await _results(pg)
                    if results[-1].status != pq.ExecStatus.COMMAND_OK:
                        raise FastRefused(results[-1].get_error_message())
                self._poller = select.poll()
                self._poller.register(pg.socket, select.POLLIN)
                self._pg, pg = pg, None
                self.generation = generation
                self._retry_after = _RETRY_INITIAL
                return True
        except (PsycopgError, FastRefused, OSError, trio.TooSlowError):
            pass
        finally:
            if pg is not None:
                _finish(pg)
        self._retry_at = now + self._retry_after
        self._retry_after = min(self._retry_after * 2, _RETRY_MAX)
        return False

    def close(self) -> None:
        """Close the connection now (no statement may be in flight on it)."""
        pg, self._pg = self._pg, None
        self._prepared.clear()
        if pg is not None:
            _finish(pg)

    async def fetch_version(
        self, sql: str, oids: tuple[int, ...], args: Sequence[object]
    ) -> int | None:
        """Run ``sql`` (one bigint result column at most one row) with ``args`` of the
        types ``oids``: the value, or None when it returned no row."""
        pg = self._pg
        if pg is not None and not _alive(pg, self._poller):
            pg = None
        if pg is None or pg.status != pq.ConnStatus.OK:
            self.close()
            raise FastNotSent("the connection is closed")
        name = self._prepared.get(sql)
        if name is None:
            name = f"zlink_fast_{len(self._prepared)}".encode()
            try:
                pg.send_prepare(name, sql.encode("utf-8"), oids)
            except PsycopgError as exc:
                self.close()
                raise FastNotSent(str(exc)) from exc
            # A prepare applies nothing: any failure here is "not sent" for the CAS.
            try:
                results = await self._settled(pg)
            except FastLost as exc:
                raise FastNotSent(str(exc)) from exc
            if results[-1].status != pq.ExecStatus.COMMAND_OK:
                raise FastRefused(results[-1].get_error_message())
            self._prepared[sql] = name
        values = [_encode(oid, value) for oid, value in zip(oids, args, strict=True)]
        try:
            pg.send_query_prepared(name, values, [1] * len(values), result_format=1)
        except PsycopgError as exc:
            # Part of the message may have left: unknown, like a loss in flight.
            self.close()
            raise FastLost(str(exc)) from exc
        self.statements += 1
        results = await self._settled(pg)
        result = results[-1]
        if result.status == pq.ExecStatus.TUPLES_OK:
            if result.ntuples == 0:
                return None
            value = result.get_value(0, 0)
            assert value is not None
            return int(_INT8.unpack(value)[0])
        raise FastRefused(result.get_error_message())

    async def _settled(self, pg: pq.abc.PGconn) -> list[pq.abc.PGresult]:
        """The results of the statement just sent. Raises FastLost (connection broken,
        closed) or, cancelled, settles the statement and closes before ``Cancelled``."""
        try:
            results = await _results(pg)
        except PsycopgError as exc:
            self.close()
            raise FastLost(str(exc)) from exc
        except BaseException:
            await self._cancel_in_flight(pg)
            raise
        if pg.status != pq.ConnStatus.OK:
            self.close()
            raise FastLost(pg.get_error_message() or "the server closed the connection")
        return results

    async def _cancel_in_flight(self, pg: pq.abc.PGconn) -> None:
        """Shielded: cancel the running statement server-side and wait until it settled
        (at most ``grace`` seconds). Settled — the server said it is ready for the next
        query, outside any transaction — the connection stays (libpq's state is exactly
        the protocol's; asyncpg's trap 3 does not apply); otherwise it is closed."""
        settled = False
        with trio.CancelScope(shield=True), trio.move_on_after(self._grace):
            try:
                await _send_cancel(pg)
                await _results(pg)
                settled = (
                    pg.status == pq.ConnStatus.OK
                    and pg.transaction_status == pq.TransactionStatus.IDLE
                )
            except (PsycopgError, OSError):
                pass
        if not settled:
            self.close()


def _alive(pg: pq.abc.PGconn, poller: select.poll) -> bool:
    """Whether the idle connection ``pg`` is still open: what the server sent while it was
    idle is read first (a killed backend's termination notice, then EOF), so a connection
    found dead before a statement leaves is "not sent", never "unknown". One zero-timeout
    poll when nothing arrived."""
    for _ in range(8):
        if not poller.poll(0):
            break
        try:
            pg.consume_input()
        except PsycopgError:
            return False
    return pg.status == pq.ConnStatus.OK


async def _open(conninfo: bytes) -> pq.abc.PGconn:
    pg = pq.PGconn.connect_start(conninfo)
    try:
        if not await _drive(pg.connect_poll, pg):
            raise FastRefused(pg.get_error_message() or "connection failed")
        pg.nonblocking = 1
    except BaseException:
        _finish(pg)
        raise
    return pg


async def _drive(poll: Callable[[], int], conn: pq.abc.PGconn | pq.abc.PGcancelConn) -> bool:
    """Drive libpq's non-blocking ``poll`` of ``conn`` (a connect or a cancel request)
    until it ends: True when it succeeded, False when it failed."""
    while True:
        status = poll()
        if status == pq.PollingStatus.OK:
            return True
        if status == pq.PollingStatus.READING:
            await trio.lowlevel.wait_readable(conn.socket)
        elif status == pq.PollingStatus.WRITING:
            await trio.lowlevel.wait_writable(conn.socket)
        else:
            return False


async def _results(pg: pq.abc.PGconn) -> list[pq.abc.PGresult]:
    """Flush the statement just sent and read every result until the connection is
    idle again (non-blocking libpq: ``flush``, ``consume_input``, ``is_busy``)."""
    fd = pg.socket
    while pg.flush():
        await trio.lowlevel.wait_writable(fd)
    results: list[pq.abc.PGresult] = []
    while True:
        while pg.is_busy():
            await trio.lowlevel.wait_readable(fd)
            pg.consume_input()
        result = pg.get_result()
        if result is None:
            return results
        results.append(result)


async def _send_cancel(pg: pq.abc.PGconn) -> None:
    """A cancel request for ``pg``'s running statement, without blocking the Trio thread
    (libpq >= 17 ``PQcancelStart``; a worker thread with an older libpq)."""
    try:
        cancel = pg.cancel_conn()
    except NotSupportedError:
        legacy = pg.get_cancel()
        await trio.to_thread.run_sync(legacy.cancel)
        return
    try:
        cancel.start()
        await _drive(cancel.poll, cancel)
    finally:
        _finish(cancel)


def _finish(conn: pq.abc.PGconn | pq.abc.PGcancelConn) -> None:
    """Close ``conn``, telling Trio first that its socket goes (a waiter wakes up)."""
    try:
        fd = conn.socket
    except PsycopgError:
        fd = -1  # no socket (the connection is lost)
    if fd >= 0:
        trio.lowlevel.notify_closing(fd)
    conn.finish()
