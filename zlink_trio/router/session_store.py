"""``SessionStore``: one node's door to the lease store and the record store (spec 10 §5.3).

``claim`` runs in this order, so no distributed transaction is needed even when the two
backends are different systems:

1. lease election: a loser stops here (:class:`HeldElsewhere`) and never touches a record;
2. agent-binding check: a mismatch is :class:`AgentConflict` and writes nothing;
3. record provisioning: create the record bound to the agent if missing, and raise its
   fence to this lease's token (skipped when the lease was already held and the record
   already carries its token: a later turn's claim writes nothing).

The store remembers the leases this node holds, so :attr:`records` fences every write with
the right token without threading it through the turn's call chain. Renewal goes through
:meth:`renew`: a lost lease is forgotten at once and the next fenced write is refused.
One store per router: the router builder assembles it from the two backends itself.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import ClassVar, Literal, TypeAlias, final

import attrs
import trio

from ..errors import ZLinkError
from .errors import FencingRejected, SessionClaimFailed
from .ids import AgentRef, NodeId, SessionId
from .records import LeaseHeld, SessionLease, SessionRecordView, TranscriptEntry
from .spi import SessionLeaseStore, SessionRecordStore

__all__ = [
    "AgentConflict",
    "ClaimOutcome",
    "Claimed",
    "FencedRecords",
    "HeldElsewhere",
    "SessionHistory",
    "SessionStore",
]


@attrs.frozen
class Claimed:
    lease: SessionLease
    record: SessionRecordView
    newly_acquired: bool
    kind: ClassVar[Literal["claimed"]] = "claimed"


@attrs.frozen
class HeldElsewhere:
    holder_id: NodeId
    kind: ClassVar[Literal["held_elsewhere"]] = "held_elsewhere"


@attrs.frozen
class AgentConflict:
    bound_agent: AgentRef
    kind: ClassVar[Literal["agent_conflict"]] = "agent_conflict"


ClaimOutcome: TypeAlias = Claimed | HeldElsewhere | AgentConflict


@final
class SessionStore:
    """Node-scoped composite of a :class:`SessionLeaseStore` and a
    :class:`SessionRecordStore`. Never share one between two routers (§5.3)."""

    def __init__(
        self,
        *,
        records: SessionRecordStore,
        leases: SessionLeaseStore,
        node_id: NodeId,
        lease_ttl: float,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self._records = records
        self._leases = leases
        self.node_id = node_id
        self._ttl = lease_ttl
        self._clock = clock
        self._held: dict[SessionId, SessionLease] = {}
        self._deadlines: dict[SessionId, float] = {}
        """Per held lease, the local deadline: when the acquisition or renewal that granted
        it was *sent*, plus the TTL. The store measured its expiry from a later instant (it
        got the call after it was sent), so this deadline is never later than the store's
        expiry: a node trusts its lease a little less long than the store does, never
        longer — whatever a backend call's latency."""
        self._lapsed: dict[SessionId, SessionLease] = {}
        """Leases forgotten at their local deadline that the backend may still hold (a
        renewal's answer came back late): kept until :meth:`release_lapsed` gives them
        back, so the session is not blocked for every node until the backend's expiry."""
        self.records = FencedRecords(self, records)

    def held(self, session_id: SessionId) -> SessionLease | None:
        """The lease this node holds for the session, if it has not expired by this node's
        clock (an unrenewed lease is not trusted past its local deadline)."""
        lease = self._held.get(session_id)
        if lease is not None and self._clock() >= self.deadline(session_id):
            self._forget(session_id)
            self._lapsed[session_id] = lease
            return None
        return lease

    def deadline(self, session_id: SessionId) -> float:
        """The local deadline of the held lease (``-inf`` when none is held)."""
        lease = self._held.get(session_id)
        if lease is None:
            return -math.inf
        return min(lease.expires_at, self._deadlines.get(session_id, lease.expires_at))

    def _keep(self, lease: SessionLease, sent_at: float) -> None:
        self._lapsed.pop(lease.session_id, None)  # a new grant: the backend dropped the old
        self._held[lease.session_id] = lease
        self._deadlines[lease.session_id] = sent_at + self._ttl

    def _forget(self, session_id: SessionId) -> None:
        self._held.pop(session_id, None)
        self._deadlines.pop(session_id, None)

    def held_sessions(self) -> tuple[SessionId, ...]:
        return tuple(s for s in list(self._held) if self.held(s) is not None)

    async def bound_agent(self, session_id: SessionId) -> AgentRef | None:
        """The recorded binding (the F1 pre-check reads it; only ``claim`` writes it)."""
        record = await self._records.load(session_id)
        return None if record is None else record.agent_ref

    async def claim(self, session_id: SessionId, agent_ref: AgentRef) -> ClaimOutcome:
        """Election, binding check, provisioning (in that order). Backend failures raise
        :class:`SessionClaimFailed` (503); a lease won by a failed claim is given back."""
        lease = self.held(session_id)
        newly = lease is None
        try:
            if lease is None:
                sent_at = self._clock()
                outcome = await self._leases.try_acquire(session_id, self.node_id, self._ttl)
                if isinstance(outcome, LeaseHeld):
                    return HeldElsewhere(outcome.holder_id)
                lease = outcome.lease
                self._keep(lease, sent_at)
            record = await self._records.load(session_id)
            if record is not None and record.agent_ref != agent_ref:
                if newly:
                    await self._give_back(lease)
                return AgentConflict(record.agent_ref)
            if newly or record is None or record.fence != lease.fencing_token:
                # a held lease reused by a later turn (§3.2) already provisioned its record
                # and raised its fence: writing them again is a store write per turn for
                # nothing (a record deleted or fenced meanwhile still goes through here)
                record = await self._records.provision(session_id, agent_ref, lease.fencing_token)
        except ZLinkError:
            if newly and lease is not None:
                await self._give_back(lease)
            raise
        except Exception as exc:
            if newly and lease is not None:
                await self._give_back(lease)
            raise SessionClaimFailed(f"claim of {session_id} failed: {exc!r}") from exc
        return Claimed(lease, record, newly)

    async def renew(self, session_id: SessionId) -> SessionLease | None:
        """Extend the held lease through the backend. On loss the lease is forgotten before
        this returns None, so the next fenced write is refused. A backend error propagates
        (the lease stays trusted until its own expiry)."""
        lease = self.held(session_id)
        if lease is None:
            return None
        sent_at = self._clock()
        renewed = await self._leases.renew(lease, self._ttl)
        if renewed is None:
            if self._held.get(session_id) == lease:
                self._forget(session_id)
            return None
        if self._held.get(session_id) == lease:  # not released or lost meanwhile
            self._keep(renewed, sent_at)
        return renewed

    async def release(self, session_id: SessionId) -> bool:
        """Give the lease back (forgotten first; a backend failure is the caller's to
        swallow, the TTL frees it anyway)."""
        lease = self._held.get(session_id)
        lapsed = self._lapsed.pop(session_id, None)
        self._forget(session_id)
        if lease is None:
            lease = lapsed
        if lease is None:
            return False
        return await self._leases.release(lease)

    async def release_lapsed(self, session_id: SessionId) -> bool:
        """Give back, with the fencing token it held, a lease this node stopped trusting at
        its local deadline (the backend may have extended it). Safe whatever happened
        meanwhile: the backend refuses a release whose token is not the current holder's.
        A backend failure is the caller's to swallow (the backend's expiry frees it)."""
        if self.held(session_id) is not None:  # moves a lease past its deadline to lapsed
            return False  # still trusted: not lapsed
        lease = self._lapsed.pop(session_id, None)
        if lease is None:
            return False
        return await self._leases.release(lease)

    async def _give_back(self, lease: SessionLease) -> None:
        self._forget(lease.session_id)
        with trio.CancelScope(shield=True), contextlib.suppress(Exception):
            await self._leases.release(lease)  # on failure the TTL frees it anyway

    def _token(self, session_id: SessionId) -> int:
        lease = self.held(session_id)
        if lease is None:
            raise FencingRejected(f"{self.node_id} holds no lease on {session_id}")
        return lease.fencing_token


