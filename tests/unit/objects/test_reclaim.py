"""The backstop for orphaned Creating rows (``objects/reclaim.py``): a reservation is
aborted only when the lifecycle that must drive it is gone (its owner's lease or the node
lifecycle that made it), never while both live."""

from __future__ import annotations

import pytest

from zlink_trio.config import ObjectRole
from zlink_trio.ids import (
    MeshName,
    NodeGeneration,
    NodeRid,
    OperationId,
    StableType,
    new_entry_spot_id,
)
from zlink_trio.objects.reclaim import orphaned
from zlink_trio.store.api import (
    Applied,
    AuthorityRow,
    Endpoint,
    NodeDescriptor,
    ObjectKey,
    ObjectKind,
    OperationKey,
    OwnerFence,
    Reservation,
)
from zlink_trio.store.memory import MemoryLocationStore
from zlink_trio.testing import advance_store_clock

MESH = MeshName("m")
PLAYER = StableType("player")


async def _register(store: MemoryLocationStore, ttl: float) -> tuple[OwnerFence, OperationKey]:
    rid, generation = NodeRid.new(), NodeGeneration.new()
    descriptor = NodeDescriptor(
        mesh_name=MESH,
        node_rid=rid,
        node_generation=generation,
        endpoint=Endpoint("127.0.0.1", 7000),
        object_role=ObjectRole.SERVER,
        actor_types=frozenset({PLAYER}),
        spot_types=frozenset(),
        instance_types=frozenset(),
        placement_weight=1.0,
        entry_spot_id=new_entry_spot_id("node"),
    )
    lease = await store.register_node(rid, generation, [descriptor], capacity=10, lease_ttl=ttl)
    fence = OwnerFence(MESH, rid, generation, lease.lease_generation)
    return fence, OperationKey(rid, generation, OperationId.new())


async def _reserve(
    store: MemoryLocationStore, owner: OwnerFence, operation: OperationKey
) -> AuthorityRow:
    result = await store.reserve(
        Reservation(
            key=ObjectKey.actor("a"),
            kind=ObjectKind.ACTOR,
            stable_type=PLAYER,
            owner=owner,
            operation=operation,
        )
    )
    assert isinstance(result, Applied)
    return result.row


@pytest.mark.parametrize("dead", ["none", "owner", "source"])
async def test_orphaned_aborts_only_rows_whose_lifecycles_are_gone(dead: str) -> None:
    store = MemoryLocationStore()
    owner, _ = await _register(store, ttl=100.0 if dead != "owner" else 5.0)
    _, source = await _register(store, ttl=100.0 if dead != "source" else 5.0)
    row = await _reserve(store, owner, source)
    await advance_store_clock(store, 10.0)
    aborted = await orphaned(store, row)
    assert aborted is (dead != "none")
    current = await store.read(row.key)
    assert (current is None) is (dead != "none")


async def test_orphaned_leaves_a_row_that_moved_on() -> None:
    """The abort is a CAS on the version seen: a row committed meanwhile is untouched."""
    store = MemoryLocationStore()
    owner, source = await _register(store, ttl=5.0)
    row = await _reserve(store, owner, source)
    committed = await store.commit_ready(row.key, row.store_version)
    assert isinstance(committed, Applied)
    await advance_store_clock(store, 10.0)
    assert await orphaned(store, row) is True  # "re-read": the caller reads again
    current = await store.read(row.key)
    assert current is not None and current.store_version == committed.row.store_version
