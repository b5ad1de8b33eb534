"""The Actor owner role of one node: the registry of hosted Actors and their admission.

Only this node's hosted Actors live here. Admission is the single place an application
payload enters an Actor queue, whatever its ingress (local call, command 24 from a peer,
session relay, Actor-to-Actor): so every ingress kind is ordered by the same queue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, final

import trio

from ..engine.engine import Engine
from ..engine.gate import Gate
from ..engine.lane import Lane
from ..engine.lanes import ActorDeliveryLane
from ..engine.oneshot import OneShot
from ..errors import CapacityExceeded, ShuttingDown, StaleRoute, Unavailable, ZLinkError
from ..ids import ActorId, NodeRid, StableType
from ..mesh.lease import LeaseDeadline
from ..objects.timers import TimerService, TimerTick
from ..observe import FlowEvent, FlowTrace
from .hosted import (
    ACTOR_LANE,
    DESTROYING,
    FENCED,
    JOINING,
    MOVED,
    READY,
    RELOCATING,
    ActorItem,
    Barrier,
    Deliver,
    HostedActor,
    HostedKind,
    JoinDone,
    fail_parked,
    lease_lost_error,
)

if TYPE_CHECKING:
    from .join import JoinRegistrar
    from .registry import ActorType
    from .stats import DispatchStats

__all__ = ["ActorHost"]

logger = logging.getLogger("zlink_trio.actors")


@final
class _Staging:
    """A creation attempt about to commit here: local callers wait for its end; frames a
    connection reader admits meanwhile are parked here, in arrival order, and go first
    into the new Actor's queue when it is published (the reader never waits)."""

    __slots__ = ("attempts", "event", "parked")

    def __init__(self) -> None:
        self.attempts = 1
        """Creation attempts of the id staging here: one that ended (its reservation was
        given back at its source's deadline) can overlap a later one of the same id."""
        self.event = trio.Event()
        self.parked: list[Deliver] = []


