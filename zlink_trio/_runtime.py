"""The composition root: builds one node from its layers and starts its roles in order.

:func:`open_runtime` opens the Store and the engine, builds the MeshNode from plain values
(the config, the Store, the hosted Actor types), then starts each role explicitly with
``await nursery.start(serve_x, ..., task_status=...)``, each handing its handle to the roles
above it, and only then lets the node bind, register and accept::

    open_runtime                                  the node nursery
    ├─ engine + roles nursery
    │  ├─ zlink_trio.timers   serve_timers         the node's one timer service  -> TimerService
    │  ├─ zlink_trio.spots    serve_spots          Spot owner: Entry Spot lanes  -> SpotOwner
    │  │                      └─ serve_spot_runtime  User/Instance Spots: hosting, 47/48,
    │  │                                             server.spots (with a Store + Object mesh)
    │  ├─ zlink_trio.actors   serve_actors(spots)  Actor owner + manager         -> ActorRuntime
    │  │                      (later: the session owner, the relocation coordinator and the
    │  │                       STREAM listener start here, each given the handles below it)
    │  ├─ extra services      test plumbing (:mod:`zlink_trio.mesh.services`)
    │  └─ zlink_trio.objects  serve_reclaim_sweep  reclaims dead lifecycles' rows (its first
    │                                              round before the server is handed out)
    └─ zlink_trio.mesh.node   MeshNode.serve       listener, lease, watcher, peers (it
                                                   outlives the roles: the drain needs it)

A lost owner lease halts the engine at once (``MeshNode.on_lease_lost``): no turn runs on
a fail-stopped node.

Exit (also when the body raises or is cancelled) is the drain of a clean stop, the steps of
:data:`DRAIN_STEPS` in that order, each shielded and bounded (docs/decisions.md,
"Graceful drain on a clean stop"):

1. **stop admission** -- the node admits nothing more: new calls end ShuttingDown, peers'
   commands are refused (Unavailable), new hellos too, and no timer fires (ticks already
   queued still run in 2); connections, replies and the lease go on;
2. **settle** -- the accepted turns (everything already queued to a lane) and the control
   transactions in progress here (creation attempts, destroys) run to their end, until
   the drain deadline (stop + ``drain_timeout``);
3. **relocate out** -- the hook of the relocation issue: relocatable objects will move to
   peers here, before their rows are released (nothing is relocatable yet);
4. **stop the roles** -- what still runs is cancelled and the engine closes: no turn runs
   from here on; the timer service ends and cleans up every registration;
5. **release** -- every authority row this lifecycle owns is given back in the Store
   (Ready/Closing → release, Creating → abort_creation, each a CAS on the version read),
   bounded by ``drain_timeout``, so peers see the ids Missing at once;
6. **deregister** -- ``MeshNode.aclose``: ``remove_node`` (descriptors, Entry claims,
   lease), goodbyes, then the node's tasks end; then the Store closes.

A crash simulated by ``Cluster.kill`` skips 2-3 and 5-6 (nobody is told); a node whose
lease expired (fail-stopped) skips 2-3 and makes no Store call at all.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial
from typing import Any, Final, cast, final

import trio

from ._exceptions import raise_single_error
from .actors.runtime import ActorRuntime, serve_actors
from .app import ValidatedApp
from .config import MemoryStoreConfig, PostgresStoreConfig, ServerConfig
from .engine import Engine, open_engine
from .errors import ConfigurationError
from .ids import MeshName, SpotId
from .mesh.faults import FaultPlan
from .mesh.node import MeshNode
from .mesh.services import RuntimeService, ServiceContext
from .mesh.tap import WireTap
from .objects.owner_loss import serve_reclaim_sweep
from .objects.release_owned import release_owned
from .objects.timers import TimerService, serve_timers
from .observe import FlowTrace
from .spots.owner import SpotOwner, serve_spots
from .store.api import LocationStore
from .store.memory import MemoryLocationStore
from .stream.server import StreamCallbacks, StreamServer
from .wire.payloads import PayloadRegistry

__all__ = ["DRAIN_STEPS", "Runtime", "open_runtime"]

logger = logging.getLogger("zlink_trio.server")

POSTGRES_MODULE: Final = "zlink_trio.store.postgres"

DRAIN_STEPS: Final = (
    "stop admission",
    "settle",
    "relocate out",
    "stop the roles",
    "release",
    "deregister",
)
"""The steps of a clean stop, in order (the module docstring; :func:`open_runtime`)."""


@final
class Runtime:
    """The parts of one running node (private: ``Server`` exposes only its surface)."""

    __slots__ = (
        "actors",
        "app",
        "config",
        "engine",
        "flow",
        "node",
        "spots",
        "store",
        "stream",
        "timers",
    )

    def __init__(
        self,
        config: ServerConfig,
        app: ValidatedApp | None,
        store: LocationStore | None,
        engine: Engine,
        node: MeshNode,
        spots: SpotOwner,
        actors: ActorRuntime | None,
        flow: FlowTrace,
        timers: TimerService | None = None,
        stream: StreamServer | None = None,
    ) -> None:
        self.config = config
        self.stream = stream
        """The session owner (STREAM listener) when ``config.stream`` is set."""
        self.timers = timers
        """The node's one timer service (Actor and Spot timers)."""
        self.flow = flow
        self.app = app
        self.store = store
        self.engine = engine
        self.node = node
        self.spots = spots
        self.actors = actors


