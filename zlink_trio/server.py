"""``open_server`` / ``serve_server``: one MeshNode lifecycle in one nursery.

::

    async with zlink_trio.open_server(config, app) as server:
        ...

    server = await nursery.start(zlink_trio.serve_server, config, app)   # until cancelled

Startup (everything validated before anything starts, DESIGN.md §2):

1. :func:`check_startup`: ``app.validate()``; the Actor-dispatch rules of spec 02 §3
   (B02-01): dispatch needs an Object Client/Server role in some mesh and a Location Store;
   a registered Actor type needs a SERVER role somewhere; several meshes are fine. Meshes
   need a Location Store (descriptors live there). The default ``location_store``,
   :class:`~zlink_trio.config.MemoryStoreConfig`, is one: an in-process memory store the
   server creates; only an explicit ``location_store=None`` means "no store".
2. The composition root (:mod:`zlink_trio._runtime`) opens the Store (a store object passed
   in is the caller's; a :class:`~zlink_trio.config.PostgresStoreConfig` or the memory
   default is opened here and closed at exit) and the engine, then starts the roles in
   order -- Spot owner, Actor owner -- and finally the MeshNode (bind, ONE
   ``register_node``, lease renewer, descriptor watcher, accept).

Exit (also when the body raises or is cancelled) is the drain of a clean stop
(:data:`zlink_trio._runtime.DRAIN_STEPS`, each step shielded and bounded): admission
stops; accepted turns and creates/destroys in progress finish until ``drain_timeout``;
the roles are cancelled and the engine closes; every authority row this lifecycle owns
is released in the Store (peers see the ids Missing at once); then the MeshNode closes
(``remove_node``, goodbyes) and the Store closes. A single error leaves the ``async
with`` as itself, never wrapped in an ExceptionGroup.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import final, overload

import attrs
import trio

from ._exceptions import raise_single_error
from ._runtime import Runtime, open_runtime
from .actors.manager import ActorManager
from .actors.relocating import RelocationResult
from .actors.stats import ActorRuntimeStatistics
from .app import App, ValidatedApp
from .config import MemoryStoreConfig, PostgresStoreConfig, ServerConfig
from .engine import EngineStatistics
from .engine._construct import NoPublicConstructor
from .errors import ConfigurationError, NotConfigured
from .ids import ActorId, ActorRef, NodeRid, SpotId, SpotRef
from .mesh.api import NodeIdentity
from .mesh.descriptors import advertised_host
from .mesh.faults import FaultPlan
from .mesh.lease import LeaseExpired
from .mesh.services import RuntimeService
from .mesh.stats import MeshNodeStatistics
from .mesh.tap import WireTap
from .objects.timers import TimerStatistics
from .observe import FlowEvent
from .spots.manager import SpotManager
from .spots.relocation import SpotRelocationResult
from .spots.stats import SpotRuntimeStatistics
from .store.api import Endpoint, LocationStore
from .stream.server import StreamServer

__all__ = [
    "Server",
    "ServerStatistics",
    "check_startup",
    "open_server",
    "runtime_of",
    "serve_server",
]


@attrs.frozen
class ServerStatistics:
    """A snapshot of one server."""

    node: MeshNodeStatistics
    engine: EngineStatistics
    actors: ActorRuntimeStatistics | None
    """None when Actor dispatch is not enabled."""
    flow: Mapping[FlowEvent, int]
    """How often each logged-and-counted runtime outcome (:class:`FlowEvent`) happened in
    this lifecycle (every event present, zero included)."""
    spots: SpotRuntimeStatistics | None = None
    """None when the node runs no User/Instance Spot runtime (no Store or Object mesh)."""
    timers: TimerStatistics | None = None
    """The node's framework timers (Actor and Spot timers together; no owner id)."""


