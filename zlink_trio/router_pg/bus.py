"""PostgreSQL SessionSignalBus (spec 10 §3.3, §5.4, §10.1) on LISTEN/NOTIFY.

Two NOTIFY channels per schema, one per :class:`~zlink_trio.router.signals.Channel` (events
and control), named from a hash of the schema. A notification's payload is the signal's
canonical JSON text; one whose text is over NOTIFY's limit (8,000 bytes) is written to the
spill table instead, in the same statement that notifies ``#<row id>``, and each receiver
reads the row back (rows expire after ``spill_ttl`` on the database clock; expired ones are
deleted by later spills).

:meth:`PostgresSessionSignalBus.serve` (a service task) owns one listening connection on
the database's loop thread and two tasks: the *watcher* (reconnects and
re-LISTENs when the connection ends, and pings it every ``keepalive`` seconds to find a
connection that died silently) and the *dispatcher* (resolves spills, decodes, fans the
signal out to the current subscribers). ``subscribe`` only registers a channel: it owns
no task and no cancel scope. Notifications arrive on the loop thread and are handed to Trio with the
run's token (``run_sync_soon``; the callback never raises into the run: trap 5 of
notes/postgres-under-trio.md).

Loss: pub/sub is lossy (§10.1). Signals published while a subscription reconnects are not
delivered; neither are those that overflow a full subscriber buffer or whose spill row is
gone (all counted in :meth:`PostgresSessionSignalBus.statistics`). The router never depends
on one signal: a forwarded caller polls the idempotency store (``forward_poll_interval``,
§6.3 D) and the holder re-checks its inbox, which is the polling fallback for lost
notifications.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, final

import asyncpg
import attrs
import trio

from ..errors import ZLinkError
from ..router.signals import Channel, SessionSignal, decode_signal, encode_signal
from ..store._pgadmin import _connect_kwargs
from ._db import RouterDatabase

__all__ = ["NOTIFY_LIMIT", "PgSignalBusStatistics", "PostgresSessionSignalBus", "channel_names"]

NOTIFY_LIMIT: Final = 8000
"""PostgreSQL refuses a NOTIFY payload of 8,000 bytes or more (default build)."""
_SPILL: Final = "#"
_MARKER: Final = "!"
_BACKOFF_INITIAL: Final = 0.05
_BACKOFF_MAX: Final = 1.0


def channel_names(schema: str) -> dict[Channel, str]:
    """The NOTIFY channel of each bus channel for ``schema``."""
    digest = hashlib.sha256(schema.encode("utf-8")).hexdigest()[:20]
    return {c: f"zlr_{digest}_{c.value}" for c in Channel}


@attrs.frozen
class PgSignalBusStatistics:
    published: dict[Channel, int]
    spilled: int
    """Signals published through the spill table (over NOTIFY's limit)."""
    dropped_undecodable: int
    dropped_overflow: int
    """Lost to a full subscriber buffer (or a full hand-off queue from the loop thread)."""
    dropped_spill_missing: int
    reconnects: int
    """Listening connections re-established (each one may have lost signals)."""


# ----- loop thread -----------------------------------------------------------------------
@final
class _LoopConn:
    """The listening connection, only ever touched on the loop thread."""

    __slots__ = ("conn",)

    def __init__(self) -> None:
        self.conn: Any = None


async def _listen(
    holder: _LoopConn,
    kwargs: dict[str, Any],
    channels: tuple[str, ...],
    on_notify: Callable[..., None],
    on_lost: Callable[..., None],
) -> None:
    conn = await asyncpg.connect(**kwargs)
    try:
        for channel in channels:
            await conn.add_listener(channel, on_notify)
        conn.add_termination_listener(on_lost)
    except BaseException:
        conn.terminate()
        raise
    holder.conn = conn  # installed here: a cancelled caller would drop a returned one


async def _drop(holder: _LoopConn) -> None:
    conn, holder.conn = holder.conn, None
    if conn is not None:
        conn.terminate()


async def _ping(holder: _LoopConn) -> None:
    conn = holder.conn
    if conn is None or conn.is_closed():
        raise ConnectionError("listening connection closed")
    await conn.fetchval("SELECT 1")


# ----- Trio side ---------------------------------------------------------------------------
@final
class _Listener:
    """The bus's listening connection, its watcher and its dispatcher (:meth:`run`)."""

    def __init__(self, bus: PostgresSessionSignalBus) -> None:
        self._bus = bus
        self._token = trio.lowlevel.current_trio_token()
        self._incoming_send, self._incoming = trio.open_memory_channel[str](bus._buffer)
        self._holder = _LoopConn()
        self._generation = 0
        self._lost = trio.Event()

    # Loop thread: hand over to Trio; never raise.
    def _notify_from_loop(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        with suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self._arrive, payload)

    def _lost_from_loop(self, generation: int) -> Callable[..., None]:
        def lost(_conn: object) -> None:
            with suppress(trio.RunFinishedError):
                self._token.run_sync_soon(self._mark_lost, generation)

        return lost

    # Trio thread (run_sync_soon callbacks: must not raise).
    def _arrive(self, payload: str) -> None:
        try:
            self._incoming_send.send_nowait(payload)
        except trio.WouldBlock:
            self._bus._overflow += 1
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    def _mark_lost(self, generation: int) -> None:
        if generation == self._generation:
            self._lost.set()

    async def _connect(self) -> None:
        self._generation += 1
        self._lost = trio.Event()
        bus = self._bus
        await bus._db.bridge.run(
            _listen,
            self._holder,
            bus._connect_kwargs,
            tuple(bus._channels.values()),
            self._notify_from_loop,
            self._lost_from_loop(self._generation),
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        bus = self._bus
        try:
            async with trio.open_nursery() as nursery:
                if bus._listen:
                    await self._connect()
                    nursery.start_soon(self._watch)
                nursery.start_soon(self._dispatch)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True):
                self._incoming_send.close()
                await bus._db.bridge.run(_drop, self._holder)

    async def _watch(self) -> None:
        bus = self._bus
        while True:
            with trio.move_on_after(bus._keepalive):
                await self._lost.wait()
            if not self._lost.is_set():
                try:
                    with trio.fail_after(bus._keepalive):
                        await bus._db.bridge.run(_ping, self._holder)
                    continue
                except (Exception, trio.TooSlowError):
                    pass
            await bus._db.bridge.run(_drop, self._holder)
            backoff = _BACKOFF_INITIAL
            while True:
                try:
                    await self._connect()
                    break
                except Exception:
                    await trio.sleep(backoff)
                    backoff = min(backoff * 2, _BACKOFF_MAX)
            bus._reconnects += 1

    async def _dispatch(self) -> None:
        bus = self._bus
        async with self._incoming:
            async for payload in self._incoming:
                text = payload
                if payload.startswith(_MARKER):
                    heard = bus._markers.pop(payload, None)
                    if heard is not None:
                        heard.set()
                    continue
                if payload.startswith(_SPILL):
                    spilled = await bus._read_spill(payload[len(_SPILL) :])
                    if spilled is None:
                        bus._spill_missing += 1
                        continue
                    text = spilled
                bus._fan_out(text)


@final
class PostgresSessionSignalBus:
    """:class:`~zlink_trio.router.spi.SessionSignalBus` on LISTEN/NOTIFY (module docstring).

    ``listen=False`` makes a bus that publishes but never hears (its subscriptions stay
    silent): a node whose notifications are blocked, to prove the polling fallback."""

    def __init__(
        self,
        db: RouterDatabase,
        *,
        subscriber_buffer: int = 1024,
        spill_ttl: float = 60.0,
        keepalive: float = 5.0,
        listen: bool = True,
    ) -> None:
        if subscriber_buffer <= 0:
            raise ValueError("subscriber_buffer must be > 0")
        if not (0 < spill_ttl < math.inf and 0 < keepalive < math.inf):
            raise ValueError("spill_ttl and keepalive must be finite and > 0")
        self._db = db
        self._buffer: Final = subscriber_buffer
        self._spill_ttl = float(spill_ttl)
        self._keepalive = float(keepalive)
        self._listen = listen
        self._channels: Final = channel_names(db.schema)
        self._connect_kwargs = _connect_kwargs(db.dsn, db.schema)
        self._subscribers: list[trio.MemorySendChannel[SessionSignal]] = []
        self._markers: dict[str, trio.Event] = {}
        self._serving = trio.Event()
        q = db.q
        self._notify = "SELECT pg_notify($1, $2)"
        self._spill = (
            f"WITH gc AS (DELETE FROM {q}.router_signal_spill"
            f" WHERE expires_at <= {q}.router_now()),"
            f" s AS (INSERT INTO {q}.router_signal_spill (body, expires_at)"
            f" VALUES ($2, {q}.router_now() + $3) RETURNING id)"
            f" SELECT pg_notify($1, '{_SPILL}' || s.id::text) FROM s"
        )
        self._spill_read = f"SELECT body FROM {q}.router_signal_spill WHERE id = $1"
        self._published: dict[Channel, int] = dict.fromkeys(Channel, 0)
        self._spilled = 0
        self._undecodable = 0
        self._overflow = 0
        self._spill_missing = 0
        self._reconnects = 0

    async def publish(self, signal: SessionSignal) -> None:
        self._published[signal.channel] += 1
        await self.publish_text(encode_signal(signal), signal.channel)

    async def publish_text(self, text: str, channel: Channel = Channel.CONTROL) -> None:
        """Notify raw signal text (what a node of another build may send); a receiver drops
        an undecodable or unknown kind whole."""
        name = self._channels[channel]
        if len(text.encode("utf-8")) < NOTIFY_LIMIT and not text.startswith((_SPILL, _MARKER)):
            await self._db.call("execute", self._notify, name, text, idempotent=True)
            return
        self._spilled += 1
        await self._db.call("execute", self._spill, name, text, self._spill_ttl, idempotent=False)

    async def _read_spill(self, ref: str) -> str | None:
        try:
            row_id = int(ref)
            body = await self._db.read("fetchval", self._spill_read, row_id)
        except (ValueError, ZLinkError):
            return None
        return None if body is None else str(body)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled: started once both channels are LISTENed (run it with
        ``nursery.start``; :func:`~zlink_trio.router_pg.open_postgres_spis` does)."""
        if self._serving.is_set():
            raise RuntimeError("this bus is already served")
        listener = _Listener(self)
        remove = self._db.bridge.add_barrier(self.barrier) if self._listen else None
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(listener.run)
                self._serving.set()
                task_status.started()
        finally:
            if remove is not None:
                remove()

    def _fan_out(self, text: str) -> None:
        if decode_signal(text) is None:
            self._undecodable += 1
            return
        for send in list(self._subscribers):
            signal = decode_signal(text)  # a fresh decode per subscriber: nothing shared
            assert signal is not None
            try:
                send.send_nowait(signal)
            except trio.WouldBlock:
                self._overflow += 1
            except trio.BrokenResourceError:
                self._subscribers.remove(send)

    @asynccontextmanager
    async def subscribe(self) -> AsyncIterator[trio.MemoryReceiveChannel[SessionSignal]]:
        """Hear both channels from now until the block exits. Waits until the bus is served
        (its LISTEN in place); owns no task, so it may be entered and left anywhere."""
        await self._serving.wait()
        send, receive = trio.open_memory_channel[SessionSignal](self._buffer)
        self._subscribers.append(send)
        try:
            async with receive:
                yield receive
        finally:
            if send in self._subscribers:
                self._subscribers.remove(send)
            send.close()

    async def barrier(self) -> None:
        """Notify a marker and wait until this bus has heard it: every signal committed
        before this call has then been handed to the subscribers (NOTIFY delivers in commit
        order). One LISTEN/NOTIFY round trip; a lost marker waits for the caller's timeout."""
        await self._serving.wait()
        marker = f"{_MARKER}{uuid.uuid4().hex}"
        heard = trio.Event()
        self._markers[marker] = heard
        try:
            await self._db.call(
                "execute", self._notify, self._channels[Channel.CONTROL], marker, idempotent=True
            )
            await heard.wait()
        finally:
            self._markers.pop(marker, None)

    def statistics(self) -> PgSignalBusStatistics:
        return PgSignalBusStatistics(
            dict(self._published),
            self._spilled,
            self._undecodable,
            self._overflow,
            self._spill_missing,
            self._reconnects,
        )
