"""The User and Instance Spot runtime of one node: hosting, creation, close, the manager.

Started by the Spot role (:func:`~zlink_trio.spots.owner.serve_spots`) when the node has a
Location Store and an Object mesh. It gets its inputs as plain values (the validated Spot
types, the Store, the engine, the MeshNode), registers the inbound Spot commands (47
userSpotCreate, 48 userSpotClose) on the MeshNode before the node admits anyone, and owns
one nursery for its tasks (creation attempts, closes, background give-backs).

Everything generic comes from the shared object layer (:mod:`zlink_trio.objects`): the
create source and target, the reclaimer, the destroy machinery (a Spot close) and the
authority reads; this module wires them with the Spot kind adapters (:mod:`.kind`,
:mod:`.close`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, final

import trio

from ..config import ServerConfig
from ..errors import StaleRoute, Unavailable, ZLinkError
from ..ids import SpotId, StableType
from ..mesh.api import PeerIdentity
from ..objects.activity import Activity
from ..objects.authority import Authority
from ..objects.create_source import CreateSource
from ..objects.create_target import CreateTarget
from ..objects.destroy import Destroyer
from ..objects.follow import FollowTable
from ..objects.reclaim import Reclaimer
from ..objects.relocation_inbox import RelocationInbox, relocation_side
from ..objects.relocation_stats import RelocationStatistics
from ..objects.sinks import RemoteSink, failure, ok
from ..objects.timers import TimerService
from ..observe import FlowTrace
from ..routing.route_cache import RouteCache
from ..store.api import LocationStore, ObjectKind
from ..wire.commands import Command
from ..wire.payloads import EMPTY_REGISTRY, PayloadRegistry
from ..wire.records import UserSpotClose, UserSpotCreate
from ..wire.tails import CloseTail
from .close import CloseFence, SpotCloseKind, SpotCloser
from .host import SpotHost
from .hosted import SPOT_RELOCATING, HostedSpot, SpotReady, spot_lease_lost
from .kind import SpotTargetKind, UserSpotSourceKind, spot_key, user_spot_order
from .manager import SpotManager
from .messaging import SpotMessaging
from .registry import SpotTypes
from .relocation import SpotRelocator
from .relocation_target import SpotRelocationTarget
from .results import SpotCreateResult
from .stats import SpotCounters, SpotRuntimeStatistics, SpotTypeStatistics

if TYPE_CHECKING:
    from ..engine.engine import Engine
    from ..mesh.node import MeshNode

__all__ = ["SpotRuntime", "serve_spot_runtime"]

logger = logging.getLogger("zlink_trio.spots")


@final
class SpotRuntime:
    """This node's User and Instance Spots (see the module docstring)."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        types: SpotTypes,
        store: LocationStore,
        node: MeshNode,
        engine: Engine,
        flow: FlowTrace,
        nursery: trio.Nursery,
        timers: TimerService | None = None,
        payloads: PayloadRegistry = EMPTY_REGISTRY,
    ) -> None:
        self._config = config
        self._node = node
        self._flow = flow
        self._nursery = nursery
        self.types = types
        self.store = store
        self.transactions = Activity()
        """Control transactions in progress here: creation attempts (from their staging to
        its end) and closes. A clean stop lets them finish (``_runtime``'s drain)."""
        self.host = SpotHost(
            engine,
            flow,
            node.lease_deadline,
            node.lease_live,
            lambda: node.identity.node_rid,
            config.max_reply_bytes,
            self._self_close,
            timers,
        )
        cache: RouteCache[SpotId] = RouteCache(
            max_age=config.route_cache_max_age, lease_bound=config.owner_lease_ttl
        )
        self.authority: Authority[SpotId] = Authority(store, cache, spot_key)
        """Every read of a Spot authority row (the positive route cache learns from it;
        the direct-call path resolves through the same object)."""
        self.reclaimer = Reclaimer(store, nursery)
        target_kind = SpotTargetKind(
            host=self.host, types=types, nursery=nursery, activity=self.transactions
        )
        self.target: CreateTarget[SpotId] = CreateTarget(
            kind=target_kind,
            config=config,
            node=node,
            store=store,
            nursery=nursery,
            authority=self.authority,
            reclaimer=self.reclaimer,
            owner="Spot runtime",
            task_name="zlink_trio.spot.create",
        )
        self.source: CreateSource[SpotId, SpotCreateResult] = CreateSource(
            kind=UserSpotSourceKind(),
            config=config,
            node=node,
            store=store,
            target=self.target,
            authority=self.authority,
            reclaimer=self.reclaimer,
            flow=flow,
        )
        self._close_kind = SpotCloseKind(
            self.host,
            store,
            self.authority,
            lambda: (node.identity.node_rid, node.identity.node_generation),
        )
        self.destroyer: Destroyer[SpotId, HostedSpot] = Destroyer(
            kind=self._close_kind,
            object_kind=ObjectKind.USER_SPOT,
            store=store,
            authority=self.authority,
            drain_timeout=config.drain_timeout,
            nursery=nursery,
            owner="Spot runtime",
            task_name="zlink_trio.spot.close",
            operation="close",
            activity=self.transactions,
        )
        self.closer = SpotCloser(self.destroyer, nursery)
        self.messaging = SpotMessaging(
            config=config,
            node=node,
            store=store,
            host=self.host,
            types=types,
            authority=self.authority,
            target=self.target,
            target_kind=target_kind,
            activity=self.transactions,
            nursery=nursery,
            flow=flow,
            payloads=payloads,
        )
        """Direct calls (``server.spots.send/request``, ``context.spots``), cold
        activation as source and target, and its recovery (:mod:`.messaging`)."""
        self.follow: FollowTable[SpotId] = FollowTable(config.message_follow_duration)
        """Message Follow routes of the Spots that moved away from here."""
        self.messaging.follow(self.follow, config.message_follow_max_hops, nursery)
        self.relocator = SpotRelocator(
            config=config, node=node, store=store, host=self.host, follow=self.follow,
            nursery=nursery,
        )  # fmt: skip
        self.relocation_target = SpotRelocationTarget(
            config=config, node=node, store=store, host=self.host, authority=self.authority,
            types=types, follow=self.follow, timers=timers, nursery=nursery,
            activity=self.transactions,
        )  # fmt: skip
        self.relocations = RelocationInbox()
        """The node's inbound 120-125 (the Actor runtime attaches its side)."""
        self.relocations.spots = relocation_side(self.relocator, self.relocation_target)
        self.manager = SpotManager(
            config=config,
            node=node,
            store=store,
            source=self.source,
            closer=self.closer,
            authority=self.authority,
            flow=flow,
            client=self.messaging.client,
        )

    def _self_close(self, hosted: HostedSpot) -> None:
        self.closer.request(hosted)

    def register(self) -> None:
        """Register the inbound Spot commands (before the node serves)."""
        node = self._node
        node.on(Command.USER_SPOT_CREATE, self._on_user_spot_create)
        node.on(Command.USER_SPOT_CLOSE, self._on_user_spot_close)
        self.messaging.register()
        self.relocations.register(node)

    # --- inbound ------------------------------------------------------------------------
    def _for_me(self, rid: object, generation: object) -> bool:
        me = self._node.identity
        return rid == me.node_rid and generation == me.node_generation

    async def _on_user_spot_create(self, peer: PeerIdentity, record: UserSpotCreate) -> None:
        """Command 47: the reserved target runs the attempt once; its terminal goes back
        as one command 20 (replays of the operation join the attempt or get its
        retained terminal). The creation request is read from the Store, never from the
        command."""
        sink = RemoteSink(self._node, peer.address, record.correlation)
        fence = record.reservation
        if not self._for_me(fence.target_rid, fence.target_generation):
            await sink.deliver(failure(Unavailable("the reservation names another node lifecycle")))
            return
        if not self._node.admitting:
            await sink.deliver(failure(Unavailable("this owner's lease expired")))
            return
        self.target.handle(user_spot_order(record), sink)

    async def _on_user_spot_close(self, peer: PeerIdentity, record: UserSpotClose) -> None:
        """Command 48: after the peer (checked at ingress) and this target lifecycle, the
        close runs with the fence the source read; its one terminal is a CloseTail."""
        sink = RemoteSink(self._node, peer.address, record.correlation)
        if not self._for_me(record.target_rid, record.target_generation):
            await sink.deliver(failure(StaleRoute("the close names another node lifecycle")))
            return
        if not self._node.admitting:
            await sink.deliver(failure(Unavailable("this owner admits nothing now")))
            return
        deadline = trio.current_time() + record.timeout_ms / 1000
        self._nursery.start_soon(
            self._close_for_peer, record, sink, deadline, name="zlink_trio.spot.close"
        )

    async def _close_for_peer(
        self, record: UserSpotClose, sink: RemoteSink, deadline: float
    ) -> None:
        # A task of the runtime's nursery: whatever goes wrong ends as a terminal.
        spot = record.spot
        fence = CloseFence(
            record.expected_authority_owner_generation, record.expected_store_version
        )
        try:
            closed = await self.closer.close(
                spot.spot_id, spot.object_generation, fence=fence, deadline=deadline
            )
        except ZLinkError as exc:
            await sink.deliver(failure(exc))
            return
        except Exception as exc:
            logger.exception("close of %r for a peer failed", spot.spot_id)
            await sink.deliver(failure(Unavailable(f"close failed: {type(exc).__name__}")))
            return
        await sink.deliver(ok(CloseTail(closed=closed)))

    # --- fencing ------------------------------------------------------------------------
    async def fence_on_lease_loss(self) -> None:
        """Once the owner lease is lost, fence every hosted Spot: none runs a turn again
        and what their queues held is answered Unavailable now."""
        await self._node.wait_lease_lost()
        for hosted in self.host.fence():
            await hosted.fail_orphans(spot_lease_lost())

    # --- observability ------------------------------------------------------------------
    def statistics(self) -> SpotRuntimeStatistics:
        ready: dict[StableType, int] = {}
        for hosted in self.host:
            if isinstance(hosted.state, SpotReady):
                st = hosted.spot_type.stable_type
                ready[st] = ready.get(st, 0) + 1
        shared = {s.spot_type.stable_type: s for s in self.host.shared_all()}
        types = []
        for st in sorted(self.types, key=lambda t: t.value):
            spot_type = self.types[st]
            counters = shared[st].counters if st in shared else SpotCounters()
            types.append(
                SpotTypeStatistics.of(st.value, spot_type.kind.value, ready.get(st, 0), counters)
            )
        return SpotRuntimeStatistics(
            hosted=len(self.host),
            staging=self.host.staging_count,
            creates_in_flight=self.target.in_flight,
            creates=self.source.creates,
            create_replays=self.source.replays,
            rejected=self.target.rejected,
            failed_creates=self.target.failed,
            closes=self._close_kind.closed,
            types=tuple(types),
            calls=self.messaging.statistics(),
            relocation=RelocationStatistics(
                sealed=sum(1 for hosted in self.host if hosted.state is SPOT_RELOCATING),
                in_flight=len(self.relocator.in_flight),
                moved_out=self.relocator.moved_out,
                aborted=self.relocator.aborted,
                restores=self.relocation_target.restores,
                committed=self.relocation_target.committed,
                discarded=self.relocation_target.discarded,
                cutover_timeouts=self.relocation_target.cutover_timeouts,
                followed=self.follow.followed,
            ),
        )


async def serve_spot_runtime(
    config: ServerConfig,
    types: SpotTypes,
    store: LocationStore,
    node: MeshNode,
    engine: Engine,
    flow: FlowTrace,
    payloads: PayloadRegistry = EMPTY_REGISTRY,
    *,
    timers: TimerService | None = None,
    task_status: trio.TaskStatus[SpotRuntime] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the User/Instance Spot runtime until cancelled (start it before ``node``
    serves: it registers the inbound commands 47 and 48)."""
    async with trio.open_nursery() as nursery:
        runtime = SpotRuntime(
            config=config,
            types=types,
            store=store,
            node=node,
            engine=engine,
            flow=flow,
            nursery=nursery,
            timers=timers,
            payloads=payloads,
        )
        runtime.register()
        await nursery.start(runtime.messaging.serve, name="zlink_trio.spots.deadlines")
        nursery.start_soon(runtime.fence_on_lease_loss, name="zlink_trio.spots.fence")
        task_status.started(runtime)
        await trio.sleep_forever()