@final
class Server(metaclass=NoPublicConstructor):
    """A running server (made by :func:`open_server` / :func:`serve_server` only).

    Its surface is the manager APIs (:attr:`actors`), the node's :attr:`identity` and
    :attr:`endpoint`, :meth:`statistics` and :meth:`wait_lease_lost`; the parts it is built
    from (node, engine, Store, app) are not exposed (tests reach them through
    ``zlink_trio.testing``)."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    def __repr__(self) -> str:
        node = self._runtime.node
        return f"<Server {node.identity.node_rid.hex[:12]} {node.phase.value}>"

    @property
    def config(self) -> ServerConfig:
        return self._runtime.config

    @property
    def identity(self) -> NodeIdentity:
        """This lifecycle's NodeRid and NodeGeneration."""
        return self._runtime.node.identity

    @property
    def actors(self) -> ActorManager:
        """The Actor manager: create, get_or_create, find, destroy, send, request.

        Raises:
            NotConfigured: the app did not enable Actor dispatch.
        """
        actors = self._runtime.actors
        if actors is None:
            raise NotConfigured("Actor dispatch is not enabled (App.enable_actor_dispatch())")
        return actors.manager

    @property
    def spots(self) -> SpotManager:
        """The Spot manager: create, get_or_create, find, query, close (User Spots).

        Raises:
            NotConfigured: the node has no Location Store or no Object Client/Server mesh.
        """
        runtime = self._runtime.spots.runtime
        if runtime is None:
            raise NotConfigured(
                "Spots need a Location Store and a mesh with an Object Client or Server role"
            )
        return runtime.manager

    @property
    def stream(self) -> StreamServer:
        """The STREAM session owner: its listener's ``endpoint`` / ``port`` / ``url``,
        ``statistics()``, the open ``sessions()``.

        Raises:
            NotConfigured: ``ServerConfig.stream`` is not set.
        """
        stream = self._runtime.stream
        if stream is None:
            raise NotConfigured("no STREAM endpoint (ServerConfig.stream)")
        return stream

    @property
    def endpoint(self) -> Endpoint | None:
        """Advertised host and bound port of the mesh listener (None without meshes)."""
        return self._runtime.node.endpoint

    def statistics(self) -> ServerStatistics:
        runtime = self._runtime
        return ServerStatistics(
            node=runtime.node.statistics(),
            engine=runtime.engine.statistics(),
            actors=None if runtime.actors is None else runtime.actors.statistics(),
            flow=runtime.flow.snapshot(),
            spots=None if runtime.spots.runtime is None else runtime.spots.runtime.statistics(),
            timers=None if runtime.timers is None else runtime.timers.statistics(),
        )

    @overload
    async def relocate(self, actor: SpotRef | SpotId, *, to: NodeRid) -> SpotRelocationResult: ...

    @overload
    async def relocate(
        self, actor: ActorRef | ActorId | str, *, to: NodeRid
    ) -> RelocationResult: ...

    async def relocate(
        self, actor: ActorRef | ActorId | SpotRef | SpotId | str, *, to: NodeRid
    ) -> RelocationResult | SpotRelocationResult:
        """Move an Actor or a Spot hosted on this node to the live node ``to`` of its mesh,
        live (docs/relocation.md): nothing it accepted is lost or run twice, its
        ObjectGeneration stays, its AuthorityOwnerGeneration rises by one. Returns once
        the target committed (``result.committed``), or ``relocation_timeout`` after the
        relay-ready reply was accepted (the move is then the target's in any case).

        A SpotRef or a SpotId names a User or Instance Spot (a str names an Actor): its
        seal holds its ingress, its state (PreserveStateWith) and framework timers move
        with it, a stale SpotRef keeps naming the old node while messages by SpotId
        follow to the new owner. A PerActor User Spot moves alone (its members keep their
        own routes and move separately); a SpotWide User Spot with members moves WITH
        them in one aggregate commit (``change_owners``: the Spot row and every member
        row), each member's held work, timers and bound sessions moving as in an Actor
        move; any failure before relay-ready leaves all of them here.

        Raises:
            NotConfigured: Actor dispatch is not enabled (an Actor, or a SpotWide User
                Spot with members), or this node hosts no Spots (a Spot).
            NotFound: the Actor (Spot, or a member of a SpotWide Spot) is not hosted here.
            InvalidOperation: its type is DisableRelocation, ``to`` is this node, the
                Actor is a member of a SpotWide User Spot (it moves only with its Spot), or
                the SpotRef names another incarnation than the one hosted here.
            Unavailable: it is moving, joining or closing already, or the target refused
                or could not be reached before relay-ready (it stays here, in order).
        """
        if isinstance(actor, SpotRef | SpotId):
            spots = self._runtime.spots.runtime
            if spots is None:
                raise NotConfigured("this node hosts no Spots")
            if isinstance(actor, SpotRef):
                # A SpotRef names one incarnation: a move never re-targets a newer one.
                return await spots.relocator.relocate(
                    actor.spot_id, to, generation=actor.object_generation
                )
            return await spots.relocator.relocate(actor, to)
        actors = self._runtime.actors
        if actors is None:
            raise NotConfigured("Actor dispatch is not enabled (App.enable_actor_dispatch())")
        if isinstance(actor, ActorRef):
            actor_id = actor.actor_id
        elif isinstance(actor, ActorId):
            actor_id = actor
        else:
            actor_id = ActorId(actor)
        return await actors.relocator.relocate(actor_id, to)

    async def wait_lease_lost(self) -> LeaseExpired:
        """Wait until the owner lease is lost. The node is then fail-stopped (no peer
        connection, no admission, no Store update) and stays so: exit and start a new
        lifecycle (a supervisor restarts the process; ``zlink-trio node`` exits with
        status 3)."""
        return await self._runtime.node.wait_lease_lost()


