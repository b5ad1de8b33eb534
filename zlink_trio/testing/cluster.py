"""``open_cluster``: N MeshNodes in one Trio process over loopback, sharing one Location
Store, secret and mesh(es) -- what Orleans' TestCluster is to its users.

::

    async with open_cluster(3) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers[0], cluster.servers[1]
        ...
        await cluster.restart(1)          # a replacement lifecycle at the same endpoint

Nodes start one after another (each ``open_server`` returns once it is registered and
accepting); admission between them proceeds in the background: use
:meth:`Cluster.wait_all_admitted` (event-driven). Leaving the block stops every node
gracefully. Under ``trio.testing.MockClock(autojump_threshold=0)`` everything runs in
virtual time (loopback writes complete synchronously).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, final

import attrs
import trio

from .._exceptions import raise_single_error
from ..app import App, ValidatedApp
from ..config import MemoryStoreConfig, MeshConfig, ServerConfig
from ..engine import Engine
from ..ids import MeshName
from ..mesh.api import PeerAddress, PeerState
from ..mesh.faults import FaultPlan
from ..mesh.node import MeshNode
from ..mesh.services import RuntimeService
from ..mesh.tap import WireTap
from ..server import Server, _open_server, runtime_of
from ..store.api import LocationStore
from ..store.memory import MemoryLocationStore

__all__ = [
    "DEFAULT_MESH",
    "Cluster",
    "instrument",
    "node_of",
    "open_cluster",
    "server_app",
    "server_engine",
    "server_store",
]

DEFAULT_MESH: Final = MeshName("test")

ConfigArg = ServerConfig | Callable[[int], ServerConfig] | None
AppArg = App | Callable[[int], App | None] | None
ServicesArg = Sequence[RuntimeService] | Callable[[int], Sequence[RuntimeService]]


def node_of(server: Server) -> MeshNode:
    """The concrete MeshNode of ``server`` (test access to statistics and hooks)."""
    return runtime_of(server).node


def server_engine(server: Server) -> Engine:
    """The engine of ``server`` (e.g. ``await server_engine(s).wait_idle()``)."""
    return runtime_of(server).engine


def server_store(server: Server) -> LocationStore | None:
    """The Location Store ``server`` uses (the embedded memory store it created, a store
    passed in, or the PostgreSQL store it opened; None with ``location_store=None``)."""
    return runtime_of(server).store


def server_app(server: Server) -> ValidatedApp | None:
    """The validated registrations ``server`` runs with."""
    return runtime_of(server).app


def instrument(
    server: Server, *, fault_plan: FaultPlan | None = None, tap: WireTap | None = None
) -> None:
    """Install (or with None, remove) a fault plan and a wire tap on a running server."""
    node_of(server).instrument(fault_plan=fault_plan, tap=tap)


@final
class _Lifecycle:
    """One running node lifecycle of the cluster (a task in the cluster's nursery)."""

    __slots__ = ("done", "server", "stop")

    def __init__(self) -> None:
        self.stop = trio.Event()
        self.done = trio.Event()
        self.server: Server | None = None


@final
class Cluster:
    """A running cluster (made by :func:`open_cluster`)."""

    def __init__(
        self,
        nursery: trio.Nursery,
        store: LocationStore,
        secret: bytes,
        configs: list[ServerConfig],
        apps: list[App | None],
        services: list[Sequence[RuntimeService]],
        fault_plan: FaultPlan | None,
        tap: WireTap | None,
    ) -> None:
        self._nursery = nursery
        self.store: Final = store
        self.secret: Final = secret
        self.configs = configs
        """The configuration of each index's current (or last) lifecycle."""
        self._apps = apps
        self._services = services
        self.fault_plan: Final = fault_plan
        self.tap: Final = tap
        self._lifecycles: list[_Lifecycle | None] = [None] * len(configs)
        self.servers: list[Server] = []
        """The current (or, once stopped, the last) Server of each index."""

    def __len__(self) -> int:
        return len(self.configs)

    def running(self, index: int) -> bool:
        lifecycle = self._lifecycles[index]
        return lifecycle is not None and not lifecycle.done.is_set()

    def running_servers(self) -> list[Server]:
        return [s for i, s in enumerate(self.servers) if self.running(i)]

    # --- lifecycles ----------------------------------------------------------------------
    async def start(self, index: int) -> Server:
        """Start a new lifecycle at ``index`` (which must not be running)."""
        if self.running(index):
            raise RuntimeError(f"node {index} is running")
        lifecycle = _Lifecycle()
        server: Server = await self._nursery.start(self._run, index, lifecycle)
        self._lifecycles[index] = lifecycle
        if index < len(self.servers):
            self.servers[index] = server
        else:
            self.servers.append(server)
        return server

    async def stop(self, index: int) -> None:
        """Stop the lifecycle at ``index`` gracefully: the drain of leaving ``open_server``
        (accepted turns finish, its rows are released, descriptor removed, goodbyes)."""
        lifecycle = self._lifecycles[index]
        if lifecycle is None or lifecycle.done.is_set():
            await trio.lowlevel.checkpoint()
            return
        lifecycle.stop.set()
        await lifecycle.done.wait()

    async def kill(self, index: int) -> None:
        """Stop the lifecycle at ``index`` like a crash: its sockets close, but nobody
        is told and its descriptor stays in the Store until its lease expires."""
        lifecycle = self._lifecycles[index]
        if lifecycle is None or lifecycle.done.is_set():
            await trio.lowlevel.checkpoint()
            return
        node_of(self.servers[index])._abandon()
        lifecycle.stop.set()
        await lifecycle.done.wait()

    async def restart(self, index: int, *, same_endpoint: bool = True) -> Server:
        """Stop ``index`` gracefully and start a replacement lifecycle (new NodeRid, new
        NodeGeneration, new Entry Spot ids), by default at the same endpoint (port)."""
        old = self.servers[index]
        await self.stop(index)
        if same_endpoint and old.endpoint is not None:
            self.configs[index] = attrs.evolve(self.configs[index], listen_port=old.endpoint.port)
        return await self.start(index)

    async def _run(
        self,
        index: int,
        lifecycle: _Lifecycle,
        *,
        task_status: trio.TaskStatus[Server] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            async with _open_server(
                self.configs[index],
                self._apps[index],
                services=self._services[index],
                fault_plan=self.fault_plan,
                tap=self.tap,
            ) as server:
                lifecycle.server = server
                task_status.started(server)
                await lifecycle.stop.wait()
        finally:
            lifecycle.done.set()

    # --- waiting -------------------------------------------------------------------------
    def _missing(self) -> tuple[MeshNode, PeerAddress] | None:
        """The first (node, peer) of running nodes sharing a mesh that is not ADMITTED."""
        nodes = [node_of(s) for s in self.running_servers()]
        for node in nodes:
            for other in nodes:
                if other is node:
                    continue
                for mesh in node.meshes & other.meshes:
                    address = PeerAddress(mesh, other.identity.node_rid)
                    if node.peer_state(address) is not PeerState.ADMITTED:
                        return node, address
        return None

    async def wait_all_admitted(self) -> None:
        """Wait until every running node has an admitted connection to every other
        running node in every mesh they share (waits on state transitions, no polling).
        Callers bound it with their own deadline."""
        while (missing := self._missing()) is not None:
            node, address = missing
            await node.wait_peer_change(address)
        await trio.lowlevel.checkpoint()


def _node_config(
    index: int, config: ConfigArg, store: LocationStore, secret: bytes
) -> ServerConfig:
    if config is None:
        base = ServerConfig()
    elif isinstance(config, ServerConfig):
        base = config
    else:
        base = config(index)
    changes: dict[str, Any] = {}
    if not base.meshes:
        changes["meshes"] = (MeshConfig(name=DEFAULT_MESH),)
    if not base.cluster_secret:
        changes["cluster_secret"] = secret
    if base.location_store is None or isinstance(base.location_store, MemoryStoreConfig):
        changes["location_store"] = store
    if base.node_name == "node":
        changes["node_name"] = f"node{index}"
    return attrs.evolve(base, **changes) if changes else base


@asynccontextmanager
async def open_cluster(
    n: int,
    *,
    store: LocationStore | None = None,
    app: AppArg = None,
    config: ConfigArg = None,
    services: ServicesArg = (),
    fault_plan: FaultPlan | None = None,
    tap: WireTap | None = None,
) -> AsyncIterator[Cluster]:
    """Start ``n`` nodes in this Trio run; stop them all when the block exits.

    Args:
        n: number of nodes (indices ``0..n-1``).
        store: the shared Location Store (default: a fresh MemoryLocationStore).
        app: one App for every node, or ``app(index)``.
        config: a ServerConfig template, or ``config(index)``. Per node, unset fields get
            cluster defaults: meshes (one SERVER mesh named "test"), cluster_secret (one
            generated secret), location_store (the shared store, unless the template names
            a store object or a PostgresStoreConfig), node_name ("node<i>").
        services: runtime services of every node (or ``services(index)``): how tests
            register inbound handlers before a node accepts (:mod:`zlink_trio.mesh.services`).
        fault_plan: installed on every node's transport.
        tap: installed on every node's transport.
    """
    if n < 1:
        raise ValueError("a cluster needs at least one node")
    shared = MemoryLocationStore() if store is None else store
    secret = secrets.token_bytes(32)
    configs = [_node_config(i, config, shared, secret) for i in range(n)]
    apps = [app(i) if callable(app) else app for i in range(n)]
    per_node = [services(i) if callable(services) else services for i in range(n)]
    try:
        async with trio.open_nursery() as nursery:
            cluster = Cluster(nursery, shared, secret, configs, apps, per_node, fault_plan, tap)
            try:
                for index in range(n):
                    await cluster.start(index)
                yield cluster
            finally:
                with trio.CancelScope(shield=True):
                    for index in reversed(range(n)):
                        await cluster.stop(index)
    except BaseExceptionGroup as group:
        raise_single_error(group)  # one error leaves as itself
