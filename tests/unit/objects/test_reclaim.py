"""The backstop for orphaned Creating rows (``objects/reclaim.py``): a reservation is
ended only when its attempt is over (its recorded deadline + grace passed) or the
lifecycle that must drive it is gone (its owner's lease or the node lifecycle that made
it), never while both live and the attempt runs."""

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
from zlink_trio.observe import FlowEvent, FlowTrace
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


GRACE = 5.0


async def _reserve(
    store: MemoryLocationStore,
    owner: OwnerFence,
    operation: OperationKey,
    *,
    attempt_ttl: float | None = None,
) -> AuthorityRow:
    result = await store.reserve(
        Reservation(
            key=ObjectKey.actor("a"),
            kind=ObjectKind.ACTOR,
            stable_type=PLAYER,
            owner=owner,
            operation=operation,
            attempt_ttl=attempt_ttl,
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
    flow = FlowTrace()
    aborted = await orphaned(store, row, grace=GRACE, flow=flow)
    assert aborted is (dead != "none")
    current = await store.read(row.key)
    assert (current is None) is (dead != "none")
    # an expired owner's row is reclaimed (fenced, counted); a dead source's is aborted
    assert flow.count(FlowEvent.RECLAIMED) == (1 if dead == "owner" else 0)
    assert sum(n.pending for n in await store.list_nodes()) == (1 if dead == "none" else 0)


async def test_orphaned_reclaims_a_row_past_its_attempt_deadline_plus_grace() -> None:
    """Both lifecycles live, the attempt deadline recorded in the row passed: until
    deadline + grace the row stays (its attempt may still commit), from then on it is
    reclaimed by one fenced CAS (counted RECLAIMED) and its pending unit comes back."""
    store = MemoryLocationStore()
    owner, source = await _register(store, ttl=1000.0)
    row = await _reserve(store, owner, source, attempt_ttl=10.0)
    flow = FlowTrace()
    await advance_store_clock(store, 10.0 + GRACE - 0.5)
    assert await orphaned(store, row, grace=GRACE, flow=flow) is False
    assert await store.read(row.key) == row
    await advance_store_clock(store, 0.5)
    assert await orphaned(store, row, grace=GRACE, flow=flow) is True
    assert await store.read(row.key) is None
    assert flow.count(FlowEvent.RECLAIMED) == 1
    assert [(n.active, n.pending) for n in await store.list_nodes()] == [(0, 0)]


async def test_orphaned_leaves_a_row_that_moved_on() -> None:
    """The abort is a CAS on the version seen: a row committed meanwhile is untouched."""
    store = MemoryLocationStore()
    owner, source = await _register(store, ttl=5.0)
    row = await _reserve(store, owner, source)
    committed = await store.commit_ready(row.key, row.store_version)
    assert isinstance(committed, Applied)
    await advance_store_clock(store, 10.0)
    flow = FlowTrace()
    assert await orphaned(store, row, grace=GRACE, flow=flow) is True  # the caller re-reads
    assert flow.count(FlowEvent.RECLAIMED) == 0
    current = await store.read(row.key)
    assert current is not None and current.store_version == committed.row.store_version