def runtime_of(server: Server) -> Runtime:
    """The parts of ``server`` (package-private: for ``zlink_trio.testing`` and the CLI)."""
    return server._runtime


def check_startup(config: ServerConfig, app: App | None) -> ValidatedApp | None:
    """Every startup configuration check that needs no I/O (spec 02 §3, B02-01).

    Raises:
        ConfigurationError: the first problem found.
    """
    validated = app.validate() if app is not None else None
    store = config.location_store
    if store is not None and not isinstance(
        store, LocationStore | PostgresStoreConfig | MemoryStoreConfig
    ):
        raise ConfigurationError(
            f"location_store: {store!r} does not implement the LocationStore protocol"
        )
    if validated is not None and validated.actor_dispatch:
        if not config.object_meshes():
            raise ConfigurationError(
                "Actor dispatch needs an Object Client or Server role in at least one mesh"
            )
        if store is None:
            raise ConfigurationError("Actor dispatch needs a Location Store")
    if validated is not None and validated.actor_types and not validated.actor_dispatch:
        names = ", ".join(sorted(t.value for t in validated.actor_types))
        raise ConfigurationError(
            f"registered Actor types ({names}) are never hosted without Actor dispatch: "
            "call App.enable_actor_dispatch()"
        )
    if (
        validated is not None
        and validated.actor_types
        and not any(m.object_role.can_host for m in config.meshes)
    ):
        names = ", ".join(sorted(t.value for t in validated.actor_types))
        raise ConfigurationError(
            f"registered Actor types ({names}) need an Object Server role in some mesh"
        )
    if validated is not None and validated.spot_types:
        names = ", ".join(sorted(t.value for t in validated.spot_types))
        if not any(m.object_role.can_host for m in config.meshes):
            raise ConfigurationError(
                f"registered Spot types ({names}) need an Object Server role in some mesh"
            )
        if store is None:
            raise ConfigurationError(f"registered Spot types ({names}) need a Location Store")
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


async def serve_server(
    config: ServerConfig,
    app: App | None = None,
    *,
    task_status: trio.TaskStatus[Server] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run one server until cancelled, for ``nursery.start`` users (as trio's ``serve_*``
    functions)::

        server = await nursery.start(zlink_trio.serve_server, config, app)

    ``nursery.start`` returns the :class:`Server` once it is registered and accepting;
    cancelling the task stops it the way leaving :func:`open_server`'s block does.

    Raises:
        The errors of :func:`open_server` (a startup error propagates from
        ``nursery.start``).
    """
    async with _open_server(config, app) as server:
        task_status.started(server)
        await trio.sleep_forever()


@asynccontextmanager
async def _open_server(
    config: ServerConfig,
    app: App | None = None,
    *,
    services: Sequence[RuntimeService] = (),
    fault_plan: FaultPlan | None = None,
    tap: WireTap | None = None,
) -> AsyncIterator[Server]:
    """:func:`open_server` with the internal hooks (extra services, fault plan, tap)."""
    validated = check_startup(config, app)
    try:
        async with open_runtime(
            config, validated, services=services, fault_plan=fault_plan, tap=tap
        ) as runtime:
            yield Server._create(runtime)
    except BaseExceptionGroup as group:
        raise_single_error(group)  # one error leaves as itself