def _entry_ids(
    config: ServerConfig, app: ValidatedApp | None, node: MeshNode
) -> dict[MeshName, SpotId]:
    """The Entry Spots the Spot owner runs: one per hosting mesh when Actors are hosted."""
    if app is None or not app.actor_dispatch:
        return {}
    return {m.name: node.entry_spot_id(m.name) for m in config.meshes if m.object_role.can_host}


@final
class _Roles:
    """The roles of one node, started in order in the roles nursery (what started is kept
    even when a later one fails: the drain needs it)."""

    __slots__ = ("actors", "spots", "stream", "timers")

    def __init__(self) -> None:
        self.timers: TimerService | None = None
        self.spots: SpotOwner | None = None
        self.actors: ActorRuntime | None = None
        self.stream: StreamServer | None = None

    async def start(
        self,
        nursery: trio.Nursery,
        config: ServerConfig,
        app: ValidatedApp | None,
        store: LocationStore | None,
        node: MeshNode,
        engine: Engine,
        flow: FlowTrace,
        services: Sequence[RuntimeService],
    ) -> None:
        """Timer service, Spot owner, Actor owner, extra services (before the node
        serves)."""
        self.timers = await nursery.start(serve_timers, name="zlink_trio.timers")
        node.on_lease_lost(self.timers.seal)  # a fail-stopped node fires no tick either
        on_create = app.on_create_actor if app is not None else None
        self.spots = await nursery.start(
            partial(
                serve_spots,
                config=config,
                spot_types=app.spot_types if app is not None else None,
                payloads=app.payloads if app is not None else None,
                store=store,
                node=node,
                flow=flow,
                timers=self.timers,
            ),
            engine,
            _entry_ids(config, app, node),
            on_create,
            name="zlink_trio.spots",
        )
        if app is not None and app.actor_dispatch:
            if store is None:  # check_startup refuses this configuration
                raise ConfigurationError("Actor dispatch needs a Location Store")
            spot_runtime = self.spots.runtime
            self.actors = await nursery.start(
                partial(
                    serve_actors,
                    timers=self.timers,
                    spot_client=None if spot_runtime is None else spot_runtime.messaging.client,
                    spots=self.spots.runtime,
                    spot_runtime=self.spots.runtime,
                    on_disconnect_actor=app.on_disconnect_actor,
                ),
                config,
                app.actor_types,
                app.payloads,
                self.spots.entry_spots,
                store,
                node,
                engine,
                flow,
                name="zlink_trio.actors",
            )
        if config.stream is not None:
            # The session owner: its inbound commands now (before the node serves), its
            # listener once the node serves (start_listener).
            self.stream = StreamServer(
                config=config,
                stream=config.stream,
                callbacks=app.stream if app is not None else StreamCallbacks(),
                payloads=app.payloads if app is not None else PayloadRegistry(),
                node=node,
                engine=engine,
                flow=flow,
                store=store,
                actors=self.actors,
            )
            self.stream.register()
        context = ServiceContext(config, store, engine, node)
        for service in services:
            await nursery.start(service, context)


