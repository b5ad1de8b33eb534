"""Location Store contract: node registration, descriptors, Entry claims and leases."""

from __future__ import annotations

import pytest
from store_kit import (
    MESH,
    OTHER_MESH,
    TTL,
    actor,
    applied,
    conflict,
    descriptor,
    node_record,
    register,
    reserved,
    snapshot,
    spot,
)

from zlink_trio.errors import DescriptorConflict, OwnerLeaseExpired
from zlink_trio.ids import (
    AuthorityOwnerGeneration,
    NodeGeneration,
    NodeRid,
    OwnerLeaseGeneration,
    new_entry_spot_id,
)
from zlink_trio.store.api import (
    ENTRY_SPOT_TYPE,
    AuthorityState,
    LocationStore,
    ObjectKey,
    ObjectKind,
)
from zlink_trio.testing import advance_store_clock


async def test_register_node_publishes_descriptors_and_entry_claims(
    store: LocationStore,
) -> None:
    before = await store.now()
    node = await register(store, meshes=(MESH, OTHER_MESH), capacity=7)
    assert node.lease.node_rid == node.rid
    assert node.lease.node_generation == node.generation
    assert node.lease.expires_at == pytest.approx(before + TTL, abs=1.0)
    records = await store.list_nodes()
    assert [r.descriptor for r in records] == sorted(
        node.descriptors, key=lambda d: (d.mesh_name, d.node_rid)
    )
    for record in records:
        assert record.live
        assert record.lease_generation == node.lease.lease_generation
        assert record.lease_expires_at == node.lease.expires_at
        assert (record.capacity, record.active, record.pending) == (7, 0, 0)
    generations = set()
    for d in node.descriptors:
        row = await store.read(ObjectKey.spot(d.entry_spot_id.value))
        assert row is not None
        assert row.kind is ObjectKind.ENTRY_SPOT
        assert row.stable_type == ENTRY_SPOT_TYPE
        assert row.state is AuthorityState.READY
        assert row.owner == node.fence(d.mesh_name)
        assert row.owner_generation == AuthorityOwnerGeneration(1)
        generations.add(row.object_generation)
    assert len(generations) == 2


async def test_list_nodes_filters_by_mesh(store: LocationStore) -> None:
    a = await register(store, meshes=(MESH,))
    b = await register(store, meshes=(MESH, OTHER_MESH))
    in_mesh = await store.list_nodes(MESH)
    assert {r.descriptor.node_rid for r in in_mesh} == {a.rid, b.rid}
    assert [r.descriptor.node_rid for r in in_mesh] == sorted(
        r.descriptor.node_rid for r in in_mesh
    )
    (other,) = await store.list_nodes(OTHER_MESH)
    assert other.descriptor.node_rid == b.rid
    assert len(await store.list_nodes()) == 3


async def test_lease_expires_by_store_time(store: LocationStore) -> None:
    node = await register(store)
    await advance_store_clock(store, TTL / 2)
    assert (await node_record(store, node)).live
    await advance_store_clock(store, TTL)
    record = await node_record(store, node)
    assert not record.live  # still listed, no longer live
    with pytest.raises(OwnerLeaseExpired):
        await store.renew_lease(node.rid, node.lease.lease_generation, TTL)
    with pytest.raises(OwnerLeaseExpired):
        await store.reserve(actor(node, "p"))
    assert await store.read(ObjectKey.actor("p")) is None


async def test_renew_extends_the_lease(store: LocationStore) -> None:
    node = await register(store)
    await advance_store_clock(store, TTL / 2)
    renewed = await store.renew_lease(node.rid, node.lease.lease_generation, TTL)
    assert renewed.lease_generation == node.lease.lease_generation
    assert renewed.node_generation == node.generation
    assert renewed.expires_at > node.lease.expires_at
    assert renewed.expires_at == pytest.approx(await store.now() + TTL, abs=1.0)
    await advance_store_clock(store, TTL * 0.75)  # past the first expiry, before the second
    record = await node_record(store, node)
    assert record.live
    assert record.lease_expires_at == renewed.expires_at
    await reserved(store, actor(node, "p"))


async def test_renew_of_an_unknown_or_superseded_lease_fails(store: LocationStore) -> None:
    node = await register(store)
    with pytest.raises(OwnerLeaseExpired):
        await store.renew_lease(NodeRid.new(), node.lease.lease_generation, TTL)
    with pytest.raises(OwnerLeaseExpired):
        await store.renew_lease(
            node.rid, OwnerLeaseGeneration(node.lease.lease_generation.value + 1), TTL
        )
    await advance_store_clock(store, TTL + 1)
    again = await register(store, rid=node.rid, generation=node.generation, meshes=(), entries=[])
    assert again.lease.lease_generation != node.lease.lease_generation
    with pytest.raises(OwnerLeaseExpired):  # superseded, never revived
        await store.renew_lease(node.rid, node.lease.lease_generation, TTL)
    await store.renew_lease(node.rid, again.lease.lease_generation, TTL)


