"""The four storage SPIs the router stands on (spec 10 §4.1, §5.3–§5.6, §9.2).

Every method is async (the distributed backends do I/O). Each has an in-memory
implementation in :mod:`zlink_trio.router.memory`, and one contract suite
(``tests/contract/router``) that every implementation runs unchanged.

Time is the backend's clock: the in-memory implementations take a ``clock`` (default
``trio.current_time``), so tests drive every TTL with a MockClock.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

import trio

from .idempotency import (
    IdempotencyEntry,
    IdempotencyTtls,
    MarkDoneOutcome,
    PutOutcome,
    TakeoverOutcome,
)
from .ids import AgentRef, IdempotencyKey, NodeId, ReserverId, SessionId
from .inbox import InboundMessage
from .primitives import JsonMap
from .records import LeaseOutcome, SessionLease, SessionRecordView, TranscriptEntry
from .signals import SessionSignal
from .values import Priority

__all__ = [
    "IdempotencyStore",
    "SessionInbox",
    "SessionLeaseStore",
    "SessionRecordStore",
    "SessionSignalBus",
]


@runtime_checkable
class SessionLeaseStore(Protocol):
    """Elects one holder per session, with a fencing token per acquisition."""

    async def try_acquire(
        self, session_id: SessionId, holder_id: NodeId, ttl: float
    ) -> LeaseOutcome:
        """Grant a new lease (a fresh, larger fencing token) unless an unexpired one exists;
        an existing one is reported as held, whoever holds it."""
        ...

    async def renew(self, lease: SessionLease, ttl: float) -> SessionLease | None:
        """Extend ``lease`` to now + ttl if it is still the current lease (same token, not
        expired); None when it was lost."""
        ...

    async def release(self, lease: SessionLease) -> bool:
        """Give the lease back if it is still the current one."""
        ...

    async def current(self, session_id: SessionId) -> SessionLease | None:
        """The unexpired lease, if any."""
        ...


@runtime_checkable
class SessionRecordStore(Protocol):
    """The authority on a session's binding and history. Writes are fenced: a write whose
    token is below the highest one the record has seen raises
    :class:`~zlink_trio.router.errors.FencingRejected`."""

    async def load(self, session_id: SessionId) -> SessionRecordView | None: ...

    async def provision(
        self, session_id: SessionId, agent_ref: AgentRef, fencing_token: int
    ) -> SessionRecordView:
        """Create the record bound to ``agent_ref`` if missing (an existing one keeps its
        binding), and raise its fence to ``fencing_token``."""
        ...

    async def append(
        self, session_id: SessionId, entries: Sequence[TranscriptEntry], fencing_token: int
    ) -> SessionRecordView:
        """Append history (raises NotFound without a record)."""
        ...

    async def delete(self, session_id: SessionId, fencing_token: int) -> bool:
        """Only ``SessionRouter.delete_session`` calls this (§7.7)."""
        ...


@runtime_checkable
class SessionInbox(Protocol):
    """Cross-node, multi-session mailbox: any node delivers, the lease holder collects."""

    async def deliver(self, message: InboundMessage) -> None: ...

    async def collect(self, session_id: SessionId, up_to: Priority) -> tuple[InboundMessage, ...]:
        """Atomically take every message of the session whose priority is ``up_to`` or more
        urgent (``Priority.LATER`` takes all), in stable (priority, delivered_at) order."""
        ...

    async def has_pending(self, session_id: SessionId) -> bool: ...

    async def pending_sessions(
        self, delivered_before: float, limit: int = 100
    ) -> tuple[SessionId, ...]:
        """Up to ``limit`` sessions with at least one message waiting that was delivered
        before ``delivered_before`` (its envelope's ``delivered_at``), each once, oldest
        first: the orphan scan's read (§14 — messages whose holder and waiting node both
        died). A backend answers it from an index, not a full scan."""
        ...

    async def purge(self, session_id: SessionId) -> int:
        """Drop the session's messages; returns how many."""
        ...


@runtime_checkable
class SessionSignalBus(Protocol):
    """At-least-once, unordered pub/sub. Everything crossing it is plain JSON primitives;
    subscribers receive decoded signals whose payloads are plain dicts."""

    async def publish(self, signal: SessionSignal) -> None: ...

    def subscribe(self) -> AbstractAsyncContextManager[trio.MemoryReceiveChannel[SessionSignal]]:
        """Hear both channels from now on, until the context exits. Signals published while
        not subscribed are not delivered (§10.1 row 3)."""
        ...


@runtime_checkable
class IdempotencyStore(Protocol):
    """At-most-once per client key, with the §9.2 matrix (see
    :mod:`zlink_trio.router.idempotency` for the lifetimes)."""

    @property
    def ttls(self) -> IdempotencyTtls: ...

    async def put_if_absent(
        self,
        key: IdempotencyKey,
        input_hash: str,
        holder_id: ReserverId,
        *,
        session_id: SessionId | None = None,
    ) -> PutOutcome:
        """§9.2: reserve a new key (recording ``session_id`` on the entry), or report the
        existing entry's case."""
        ...

    async def find(self, key: IdempotencyKey) -> IdempotencyEntry | None:
        """The live entry (stale IN_FLIGHT included), or None."""
        ...

    async def mark_done(
        self, key: IdempotencyKey, holder_id: ReserverId, result: JsonMap
    ) -> MarkDoneOutcome:
        """IN_FLIGHT held by ``holder_id`` → DONE with ``result``; anything else is refused
        and leaves the entry unchanged (holder-matched, enforced here: §14)."""
        ...

    async def acquire_holder(self, key: IdempotencyKey, holder_id: ReserverId) -> TakeoverOutcome:
        """Take a holderless IN_FLIGHT entry (back on the secondary TTL). Exactly one of
        concurrent callers wins."""
        ...

    async def release_holder(self, key: IdempotencyKey, holder_id: ReserverId) -> bool:
        """Clear the holder (IN_FLIGHT held by ``holder_id``); the entry now lives on the
        forward TTL. The inverse of ``acquire_holder``."""
        ...

    async def compare_and_reset(self, key: IdempotencyKey, expected_holder_id: ReserverId) -> bool:
        """Remove the IN_FLIGHT entry iff ``expected_holder_id`` holds it."""
        ...

    async def find_stale_in_flight(self, limit: int = 100) -> tuple[IdempotencyEntry, ...]:
        """Held IN_FLIGHT entries untouched past the secondary TTL (holderless skipped)."""
        ...

    async def touch(self, key: IdempotencyKey, holder_id: ReserverId) -> bool:
        """Refresh ``last_touched_at`` iff ``holder_id`` holds the IN_FLIGHT entry; a
        mismatch is a silent False."""
        ...
