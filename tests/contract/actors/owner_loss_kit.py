"""Shared pieces of the owner-loss contract tests (a node dies; its Actors' rows are
reclaimed): short leases, placement onto a chosen node, waiting for a peer to be GONE."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import trio

from zlink_trio import Created, Server, ServerConfig
from zlink_trio.ids import ActorRef, NodeRid
from zlink_trio.mesh.api import PeerAddress, PeerState
from zlink_trio.store.api import LocationStore, ObjectKey
from zlink_trio.testing import StoreCall, node_of

TTL = 1.0
RENEW = 0.3
NO_SWEEP = 3600.0
"""A sweep interval no test outlives: only the startup round runs (lazy paths tested)."""


def short_leases(
    *, sweep: float = NO_SWEEP, batch: int = 100, store: Callable[[int], Any] | None = None
) -> Callable[[int], ServerConfig]:
    """``config(index)`` of a cluster with 1 s leases (renewed every 0.3 s)."""

    def config(index: int) -> ServerConfig:
        extra: dict[str, Any] = {}
        if store is not None:
            extra["location_store"] = store(index)
        return ServerConfig(
            owner_lease_ttl=TTL,
            owner_lease_renew_interval=RENEW,
            descriptor_poll_interval=0.2,
            reclaim_sweep_interval=sweep,
            reclaim_sweep_batch=batch,
            **extra,
        )

    return config


async def create_on(caller: Server, prefix: str, host: NodeRid, count: int) -> list[ActorRef]:
    """Create ``prefix<i>`` Actors from ``caller`` until ``count`` of them are placed on
    ``host`` (placement is random among the hosting nodes); returns those ``count``."""
    placed: list[ActorRef] = []
    for i in range(50 * count):
        created = await caller.actors.get_or_create(f"{prefix}{i}", "player").timeout(10)
        assert isinstance(created, Created)
        if created.actor.node_rid == host:
            placed.append(created.actor)
            if len(placed) == count:
                return placed
    raise AssertionError("placement never chose the node")


async def wait_gone(servers: Sequence[Server], rid: NodeRid) -> None:
    """Wait until every server sees the node lifecycle ``rid`` GONE (its descriptor
    watcher dropped the intent: the lease expired by the Store's clock)."""
    for server in servers:
        node = node_of(server)
        (mesh,) = node.meshes
        address = PeerAddress(mesh, rid)
        while node.peer_state(address) is not PeerState.GONE:
            await node.wait_peer_change(address)
    await trio.lowlevel.checkpoint()


def applied(history: Sequence[StoreCall], key: ObjectKey, method: str) -> list[StoreCall]:
    return [m for m in history if m.key == key and m.method == method and m.applied]


async def rows_of(store: LocationStore, refs: Sequence[ActorRef]) -> list[Any]:
    return [await store.read(ObjectKey.actor(ref.actor_id.value)) for ref in refs]
