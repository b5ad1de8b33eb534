"""The Spot owner's registry of hosted User and Instance Spots, and their admission.

Only this node's hosted Spots live here. Admission (:meth:`SpotHost.admit`,
:meth:`SpotHost.admit_nowait`) is the single place an application message enters a Spot's
application queue, whatever its ingress (local direct call, command 39 from a peer, the
first message of a cold activation), so every ingress kind is ordered by the same queue.

A Spot being created here is *staging* from its reservation's attempt until the attempt
ends: messages admitted meanwhile are parked, in arrival order, and enter the Spot's queue
first when it is published (a cold activation admits its first message this way before the
factory runs); an attempt that ends unpublished hands them back to be failed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, final

import trio

from ..engine.engine import Engine
from ..engine.lanes import SpotLane
from ..errors import CapacityExceeded, InvalidOperation, StaleRoute, Unavailable
from ..ids import (
    AuthorityOwnerGeneration,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OperationId,
    SpotId,
    StableType,
)
from ..mesh.lease import LeaseDeadline
from ..objects.timers import TimerService
from ..observe import FlowEvent, FlowTrace
from .context import SpotContext
from .execution import SpotWide
from .hosted import (
    SPOT_CLOSED,
    SPOT_FENCED,
    SPOT_READY,
    SPOT_RELOCATING,
    HostedSpot,
    SpotClosing,
    SpotFenced,
    SpotItem,
    SpotMessage,
    SpotReady,
    SpotShared,
    SpotStaging,
    spot_lease_lost,
)
from .registry import SpotType

if TYPE_CHECKING:
    from .client import SpotClient
    from .members import MemberJoins

__all__ = ["SpotHost"]


@final
class _Staging:
    """Attempts staging one id here, and what was admitted for it meanwhile."""

    __slots__ = ("attempts", "event", "firsts", "parked", "relay_from", "relayed")

    def __init__(self, relay_from: tuple[NodeRid, NodeGeneration] | None) -> None:
        self.attempts = 1
        self.event = trio.Event()
        self.parked: list[SpotMessage] = []
        self.firsts: dict[ObjectGeneration, SpotMessage] = {}
        """Each cold activation's first message, by the incarnation it reserved: only
        that incarnation's Spot ever takes it (an attempt that ended without a Spot never
        hands its first message to a later attempt of the id)."""
        self.relay_from = relay_from
        """A relocation's temporary queue: the source lifecycle whose relay it takes
        (then nothing it parks is count-bounded, spec 06 §6); None for a creation."""
        self.relayed: list[SpotMessage] = []
        """The relay from the source (saved work, then held ingress), in its order: it
        enters the lane before what ``parked`` holds (A04-05)."""


@final
class SpotHost:
    __slots__ = (
        "_engine",
        "_fenced",
        "_flow",
        "_lease",
        "_lease_live",
        "_max_reply",
        "_node_rid",
        "_on_close",
        "_shared",
        "_spots",
        "_staging",
        "_timers",
        "joins",
        "spots_client",
    )

    def __init__(
        self,
        engine: Engine,
        flow: FlowTrace,
        lease: LeaseDeadline,
        lease_live: Callable[[], bool],
        node_rid: Callable[[], NodeRid],
        max_reply: int,
        on_close_request: Callable[[HostedSpot], None],
        timers: TimerService | None = None,
    ) -> None:
        self._engine = engine
        self._timers = timers
        self._flow = flow
        self._lease = lease
        self._lease_live = lease_live
        self._node_rid = node_rid
        self._max_reply = max_reply
        self._on_close = on_close_request
        self._fenced = False
        self._spots: dict[SpotId, HostedSpot] = {}
        self._staging: dict[SpotId, _Staging] = {}
        self._shared: dict[StableType, SpotShared] = {}
        self.joins: MemberJoins | None = None
        """The Actor runtime's Join registrar: a User Spot handler Defers its members'
        Joins through it (set by that runtime; None: no membership on this server)."""
        self.spots_client: SpotClient | None = None
        """The direct-call client the Spots' Contexts hand out as ``context.spots`` (set
        by the runtime once it exists)."""

    # --- registry ---------------------------------------------------------------------
    def get(self, spot_id: SpotId) -> HostedSpot | None:
        """The published incarnation of ``spot_id`` here (Ready or Closing), or None."""
        return self._spots.get(spot_id)

    def ready(self, spot_id: SpotId) -> HostedSpot | None:
        hosted = self._spots.get(spot_id)
        return hosted if hosted is not None and hosted.state is SPOT_READY else None

    def __len__(self) -> int:
        return len(self._spots)

    def __iter__(self) -> Iterator[HostedSpot]:
        return iter(tuple(self._spots.values()))

    @property
    def staging_count(self) -> int:
        return len(self._staging)

    def shared(self, spot_type: SpotType) -> SpotShared:
        """What every hosted Spot of ``spot_type`` shares here (made once)."""
        shared = self._shared.get(spot_type.stable_type)
        if shared is None or shared.spot_type is not spot_type:
            shared = self._shared[spot_type.stable_type] = SpotShared(
                spot_type, self._node_rid(), self._max_reply, self._flow, self._lease,
                self._lease_live, self._timers, self.joins,
            )  # fmt: skip
        return shared

    def shared_all(self) -> tuple[SpotShared, ...]:
        return tuple(self._shared.values())

    # --- staging and publication ----------------------------------------------------------
    def stage(
        self,
        spot_type: SpotType,
        spot_id: SpotId,
        generation: ObjectGeneration,
        mesh_name: MeshName,
        owner_generation: AuthorityOwnerGeneration,
    ) -> HostedSpot:
        """A new Staging activation of ``spot_id`` with its lane (under a new shared gate
        for a SpotWide Spot): the factory and the create callback run in its lifecycle
        turns; it admits no message until :meth:`publish`."""
        holder: list[HostedSpot] = []

        def close() -> None:
            self._request_close(holder[0])

        context = SpotContext(spot_id, generation, spot_type.kind, spot_type.stable_type,
                              mesh_name, close, self.spots_client)  # fmt: skip
        shared = self.shared(spot_type)
        gate = self._engine.new_gate() if isinstance(spot_type.execution, SpotWide) else None
        hosted = HostedSpot(shared, context, owner_generation, gate)
        holder.append(hosted)
        hosted.lane = self._engine.new_lane(SpotLane(), hosted, gate=gate, on_drop=hosted.dropped)
        self.begin_staging(spot_id)
        return hosted

    def begin_staging(
        self, spot_id: SpotId, *, relay_from: tuple[NodeRid, NodeGeneration] | None = None
    ) -> None:
        """From now until the matching :meth:`end_staging_of`, messages admitted for
        ``spot_id`` (not hosted here yet) are parked, in arrival order, instead of being
        refused StaleRoute; the Spot published meanwhile takes them first. :meth:`stage`
        calls it; a cold activation calls it BEFORE its own reserve (then
        :meth:`park_first` its first message), so nothing can overtake that message.
        ``relay_from``: the temporary queue of a move here from that source lifecycle (it
        parks without a bound and takes the source's relay apart)."""
        staging = self._staging.get(spot_id)
        if staging is None:
            self._staging[spot_id] = _Staging(relay_from)
        else:
            staging.attempts += 1
            if relay_from is not None:
                staging.relay_from = relay_from

    def admit_relayed_nowait(
        self, spot_id: SpotId, item: SpotMessage, source: tuple[NodeRid, NodeGeneration]
    ) -> bool:
        """``item`` is part of the relay of a move of ``spot_id`` here from ``source``:
        parked apart, in relay order (True); False when no such move stages it here."""
        staging = self._staging.get(spot_id)
        if staging is None or staging.relay_from != source or spot_id in self._spots:
            return False
        staging.relayed.append(item)
        return True

    def has_temporary_queue(self, spot_id: SpotId) -> bool:
        """Whether something stages ``spot_id`` here (a creation or a move): inbound
        dispatch parks there, before any follow route is looked at (A04-04)."""
        return spot_id in self._staging

    def park_first(self, spot_id: SpotId, generation: ObjectGeneration, item: SpotMessage) -> None:
        """Park ``item``, the first message of the cold activation of ``spot_id`` that
        reserved incarnation ``generation``: the Spot of that incarnation, once published,
        runs it before anything parked; no other incarnation ever takes it. Raises
        StaleRoute when nothing stages the id."""
        staging = self._staging.get(spot_id)
        if staging is None:
            raise StaleRoute(f"spot {spot_id.value!r} is not staging on this node")
        staging.firsts[generation] = item

    def end_staging_of(self, spot_id: SpotId) -> list[SpotMessage]:
        """One :meth:`begin_staging` of ``spot_id`` ended. Returns the messages parked for
        it that no published Spot took, once nothing else stages it (the caller fails
        them, StaleRoute); while another attempt does, they stay parked for it."""
        staging = self._staging.get(spot_id)
        if staging is None:
            return []
        staging.attempts -= 1
        if staging.attempts > 0:
            return []
        del self._staging[spot_id]
        staging.event.set()
        parked = [*staging.firsts.values(), *staging.relayed, *staging.parked]
        staging.firsts, staging.relayed, staging.parked = {}, [], []
        return parked

    def publish(self, hosted: HostedSpot, owner_generation: AuthorityOwnerGeneration) -> None:
        """Make ``hosted`` reachable (after its Ready commit): the messages parked while
        it was staging enter its queue first, in arrival order. On a fenced host (the
        lease was lost after the commit was sent) it is registered Fenced and never runs."""
        hosted.owner_generation = owner_generation
        spot_id = hosted.spot_id
        self._spots[spot_id] = hosted
        staging = self._staging.get(spot_id)
        if self._fenced:
            hosted.state = SPOT_FENCED
            hosted.retire_lane()
        else:
            hosted.state = SPOT_READY
            first = None if staging is None else staging.firsts.pop(hosted.generation, None)
            if staging is not None and (first is not None or staging.parked):
                parked, staging.parked = staging.parked, []
                if first is not None:
                    parked.insert(0, first)
                lane = hosted.lane
                assert lane is not None
                for item in parked:
                    lane.submit_nowait(item)
            if hosted.timers is not None:
                hosted.timers.resume()  # registered while staging: ticks from now on
        if staging is not None:
            staging.event.set()
            staging.event = trio.Event()

    def end_staging(self, hosted: HostedSpot) -> list[SpotMessage]:
        """``hosted``'s attempt ended. Unpublished, its lane is closed (nothing it holds
        runs). Returns the messages parked for the id that no published Spot took, once
        no other attempt of it stages here (the caller fails them, StaleRoute)."""
        own: list[SpotMessage] = []
        if isinstance(hosted.state, SpotStaging):
            hosted.state = SPOT_CLOSED
            hosted.retire_lane()
            staging = self._staging.get(hosted.spot_id)
            first = None if staging is None else staging.firsts.pop(hosted.generation, None)
            if first is not None:
                own.append(first)  # its attempt is over: it never runs on another one
        return [*own, *self.end_staging_of(hosted.spot_id)]

    def retire(self, hosted: HostedSpot) -> None:
        """Unpublish ``hosted`` (close: its cleanup ran) and retire its lane."""
        if self._spots.get(hosted.spot_id) is hosted:
            del self._spots[hosted.spot_id]
        if not isinstance(hosted.state, SpotFenced):
            hosted.state = SPOT_CLOSED
        hosted.retire_lane()

    def fence(self) -> list[HostedSpot]:
        """This node's owner lease was lost: every hosted Spot becomes Fenced (admits
        nothing, runs no turn again) and its lane is retired; returns those with orphans
        (the caller fails them). Later publications are fenced at once. Idempotent."""
        self._fenced = True
        orphaned = []
        for hosted in self._spots.values():
            hosted.state = SPOT_FENCED
            hosted.retire_lane()
            if hosted.orphans:
                orphaned.append(hosted)
        return orphaned

    # --- relocation (docs/relocation.md, "Spots") ------------------------------------------
    def seal_relocation(
        self, hosted: HostedSpot, relocation_id: OperationId
    ) -> list[SpotItem] | None:
        """The relocation seal, in a lifecycle turn of the Spot's own lane (its running
        handler has finished): the lane is sealed (application ingress from now on is
        HELD, lifecycle work still runs), its timers suspended, and the application work
        it had accepted and not run (the saved work) handed to the relocation, in
        acceptance order. A Spot that is not Ready is not sealed (None, state
        unchanged)."""
        lane = hosted.lane
        if hosted.state is not SPOT_READY or lane is None:
            return None
        lane.seal(relocation_id)
        hosted.state = SPOT_RELOCATING
        if hosted.timers is not None:
            hosted.timers.suspend()
        return list(lane.take_held().pending)

    def unseal_relocation(
        self, hosted: HostedSpot, relocation_id: OperationId, saved: list[SpotItem]
    ) -> bool:
        """An abort before relay-ready acceptance: the saved work and then the held
        ingress go back into the lane in arrival order (one synchronous step), the lane
        runs again and the timers resume. False when the Spot is not Relocating any more
        (fenced meanwhile: nothing reopens; the saved messages become its orphans)."""
        lane = hosted.lane
        if hosted.state is not SPOT_RELOCATING or lane is None:
            hosted.orphans.extend(item for item in saved if type(item) is SpotMessage)
            return False
        held, hosted.parked = hosted.parked, []
        lane.unseal(relocation_id)
        hosted.state = SPOT_READY
        lane.merge_nowait([*saved, *held])
        if hosted.timers is not None:
            hosted.timers.resume()
        return True

    def take_held_relocation(self, hosted: HostedSpot) -> list[SpotMessage]:
        """What the sealed lane held since the last take (arrival order)."""
        if hosted.state is not SPOT_RELOCATING:
            return []
        held, hosted.parked = hosted.parked, []
        return list(held)

    def unpublish_relocated(self, hosted: HostedSpot) -> list[SpotMessage]:
        """Relay-ready was accepted and the held work relayed: this activation is
        unpublished (ingress here follows, or is a stale route), its lane retired and its
        timers (captured) cleaned up here. Returns what was held since the last take,
        in arrival order (one synchronous step with the unpublication)."""
        held = self.take_held_relocation(hosted)
        if self._spots.get(hosted.spot_id) is hosted:
            del self._spots[hosted.spot_id]
        hosted.state = SPOT_CLOSED
        hosted.retire_lane()
        return held

    def publish_relocated(
        self,
        hosted: HostedSpot,
        owner_generation: AuthorityOwnerGeneration,
        first: list[SpotItem],
    ) -> None:
        """The target's commit (after its owner CAS): ``first`` (the timer ticks that
        were in the source lane), then the source's relay (saved work, then the
        pre-boundary hold), then the remaining temporary work enter the lane in that
        order, and the regular route replaces the temporary queue: one synchronous step,
        so nothing is admitted between them or twice. Never cut by the lane's
        capacity."""
        hosted.owner_generation = owner_generation
        spot_id = hosted.spot_id
        self._spots[spot_id] = hosted
        staging = self._staging.get(spot_id)
        parked: list[SpotMessage] = []
        if staging is not None:
            parked = [*staging.relayed, *staging.parked]
            staging.relayed, staging.parked = [], []
        if self._fenced:
            hosted.state = SPOT_FENCED
            hosted.orphans.extend(parked)
            hosted.retire_lane()
        else:
            hosted.state = SPOT_READY
            lane = hosted.lane
            assert lane is not None
            lane.merge_nowait([*first, *parked])
            if hosted.timers is not None:
                hosted.timers.resume()
        if staging is not None:
            staging.event.set()
            staging.event = trio.Event()

    def _request_close(self, hosted: HostedSpot) -> None:
        if isinstance(hosted.state, SpotStaging):
            raise InvalidOperation("the Spot is not Ready yet: it cannot close itself now")
        if hosted.close_requested or not isinstance(hosted.state, SpotReady):
            return  # a close runs already (or it is over)
        hosted.close_requested = True
        self._on_close(hosted)

    # --- admission ----------------------------------------------------------------------------
    def _not_admitting(self, hosted: HostedSpot) -> Unavailable:
        if isinstance(hosted.state, SpotFenced):
            return spot_lease_lost()
        if isinstance(hosted.state, SpotClosing):
            return Unavailable(f"spot {hosted.spot_id.value!r} is closing")
        return Unavailable(f"spot {hosted.spot_id.value!r} is closed")

    async def admit(self, spot_id: SpotId, item: SpotMessage) -> HostedSpot | None:
        """Put ``item`` on the current Ready Spot's application queue, waiting while its
        queue is full (backpressure). A Spot staging here gets it parked (see the module
        docstring; None: parked for a Spot not published yet), a Spot sealed for a move
        gets it held. The state is looked at and acted on in one synchronous step: a
        parked or held item is never refused afterwards (it runs once, where the
        staging or the move takes it).

        Raises:
            StaleRoute: the Spot is not hosted here.
            Unavailable: it is closing, closed or fenced.
        """
        hosted = self._spots.get(spot_id)
        if hosted is None:
            self.admit_nowait(spot_id, item)  # parks it (or raises StaleRoute)
            await trio.lowlevel.cancel_shielded_checkpoint()  # parked: never withdrawn
            return self._spots.get(spot_id)
        if hosted.state is not SPOT_READY:
            if hosted.state is SPOT_RELOCATING:
                hosted.parked.append(item)  # the relocation hold: never refused
                await trio.lowlevel.cancel_shielded_checkpoint()
                return hosted
            await trio.lowlevel.checkpoint()
            raise self._not_admitting(hosted)
        lane = hosted.lane
        assert lane is not None
        try:
            lane.submit_nowait(item)
        except CapacityExceeded:
            await lane.submit(item)
        return hosted

    def admit_nowait(self, spot_id: SpotId, item: SpotMessage) -> None:
        """Like :meth:`admit` without ever waiting (a connection's reader).

        Raises:
            StaleRoute: the Spot is not hosted here.
            Unavailable: it is closing, closed or fenced.
            CapacityExceeded: its queue (or the staging parking) is full; counted as
                ``refused`` on the type's counters.
        """
        hosted = self._spots.get(spot_id)
        if hosted is None:
            staging = self._staging.get(spot_id)
            if staging is None:
                raise StaleRoute(f"spot {spot_id.value!r} is not hosted on this node")
            capacity = self._engine.limits.capacity
            if len(staging.parked) >= capacity and staging.relay_from is None:
                raise CapacityExceeded(
                    f"spot {spot_id.value!r} is being created and {capacity} messages "
                    "already wait for it"
                )
            staging.parked.append(item)
            return
        if hosted.state is not SPOT_READY:
            if hosted.state is SPOT_RELOCATING:
                hosted.parked.append(item)  # the relocation hold: never refused
                return
            raise self._not_admitting(hosted)
        lane = hosted.lane
        assert lane is not None
        try:
            lane.submit_nowait(item)
        except CapacityExceeded:
            hosted.shared.counters.refused += 1
            self._flow.emit(FlowEvent.DISPATCH_REFUSED, "spot %r: its queue is full", spot_id.value)
            raise CapacityExceeded(
                f"spot {spot_id.value!r}: its queue is full ({self._engine.limits.capacity})"
            ) from None
