"""Location Store contract: node capacity accounting and owner-lease fences."""

from __future__ import annotations

import attrs
import pytest
from store_kit import (
    ACTOR_TYPE,
    INSTANCE_TYPE,
    MESH,
    OTHER_MESH,
    SPOT_TYPE,
    TTL,
    actor,
    applied,
    conflict,
    operation_key,
    ready,
    register,
    reserved,
    snapshot,
    spot,
    usage,
)

from zlink_trio.errors import CapacityExceeded, NotFound, OwnerLeaseExpired
from zlink_trio.ids import MeshName, NodeGeneration, OwnerLeaseGeneration, StableType
from zlink_trio.store.api import (
    AuthorityState,
    LocationStore,
    ObjectKind,
    OwnerFence,
    Reservation,
    TerminalRecord,
)
from zlink_trio.testing import advance_store_clock


async def test_capacity_follows_the_row_lifecycle(store: LocationStore) -> None:
    """A04-21: reserve takes a pending unit, commit makes it active, abort gives it back,
    release frees the active unit."""
    node = await register(store, capacity=5)
    assert await usage(store, node) == (0, 0)
    a = await reserved(store, actor(node, "a"))
    b = await reserved(store, spot(node, "b"))
    assert await usage(store, node) == (0, 2)
    a = applied(await store.commit_ready(a.key, a.store_version))
    assert await usage(store, node) == (1, 1)
    applied(await store.abort_creation(b.key, b.store_version))
    assert await usage(store, node) == (1, 0)
    a = applied(await store.begin_closing(a.key, a.store_version))
    assert await usage(store, node) == (1, 0)  # Closing still holds its unit
    applied(await store.release(a.key, a.store_version))
    assert await usage(store, node) == (0, 0)


async def test_capacity_exceeded_counts_pending_units(store: LocationStore) -> None:
    node = await register(store, capacity=2)
    first = await ready(store, actor(node, "a"))
    pending = await reserved(store, actor(node, "b"))
    before = await snapshot(store)
    with pytest.raises(CapacityExceeded):
        await store.reserve(actor(node, "c"))
    with pytest.raises(CapacityExceeded):
        await store.reserve(spot(node, "s"))
    assert await snapshot(store) == before
    applied(await store.abort_creation(pending.key, pending.store_version))
    await reserved(store, actor(node, "c"))
    with pytest.raises(CapacityExceeded):
        await store.reserve(actor(node, "d"))
    applied(await store.release(first.key, first.store_version))
    await reserved(store, actor(node, "d"))
    assert await usage(store, node) == (0, 2)


async def test_zero_capacity_node_hosts_nothing(store: LocationStore) -> None:
    node = await register(store, capacity=0)
    with pytest.raises(CapacityExceeded):
        await store.reserve(actor(node, "a"))


async def test_existing_row_conflicts_before_capacity_is_checked(store: LocationStore) -> None:
    """reserve's order: lease, existing row, type, capacity (GetOrCreate on a full node
    still learns the existing row)."""
    full = await register(store, capacity=1)
    row = await ready(store, actor(full, "a"))
    assert conflict(await store.reserve(actor(full, "a"))) == row
    with pytest.raises(CapacityExceeded):
        await store.reserve(actor(full, "b"))


async def test_lease_is_checked_before_the_existing_row(store: LocationStore) -> None:
    node = await register(store)
    await ready(store, actor(node, "a"))
    await advance_store_clock(store, TTL + 1)
    with pytest.raises(OwnerLeaseExpired):
        await store.reserve(actor(node, "a"))


async def test_entry_claims_consume_no_capacity(store: LocationStore) -> None:
    node = await register(store, meshes=(MESH, OTHER_MESH), capacity=1)
    for mesh in (MESH, OTHER_MESH):
        record = [r for r in await store.list_nodes(mesh) if r.descriptor.node_rid == node.rid]
        assert [(r.active, r.pending) for r in record] == [(0, 0)]
    await reserved(store, actor(node, "only"))
    # capacity is node-wide: every descriptor of the node shows the same counters
    assert {(r.active, r.pending) for r in await store.list_nodes()} == {(0, 1)}


async def test_change_owner_moves_the_active_unit(store: LocationStore) -> None:
    a, b = await register(store, capacity=3), await register(store, capacity=3)
    row = await ready(store, actor(a, "p"))
    moved = applied(await store.change_owner(row.key, row.store_version, b.fence()))
    assert (await usage(store, a), await usage(store, b)) == ((0, 0), (1, 0))
    applied(await store.release(moved.key, moved.store_version))
    assert (await usage(store, a), await usage(store, b)) == ((0, 0), (0, 0))


