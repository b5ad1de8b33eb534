"""In-memory implementations of the four SPIs: the SINGLE_NODE defaults, and several
routers of one process sharing them in tests.

Each operation is atomic (it never awaits between reading and writing its state; the one
``checkpoint`` comes first), so concurrent callers see one winner exactly like a CAS
backend. What crosses nodes goes through its serialized text: the bus and the inbox store
and deliver JSON text, never the objects that were handed to them.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Final, final

import attrs
import trio

from ..errors import NotFound
from .errors import FencingRejected
from .idempotency import (
    AlreadyDone,
    HolderAcquired,
    HolderRejected,
    IdempotencyEntry,
    IdempotencyState,
    IdempotencyTtls,
    InFlight,
    InputConflict,
    MarkDoneOutcome,
    Marked,
    MarkRejected,
    PutOutcome,
    Rejection,
    Reserved,
    StaleInFlight,
    TakeoverOutcome,
)
from .ids import AgentRef, IdempotencyKey, NodeId, ReserverId, SessionId
from .inbox import InboundMessage
from .primitives import JsonMap, check_json_map, from_text, to_text
from .records import (
    LeaseGranted,
    LeaseHeld,
    LeaseOutcome,
    SessionLease,
    SessionRecordView,
    TranscriptEntry,
)
from .signals import Channel, SessionSignal, decode_signal, encode_signal
from .values import Priority

__all__ = [
    "MemoryIdempotencyStore",
    "MemorySessionInbox",
    "MemorySessionLeaseStore",
    "MemorySessionRecordStore",
    "MemorySessionSignalBus",
    "SignalBusStatistics",
]

Clock = Callable[[], float]


def _check_ttl(ttl: float) -> None:
    if not ttl > 0:
        raise ValueError(f"ttl must be > 0, got {ttl!r}")


@final
class MemorySessionLeaseStore:
    """Leases with a store-wide increasing fencing token. Expired when ``now >= expires_at``."""

    def __init__(self, *, clock: Clock = trio.current_time) -> None:
        self._clock = clock
        self._leases: dict[SessionId, SessionLease] = {}
        self._tokens = itertools.count(1)

    def _live(self, session_id: SessionId) -> SessionLease | None:
        lease = self._leases.get(session_id)
        if lease is not None and self._clock() >= lease.expires_at:
            del self._leases[session_id]
            return None
        return lease

    async def try_acquire(
        self, session_id: SessionId, holder_id: NodeId, ttl: float
    ) -> LeaseOutcome:
        await trio.lowlevel.checkpoint()
        _check_ttl(ttl)
        held = self._live(session_id)
        if held is not None:
            return LeaseHeld(held.holder_id, held.expires_at)
        lease = SessionLease(
            session_id=session_id,
            holder_id=holder_id,
            fencing_token=next(self._tokens),
            expires_at=self._clock() + ttl,
        )
        self._leases[session_id] = lease
        return LeaseGranted(lease)

    async def renew(self, lease: SessionLease, ttl: float) -> SessionLease | None:
        await trio.lowlevel.checkpoint()
        _check_ttl(ttl)
        held = self._live(lease.session_id)
        if held is None or held.fencing_token != lease.fencing_token:
            return None
        renewed = attrs.evolve(held, expires_at=self._clock() + ttl)
        self._leases[lease.session_id] = renewed
        return renewed

    async def release(self, lease: SessionLease) -> bool:
        await trio.lowlevel.checkpoint()
        held = self._live(lease.session_id)
        if held is None or held.fencing_token != lease.fencing_token:
            return False
        del self._leases[lease.session_id]
        return True

    async def current(self, session_id: SessionId) -> SessionLease | None:
        await trio.lowlevel.checkpoint()
        return self._live(session_id)


@final
class MemorySessionRecordStore:
    """Session records with a per-record fence (the highest fencing token written)."""

    def __init__(self) -> None:
        self._records: dict[SessionId, SessionRecordView] = {}

    def _fence(self, record: SessionRecordView, token: int) -> None:
        if token < record.fence:
            raise FencingRejected(
                f"{record.session_id}: fencing token {token} is older than {record.fence}"
            )

    async def load(self, session_id: SessionId) -> SessionRecordView | None:
        await trio.lowlevel.checkpoint()
        return self._records.get(session_id)

    async def provision(
        self, session_id: SessionId, agent_ref: AgentRef, fencing_token: int
    ) -> SessionRecordView:
        await trio.lowlevel.checkpoint()
        record = self._records.get(session_id)
        if record is None:
            record = SessionRecordView(session_id=session_id, agent_ref=agent_ref)
        self._fence(record, fencing_token)
        record = attrs.evolve(record, fence=fencing_token)
        self._records[session_id] = record
        return record

    async def append(
        self, session_id: SessionId, entries: Sequence[TranscriptEntry], fencing_token: int
    ) -> SessionRecordView:
        await trio.lowlevel.checkpoint()
        record = self._records.get(session_id)
        if record is None:
            raise NotFound(f"no session record {session_id}")
        self._fence(record, fencing_token)
        record = attrs.evolve(
            record, transcript=record.transcript + tuple(entries), fence=fencing_token
        )
        self._records[session_id] = record
        return record

    async def delete(self, session_id: SessionId, fencing_token: int) -> bool:
        await trio.lowlevel.checkpoint()
        record = self._records.get(session_id)
        if record is None:
            return False
        self._fence(record, fencing_token)
        del self._records[session_id]
        return True


@final
class MemorySessionInbox:
    """Messages stored as their JSON text; collect decodes them (what a real backend does)."""

    def __init__(self) -> None:
        self._pending: dict[SessionId, list[tuple[int, int, float, str]]] = defaultdict(list)
        self._seq = itertools.count()

    async def deliver(self, message: InboundMessage) -> None:
        await trio.lowlevel.checkpoint()
        text = to_text(message.to_wire())
        self._pending[message.session_id].append(
            (int(message.priority), next(self._seq), message.delivered_at, text)
        )

    async def collect(self, session_id: SessionId, up_to: Priority) -> tuple[InboundMessage, ...]:
        await trio.lowlevel.checkpoint()
        queued = self._pending.get(session_id, [])
        taken = [m for m in queued if m[0] <= up_to]
        kept = [m for m in queued if m[0] > up_to]
        if kept:
            self._pending[session_id] = kept
        else:
            self._pending.pop(session_id, None)
        taken.sort(key=lambda m: (m[0], m[2], m[1]))
        out: list[InboundMessage] = []
        for *_, text in taken:
            wire = from_text(text)
            assert isinstance(wire, dict)
            out.append(InboundMessage.from_wire(wire))
        return tuple(out)

    async def has_pending(self, session_id: SessionId) -> bool:
        await trio.lowlevel.checkpoint()
        return bool(self._pending.get(session_id))

    async def pending_sessions(
        self, delivered_before: float, limit: int = 100
    ) -> tuple[SessionId, ...]:
        await trio.lowlevel.checkpoint()
        oldest = [(min(m[2] for m in queued), s) for s, queued in self._pending.items() if queued]
        return tuple(s for at, s in sorted(oldest) if at < delivered_before)[:limit]

    async def purge(self, session_id: SessionId) -> int:
        await trio.lowlevel.checkpoint()
        return len(self._pending.pop(session_id, []))


@attrs.frozen
class SignalBusStatistics:
    published: dict[Channel, int]
    dropped_undecodable: int
    dropped_overflow: int


@final
class MemorySessionSignalBus:
    """One in-process bus shared by the routers of one process (one per cluster).

    Every signal is encoded to JSON text on publish and decoded per subscriber, so no typed
    object survives the trip. A subscriber whose buffer is full loses the signal (counted):
    pub/sub is lossy, and the router never depends on one signal arriving.
    """

    def __init__(self, *, subscriber_buffer: int = 1024) -> None:
        if subscriber_buffer <= 0:
            raise ValueError("subscriber_buffer must be > 0")
        self._buffer: Final = subscriber_buffer
        self._subscribers: list[trio.MemorySendChannel[SessionSignal]] = []
        self._published: dict[Channel, int] = dict.fromkeys(Channel, 0)
        self._undecodable = 0
        self._overflow = 0

    async def publish(self, signal: SessionSignal) -> None:
        await trio.lowlevel.checkpoint()
        self._published[signal.channel] += 1
        self.publish_text_nowait(encode_signal(signal))

    def publish_text_nowait(self, text: str) -> None:
        """Deliver raw signal text (what arrives from the wire); an undecodable or unknown
        kind is dropped whole and counted."""
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
        send, receive = trio.open_memory_channel[SessionSignal](self._buffer)
        self._subscribers.append(send)
        try:
            async with receive:
                yield receive
        finally:
            if send in self._subscribers:
                self._subscribers.remove(send)
            send.close()

    def statistics(self) -> SignalBusStatistics:
        return SignalBusStatistics(dict(self._published), self._undecodable, self._overflow)


@final
class MemoryIdempotencyStore:
    """The idempotency matrix in memory; results are stored as JSON text."""

    def __init__(
        self, *, ttls: IdempotencyTtls | None = None, clock: Clock = trio.current_time
    ) -> None:
        self._ttls = ttls if ttls is not None else IdempotencyTtls()
        self._clock = clock
        self._entries: dict[IdempotencyKey, IdempotencyEntry] = {}

    @property
    def ttls(self) -> IdempotencyTtls:
        return self._ttls

    def _live(self, key: IdempotencyKey) -> IdempotencyEntry | None:
        entry = self._entries.get(key)
        if entry is not None and entry.expires_at is not None and self._clock() >= entry.expires_at:
            del self._entries[key]
            return None
        return entry

    def _stale(self, entry: IdempotencyEntry) -> bool:
        return (
            entry.state is IdempotencyState.IN_FLIGHT
            and entry.holder_id is not None
            and entry.last_touched_at < self._clock() - self._ttls.secondary
        )

    def _reserve(
        self,
        key: IdempotencyKey,
        input_hash: str,
        holder_id: ReserverId,
        session_id: SessionId | None,
    ) -> IdempotencyEntry:
        now = self._clock()
        entry = IdempotencyEntry(
            key=key,
            input_hash=input_hash,
            state=IdempotencyState.IN_FLIGHT,
            holder_id=holder_id,
            created_at=now,
            last_touched_at=now,
            expires_at=None,
            session_id=session_id,
        )
        self._entries[key] = entry
        return entry

    async def put_if_absent(
        self,
        key: IdempotencyKey,
        input_hash: str,
        holder_id: ReserverId,
        *,
        session_id: SessionId | None = None,
    ) -> PutOutcome:
        await trio.lowlevel.checkpoint()
        entry = self._live(key)
        if entry is None:
            return Reserved(self._reserve(key, input_hash, holder_id, session_id))
        if self._stale(entry):
            return StaleInFlight(entry)
        if entry.input_hash != input_hash:
            return InputConflict(entry)
        if entry.state is IdempotencyState.DONE:
            return AlreadyDone(entry)
        return InFlight(entry)

    async def find(self, key: IdempotencyKey) -> IdempotencyEntry | None:
        await trio.lowlevel.checkpoint()
        return self._live(key)

    async def mark_done(
        self, key: IdempotencyKey, holder_id: ReserverId, result: JsonMap
    ) -> MarkDoneOutcome:
        await trio.lowlevel.checkpoint()
        stored = from_text(to_text(check_json_map(result, "result")))
        assert isinstance(stored, dict)
        entry = self._live(key)
        if entry is None:
            return MarkRejected(Rejection.EXPIRED)
        if entry.state is IdempotencyState.DONE:
            return MarkRejected(Rejection.DONE)
        if entry.holder_id != holder_id:
            return MarkRejected(Rejection.NOT_HOLDER)
        now = self._clock()
        done = attrs.evolve(
            entry,
            state=IdempotencyState.DONE,
            result=stored,
            last_touched_at=now,
            expires_at=now + self._ttls.primary,
        )
        self._entries[key] = done
        return Marked(done)

    async def acquire_holder(self, key: IdempotencyKey, holder_id: ReserverId) -> TakeoverOutcome:
        await trio.lowlevel.checkpoint()
        entry = self._live(key)
        if entry is None:
            return HolderRejected(Rejection.EXPIRED)
        if entry.state is IdempotencyState.DONE:
            return HolderRejected(Rejection.DONE)
        if entry.holder_id is not None:
            return HolderRejected(Rejection.HELD)
        taken = attrs.evolve(
            entry, holder_id=holder_id, last_touched_at=self._clock(), expires_at=None
        )
        self._entries[key] = taken
        return HolderAcquired(taken)

    def _held_by(self, key: IdempotencyKey, holder_id: ReserverId) -> IdempotencyEntry | None:
        """The live IN_FLIGHT entry of ``key`` if ``holder_id`` holds it, else None."""
        entry = self._live(key)
        if (
            entry is None
            or entry.state is not IdempotencyState.IN_FLIGHT
            or entry.holder_id != holder_id
        ):
            return None
        return entry

    async def release_holder(self, key: IdempotencyKey, holder_id: ReserverId) -> bool:
        await trio.lowlevel.checkpoint()
        entry = self._held_by(key, holder_id)
        if entry is None:
            return False
        self._entries[key] = attrs.evolve(
            entry, holder_id=None, expires_at=self._clock() + self._ttls.forward
        )
        return True

    async def compare_and_reset(self, key: IdempotencyKey, expected_holder_id: ReserverId) -> bool:
        await trio.lowlevel.checkpoint()
        if self._held_by(key, expected_holder_id) is None:
            return False
        del self._entries[key]
        return True

    async def find_stale_in_flight(self, limit: int = 100) -> tuple[IdempotencyEntry, ...]:
        await trio.lowlevel.checkpoint()
        stale = [e for k in list(self._entries) if (e := self._live(k)) and self._stale(e)]
        stale.sort(key=lambda e: e.last_touched_at)
        return tuple(stale[:limit])

    async def touch(self, key: IdempotencyKey, holder_id: ReserverId) -> bool:
        await trio.lowlevel.checkpoint()
        entry = self._held_by(key, holder_id)
        if entry is None:
            return False
        self._entries[key] = attrs.evolve(entry, last_touched_at=self._clock())
        return True
