"""The Actor runtime service: this node's Actor owner role plus the Actor manager.

Started by the composition root (:mod:`zlink_trio._runtime`) with ``nursery.start`` after
the Spot owner, when the app enabled Actor dispatch. It gets its inputs as plain values
(the validated Actor types, the Store, the engine, the MeshNode and the Spot owner's Entry
Spots, one per mesh where this node is an Object Server), registers the inbound Actor
commands on the MeshNode before the node admits anyone and owns one nursery for its tasks
(creation attempts, destroys).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, final

import trio

from ..config import ServerConfig
from ..errors import (
    CapacityExceeded,
    DeadlineExceeded,
    InvalidOperation,
    StaleRoute,
    Unavailable,
    ZLinkError,
)
from ..ids import ActorId, MeshName, NodeGeneration, NodeRid, StableType
from ..mesh.api import (
    LinkLost,
    PeerAddress,
    PeerGone,
    PeerIdentity,
    PeerNotAdmitted,
    PendingReply,
)
from ..objects.activity import Activity
from ..objects.create_source import CreateSource
from ..objects.create_target import CreateTarget
from ..objects.destroy import Destroyer
from ..objects.reclaim import Reclaimer
from ..objects.relocation import ActorRelocationParticipant
from ..objects.relocation_inbox import RelocationInbox, relocation_side
from ..objects.relocation_stats import RelocationStatistics
from ..objects.sinks import RemoteSink, failure, ok
from ..objects.timers import TimerService
from ..observe import FlowEvent, FlowTrace
from ..routing.dedupe import IngressDedupe
from ..routing.reply_deadlines import ReplyDeadlines
from ..routing.route_cache import RouteCache
from ..spots.client import SpotClient
from ..spots.entry import EntrySpot
from ..spots.runtime import SpotRuntime
from ..store.api import LocationStore, ObjectKind
from ..wire.codec import evolve
from ..wire.commands import Command
from ..wire.enums import MessageKind
from ..wire.payloads import PayloadRegistry
from ..wire.records import (
    ActorCreate,
    ActorDestroy,
    ActorJoin,
    ActorSend,
    TerminalReply,
)
from ..wire.tails import DestroyTail
from .authority import Authority
from .bind_follow import BindFollow
from .bindings import ActorBindings, OnDisconnectActor
from .client import ActorClient
from .destroy import ActorDestroyKind
from .follow import FollowRoute, FollowRoutes
from .host import ActorHost
from .hosted import READY, RELOCATING, Deliver, Destroying, HostedActor, Ready, lease_lost_error
from .join import JoinRegistrar
from .join_target import JoinTarget
from .joining import JoinRunner
from .kind import ActorSourceKind, ActorTargetKind, actor_order
from .manager import ActorManager
from .messenger import NEVER, Messenger
from .registry import ActorTypes
from .relocating import ActorRelocator
from .relocation_target import RelocationTarget
from .results import ActorCreateResult
from .session_moves import SessionMoves
from .spot_wide_target import SpotWideMembersTarget
from .stats import ActorRuntimeStatistics, ActorTypeStatistics, DispatchStats

if TYPE_CHECKING:
    from ..engine.engine import Engine
    from ..mesh.node import MeshNode
    from ..spots.runtime import SpotRuntime

__all__ = ["ActorRuntime", "serve_actors"]

logger = logging.getLogger("zlink_trio.actors")

_REQUEST: Final = MessageKind.REQUEST


@final
class ActorRuntime:
    def __init__(
        self,
        *,
        config: ServerConfig,
        types: ActorTypes,
        payloads: PayloadRegistry,
        entry_spots: Mapping[MeshName, EntrySpot],
        store: LocationStore,
        node: MeshNode,
        engine: Engine,
        flow: FlowTrace,
        nursery: trio.Nursery,
        timers: TimerService | None = None,
        spot_client: SpotClient | None = None,
        spots: SpotRuntime | None = None,
        spot_runtime: SpotRuntime | None = None,
        on_disconnect_actor: OnDisconnectActor | None = None,
    ) -> None:
        self._config = config
        self._flow = flow
        self._store = store
        self._node = node
        self._spot_runtime = spot_runtime
        self._stats: dict[StableType, DispatchStats] = {st: DispatchStats() for st in types}
        self.transactions = Activity()
        """Control transactions in progress here: creation attempts (from their staging
        to its end) and destroys. A clean stop lets them finish (``_runtime``'s drain)."""
        self.host = ActorHost(engine, flow, node.lease_deadline, node.lease_live, timers)
        cache: RouteCache[ActorId] = RouteCache(
            max_age=config.route_cache_max_age, lease_bound=config.owner_lease_ttl
        )
        authority = Authority(store, cache)
        self.authority = authority
        self.joins = JoinRegistrar(
            self.host, default_timeout=config.join_timeout, payloads=payloads
        )
        self.host.joins = self.joins
        if spots is not None:
            spots.host.joins = self.joins  # User Spot handlers Defer their members' Joins
        self.reclaimer = Reclaimer(store, nursery)
        self.deadlines = ReplyDeadlines()
        self.messenger = Messenger(
            config=config,
            node=node,
            store=store,
            host=self.host,
            authority=authority,
            deadlines=self.deadlines,
            flow=flow,
        )
        self.client = ActorClient(
            self.messenger,
            max_request=config.max_request_bytes,
            default_timeout=config.default_request_timeout,
            payloads=payloads,
            spots=spot_client,
        )
        self.client.barriers = self.joins
        self.bindings = ActorBindings(
            node=node,
            host=self.host,
            flow=flow,
            nursery=nursery,
            entry_spots=entry_spots,
            spot_runtime=spot_runtime,
            on_disconnect_actor=on_disconnect_actor,
            retention=config.terminal_record_retention,
            max_payload=config.max_reply_bytes,
        )
        """Session bindings of the hosted Actors (spec 02): command 38, relay checks,
        ``context.session`` push/close."""
        self.client.bindings = self.bindings
        self.session_moves = SessionMoves(node, self.bindings)
        """The sessions participant (spec 02 §8: commands 42/43/44)."""
        self.relocation_participants: list[ActorRelocationParticipant] = [self.session_moves]
        """Framework state that moves with a relocating Actor, called in the order of
        :mod:`zlink_trio.objects.relocation` (docs/relocation.md, "Participants")."""
        self.target: CreateTarget[ActorId] = CreateTarget(
            kind=ActorTargetKind(
                config=config,
                host=self.host,
                types=types,
                entry_spots=entry_spots,
                client=self.client,
                stats_for=self._stats_for,
                node_rid=lambda: node.identity.node_rid,
                nursery=nursery,
                activity=self.transactions,
                joins=self.joins,
            ),
            config=config,
            node=node,
            store=store,
            nursery=nursery,
            authority=authority,
            reclaimer=self.reclaimer,
            owner="Actor runtime",
            task_name="zlink_trio.actor.create",
        )
        self.source: CreateSource[ActorId, ActorCreateResult] = CreateSource(
            kind=ActorSourceKind(),
            config=config,
            node=node,
            store=store,
            target=self.target,
            authority=authority,
            reclaimer=self.reclaimer,
            flow=flow,
            reserve_first=True,
        )
        self.destroyer: Destroyer[ActorId, HostedActor] = Destroyer(
            kind=ActorDestroyKind(self.host, authority, self.bindings),
            object_kind=ObjectKind.ACTOR,
            store=store,
            authority=authority,
            drain_timeout=config.drain_timeout,
            nursery=nursery,
            owner="Actor runtime",
            task_name="zlink_trio.actor.destroy",
            activity=self.transactions,
        )
        self.manager = ActorManager(
            config=config,
            node=node,
            store=store,
            source=self.source,
            destroyer=self.destroyer,
            client=self.client,
            authority=authority,
            flow=flow,
        )
        self.joiner = JoinRunner(
            config=config,
            node=node,
            store=store,
            host=self.host,
            authority=authority,
            entry_spots=entry_spots,
            registrar=self.joins,
            nursery=nursery,
            activity=self.transactions,
            flow=flow,
            spots=spots,
        )
        self.join_target = JoinTarget(
            config=config,
            node=node,
            store=store,
            host=self.host,
            authority=authority,
            types=types,
            entry_spots=entry_spots,
            client=self.client,
            registrar=self.joins,
            stats_for=self._stats_for,
            nursery=nursery,
            activity=self.transactions,
            spots=spots,
        )
        self.follow = FollowRoutes(config.message_follow_duration)
        self.messenger.target_adapter.follow = self.follow
        """Message Follow routes of the Actors that moved away from here."""
        self.bindings.follow = BindFollow(
            node=node,
            host=self.host,
            routes=self.follow,
            max_hops=config.message_follow_max_hops,
        )
        self.relocator = ActorRelocator(
            config=config,
            node=node,
            store=store,
            host=self.host,
            participants=self.relocation_participants,
            follow=self.follow,
            nursery=nursery,
            flow=flow,
        )
        self.relocation_target = RelocationTarget(
            config=config,
            node=node,
            store=store,
            host=self.host,
            authority=authority,
            types=types,
            client=self.client,
            registrar=self.joins,
            journal=self.join_target,
            follow=self.follow,
            participants=self.relocation_participants,
            stats_for=self._stats_for,
            timers=timers,
            nursery=nursery,
            activity=self.transactions,
        )
        self._nursery = nursery
        self._dedupe = IngressDedupe()

    def _stats_for(self, stable_type: StableType) -> DispatchStats:
        return self._stats.setdefault(stable_type, DispatchStats())

    def register(self) -> None:
        node = self._node
        node.on(Command.ACTOR_SEND, self._on_actor_send)
        node.on(Command.ACTOR_CREATE, self._on_actor_create)
        node.on(Command.ACTOR_DESTROY, self._on_actor_destroy)
        node.on(Command.ACTOR_JOIN, self._on_actor_join)
        node.on(Command.ACTOR_JOURNAL, self.join_target.on_journal)
        node.on(Command.ACTOR_JOURNAL_END, self.join_target.on_journal_end)
        # 120-125 are shared with the Spot runtime's moves (one inbox registers them).
        side = relocation_side(self.relocator, self.relocation_target)
        if self._spot_runtime is not None:
            spots = self._spot_runtime
            spots.relocations.actors = side
            # A SpotWide Spot's members move with it (spec 06 §6.1).
            spots.relocator.members = self.relocator
            spots.relocation_target.members = SpotWideMembersTarget(self.relocation_target)
            self.relocation_target.spot_wide_staging = spots.relocation_target.spot_wide_staging
        else:
            inbox = RelocationInbox()
            inbox.actors = side
            inbox.register(node)
        self.bindings.register()

    # --- inbound ------------------------------------------------------------------------
    def _for_me(self, rid: NodeRid, generation: NodeGeneration) -> bool:
        me = self._node.identity
        # (The ids' values: one comparison each, without the generated ``__eq__`` calls.)
        return rid.value == me.node_rid.value and generation.value == me.node_generation.value

    async def _on_actor_send(self, peer: PeerIdentity, record: ActorSend) -> None:
        message_id = record.operation_id
        # Ingress matched the source to ``peer``: the link's window (see .dedupe).
        # A followed record (follow_hops > 0) keeps its original caller's message id, which
        # the relaying node deduplicated on arrival: it is not in this link's id space.
        if (
            message_id is not None
            and record.follow_hops == 0
            and not self._dedupe.first(peer, message_id.value)
        ):
            # A repeated frame: the first arrival was (or is being) handled; an application
            # message never runs twice, and the original answers a request.
            self._flow.emit(
                FlowEvent.REPEATED_FRAME_DROPPED, "message %d from %s", message_id.value, peer
            )
            return
        # The common case first: for this lifecycle, admitting, the Actor Ready here within
        # the route's owner fence, no session. It takes the same steps as the checks
        # below would (each of them passes), with one registry lookup instead of three.
        node = self._node
        me = node.identity
        hosted = None
        if (
            record.target_rid.value == me.node_rid.value
            and record.target_generation.value == me.node_generation.value
            and record.session is None
            and node.admitting
        ):
            hosted = self.host.by_id.get(record.actor_id)
            if hosted is not None:
                expected = record.expected_owner_generation
                if hosted.state is not READY or (
                    expected is not None and expected.value > hosted.owner_generation.value
                ):
                    hosted = None
        if hosted is None:
            await self._admit(peer, record)
            return
        sink = None
        run_by = NEVER  # an accepted send never expires
        if record.message_kind is _REQUEST:
            sink = RemoteSink(node, peer.address, record.correlation)
            if record.timeout_ms is not None:
                run_by = hosted.kind.now() + record.timeout_ms / 1000  # (trio's clock)
        item = Deliver(record.message_kind, record.packet_name, record.payload, sink, run_by)
        reader = node.reader_handoff()
        if reader is not None:
            lane = hosted.lane
            if lane is not None and await lane.run_here(item, reader):
                return
        try:
            self.host.admit_ready_nowait(hosted, item)
        except ZLinkError as exc:
            await self._refused(record, sink, exc)

    async def _admit(self, peer: PeerIdentity, record: ActorSend) -> None:
        """``record`` after the repeat filter: every ingress check, in order."""
        sink = (
            RemoteSink(self._node, peer.address, record.correlation)
            if record.message_kind is MessageKind.REQUEST
            else None
        )
        error: ZLinkError | None = None
        if not self._for_me(record.target_rid, record.target_generation):
            error = StaleRoute("the route names another node lifecycle")
        elif not self._node.admitting:
            error = Unavailable("this owner's lease expired: it admits nothing")
        elif (follow := self._follow_or_fence(record)) is not None:
            if isinstance(follow, FollowRoute):
                await self._follow_on(record, follow, sink)
                return
            error = follow
        elif record.session is not None and (
            refused := self.bindings.check_relay(record.actor_id, record.session)
        ):
            error = refused  # a retired or unknown binding (spec 02 §6): never run
        else:
            # A request is run only before its deadline; an accepted send never expires.
            run_by = NEVER
            if sink is not None and record.timeout_ms is not None:
                run_by = trio.current_time() + record.timeout_ms / 1000
            item = Deliver(record.message_kind, record.packet_name, record.payload, sink, run_by)
            # A lone frame for an idle Actor: its turn runs here, in the connection's
            # reader, without a hand-off to a runner (Lane.run_here).
            reader = self._node.reader_handoff()
            if reader is not None:
                lane = self.host.ready_lane(record.actor_id)
                if lane is not None and await lane.run_here(item, reader):
                    return
            try:
                # Never waits: this is the connection's reader (replies and messages for
                # other Actors share the connection). A full queue refuses the payload.
                self.host.admit_nowait(record.actor_id, item)
            except ZLinkError as exc:
                error = exc
        if error is not None:
            await self._refused(record, sink, error)

    async def _refused(self, record: ActorSend, sink: RemoteSink | None, error: ZLinkError) -> None:
        """``record`` was not admitted: counted, and a request answered ``error``."""
        if isinstance(error, StaleRoute):
            self._flow.emit(
                FlowEvent.STALE_ROUTE_INGRESS,
                "%s to %r: %r",
                record.message_kind.name.lower(),
                record.actor_id,
                error,
            )
        elif sink is None and not isinstance(error, CapacityExceeded):
            # (a full queue was counted as dispatch_refused where it was refused)
            self._flow.emit(FlowEvent.SEND_NOT_ADMITTED, "send to %r: %r", record.actor_id, error)
        if sink is not None:
            await sink.fail_nowait(error)

    def _follow_or_fence(self, record: ActorSend) -> FollowRoute[ActorId] | ZLinkError | None:
        """The owner fence at ingress (docs/relocation.md): None to admit here; a follow
        route when the Actor moved away from here; an error to refuse with."""
        hosted = self.host.get(record.actor_id)
        if hosted is not None:
            expected = record.expected_owner_generation
            if expected is not None and expected.value > hosted.owner_generation.value:
                return InvalidOperation(
                    f"actor {record.actor_id.value!r}: the route names an owner generation "
                    "this owner never had"
                )
            return None
        if self.host.has_temporary_queue(record.actor_id):
            return None  # the temporary queue is checked first (A04-04)
        route = self.follow.lookup(record.actor_id)
        if route is None:
            return None  # admission decides (staging, or a stale route)
        if (
            record.route_object_generation is not None
            and record.route_object_generation != route.object_generation
        ):
            return InvalidOperation("the route names another incarnation than the one that moved")
        if record.follow_hops >= min(self._config.message_follow_max_hops, 8):
            return Unavailable("the Message Follow chain is longer than its hop bound")
        return route

    async def _follow_on(
        self, record: ActorSend, route: FollowRoute[ActorId], sink: RemoteSink | None
    ) -> None:
        """Message Follow: the record, its operation id, payload and deadline unchanged,
        to the current owner over the committed route (no Store read, no handler); the
        terminal of a request comes back through here to its caller."""
        me = self._node.identity
        forwarded = evolve(
            record,
            source_rid=me.node_rid,
            source_generation=me.node_generation,
            target_rid=route.target_rid,
            target_generation=route.target_generation,
            expected_owner_generation=route.target_owner_generation,
            follow_hops=record.follow_hops + 1,
        )
        peer = PeerAddress(route.mesh_name, route.target_rid)
        self.follow.followed += 1
        try:
            if sink is None:
                await self._node.send(peer, forwarded, wait=False)
                return
            pending = await self._node.request_with(
                peer, lambda correlation: evolve(forwarded, correlation=correlation), wait=False
            )
        except (PeerNotAdmitted, DeadlineExceeded, trio.WouldBlock, ZLinkError) as exc:
            if sink is not None:
                await sink.fail_nowait(Unavailable(f"the Message Follow route failed: {exc!r}"))
            return
        self._nursery.start_soon(_relay_followed, pending, sink, record.timeout_ms)

    async def _on_actor_create(self, peer: PeerIdentity, record: ActorCreate) -> None:
        sink = RemoteSink(self._node, peer.address, record.correlation)
        if not self._for_me(record.reservation.target_rid, record.reservation.target_generation):
            await sink.deliver(failure(Unavailable("the reservation names another node lifecycle")))
            return
        if not self._node.admitting:
            await sink.deliver(failure(Unavailable("this owner's lease expired")))
            return
        self.target.handle(actor_order(record), sink)

    async def _on_actor_join(self, peer: PeerIdentity, record: ActorJoin) -> None:
        sink = RemoteSink(self._node, peer.address, record.correlation)
        if not self._for_me(record.target_rid, record.target_generation):
            await sink.deliver(failure(StaleRoute("the join names another node lifecycle")))
            return
        if not self._node.admitting:
            await sink.deliver(failure(Unavailable("this node does not admit new membership")))
            return
        self.join_target.handle(record, sink)

    async def _on_actor_destroy(self, peer: PeerIdentity, record: ActorDestroy) -> None:
        sink = RemoteSink(self._node, peer.address, record.correlation)
        if not self._for_me(record.target_rid, record.target_generation):
            await sink.deliver(failure(StaleRoute("the destroy names another node lifecycle")))
            return
        # The caller's deadline, fixed on arrival: a destroy that cannot start before it
        # never starts (the caller has given up on it).
        deadline = trio.current_time() + record.timeout_ms / 1000
        self._nursery.start_soon(
            self._destroy_for_peer, record, sink, deadline, name="zlink_trio.actor.destroy"
        )

    async def _destroy_for_peer(
        self, record: ActorDestroy, sink: RemoteSink, deadline: float
    ) -> None:
        # A task of the runtime's nursery: whatever goes wrong ends as a terminal, never
        # as an exception that would cancel the nursery (and the whole server).
        try:
            destroyed = await self.destroyer.destroy(
                record.actor_id, record.object_generation, deadline
            )
        except ZLinkError as exc:
            await sink.deliver(failure(exc))
            return
        except Exception as exc:
            logger.exception("destroy of %r for a peer failed", record.actor_id)
            await sink.deliver(failure(Unavailable(f"destroy failed: {type(exc).__name__}")))
            return
        await sink.deliver(ok(DestroyTail(destroyed=destroyed)))

    # --- fencing ------------------------------------------------------------------------------
    async def fence_on_lease_loss(self) -> None:
        """Once this lifecycle's owner lease is lost, fence every hosted Actor: none runs a
        turn again (each turn also checks the lease when it starts, so none starts after
        the local deadline even before this runs), and what their queues held is answered
        Unavailable now instead of at its callers' deadlines."""
        await self._node.wait_lease_lost()
        error = lease_lost_error()
        for hosted in self.host.fence():
            await hosted.fail_orphans(error)

    # --- observability ------------------------------------------------------------------------
    def statistics(self) -> ActorRuntimeStatistics:
        per_type: dict[StableType, list[int]] = {st: [0, 0, 0, 0] for st in self._stats}
        meshes: dict[StableType, set[str]] = {st: set() for st in self._stats}
        for hosted in self.host:
            st = hosted.actor_type.stable_type
            counts = per_type.setdefault(st, [0, 0, 0, 0])
            meshes.setdefault(st, set()).add(hosted.mesh_name.value)
            match hosted.state:
                case Ready():
                    counts[0] += 1
                case Destroying():
                    counts[1] += 1
            if hosted.lane is not None:
                lane = hosted.lane.statistics()
                counts[2] += lane.application
                counts[3] += lane.lifecycle
        types = []
        for st, (ready, destroying, app_backlog, control_backlog) in sorted(
            per_type.items(), key=lambda kv: kv[0].value
        ):
            d = self._stats_for(st)
            types.append(
                ActorTypeStatistics(
                    stable_type=st.value,
                    mesh_names=tuple(sorted(meshes.get(st, ()))),
                    ready=ready,
                    destroying=destroying,
                    application_backlog=app_backlog,
                    control_backlog=control_backlog,
                    dispatch_ok=d.ok,
                    dispatch_failed=d.failed,
                    dispatch_no_handler=d.no_handler,
                    dispatch_expired=d.expired,
                    dispatch_dropped=d.dropped,
                    dispatch_refused=d.refused,
                )
            )
        cache = self.messenger.cache.statistics()
        joins = self.joiner.stats
        flow = self._flow
        return ActorRuntimeStatistics(
            hosted=len(self.host),
            staging=self.host.staging_count,
            creates_in_flight=self.target.in_flight,
            types=tuple(types),
            route_cache_entries=cache.entries,
            route_cache_hits=cache.hits,
            route_cache_misses=cache.misses,
            route_cache_invalidations=cache.invalidations,
            stale_route_ingress=flow.count(FlowEvent.STALE_ROUTE_INGRESS),
            stale_route_results=flow.count(FlowEvent.STALE_ROUTE_RESULT),
            repeated_ingress=flow.count(FlowEvent.REPEATED_FRAME_DROPPED),
            creates=self.source.creates,
            create_replays=self.source.replays,
            rejected=self.target.rejected,
            failed_creates=self.target.failed,
            relocation=RelocationStatistics(
                sealed=sum(1 for hosted in self.host if hosted.state is RELOCATING),
                in_flight=len(self.relocator.in_flight),
                moved_out=self.relocator.moved_out,
                aborted=self.relocator.aborted,
                restores=self.relocation_target.factory_runs,
                committed=self.relocation_target.committed,
                discarded=self.relocation_target.discarded,
                cutover_timeouts=self.relocation_target.cutover_timeouts,
                followed=self.follow.followed,
            ),
            joins_accepted=joins.accepted,
            joins_rejected=joins.rejected,
            joins_failed=joins.failed,
            joins_moved_out=joins.moved_out,
            joins_moved_in=self.join_target.arrived,
        )


async def serve_actors(
    config: ServerConfig,
    types: ActorTypes,
    payloads: PayloadRegistry,
    entry_spots: Mapping[MeshName, EntrySpot],
    store: LocationStore,
    node: MeshNode,
    engine: Engine,
    flow: FlowTrace,
    *,
    timers: TimerService | None = None,
    spot_client: SpotClient | None = None,
    spots: SpotRuntime | None = None,
    spot_runtime: SpotRuntime | None = None,
    on_disconnect_actor: OnDisconnectActor | None = None,
    task_status: trio.TaskStatus[ActorRuntime] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The Actor owner role: run until cancelled (start it before ``node`` serves).
    ``timers``: the node's timer service (without one, ``context.timers`` registrations
    fail ShuttingDown)."""
    async with trio.open_nursery() as nursery:
        runtime = ActorRuntime(
            config=config,
            types=types,
            payloads=payloads,
            entry_spots=entry_spots,
            store=store,
            node=node,
            engine=engine,
            flow=flow,
            nursery=nursery,
            timers=timers,
            spot_client=spot_client,
            spots=spots,
            spot_runtime=spot_runtime,
            on_disconnect_actor=on_disconnect_actor,
        )
        runtime.register()
        await nursery.start(runtime.deadlines.serve, name="zlink_trio.actors.deadlines")
        nursery.start_soon(runtime.fence_on_lease_loss, name="zlink_trio.actors.fence")
        task_status.started(runtime)
        await trio.sleep_forever()


async def _relay_followed(pending: PendingReply, sink: RemoteSink, timeout_ms: int | None) -> None:
    """The followed request's terminal, to its original caller (correlation of its link)."""
    reply: object = None
    with trio.move_on_after(NEVER if timeout_ms is None else timeout_ms / 1000):
        while True:
            try:
                reply = await pending.wait()
                break
            except PeerGone:
                break
            except LinkLost:
                continue
    if reply is None:
        pending.discard()
        await sink.fail_nowait(Unavailable("the followed owner did not answer"))
        return
    assert isinstance(reply, TerminalReply)
    await sink.deliver(reply)