@final
class ActorHost:
    __slots__ = (
        "_actors",
        "_engine",
        "_fenced",
        "_flow",
        "_kinds",
        "_lease",
        "_lease_live",
        "_staging",
        "_timers",
        "by_id",
        "joins",
    )

    def __init__(
        self,
        engine: Engine,
        flow: FlowTrace,
        lease: LeaseDeadline,
        lease_live: Callable[[], bool],
        timers: TimerService | None = None,
    ) -> None:
        self._engine = engine
        self._timers = timers
        self._flow = flow
        self._lease = lease
        self._lease_live = lease_live
        self._fenced = False
        self._actors: dict[ActorId, HostedActor] = {}
        self.by_id: Mapping[ActorId, HostedActor] = self._actors
        """The published activations by ActorId, read-only (:meth:`get` without the call,
        for hot paths)."""
        self._staging: dict[ActorId, _Staging] = {}
        self._kinds: dict[StableType, HostedKind] = {}
        self.joins: JoinRegistrar | None = None
        """The node's Join registrar (closes the handlers' registration scopes)."""

    # --- registry ---------------------------------------------------------------------
    def get(self, actor_id: ActorId) -> HostedActor | None:
        return self._actors.get(actor_id)

    def __len__(self) -> int:
        return len(self._actors)

    def __iter__(self) -> Iterator[HostedActor]:
        return iter(self._actors.values())

    def has_temporary_queue(self, actor_id: ActorId) -> bool:
        """A creation attempt or a relocation target's temporary queue is registered for
        ``actor_id`` here (inbound dispatch parks there, before any follow route)."""
        return actor_id in self._staging

    @property
    def staging_count(self) -> int:
        return len(self._staging)

    def kind(
        self, actor_type: ActorType, node_rid: NodeRid, stats: DispatchStats, max_reply: int
    ) -> HostedKind:
        """The shared part of every hosted Actor of ``actor_type`` (made once)."""
        kind = self._kinds.get(actor_type.stable_type)
        if kind is None or kind.actor_type is not actor_type or kind.node_rid != node_rid:
            kind = self._kinds[actor_type.stable_type] = HostedKind(
                actor_type,
                node_rid,
                stats,
                max_reply,
                self._flow,
                self._lease,
                self._lease_live,
                self._timers,
            )
            kind.joins = self.joins
        return kind

    def begin_staging(self, actor_id: ActorId) -> None:
        """A creation attempt for ``actor_id`` is about to commit here: ingress that races
        the commit waits for :meth:`end_staging` instead of seeing a stale route. An
        earlier attempt of the same id may still be ending here: the staging record (and
        what is parked on it) is shared and lasts until the last of them ends."""
        staging = self._staging.get(actor_id)
        if staging is None:
            self._staging[actor_id] = _Staging()
        else:
            staging.attempts += 1

    def end_staging(self, actor_id: ActorId) -> list[Deliver]:
        """An attempt ended. Returns the payloads parked for the id that no published Actor
        took, once no other attempt of the id stages here (the caller fails them,
        StaleRoute); while another one does, they stay parked for it."""
        staging = self._staging.get(actor_id)
        if staging is None:
            return []
        staging.attempts -= 1
        if staging.attempts > 0:
            return []
        del self._staging[actor_id]
        staging.event.set()
        parked, staging.parked = staging.parked, []
        return parked

    def publish(self, hosted: HostedActor) -> None:
        """Make ``hosted`` reachable (after its Ready commit). The activation itself is
        its lane's handler; the lane is retired (not closed) by its owner, so it needs no
        drop callback. Payloads parked while it was staging enter its queue first, in
        arrival order (the new queue holds them all: parking is bounded by its capacity).

        On a fenced host (its owner lease was lost after the Ready commit was sent) the
        Actor is registered Fenced, without a lane: it never runs, and what was parked
        for it stays parked (its attempt's end fails it)."""
        if self._fenced:
            hosted.state = FENCED
            self._actors[hosted.actor_id] = hosted
            staging = self._staging.get(hosted.actor_id)
            if staging is not None:
                staging.event.set()
                staging.event = trio.Event()
            return
        lane = hosted.lane = self._engine.new_lane(ACTOR_LANE, hosted)
        self._actors[hosted.actor_id] = hosted
        staging = self._staging.get(hosted.actor_id)
        if staging is not None:
            if staging.parked:
                parked, staging.parked = staging.parked, []
                for item in parked:
                    lane.submit_nowait(item)
            # Local callers waiting for the commit go on now, even while an overlapping
            # attempt of the id has not ended yet.
            staging.event.set()
            staging.event = trio.Event()

    def retire(self, hosted: HostedActor) -> None:
        """Unpublish ``hosted`` (destroy: after its location ownership is gone); its
        timers are cleaned up (once)."""
        if self._actors.get(hosted.actor_id) is hosted:
            del self._actors[hosted.actor_id]
        hosted.retire_lane()
        if hosted.timers is not None:
            hosted.timers.close()

    def close_admission(self, hosted: HostedActor) -> None:
        """Destroy step 1: no payload is admitted and no timer tick enters its queue
        (ticks due meanwhile wait: :meth:`reopen` lets them in, :meth:`retire` drops
        them)."""
        hosted.state = DESTROYING
        if hosted.timers is not None:
            hosted.timers.suspend()

    def reopen(self, hosted: HostedActor, *, new_lane: bool) -> None:
        """A destroy did not happen (the Store row is still Ready): admit again.
        ``new_lane``: its lane was retired by an earlier attempt; give it a fresh one."""
        if self._actors.get(hosted.actor_id) is not hosted or hosted.state is FENCED:
            return
        if new_lane:
            hosted.lane = self._engine.new_lane(ACTOR_LANE, hosted)
        hosted.state = READY
        if hosted.timers is not None:
            hosted.timers.resume()

    def fence(self) -> list[HostedActor]:
        """This node's owner lease was lost: every hosted Actor becomes Fenced (admits
        nothing, runs no turn again), its lane is retired and what it held becomes its
        orphans (counted as FENCED); the caller fails them. Later publications are fenced
        at once. Returns the Actors that have orphans. Idempotent."""
        self._fenced = True
        orphaned = []
        for hosted in self._actors.values():
            hosted.state = FENCED
            hosted.retire_lane(FlowEvent.FENCED)
            if hosted.timers is not None:
                hosted.timers.close()
            if hosted.orphans:
                orphaned.append(hosted)
        return orphaned

    # --- the deferred Join barrier ------------------------------------------------------------
    def park(self, hosted: HostedActor) -> None:
        """Activate ``hosted``'s Join barrier (inside the turn that registered it, or any
        time for a Spot handler's registration): its lane is retired — a turn in progress
        finishes, nothing queued runs — and what it held is parked, in order, with every
        payload admitted from now on, until :meth:`unpark`."""
        lane = hosted.lane
        if hosted.parked is None:  # (parked already: what it holds stays, in order)
            hosted.parked = list(lane.retire()) if lane is not None else []
        hosted.state = JOINING

    def restore(self, hosted: HostedActor) -> None:
        """A Spot handler's registration (which parked ``hosted`` at its
        ``defer()``) was discarded: a fresh lane under the gate it had runs what was
        parked, in order, as if nothing happened. Synchronous (the handler's scope closes
        inside its turn): when no lane can be made any more (the engine stops), local
        callers are failed now and remote ones see their link close."""
        items, hosted.parked = hosted.parked or [], None
        if hosted.state is not JOINING:
            _fail_local(items, _not_admitting(hosted))
            return
        old = hosted.lane
        try:
            lane = self._engine.new_lane(ACTOR_LANE, hosted, gate=None if old is None else old.gate)
        except ShuttingDown as exc:
            hosted.state = DESTROYING
            _fail_local(items, exc)
            return
        hosted.lane = lane
        hosted.state = READY
        for item in items:
            lane.submit_nowait(item, lifecycle=type(item) is Barrier or type(item) is JoinDone)

    def _park(self, hosted: HostedActor, item: Deliver) -> None:
        parked = hosted.parked
        assert parked is not None
        capacity = self._engine.limits.capacity
        if len(parked) >= capacity:
            hosted.kind.stats.refused += 1
            self._flow.emit(
                FlowEvent.DISPATCH_REFUSED, "actor %r: joining, queue full", hosted.actor_id.value
            )
            raise CapacityExceeded(
                f"actor {hosted.actor_id.value!r} is joining a Spot and {capacity} payloads "
                "already wait for it"
            )
        parked.append(item)

    async def unpark(
        self,
        hosted: HostedActor,
        first: JoinDone | None,
        *,
        gate: Gate | None,
    ) -> None:
        """The Join ended here: a fresh lane (under ``gate``, the SpotWide Spot's, or its
        own) runs ``first`` (the completion callback), then what was parked, in order (on
        a cross-node Join's target the source's journal was put in front of what arrived
        here meanwhile). A fenced (or otherwise no longer Joining) Actor is left as it
        is."""
        items, hosted.parked = hosted.parked or [], None
        if hosted.state is not JOINING:
            await _fail_items(items, _not_admitting(hosted))
            return
        try:
            lane = self._engine.new_lane(ACTOR_LANE, hosted, gate=gate)
        except ShuttingDown as exc:
            hosted.state = DESTROYING
            await _fail_items(items, exc)
            return
        hosted.lane = lane
        hosted.state = READY
        if first is not None:
            lane.submit_nowait(first, lifecycle=True)
        for item in items:
            lane.submit_nowait(item, lifecycle=type(item) is Barrier or type(item) is JoinDone)

    def unpublish_moved(self, hosted: HostedActor) -> list[ActorItem]:
        """A cross-node Join moved ``hosted`` away: unpublish it (new ingress here is a
        stale route), retire its Context and return what it had parked (the journal)."""
        if self._actors.get(hosted.actor_id) is hosted:
            del self._actors[hosted.actor_id]
        parked, hosted.parked = hosted.parked or [], None
        hosted.state = MOVED
        hosted.context._retire()
        if hosted.timers is not None:
            # Timers do not travel with a cross-node Join (the relocation issue moves
            # them): the source's table is cleaned up here, once; its parked ticks drop.
            for item in parked:
                if type(item) is TimerTick:
                    hosted.timers.discard(item)
            hosted.timers.close()
        return parked

    def park_journal(self, hosted: HostedActor, items: list[Deliver]) -> None:
        """A cross-node Join's journal (the source's accepted payloads, in acceptance
        order) goes in front of what arrived here since the commit."""
        parked = hosted.parked
        assert parked is not None
        parked[:0] = items

    def journal_room(self, hosted: HostedActor, journal: int) -> bool:
        """Whether one more journal payload fits beside what is parked."""
        parked = hosted.parked
        return parked is not None and len(parked) + journal < self._engine.limits.capacity

    def publish_held(self, hosted: HostedActor) -> None:
        """A cross-node Join's new activation (after its commit): reachable, but Joining
        (ingress parked) until the source's journal arrived (:meth:`unpark`). Payloads
        parked while its commit was staged here go first."""
        hosted.state = JOINING if not self._fenced else FENCED
        hosted.parked = []
        self._actors[hosted.actor_id] = hosted
        staging = self._staging.get(hosted.actor_id)
        if staging is not None:
            if staging.parked:
                hosted.parked, staging.parked = list(staging.parked), []
            staging.event.set()
            staging.event = trio.Event()

    # --- relocation (docs/relocation.md) ----------------------------------------------------
    def seal_relocation(self, hosted: HostedActor) -> None:
        """The relocation seal, in the Actor's own turn (a running handler has finished):
        the lane is retired, its queued work held (the saved work) with everything admitted
        from now on (the held ingress), in acceptance order, in this owner — outside the
        lane policy (an Actor delivery lane has no sealed state)."""
        lane = hosted.lane
        hosted.parked = list(lane.retire()) if lane is not None else []
        hosted.state = RELOCATING

    def unseal_relocation(self, hosted: HostedActor) -> bool:
        """An abort before relay-ready acceptance: a fresh lane gets the saved work and the
        held ingress back in arrival order; timers resume. False when the Actor is no
        longer Relocating here (fenced meanwhile: nothing reopens). The fresh lane runs
        under the gate the sealed one had (a SpotWide member's: its Spot's)."""
        items, hosted.parked = hosted.parked or [], None
        if hosted.state is not RELOCATING or self._actors.get(hosted.actor_id) is not hosted:
            hosted.orphans = [item for item in items if type(item) is Deliver]
            return False
        old = hosted.lane
        lane = hosted.lane = self._engine.new_lane(
            ACTOR_LANE, hosted, gate=None if old is None else old.gate
        )
        hosted.state = READY
        for item in items:
            lane.submit_nowait(item, lifecycle=type(item) is Barrier or type(item) is JoinDone)
        if hosted.timers is not None:
            hosted.timers.resume()
        return True

    def unpublish_relocated(self, hosted: HostedActor) -> list[ActorItem]:
        """Relay-ready was accepted: this activation is unpublished (ingress here follows or
        is a stale route), its Context retired, its timers (captured) cleaned up here.
        Returns what it held: saved work, then held ingress, in order."""
        if self._actors.get(hosted.actor_id) is hosted:
            del self._actors[hosted.actor_id]
        parked, hosted.parked = hosted.parked or [], None
        hosted.state = MOVED
        hosted.context._retire()
        if hosted.timers is not None:
            hosted.timers.close()
        return parked

    def publish_relocated(
        self, hosted: HostedActor, merged: list[ActorItem], *, gate: Gate | None = None
    ) -> None:
        """The target's commit (after its owner CAS): ``merged`` (saved work, then the
        pre-boundary relay) and then what the temporary queue holds enter the new lane in
        that order, and the regular route replaces the temporary queue — one synchronous
        step, so nothing is admitted between them or twice. The lane runs from the next
        schedule point on (dispatch opened), under ``gate`` (a SpotWide member's: its
        Spot's new one)."""
        if self._fenced:
            hosted.state = FENCED
            self._actors[hosted.actor_id] = hosted
            return
        lane = hosted.lane = self._engine.new_lane(ACTOR_LANE, hosted, gate=gate)
        hosted.state = READY
        self._actors[hosted.actor_id] = hosted
        staging = self._staging.pop(hosted.actor_id, None)
        if staging is not None:
            merged = [*merged, *staging.parked]
            staging.parked = []
            staging.event.set()
        lane.merge_nowait(merged)  # a held burst is never cut by the lane's capacity

    # --- admission --------------------------------------------------------------------------
    def ready_lane(self, actor_id: ActorId) -> Lane[ActorDeliveryLane, ActorItem] | None:
        """The lane of the published Ready activation of ``actor_id``, or None (the
        delivery fast path)."""
        hosted = self._actors.get(actor_id)
        if hosted is not None and hosted.state is READY:
            return hosted.lane
        return None

    async def admit(self, actor_id: ActorId, item: Deliver) -> HostedActor:
        """Put ``item`` on the current Ready Actor's application queue.

        Waits only while the Actor is being committed here (staging) or its queue is full
        (backpressure); otherwise it returns without a schedule point (the caller decides
        where it yields: a remote frame's reader goes on with the next frame).

        Raises:
            StaleRoute: the Actor is not hosted here (the route that led here is stale).
            Unavailable: the Actor is being destroyed, or fenced (the lease was lost).
        """
        hosted = self._actors.get(actor_id)
        if hosted is None:
            staging = self._staging.get(actor_id)
            if staging is not None:
                await staging.event.wait()
                hosted = self._actors.get(actor_id)
            if hosted is None:
                raise StaleRoute(f"actor {actor_id.value!r} is not hosted on this node")
        if hosted.state is not READY:
            if hosted.state is JOINING or hosted.state is RELOCATING:
                self._park(hosted, item)
                return hosted
            raise _not_admitting(hosted)
        lane = hosted.lane
        assert lane is not None
        try:
            lane.submit_nowait(item)
        except CapacityExceeded:
            await lane.submit(item)
        return hosted

    def admit_nowait(self, actor_id: ActorId, item: Deliver) -> None:
        """Put ``item`` on the current Ready Actor's application queue without ever
        waiting: for a connection's reader, which must go on with the next frame whatever
        one Actor's state (other Actors' messages and replies share the connection).

        An Actor being committed here (staging) gets the item parked, in arrival order,
        ahead of anything admitted after its publication (A04-09: acceptance order per
        Actor).

        Raises:
            StaleRoute: the Actor is not hosted here.
            Unavailable: the Actor is being destroyed, or fenced (the lease was lost).
            CapacityExceeded: its queue (or the staging parking) is full; counted as
                ``refused`` on the Actor type's dispatch counters.
        """
        hosted = self._actors.get(actor_id)
        if hosted is None:
            staging = self._staging.get(actor_id)
            if staging is None:
                raise StaleRoute(f"actor {actor_id.value!r} is not hosted on this node")
            capacity = self._engine.limits.capacity
            if len(staging.parked) >= capacity:
                raise CapacityExceeded(
                    f"actor {actor_id.value!r} is being created and {capacity} payloads "
                    "already wait for it"
                )
            staging.parked.append(item)
            return
        if hosted.state is not READY:
            if hosted.state is JOINING or hosted.state is RELOCATING:
                self._park(hosted, item)
                return
            raise _not_admitting(hosted)
        self.admit_ready_nowait(hosted, item)

    def admit_ready_nowait(self, hosted: HostedActor, item: Deliver) -> None:
        """:meth:`admit_nowait` for an activation the caller found Ready here (a hot path
        that looked it up already).

        Raises:
            CapacityExceeded: as :meth:`admit_nowait`.
        """
        lane = hosted.lane
        assert lane is not None
        try:
            lane.submit_nowait(item)
        except CapacityExceeded:
            hosted.kind.stats.refused += 1
            actor_id = hosted.actor_id
            self._flow.emit(
                FlowEvent.DISPATCH_REFUSED, "actor %r: its queue is full", actor_id.value
            )
            # Said in the caller's terms (its Actor and the bound), not the lane's.
            raise CapacityExceeded(
                f"actor {actor_id.value!r}: its queue is full ({self._engine.limits.capacity})"
            ) from None


async def _fail_items(items: list[ActorItem], error: ZLinkError) -> None:
    await fail_parked([item for item in items if type(item) is Deliver], error)


def _fail_local(items: list[ActorItem], error: ZLinkError) -> None:
    for item in items:
        if type(item) is Deliver and type(item.sink) is OneShot:
            item.sink.fail(error)
        elif type(item) is Deliver:
            logger.info("%r to a stopping Actor not run: %r", item.packet, error)


def _not_admitting(hosted: HostedActor) -> Unavailable:
    if hosted.state is FENCED:
        return lease_lost_error()
    if hosted.state is MOVED:
        return StaleRoute(f"actor {hosted.actor_id.value!r} moved to another node")
    return Unavailable(f"actor {hosted.actor_id.value!r} is being destroyed")