@asynccontextmanager
async def open_runtime(
    config: ServerConfig,
    app: ValidatedApp | None,
    *,
    services: Sequence[RuntimeService] = (),
    fault_plan: FaultPlan | None = None,
    tap: WireTap | None = None,
) -> AsyncIterator[Runtime]:
    """Run one node for the block (``app`` already validated by ``check_startup``).

    The node runs in the outer nursery, the roles in an inner one inside the engine: the
    roles and the engine stop (drain step 4) while the node still holds its lease and its
    connections, which the release (5) and the deregistration (6) need."""
    async with _store_for(config) as store, trio.open_nursery() as outer:
        actor_types = app.hosted_actor_types if app is not None else frozenset()
        node = MeshNode(
            config,
            store,
            actor_types=actor_types,
            spot_types=app.hosted_user_spot_types if app is not None else frozenset(),
            instance_types=app.hosted_instance_spot_types if app is not None else frozenset(),
            fault_plan=fault_plan,
            tap=tap,
        )
        flow = FlowTrace()  # the node's one place that counts and logs flow events
        try:
            async with open_engine(
                lane_capacity=config.lane_capacity, lifecycle_burst=config.lifecycle_burst
            ) as engine:
                # Fencing: the moment the owner lease is lost the node is fail-stopped and
                # no turn of what it hosts runs any more (the one in progress is cancelled);
                # a live node may reclaim its rows from then on (docs/decisions.md, "Owner
                # loss: fencing").
                node.on_lease_lost(engine.halt)
                roles = _Roles()
                try:
                    async with trio.open_nursery() as nursery:
                        try:
                            await roles.start(
                                nursery, config, app, store, node, engine, flow, services
                            )
                            await outer.start(node.serve, name="zlink_trio.mesh.node")
                            if roles.stream is not None:
                                await nursery.start(roles.stream.serve, name="zlink_trio.stream")
                            if store is not None and config.meshes:
                                # Reclaims what dead lifecycles left; its first round runs
                                # before the server is handed out (a restart cleans up
                                # after its previous lifecycles).
                                spot_runtime = roles.spots.runtime if roles.spots else None
                                await nursery.start(
                                    serve_reclaim_sweep,
                                    config,
                                    store,
                                    flow,
                                    node,
                                    # Instance Spots whose first message did not complete
                                    # are resumed, not reclaimed (spec 06 §4.1.1).
                                    None
                                    if spot_runtime is None
                                    else spot_runtime.messaging.recovery.recover,
                                    name="zlink_trio.objects.sweep",
                                )
                            assert roles.spots is not None
                            yield Runtime(
                                config,
                                app,
                                store,
                                engine,
                                node,
                                roles.spots,
                                roles.actors,
                                flow,
                                roles.timers,
                                roles.stream,
                            )
                        finally:
                            if roles.timers is not None:
                                roles.timers.seal()  # step 1 for timers: no tick fires
                            await _drain_live(
                                config, node, engine, roles.actors, roles.spots, roles.stream
                            )  # steps 1-3
                            nursery.cancel_scope.cancel(reason="zlink_trio server closed")
                except BaseExceptionGroup as group:
                    raise_single_error(group)  # one error leaves as itself
        finally:
            await _drain_store(config, node, store, flow)  # steps 5-6
            outer.cancel_scope.cancel(reason="zlink_trio server closed")


