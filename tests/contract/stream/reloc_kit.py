"""Shared pieces of the session-relocation contract tests (spec 02 §8, B02-20 … B02-26):
three nodes — nodes 0 and 1 host the Actor type, node 2 is the session owner (a client
role: it hosts nothing and has its own CountingStore around the shared store, so the
session owner's Store reads are counted apart) — with a real websocket client bound to
the moving Actor. Everything goes through the public surface and ``zlink_trio.testing``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar

import attrs
import trio
from stream_kit import MESH, SECRET, Record, stream_cluster

from zlink_trio import MeshConfig, ObjectRole, ServerConfig, Unavailable
from zlink_trio.config import StreamConfig
from zlink_trio.ids import ActorRef, NodeRid
from zlink_trio.server import Server
from zlink_trio.store.api import LocationStore
from zlink_trio.testing import Cluster, CountingStore, FaultPlan, StoreWrapper, WireTap

SESSION_NODE: Final = 2
T = TypeVar("T")


class FailCas(StoreWrapper):
    """A hosting node's view of the Store whose owner CAS fails while ``fail`` is set
    (a relocation target's CAS failing after relay-ready)."""

    def __init__(self, inner: LocationStore) -> None:
        super().__init__(inner)
        self.fail = False
        self.failed = 0

    async def _around(self, method: str, call: Callable[[], Awaitable[T]], *args: object) -> T:
        if method == "change_owner" and self.fail:
            self.failed += 1
            await trio.lowlevel.checkpoint()
            raise Unavailable("injected owner CAS failure")
        return await call()


@attrs.define
class Moves:
    cluster: Cluster
    owner_store: CountingStore
    """The session owner's own view of the Store (its reads only)."""
    cas: list[FailCas]
    """Each hosting node's view of the Store."""

    @property
    def session_node(self) -> Server:
        return self.cluster.servers[-1]

    def index_of(self, rid: NodeRid) -> int:
        for i, server in enumerate(self.cluster.servers):
            if server.identity.node_rid == rid:
                return i
        raise AssertionError(f"no node {rid}")

    def other(self, ref: ActorRef) -> int:
        """A hosting node that is not ``ref``'s."""
        return (self.index_of(ref.node_rid) + 1) % len(self.cas)

    def session_rid(self) -> NodeRid:
        return self.session_node.identity.node_rid


@asynccontextmanager
async def moves_cluster(
    rec: Record,
    store: LocationStore,
    *,
    tap: WireTap | None = None,
    fault_plan: FaultPlan | None = None,
    seal_timeout: float | None = None,
    nodes: int = 3,
    **settings: Any,
) -> AsyncIterator[Moves]:
    """``nodes`` nodes: the last one is the session owner (hosts nothing); the others
    host the Actor type."""
    owner_store = CountingStore(store)
    session_node = nodes - 1
    cas = [FailCas(store) for _ in range(session_node)]
    timing: dict[str, Any] = dict(settings)
    if seal_timeout is not None:
        timing["session_relocation_seal_timeout"] = seal_timeout

    def config(i: int) -> ServerConfig:
        host = i != session_node
        role = ObjectRole.SERVER if host else ObjectRole.CLIENT
        extra: dict[str, Any] = dict(timing)
        extra["location_store"] = cas[i] if host else owner_store
        return ServerConfig(
            meshes=(MeshConfig(name=MESH, object_role=role),),
            cluster_secret=SECRET,
            stream=StreamConfig(),
            **extra,
        )

    hosts: Callable[[int], bool] = lambda i: i != session_node  # noqa: E731
    async with stream_cluster(
        nodes, rec, store=store, hosts=hosts, config=config, tap=tap, fault_plan=fault_plan
    ) as cluster:
        yield Moves(cluster, owner_store, cas)


async def relocate(moves: Moves, ref: ActorRef, to: int) -> Any:
    """Move ``ref``'s Actor from its current node to node ``to`` (server.relocate)."""
    source = moves.cluster.servers[moves.index_of(ref.node_rid)]
    return await source.relocate(ref.actor_id, to=moves.cluster.servers[to].identity.node_rid)
