"""The composition root: builds one node from its layers and starts its roles in order.

:func:`open_runtime` opens the Store and the engine, builds the MeshNode from plain values
(the config, the Store, the hosted Actor types), then starts each role explicitly with
``await nursery.start(serve_x, ..., task_status=...)``, each handing its handle to the roles
above it, and only then lets the node bind, register and accept::

    open_runtime                                  the server nursery
    ├─ zlink_trio.spots     serve_spots           Spot owner: Entry Spot lanes  -> SpotOwner
    ├─ zlink_trio.actors    serve_actors(spots)   Actor owner + manager         -> ActorRuntime
    │                       (later: the session owner, the relocation coordinator and the
    │                        STREAM listener start here, each given the handles below it)
    ├─ extra services       test plumbing (:mod:`zlink_trio.mesh.services`)
    ├─ zlink_trio.mesh.node MeshNode.serve        listener, lease, watcher, peers
    └─ zlink_trio.objects   serve_reclaim_sweep   reclaims dead lifecycles' rows (its first
                                                  round before the server is handed out)

A lost owner lease halts the engine at once (``MeshNode.on_lease_lost``): no turn runs on
a fail-stopped node.

Exit (also when the body raises or is cancelled): the MeshNode closes gracefully first
(shielded, bounded by ``drain_timeout``), then the roles are cancelled, then the engine and
the Store close.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final, cast, final

import trio

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
from .observe import FlowTrace
from .spots.owner import SpotOwner, serve_spots
from .store.api import LocationStore
from .store.memory import MemoryLocationStore

__all__ = ["Runtime", "open_runtime"]

POSTGRES_MODULE: Final = "zlink_trio.store.postgres"


@final
class Runtime:
    """The parts of one running node (private: ``Server`` exposes only its surface)."""

    __slots__ = ("actors", "app", "config", "engine", "flow", "node", "spots", "store")

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
    ) -> None:
        self.config = config
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


@asynccontextmanager
async def open_runtime(
    config: ServerConfig,
    app: ValidatedApp | None,
    *,
    services: Sequence[RuntimeService] = (),
    fault_plan: FaultPlan | None = None,
    tap: WireTap | None = None,
) -> AsyncIterator[Runtime]:
    """Run one node for the block (``app`` already validated by ``check_startup``)."""
    async with (
        _store_for(config) as store,
        open_engine(
            lane_capacity=config.lane_capacity, lifecycle_burst=config.lifecycle_burst
        ) as engine,
        trio.open_nursery() as nursery,
    ):
        actor_types = app.hosted_actor_types if app is not None else frozenset()
        node = MeshNode(config, store, actor_types=actor_types, fault_plan=fault_plan, tap=tap)
        # Fencing: the moment the owner lease is lost the node is fail-stopped and no turn
        # of what it hosts runs any more (the one in progress is cancelled); a live node
        # may reclaim its rows from then on (docs/decisions.md, "Owner loss: fencing").
        node.on_lease_lost(engine.halt)
        flow = FlowTrace()  # the node's one place that counts and logs flow events
        try:
            on_create = app.on_create_actor if app is not None else None
            spots: SpotOwner = await nursery.start(
                serve_spots,
                engine,
                _entry_ids(config, app, node),
                on_create,
                name="zlink_trio.spots",
            )
            actors: ActorRuntime | None = None
            if app is not None and app.actor_dispatch:
                if store is None:  # check_startup refuses this configuration
                    raise ConfigurationError("Actor dispatch needs a Location Store")
                actors = await nursery.start(
                    serve_actors,
                    config,
                    app.actor_types,
                    app.payloads,
                    spots.entry_spots,
                    store,
                    node,
                    engine,
                    flow,
                    name="zlink_trio.actors",
                )
            context = ServiceContext(config, store, engine, node)
            for service in services:
                await nursery.start(service, context)
            await nursery.start(node.serve, name="zlink_trio.mesh.node")
            if store is not None and config.meshes:
                # Reclaims what dead lifecycles left; its first round runs before the
                # server is handed out (a restart cleans up after its previous lifecycles).
                await nursery.start(
                    serve_reclaim_sweep,
                    config,
                    store,
                    flow,
                    node,
                    name="zlink_trio.objects.sweep",
                )
            yield Runtime(config, app, store, engine, node, spots, actors, flow)
        finally:
            await node.aclose()
            nursery.cancel_scope.cancel(reason="zlink_trio server closed")


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