async def test_invalid_registration_input_changes_nothing(store: LocationStore) -> None:
    rid, gen = NodeRid.new(), NodeGeneration.new()
    foreign = descriptor(NodeRid.new(), gen)
    before = await snapshot(store)
    with pytest.raises(ValueError):
        await store.register_node(rid, gen, [foreign], capacity=1, lease_ttl=TTL)
    with pytest.raises(ValueError):
        await store.register_node(rid, gen, [descriptor(rid, gen)], capacity=-1, lease_ttl=TTL)
    with pytest.raises(ValueError):
        await store.register_node(rid, gen, [descriptor(rid, gen)], capacity=1, lease_ttl=0)
    with pytest.raises(DescriptorConflict):  # one mesh published twice
        await store.register_node(
            rid, gen, [descriptor(rid, gen), descriptor(rid, gen)], capacity=1, lease_ttl=TTL
        )
    twice = new_entry_spot_id("n")
    with pytest.raises(DescriptorConflict):  # one Entry id claimed twice
        await store.register_node(
            rid,
            gen,
            [descriptor(rid, gen, entry=twice), descriptor(rid, gen, mesh=OTHER_MESH, entry=twice)],
            capacity=1,
            lease_ttl=TTL,
        )
    assert await snapshot(store) == before


async def test_live_descriptor_conflict_changes_nothing(store: LocationStore) -> None:
    """S06-04: a NewClaim conflicting with an active (MeshName, NodeRid) descriptor leaves
    the Store unchanged and raises a configuration error."""
    node = await register(store)
    before = await snapshot(store)
    fresh_entry = new_entry_spot_id("again")
    with pytest.raises(DescriptorConflict):
        await register(
            store,
            rid=node.rid,
            generation=node.generation,
            meshes=(MESH, OTHER_MESH),
            entries=[fresh_entry, new_entry_spot_id("again")],
        )
    assert await snapshot(store) == before
    assert await store.read(ObjectKey.spot(fresh_entry.value)) is None
    await store.renew_lease(node.rid, node.lease.lease_generation, TTL)  # still the holder


async def test_live_entry_id_conflict_changes_nothing(store: LocationStore) -> None:
    """S06-04: an Entry id held by another node's active claim: nothing changes, not even
    the descriptors of the batch that did not conflict."""
    holder = await register(store)
    taken = holder.descriptors[0].entry_spot_id
    before = await snapshot(store)
    rid = NodeRid.new()
    with pytest.raises(DescriptorConflict):
        await register(
            store, rid=rid, meshes=(OTHER_MESH, MESH), entries=[new_entry_spot_id("x"), taken]
        )
    assert await snapshot(store) == before
    assert await store.scan_owned(rid) in ([], ())


@pytest.mark.parametrize("kind", [ObjectKind.USER_SPOT, ObjectKind.INSTANCE_SPOT])
@pytest.mark.parametrize("ready", [False, True])
async def test_entry_id_used_by_a_spot_row_conflicts(
    store: LocationStore, kind: ObjectKind, ready: bool
) -> None:
    """S06-04 / spec 06 §2.1: Entry, User and Instance Spots share one namespace; an Entry
    claim cannot take an id a caller-created Spot row holds (even after its owner's lease
    expired), and nothing changes."""
    owner = await register(store)
    wanted = new_entry_spot_id("n")
    row = await reserved(store, spot(owner, wanted.value, kind=kind))
    if ready:
        row = applied(await store.commit_ready(row.key, row.store_version))
    await advance_store_clock(store, TTL + 1)  # the row's owner is gone; the row is not
    before = await snapshot(store)
    with pytest.raises(DescriptorConflict):
        await register(store, meshes=(OTHER_MESH, MESH), entries=[new_entry_spot_id("a"), wanted])
    assert await snapshot(store) == before
    assert await store.read(row.key) == row


async def test_entry_claim_blocks_spot_reservations(store: LocationStore) -> None:
    node = await register(store)
    entry = await store.read(node.entry_key())
    result = await store.reserve(spot(node, node.entry_key().object_id))
    assert conflict(result) == entry
    # the Actor namespace is separate
    await reserved(store, actor(node, node.entry_key().object_id))


async def test_expired_entry_claim_is_replaced(store: LocationStore) -> None:
    old = await register(store)
    entry = old.descriptors[0].entry_spot_id
    old_row = await store.read(old.entry_key())
    assert old_row is not None
    await advance_store_clock(store, TTL + 1)
    new = await register(store, entries=[entry])
    row = await store.read(new.entry_key())
    assert row is not None
    assert row.owner == new.fence()
    assert row.store_version > old_row.store_version
    assert row.object_generation != old_row.object_generation
    claims = [r for r in await store.list_nodes() if r.descriptor.entry_spot_id == entry]
    assert [r.descriptor.node_rid for r in claims] == [new.rid]


