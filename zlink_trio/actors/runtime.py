"""The Actor runtime service: this node's Actor owner role plus the Actor manager.

Started by ``open_server`` as a runtime service (see ``mesh/services.py``) when the app
enabled Actor dispatch. It registers the inbound Actor commands on the MeshNode before the
node admits anyone, owns one nursery for its tasks (creation attempts, destroys) and one
Entry Spot lane per mesh where this node is an Object Server.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, final

import trio

from ..app import ValidatedApp
from ..config import ServerConfig
from ..errors import ConfigurationError, StaleRoute, Unavailable, ZLinkError
from ..ids import ActorId, MeshName, StableType
from ..mesh.api import PeerIdentity
from ..routing.route_cache import RouteCache
from ..spots.entry import EntrySpot, EntrySpotStatistics
from ..store.api import LocationStore
from ..wire.commands import Command
from ..wire.enums import MessageKind
from ..wire.records import ActorCreate, ActorDestroy, ActorSend
from ..wire.tails import DestroyTail
from .authority import Authority
from .client import ActorClient
from .create_source import CreateSource
from .create_target import CreateTarget
from .deadlines import ReplyDeadlines
from .dedupe import IngressDedupe
from .destroy import Destroyer
from .host import ActorHost
from .hosted import Deliver, Destroying, Ready
from .manager import ActorManager
from .messenger import NEVER, Messenger
from .reclaim import Reclaimer
from .sinks import RemoteSink, failure, ok
from .stats import ActorRuntimeStatistics, ActorTypeStatistics, DispatchStats

if TYPE_CHECKING:
    from ..engine.engine import Engine
    from ..mesh.node import MeshNode
    from ..mesh.services import ServiceContext

__all__ = ["ActorRuntime", "serve_actors"]

logger = logging.getLogger("zlink_trio.actors")


@final
class ActorRuntime:
    def __init__(
        self,
        *,
        config: ServerConfig,
        app: ValidatedApp,
        store: LocationStore,
        node: MeshNode,
        engine: Engine,
        nursery: trio.Nursery,
    ) -> None:
        self._config = config
        self._app = app
        self._store = store
        self._node = node
        self._stats: dict[StableType, DispatchStats] = {
            st: DispatchStats() for st in app.actor_types
        }
        self.host = ActorHost(engine)
        cache: RouteCache[ActorId] = RouteCache(
            max_age=config.route_cache_max_age, lease_bound=config.owner_lease_ttl
        )
        authority = Authority(store, cache)
        self.reclaimer = Reclaimer(store, nursery)
        self.deadlines = ReplyDeadlines()
        self.messenger = Messenger(
            config=config,
            node=node,
            store=store,
            host=self.host,
            authority=authority,
            deadlines=self.deadlines,
        )
        self.client = ActorClient(
            self.messenger,
            max_request=config.max_request_bytes,
            default_timeout=config.default_request_timeout,
            payloads=app.payloads,
        )
        self.entry_spots: dict[MeshName, EntrySpot] = {
            mesh.name: EntrySpot(
                engine, node.entry_spot_id(mesh.name), mesh.name, app.on_create_actor
            )
            for mesh in config.meshes
            if mesh.object_role.can_host
        }
        self.target = CreateTarget(
            config=config,
            node=node,
            store=store,
            host=self.host,
            types=app.actor_types,
            entry_spots=self.entry_spots,
            client=self.client,
            stats_for=self._stats_for,
            nursery=nursery,
            authority=authority,
            reclaimer=self.reclaimer,
        )
        self.source = CreateSource(
            config=config,
            node=node,
            store=store,
            target=self.target,
            authority=authority,
            reclaimer=self.reclaimer,
        )
        self.destroyer = Destroyer(
            config=config,
            node=node,
            store=store,
            host=self.host,
            authority=authority,
            nursery=nursery,
        )
        self.manager = ActorManager(
            config=config,
            node=node,
            store=store,
            source=self.source,
            destroyer=self.destroyer,
            client=self.client,
            authority=authority,
        )
        self._nursery = nursery
        self._dedupe = IngressDedupe()
        self.stale_ingress = 0

    def _stats_for(self, stable_type: StableType) -> DispatchStats:
        return self._stats.setdefault(stable_type, DispatchStats())

    def register(self) -> None:
        node = self._node
        node.on(Command.ACTOR_SEND, self._on_actor_send)
        node.on(Command.ACTOR_CREATE, self._on_actor_create)
        node.on(Command.ACTOR_DESTROY, self._on_actor_destroy)

    # --- inbound ------------------------------------------------------------------------
    def _for_me(self, rid: object, generation: object) -> bool:
        me = self._node.identity
        return rid == me.node_rid and generation == me.node_generation

    async def _on_actor_send(self, peer: PeerIdentity, record: ActorSend) -> None:
        message_id = record.operation_id
        # Ingress matched the source to ``peer``: the link's window (see .dedupe).
        if message_id is not None and not self._dedupe.first(peer, message_id.value):
            # A repeated frame: the first arrival was (or is being) handled; an application
            # message never runs twice, and the original answers a request.
            return
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
        else:
            # A request is run only before its deadline; an accepted send never expires.
            run_by = NEVER
            if sink is not None and record.timeout_ms is not None:
                run_by = trio.current_time() + record.timeout_ms / 1000
            item = Deliver(record.message_kind, record.packet_name, record.payload, sink, run_by)
            try:
                # Never waits: this is the connection's reader (replies and messages for
                # other Actors share the connection). A full queue refuses the payload.
                self.host.admit_nowait(record.actor_id, item)
            except ZLinkError as exc:
                error = exc
        if error is not None:
            if isinstance(error, StaleRoute):
                self.stale_ingress += 1
            if sink is not None:
                await sink.fail_nowait(error)
            else:
                logger.info("send to %r not admitted: %r", record.actor_id, error)

    async def _on_actor_create(self, peer: PeerIdentity, record: ActorCreate) -> None:
        sink = RemoteSink(self._node, peer.address, record.correlation)
        if not self._for_me(record.reservation.target_rid, record.reservation.target_generation):
            await sink.deliver(failure(Unavailable("the reservation names another node lifecycle")))
            return
        if not self._node.admitting:
            await sink.deliver(failure(Unavailable("this owner's lease expired")))
            return
        self.target.handle(record, sink)

    async def _on_actor_destroy(self, peer: PeerIdentity, record: ActorDestroy) -> None:
        sink = RemoteSink(self._node, peer.address, record.correlation)
        if not self._for_me(record.target_rid, record.target_generation):
            await sink.deliver(failure(StaleRoute("the destroy names another node lifecycle")))
            return
        self._nursery.start_soon(
            self._destroy_for_peer, record, sink, name="zlink_trio.actor.destroy"
        )

    async def _destroy_for_peer(self, record: ActorDestroy, sink: RemoteSink) -> None:
        # A task of the runtime's nursery: whatever goes wrong ends as a terminal, never
        # as an exception that would cancel the nursery (and the whole server).
        try:
            destroyed = await self.destroyer.destroy(record.actor_id, record.object_generation)
        except ZLinkError as exc:
            await sink.deliver(failure(exc))
            return
        except Exception as exc:
            logger.exception("destroy of %r for a peer failed", record.actor_id)
            await sink.deliver(failure(Unavailable(f"destroy failed: {type(exc).__name__}")))
            return
        await sink.deliver(ok(DestroyTail(destroyed=destroyed)))

    # --- observability ------------------------------------------------------------------------
    def entry_spot_statistics(self) -> tuple[EntrySpotStatistics, ...]:
        return tuple(spot.statistics() for spot in self.entry_spots.values())

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
        return ActorRuntimeStatistics(
            hosted=len(self.host),
            staging=self.host.staging_count,
            creates_in_flight=self.target.in_flight,
            types=tuple(types),
            route_cache_entries=cache.entries,
            route_cache_hits=cache.hits,
            route_cache_misses=cache.misses,
            route_cache_invalidations=cache.invalidations,
            stale_route_ingress=self.stale_ingress,
            stale_route_results=self.messenger.stale_routes,
            repeated_ingress=self._dedupe.repeats,
            creates=self.source.creates,
            create_replays=self.source.replays,
            rejected=self.target.rejected,
            failed_creates=self.target.failed,
        )


async def serve_actors(
    context: ServiceContext,
    *,
    task_status: trio.TaskStatus[ActorRuntime | None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The Actor runtime service (a no-op unless the app enabled Actor dispatch)."""
    app = context.app
    if app is None or not app.actor_dispatch:
        task_status.started(None)
        return
    if context.store is None:
        raise ConfigurationError("Actor dispatch needs a Location Store")
    async with trio.open_nursery() as nursery:
        runtime = ActorRuntime(
            config=context.config,
            app=app,
            store=context.store,
            node=context.node,
            engine=context.engine,
            nursery=nursery,
        )
        runtime.register()
        await nursery.start(runtime.deadlines.serve, name="zlink_trio.actors.deadlines")
        task_status.started(runtime)
        try:
            await trio.sleep_forever()
        finally:
            for spot in runtime.entry_spots.values():
                spot.close()
