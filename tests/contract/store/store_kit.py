"""Builders and assertions shared by the Store contract tests (protocol-only)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import attrs

from zlink_trio.config import ObjectRole
from zlink_trio.ids import (
    MeshName,
    NodeGeneration,
    NodeRid,
    OperationId,
    SpotId,
    StableType,
    new_entry_spot_id,
)
from zlink_trio.store.api import (
    Applied,
    AuthorityRow,
    CasResult,
    Conflict,
    ContentRef,
    Endpoint,
    LocationStore,
    Namespace,
    NodeDescriptor,
    NodeLease,
    NodeRecord,
    ObjectKey,
    ObjectKind,
    OperationKey,
    OwnerFence,
    Reservation,
)

T = TypeVar("T")

MESH = MeshName("world")
OTHER_MESH = MeshName("lobby")
ACTOR_TYPE = StableType("player")
SPOT_TYPE = StableType("room")
INSTANCE_TYPE = StableType("shard")
TTL = 10.0
"""Lease TTL used everywhere; expire a lease with ``advance_store_clock(store, TTL + 1)``."""


@attrs.frozen
class Node:
    """A registered node as the tests see it."""

    rid: NodeRid
    generation: NodeGeneration
    lease: NodeLease
    descriptors: tuple[NodeDescriptor, ...]

    def fence(self, mesh: MeshName = MESH) -> OwnerFence:
        return OwnerFence(mesh, self.rid, self.generation, self.lease.lease_generation)

    def entry_key(self, mesh: MeshName = MESH) -> ObjectKey:
        (descriptor,) = (d for d in self.descriptors if d.mesh_name == mesh)
        return ObjectKey.spot(descriptor.entry_spot_id.value)

    def renewed(self, lease: NodeLease) -> Node:
        return attrs.evolve(self, lease=lease)


def descriptor(
    rid: NodeRid,
    generation: NodeGeneration,
    *,
    mesh: MeshName = MESH,
    entry: SpotId | None = None,
    actor_types: Sequence[StableType] = (ACTOR_TYPE,),
    spot_types: Sequence[StableType] = (SPOT_TYPE,),
    instance_types: Sequence[StableType] = (INSTANCE_TYPE,),
) -> NodeDescriptor:
    return NodeDescriptor(
        mesh_name=mesh,
        node_rid=rid,
        node_generation=generation,
        endpoint=Endpoint("127.0.0.1", 7000),
        object_role=ObjectRole.SERVER,
        actor_types=frozenset(actor_types),
        spot_types=frozenset(spot_types),
        instance_types=frozenset(instance_types),
        placement_weight=1.0,
        entry_spot_id=entry if entry is not None else new_entry_spot_id("node"),
    )


async def register(
    store: LocationStore,
    *,
    rid: NodeRid | None = None,
    generation: NodeGeneration | None = None,
    meshes: Sequence[MeshName] = (MESH,),
    entries: Sequence[SpotId] | None = None,
    capacity: int = 100,
    ttl: float = TTL,
    actor_types: Sequence[StableType] = (ACTOR_TYPE,),
) -> Node:
    rid = rid if rid is not None else NodeRid.new()
    generation = generation if generation is not None else NodeGeneration.new()
    ids = list(entries) if entries is not None else [new_entry_spot_id("node") for _ in meshes]
    descriptors = tuple(
        descriptor(rid, generation, mesh=m, entry=e, actor_types=actor_types)
        for m, e in zip(meshes, ids, strict=True)
    )
    lease = await store.register_node(
        rid, generation, descriptors, capacity=capacity, lease_ttl=ttl
    )
    return Node(rid, generation, lease, descriptors)


def actor(
    node: Node,
    actor_id: str,
    *,
    stable_type: StableType = ACTOR_TYPE,
    mesh: MeshName = MESH,
    content: bytes | None = None,
    operation: OperationKey | None = None,
    membership: SpotId | None = None,
) -> Reservation:
    return Reservation(
        key=ObjectKey.actor(actor_id),
        kind=ObjectKind.ACTOR,
        stable_type=stable_type,
        owner=node.fence(mesh),
        membership=membership,
        content=None if content is None else ContentRef.of(content),
        operation=operation,
    )


def spot(
    node: Node,
    spot_id: str,
    *,
    kind: ObjectKind = ObjectKind.USER_SPOT,
    stable_type: StableType | None = None,
    mesh: MeshName = MESH,
) -> Reservation:
    if stable_type is None:
        stable_type = INSTANCE_TYPE if kind is ObjectKind.INSTANCE_SPOT else SPOT_TYPE
    return Reservation(
        key=ObjectKey.spot(spot_id), kind=kind, stable_type=stable_type, owner=node.fence(mesh)
    )


def operation_key(node: Node, op: int = 1) -> OperationKey:
    return OperationKey(node.rid, node.generation, OperationId(op))


def applied(result: CasResult[T]) -> T:
    assert isinstance(result, Applied), f"expected Applied, got {result!r}"
    return result.row


def conflict(result: CasResult[T]) -> AuthorityRow | None:
    assert isinstance(result, Conflict), f"expected Conflict, got {result!r}"
    return result.current


async def reserved(store: LocationStore, reservation: Reservation) -> AuthorityRow:
    return applied(await store.reserve(reservation))


async def ready(store: LocationStore, reservation: Reservation) -> AuthorityRow:
    row = await reserved(store, reservation)
    return applied(await store.commit_ready(row.key, row.store_version))


async def all_rows(store: LocationStore, namespace: Namespace) -> list[AuthorityRow]:
    rows: list[AuthorityRow] = []
    after: str | None = None
    while True:
        page = await store.list_rows(namespace, after=after, limit=1000)
        rows.extend(page)
        if len(page) < 1000:
            return rows
        after = page[-1].key.object_id


@attrs.frozen
class Snapshot:
    """Everything observable through list_nodes and list_rows at one moment."""

    nodes: tuple[NodeRecord, ...]
    actors: tuple[AuthorityRow, ...]
    spots: tuple[AuthorityRow, ...]


async def snapshot(store: LocationStore) -> Snapshot:
    nodes = sorted(
        await store.list_nodes(), key=lambda r: (r.descriptor.mesh_name, r.descriptor.node_rid)
    )
    return Snapshot(
        tuple(nodes),
        tuple(await all_rows(store, Namespace.ACTOR)),
        tuple(await all_rows(store, Namespace.SPOT)),
    )


async def node_record(store: LocationStore, node: Node, mesh: MeshName = MESH) -> NodeRecord:
    (record,) = (r for r in await store.list_nodes(mesh) if r.descriptor.node_rid == node.rid)
    return record


async def usage(store: LocationStore, node: Node) -> tuple[int, int]:
    """(active, pending) of ``node``."""
    record = await node_record(store, node, node.descriptors[0].mesh_name)
    return record.active, record.pending