async def _drain_live(
    config: ServerConfig,
    node: MeshNode,
    engine: Engine,
    actors: ActorRuntime | None,
    spots: SpotOwner | None = None,
    stream: StreamServer | None = None,
) -> None:
    """Drain steps 1-3 (the module docstring), shielded; 2-3 until the drain deadline.
    Step 4 follows: the caller cancels the roles and the engine closes.

    The session owner (spec 02 §10): no new session or bind from step 1; in step 2 the
    accepted session callbacks, replies and binds settle, then every connection closes
    and its disconnect cleanup settles too."""
    node.stop_admitting()  # 1. stop admission
    if stream is not None:
        stream.stop_admitting()
    if not node.graceful:
        await trio.lowlevel.cancel_shielded_checkpoint()
        return  # a crash or a fail-stopped node: nothing is let finish
    with trio.CancelScope(shield=True, deadline=trio.current_time() + config.drain_timeout):
        await _settle(engine, actors, spots, stream)  # 2.
        if stream is not None:
            await stream.close_sessions()
            await _settle(engine, actors, spots, stream)
        await _relocate_out(node, actors, spots)  # 3.


async def _settle(
    engine: Engine,
    actors: ActorRuntime | None,
    spots: SpotOwner | None = None,
    stream: StreamServer | None = None,
) -> None:
    """Drain step 2: wait until no turn runs or is queued and no control transaction is
    in progress (a transaction may queue turns and a turn may start one: both at once).
    Transactions: the Actor runtime's and the Spot runtime's (creates, destroys, closes)."""
    activities = [] if actors is None else [actors.transactions]
    if spots is not None and spots.runtime is not None:
        activities.append(spots.runtime.transactions)
    if stream is not None:
        activities.append(stream.transactions)
    while True:
        await engine.wait_idle()
        for transactions in activities:
            await transactions.wait_idle()
        if engine.idle and not any(t.busy for t in activities):
            return


async def _relocate_out(
    node: MeshNode, actors: ActorRuntime | None, spots: SpotOwner | None = None
) -> None:
    """Drain step 3: move the relocatable Actors and User/Instance Spots this lifecycle
    hosts to live peers (their rows then name the peers, so step 5 finds nothing of
    theirs to release); what cannot move (DisableRelocation, no peer with its type, a
    SpotWide Spot with members, a failed move) is released in step 5. The Spots move
    first, then the Actors (a PerActor member moves on its own)."""
    spot_runtime = spots.runtime if spots is not None else None
    if spot_runtime is not None:
        try:
            moved = await spot_runtime.relocator.relocate_out()
        except Exception:
            logger.exception("drain by relocation (Spots) failed")
        else:
            if moved:
                logger.info("drain: %d Spots relocated to peers", moved)
    if actors is None:
        await trio.lowlevel.checkpoint()
        return
    try:
        moved = await actors.relocator.relocate_out()
    except Exception:
        logger.exception("drain by relocation failed")
        return
    if moved:
        logger.info("drain: %d Actors relocated to peers", moved)


async def _drain_store(
    config: ServerConfig, node: MeshNode, store: LocationStore | None, flow: FlowTrace
) -> None:
    """Drain steps 5-6 (the module docstring): release this lifecycle's rows (shielded,
    bounded by ``drain_timeout``; skipped unless the exit is graceful: a crash or an
    expired lease makes no Store call), then ``MeshNode.aclose``."""
    if store is not None and node.graceful:
        identity = node.identity
        with trio.CancelScope(shield=True), trio.move_on_after(config.drain_timeout):
            try:
                await release_owned(
                    store,
                    identity.node_rid,
                    identity.node_generation,
                    flow,
                    may_write=lambda: node.graceful,
                )
            except Exception:
                logger.exception("releasing this lifecycle's rows at stop failed")
    await node.aclose()


def _store_for(config: ServerConfig) -> AbstractAsyncContextManager[LocationStore | None]:
    store = config.location_store
    if isinstance(store, PostgresStoreConfig):
        module: Any = importlib.import_module(POSTGRES_MODULE)
        return cast(
            "AbstractAsyncContextManager[LocationStore | None]",
            module.open_postgres_store(
                store.dsn, schema=store.schema, connections=store.connections
            ),
        )
    if isinstance(store, MemoryStoreConfig):
        # The embedded default: created only where a store is used (a detached server,
        # without meshes, has none, as it registers nothing).
        return _borrowed(MemoryLocationStore() if config.meshes else None)
    return _borrowed(store)


@asynccontextmanager
async def _borrowed(store: LocationStore | None) -> AsyncIterator[LocationStore | None]:
    yield store