async def test_change_owner_into_a_full_node_fails(store: LocationStore) -> None:
    a, full = await register(store, capacity=3), await register(store, capacity=1)
    row = await ready(store, actor(a, "p"))
    await reserved(store, actor(full, "q"))
    before = await snapshot(store)
    with pytest.raises(CapacityExceeded):
        await store.change_owner(row.key, row.store_version, full.fence())
    assert await snapshot(store) == before


async def test_change_owner_within_the_same_node_moves_no_capacity(store: LocationStore) -> None:
    """A re-registered node taking its own row over again: owner generation +1, no unit
    moves (the node is full and that is fine)."""
    node = await register(store, capacity=1)
    row = await ready(store, actor(node, "p"))
    await advance_store_clock(store, TTL + 1)
    again = await register(store, rid=node.rid, generation=node.generation, capacity=1)
    moved = applied(await store.change_owner(row.key, row.store_version, again.fence()))
    assert moved.owner == again.fence()
    assert moved.owner_generation == row.owner_generation.next()
    assert await usage(store, again) == (1, 0)  # counters survive re-registration


async def test_change_owner_requires_the_new_owners_current_lease(store: LocationStore) -> None:
    a, b = await register(store), await register(store, ttl=TTL / 2)
    row = await ready(store, actor(a, "p"))
    stale = OwnerFence(MESH, b.rid, b.generation, OwnerLeaseGeneration(999_999))
    with pytest.raises(OwnerLeaseExpired):
        await store.change_owner(row.key, row.store_version, stale)
    await store.renew_lease(a.rid, a.lease.lease_generation, TTL)
    await advance_store_clock(store, TTL * 0.75)  # b expired, a renewed
    before = await snapshot(store)
    with pytest.raises(OwnerLeaseExpired):
        await store.change_owner(row.key, row.store_version, b.fence())
    assert await snapshot(store) == before


async def test_reserve_requires_the_owners_current_lease(store: LocationStore) -> None:
    node = await register(store)
    before = await snapshot(store)
    bad_fences = [
        OwnerFence(MESH, node.rid, node.generation, OwnerLeaseGeneration(999_999)),
        OwnerFence(
            MESH,
            node.rid,
            NodeGeneration(node.generation.value % 1000 + 1),
            node.lease.lease_generation,
        ),
    ]
    for fence in bad_fences:
        with pytest.raises(OwnerLeaseExpired):
            await store.reserve(attrs.evolve(actor(node, "p"), owner=fence))
    unknown = await register(store)
    assert await store.remove_node(unknown.rid, unknown.generation, unknown.lease.lease_generation)
    with pytest.raises(OwnerLeaseExpired):
        await store.reserve(actor(unknown, "p"))
    assert await snapshot(store) == before


async def test_commit_requires_the_owners_current_lease(store: LocationStore) -> None:
    """An expired owner cannot publish Ready; the reservation can still be aborted (the
    cleanup path) and gives its unit back."""
    node = await register(store)
    row = await reserved(store, actor(node, "p"))
    await advance_store_clock(store, TTL + 1)
    terminal = TerminalRecord(operation_key(node), b"created")
    with pytest.raises(OwnerLeaseExpired):
        await store.commit_ready(row.key, row.store_version, terminal=terminal, retain_for=60)
    assert await store.read(row.key) == row
    assert await store.read_terminal(terminal.key) is None
    applied(await store.abort_creation(row.key, row.store_version))
    assert await usage(store, node) == (0, 0)


@pytest.mark.parametrize(
    ("kind", "registered", "unregistered"),
    [
        (ObjectKind.ACTOR, ACTOR_TYPE, SPOT_TYPE),
        (ObjectKind.USER_SPOT, SPOT_TYPE, INSTANCE_TYPE),
        (ObjectKind.INSTANCE_SPOT, INSTANCE_TYPE, ACTOR_TYPE),
    ],
    ids=["actor", "user_spot", "instance_spot"],
)
async def test_reserve_needs_the_type_in_the_right_set(
    store: LocationStore, kind: ObjectKind, registered: StableType, unregistered: StableType
) -> None:
    node = await register(store, capacity=5)

    def make(object_id: str, stable_type: StableType, mesh: MeshName = MESH) -> Reservation:
        if kind is ObjectKind.ACTOR:
            return actor(node, object_id, stable_type=stable_type, mesh=mesh)
        return spot(node, object_id, kind=kind, stable_type=stable_type, mesh=mesh)

    before = await snapshot(store)
    with pytest.raises(NotFound):
        await store.reserve(make("x", unregistered))
    with pytest.raises(NotFound):
        await store.reserve(make("x", StableType("never-registered")))
    with pytest.raises(NotFound):  # the node publishes no descriptor in that mesh
        await store.reserve(make("x", registered, mesh=OTHER_MESH))
    assert await snapshot(store) == before
    row = await reserved(store, make("x", registered))
    assert row.state is AuthorityState.CREATING
    assert await usage(store, node) == (0, 1)