async def test_reregistration_after_expiry_replaces_the_old_claims(store: LocationStore) -> None:
    node = await register(store, meshes=(MESH, OTHER_MESH))
    old_keys = [node.entry_key(MESH), node.entry_key(OTHER_MESH)]
    await advance_store_clock(store, TTL + 1)
    again = await register(store, rid=node.rid, generation=node.generation, meshes=(MESH,))
    assert again.lease.lease_generation != node.lease.lease_generation
    for key in old_keys:
        assert await store.read(key) is None
    (record,) = await store.list_nodes()
    assert record.descriptor == again.descriptors[0]
    assert record.live
    assert {r.key for r in await store.scan_owned(node.rid)} == {again.entry_key()}


async def test_remove_node_removes_descriptors_and_claims_only(store: LocationStore) -> None:
    node = await register(store, meshes=(MESH, OTHER_MESH))
    owned = await reserved(store, actor(node, "p"))
    assert await store.remove_node(node.rid, node.generation, node.lease.lease_generation)
    assert await store.list_nodes() in ([], ())
    assert await store.read(node.entry_key(MESH)) is None
    assert await store.read(node.entry_key(OTHER_MESH)) is None
    assert await store.read(owned.key) == owned  # authority rows are not the node's claims
    assert not await store.remove_node(node.rid, node.generation, node.lease.lease_generation)


async def test_remove_node_of_an_expired_lease(store: LocationStore) -> None:
    node = await register(store)
    await advance_store_clock(store, TTL + 1)
    assert await store.remove_node(node.rid, node.generation, node.lease.lease_generation)
    assert await store.read(node.entry_key()) is None


async def test_remove_node_with_mismatched_identity_changes_nothing(store: LocationStore) -> None:
    node = await register(store)
    before = await snapshot(store)
    other_gen = NodeGeneration(node.generation.value % 1000 + 1)
    other_lease = OwnerLeaseGeneration(node.lease.lease_generation.value + 1)
    assert not await store.remove_node(node.rid, other_gen, node.lease.lease_generation)
    assert not await store.remove_node(node.rid, node.generation, other_lease)
    assert not await store.remove_node(NodeRid.new(), node.generation, node.lease.lease_generation)
    assert await snapshot(store) == before


async def test_stale_cleanup_leaves_the_same_rid_replacement(store: LocationStore) -> None:
    """S06-04: a stale cleanup (old lease generation) cannot delete the replacement's
    descriptor or Entry claim."""
    first = await register(store)
    await advance_store_clock(store, TTL + 1)
    replacement = await register(store, rid=first.rid, generation=NodeGeneration.new())
    before = await snapshot(store)
    assert not await store.remove_node(first.rid, first.generation, first.lease.lease_generation)
    assert not await store.remove_node(
        first.rid, replacement.generation, first.lease.lease_generation
    )
    assert await snapshot(store) == before
    entry = await store.read(replacement.entry_key())
    assert entry is not None
    assert entry.owner == replacement.fence()


async def test_stale_cleanup_leaves_a_claim_taken_over_by_another_node(
    store: LocationStore,
) -> None:
    """S06-04: the old node's own cleanup (its generations still match its lease row)
    never removes the Entry claim a replacement took over."""
    old = await register(store)
    entry = old.descriptors[0].entry_spot_id
    await advance_store_clock(store, TTL + 1)
    replacement = await register(store, entries=[entry])
    claim = await store.read(replacement.entry_key())
    await store.remove_node(old.rid, old.generation, old.lease.lease_generation)
    assert await store.read(replacement.entry_key()) == claim
    (record,) = await store.list_nodes()
    assert record.descriptor.node_rid == replacement.rid
    assert record.live


async def test_replacement_lifecycle_gets_its_own_entry_id(store: LocationStore) -> None:
    """S06-04: a replacement lifecycle (new RID) registers a new Entry id; both claims are
    distinct rows and neither contains the node RID."""
    old = await register(store)
    await advance_store_clock(store, TTL + 1)
    new = await register(store)
    assert new.entry_key() != old.entry_key()
    for node in (old, new):
        assert node.rid.hex not in node.entry_key().object_id
    assert (await store.read(new.entry_key())) is not None


async def test_entry_claims_follow_their_lease_generation(store: LocationStore) -> None:
    """Renewal keeps the Entry claim row unchanged (its id is immutable)."""
    node = await register(store)
    row = await store.read(node.entry_key())
    await store.renew_lease(node.rid, node.lease.lease_generation, TTL)
    assert await store.read(node.entry_key()) == row
