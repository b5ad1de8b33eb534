"""``open_server``: one MeshNode lifecycle in one nursery.

::

    async with zlink_trio.open_server(config, app) as server:
        ...

Startup (everything validated before anything starts, DESIGN.md §2):

1. ``app.validate()``; the Actor-dispatch rules of spec 02 §3 (B02-01): dispatch needs an
   Object Client/Server role in some mesh and a Location Store; a registered Actor type
   needs a SERVER role somewhere; several meshes are fine. Meshes need a Location Store
   (descriptors live there).
2. The Store: a store object passed in is the caller's; a
   :class:`~zlink_trio.config.PostgresStoreConfig` is opened here and closed at exit.
3. The engine (``open_engine``).
4. The server nursery: runtime services (:mod:`zlink_trio.mesh.services`) register their
   inbound handlers and start their child nurseries, then the MeshNode binds, registers
   (ONE ``register_node``: descriptors + Entry claims), starts its lease renewer and
   descriptor watcher and accepts.

Exit (also when the body raises or is cancelled): the MeshNode closes gracefully
(shielded, bounded by ``drain_timeout``: no admission, ``remove_node``, goodbyes), the
services are cancelled, then the engine and the Store close. A single error leaves the
``async with`` as itself, never wrapped in an ExceptionGroup.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final, cast, final

import attrs
import trio

from ._exceptions import raise_single_error
from .actors.manager import ActorManager
from .actors.runtime import ActorRuntime, serve_actors
from .actors.stats import ActorRuntimeStatistics
from .app import App, ValidatedApp
from .config import PostgresStoreConfig, ServerConfig
from .engine import Engine, EngineStatistics, open_engine
from .engine._construct import NoPublicConstructor
from .errors import ConfigurationError, NotConfigured
from .mesh.api import MeshNodeApi, NodeIdentity
from .mesh.descriptors import advertised_host
from .mesh.faults import FaultPlan
from .mesh.lease import LeaseExpired
from .mesh.node import MeshNode
from .mesh.services import RuntimeService, ServiceContext
from .mesh.stats import MeshNodeStatistics
from .mesh.tap import WireTap
from .store.api import Endpoint, LocationStore

__all__ = ["RUNTIME_SERVICES", "Server", "ServerStatistics", "check_startup", "open_server"]

RUNTIME_SERVICES: Final[tuple[RuntimeService, ...]] = ()
"""Services every server runs, in start order (later issues add the Actor owner, the
Spot owner and the session owner here)."""

POSTGRES_MODULE: Final = "zlink_trio.store.postgres"


@attrs.frozen
class ServerStatistics:
    """A snapshot of one server."""

    node: MeshNodeStatistics
    engine: EngineStatistics
    actors: ActorRuntimeStatistics | None
    """None when Actor dispatch is not enabled."""


@final
class Server(metaclass=NoPublicConstructor):
    """A running server (made by :func:`open_server` only)."""

    def __init__(
        self,
        config: ServerConfig,
        app: ValidatedApp | None,
        store: LocationStore | None,
        engine: Engine,
        node: MeshNode,
        actors: ActorRuntime | None,
    ) -> None:
        self._config = config
        self._app = app
        self._store = store
        self._engine = engine
        self._node = node
        self._actors = actors

    def __repr__(self) -> str:
        return f"<Server {self._node.identity.node_rid.hex[:12]} {self._node.phase.value}>"

    @property
    def config(self) -> ServerConfig:
        return self._config

    @property
    def app(self) -> ValidatedApp | None:
        return self._app

    @property
    def store(self) -> LocationStore | None:
        """The Location Store (None for a server without meshes and without a store)."""
        return self._store

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def node(self) -> MeshNodeApi:
        return self._node

    @property
    def identity(self) -> NodeIdentity:
        return self._node.identity

    @property
    def actors(self) -> ActorManager:
        """The Actor manager: create, get_or_create, find, destroy, send, request.

        Raises:
            NotConfigured: the app did not enable Actor dispatch.
        """
        if self._actors is None:
            raise NotConfigured("Actor dispatch is not enabled (App.enable_actor_dispatch())")
        return self._actors.manager

    @property
    def endpoint(self) -> Endpoint | None:
        """Advertised host and bound port of the mesh listener (None without meshes)."""
        return self._node.endpoint

    def statistics(self) -> ServerStatistics:
        return ServerStatistics(
            node=self._node.statistics(),
            engine=self._engine.statistics(),
            actors=None if self._actors is None else self._actors.statistics(),
        )

    async def wait_lease_lost(self) -> LeaseExpired:
        """Wait until the owner lease is lost. The node is then fail-stopped (no peer
        connection, no admission, no Store update) and stays so: exit and start a new
        lifecycle (a supervisor restarts the process; ``zlink-trio node`` exits with
        status 3)."""
        return await self._node.wait_lease_lost()


def check_startup(config: ServerConfig, app: App | None) -> ValidatedApp | None:
    """Every startup configuration check that needs no I/O (spec 02 §3, B02-01).

    Raises:
        ConfigurationError: the first problem found.
    """
    validated = app.validate() if app is not None else None
    store = config.location_store
    if validated is not None and validated.actor_dispatch:
        if not config.object_meshes():
            raise ConfigurationError(
                "Actor dispatch needs an Object Client or Server role in at least one mesh"
            )
        if store is None:
            raise ConfigurationError("Actor dispatch needs a Location Store")
    if (
        validated is not None
        and validated.actor_types
        and not any(m.object_role.can_host for m in config.meshes)
    ):
        names = ", ".join(sorted(t.value for t in validated.actor_types))
        raise ConfigurationError(
            f"registered Actor types ({names}) need an Object Server role in some mesh"
        )
    if config.meshes:
        if store is None:
            raise ConfigurationError("meshes need a Location Store to publish descriptors")
        advertised_host(config)
    return validated


@asynccontextmanager
async def open_server(config: ServerConfig, app: App | None = None) -> AsyncIterator[Server]:
    """Run one server for the duration of the ``async with`` block.

    Raises:
        ConfigurationError: invalid configuration or registrations (before anything
            starts), or a descriptor / Entry claim conflict at registration (nothing is
            left registered).
        OSError: the listen address cannot be bound.
    """
    async with _open_server(config, app) as server:
        yield server


@asynccontextmanager
async def _open_server(
    config: ServerConfig,
    app: App | None = None,
    *,
    services: Sequence[RuntimeService] = RUNTIME_SERVICES,
    fault_plan: FaultPlan | None = None,
    tap: WireTap | None = None,
) -> AsyncIterator[Server]:
    """:func:`open_server` with the internal hooks (extra services, fault plan, tap)."""
    validated = check_startup(config, app)
    try:
        async with (
            _store_for(config) as store,
            open_engine(
                lane_capacity=config.lane_capacity, lifecycle_burst=config.lifecycle_burst
            ) as engine,
            trio.open_nursery() as nursery,
        ):
            node = MeshNode(config, store, validated, fault_plan=fault_plan, tap=tap)
            try:
                context = ServiceContext(config, validated, store, engine, node)
                actors: ActorRuntime | None = await nursery.start(
                    serve_actors, context, name="zlink_trio.actors"
                )
                for service in services:
                    await nursery.start(service, context)
                await nursery.start(node.serve, name="zlink_trio.mesh.node")
                yield Server._create(config, validated, store, engine, node, actors)
            finally:
                await node.aclose()
                nursery.cancel_scope.cancel(reason="zlink_trio server closed")
    except BaseExceptionGroup as group:
        raise_single_error(group)  # one error leaves as itself


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
    return _borrowed(store)


@asynccontextmanager
async def _borrowed(store: LocationStore | None) -> AsyncIterator[LocationStore | None]:
    yield store