@final
class FencedRecords:
    """Record access fenced with the lease this node's store holds."""

    def __init__(self, store: SessionStore, records: SessionRecordStore) -> None:
        self._store = store
        self._records = records

    async def load(self, session_id: SessionId) -> SessionRecordView | None:
        return await self._records.load(session_id)

    async def append(
        self,
        session_id: SessionId,
        entries: Sequence[TranscriptEntry],
        *,
        lease_token: int | None = None,
    ) -> SessionRecordView:
        """Append fenced with the held lease; with ``lease_token``, only while the held lease
        is still that one (a turn's writes end with the lease it started under: a turn a
        release abandoned must not write under a lease this node claimed again since)."""
        token = self._store._token(session_id)
        if lease_token is not None and token != lease_token:
            raise FencingRejected(
                f"{session_id}: the lease {lease_token} this write was made under was given up"
            )
        return await self._records.append(session_id, entries, token)

    async def delete(self, session_id: SessionId) -> bool:
        return await self._records.delete(session_id, self._store._token(session_id))


@final
class SessionHistory:
    """One session's history as a turn sees it: read the record (the authority, re-read at
    every turn start, §10.4), append fenced with this node's lease. A turn writes at its end,
    never partial state midway (§2)."""

    def __init__(
        self, records: FencedRecords, session_id: SessionId, *, lease_token: int | None = None
    ) -> None:
        self._records = records
        self.session_id = session_id
        self._lease_token = lease_token
        """The fencing token of the lease the turn started under (the router sets it): its
        writes are refused once that lease is gone, even if this node holds a newer one."""

    async def load(self) -> tuple[TranscriptEntry, ...]:
        view = await self._records.load(self.session_id)
        return () if view is None else view.transcript

    async def append(self, entries: Sequence[TranscriptEntry]) -> None:
        await self._records.append(self.session_id, entries, lease_token=self._lease_token)
