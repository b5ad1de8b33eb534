"""Location Store contract: authority rows and their compare-and-swap transitions."""

from __future__ import annotations

import attrs
import pytest
import trio
from store_kit import (
    ACTOR_TYPE,
    INSTANCE_TYPE,
    SPOT_TYPE,
    Node,
    actor,
    applied,
    conflict,
    operation_key,
    ready,
    register,
    reserved,
    snapshot,
    spot,
)

from zlink_trio.errors import InvalidOperation
from zlink_trio.ids import AuthorityOwnerGeneration, OperationId, SpotId
from zlink_trio.store.api import (
    Applied,
    AuthorityRow,
    AuthorityState,
    CasResult,
    ContentRef,
    LocationStore,
    ObjectKey,
    ObjectKind,
    RecoveryPointer,
    RelocationMark,
)
from zlink_trio.testing import CountingStore


async def test_store_implements_the_protocol(store: LocationStore) -> None:
    assert isinstance(store, LocationStore)
    assert isinstance(store.recovery_epoch, int)
    assert isinstance(await store.now(), float)


async def test_reserve_creates_a_creating_row(store: LocationStore) -> None:
    node = await register(store)
    op = operation_key(node)
    membership = SpotId("room-1")
    row = await reserved(
        store, actor(node, "p1", content=b"hello", operation=op, membership=membership)
    )
    assert row.key == ObjectKey.actor("p1")
    assert row.kind is ObjectKind.ACTOR
    assert row.stable_type == ACTOR_TYPE
    assert row.state is AuthorityState.CREATING
    assert row.owner == node.fence()
    assert row.owner_generation == AuthorityOwnerGeneration(1)
    assert row.membership == membership
    assert row.pending_content == ContentRef.of(b"hello")
    assert row.operation == op
    assert row.relocation is None
    assert await store.read(row.key) == row


async def test_read_of_a_missing_row_is_none(store: LocationStore) -> None:
    assert await store.read(ObjectKey.actor("nobody")) is None
    assert await store.read(ObjectKey.spot("nowhere")) is None


async def test_reserve_of_an_existing_row_conflicts_with_it(store: LocationStore) -> None:
    """A04-18: only the reservation CAS winner owns the creation; the loser sees the row."""
    a, b = await register(store), await register(store)
    winner = await reserved(store, actor(a, "p1"))
    assert conflict(await store.reserve(actor(b, "p1"))) == winner
    assert conflict(await store.reserve(actor(a, "p1"))) == winner
    committed = applied(await store.commit_ready(winner.key, winner.store_version))
    assert conflict(await store.reserve(actor(b, "p1"))) == committed
    assert await store.read(winner.key) == committed


async def test_concurrent_reservations_have_exactly_one_winner(store: LocationStore) -> None:
    """A04-18: N concurrent reservations of one id across nodes: one Applied, every other
    caller gets Conflict carrying the winner's row."""
    nodes = [await register(store) for _ in range(5)]
    results: list[CasResult[AuthorityRow]] = []

    async def attempt(node: Node) -> None:
        results.append(await store.reserve(actor(node, "contested")))

    async with trio.open_nursery() as nursery:
        for node in nodes:
            nursery.start_soon(attempt, node)
    (winner,) = (r.row for r in results if isinstance(r, Applied))
    assert [conflict(r) for r in results if not isinstance(r, Applied)] == [winner] * 4
    assert await store.read(winner.key) == winner


async def test_spot_kinds_share_one_namespace_apart_from_actors(store: LocationStore) -> None:
    node = await register(store)
    user = await reserved(store, spot(node, "same-id"))
    assert conflict(await store.reserve(spot(node, "same-id", kind=ObjectKind.INSTANCE_SPOT))) == (
        user
    )
    # Actors are their own namespace: the same text id coexists.
    other = await reserved(store, actor(node, "same-id"))
    assert other.key.namespace is not user.key.namespace
    assert other.object_generation != user.object_generation


async def test_reserve_issues_increasing_unique_object_generations(store: LocationStore) -> None:
    node = await register(store)
    generations = []
    for i in range(5):
        row = await reserved(store, actor(node, f"a{i}"))
        generations.append(row.object_generation)
        generations.append((await reserved(store, spot(node, f"s{i}"))).object_generation)
        assert applied(await store.abort_creation(row.key, row.store_version)) is None
        # the same id again: a new incarnation with a new generation
        generations.append((await reserved(store, actor(node, f"a{i}"))).object_generation)
    assert generations == sorted(generations)
    assert len(set(generations)) == len(generations)


async def test_store_versions_increase_store_wide(store: LocationStore) -> None:
    node = await register(store)
    seen: list[int] = []
    row = await reserved(store, actor(node, "v"))
    seen.append(row.store_version)
    seen.append((await reserved(store, spot(node, "other"))).store_version)
    row = applied(await store.commit_ready(row.key, row.store_version))
    seen.append(row.store_version)
    row = applied(await store.set_membership(row.key, row.store_version, SpotId("r")))
    seen.append(row.store_version)
    row = applied(await store.begin_closing(row.key, row.store_version))
    seen.append(row.store_version)
    assert seen == sorted(seen)
    assert len(set(seen)) == len(seen)


async def test_version_grows_across_delete_and_recreate(store: LocationStore) -> None:
    """A re-created row always has a larger StoreVersion than any the old one had."""
    node = await register(store)
    first = await ready(store, actor(node, "phoenix"))
    assert applied(await store.release(first.key, first.store_version)) is None
    assert await store.read(first.key) is None
    second = await reserved(store, actor(node, "phoenix"))
    assert second.store_version > first.store_version
    assert second.object_generation > first.object_generation
    assert applied(await store.abort_creation(second.key, second.store_version)) is None
    third = await reserved(store, actor(node, "phoenix"))
    assert third.store_version > second.store_version


async def test_commit_ready_publishes_the_row(store: LocationStore) -> None:
    node = await register(store)
    row = await reserved(store, actor(node, "p", content=b"req", operation=operation_key(node)))
    done = applied(await store.commit_ready(row.key, row.store_version))
    assert done.state is AuthorityState.READY
    assert done.store_version > row.store_version
    assert done.pending_content is None
    assert done.operation is None
    assert done.object_generation == row.object_generation
    assert done.owner_generation == row.owner_generation
    assert done.owner == row.owner
    assert await store.read(row.key) == done


async def test_stale_expected_version_loses_with_current_row(store: LocationStore) -> None:
    node = await register(store)
    row = await reserved(store, actor(node, "p"))
    done = applied(await store.commit_ready(row.key, row.store_version))
    stale = row.store_version
    other = await register(store)
    before = await snapshot(store)
    assert conflict(await store.commit_ready(row.key, stale)) == done
    assert conflict(await store.abort_creation(row.key, stale)) == done
    assert conflict(await store.change_owner(row.key, stale, other.fence())) == done
    assert conflict(await store.set_membership(row.key, stale, SpotId("x"))) == done
    assert conflict(await store.set_recovery(row.key, stale, None)) == done
    assert conflict(await store.set_relocation(row.key, stale, None)) == done
    assert conflict(await store.begin_closing(row.key, stale)) == done
    assert conflict(await store.release(row.key, stale)) == done
    assert conflict(await store.release(row.key, done.store_version + 1000)) == done
    assert await snapshot(store) == before


async def test_mutations_of_a_missing_row_conflict_with_none(store: LocationStore) -> None:
    node = await register(store)
    key = ObjectKey.actor("ghost")
    assert conflict(await store.commit_ready(key, 1)) is None
    assert conflict(await store.abort_creation(key, 1)) is None
    assert conflict(await store.change_owner(key, 1, node.fence())) is None
    assert conflict(await store.set_membership(key, 1, None)) is None
    assert conflict(await store.set_recovery(key, 1, None)) is None
    assert conflict(await store.set_relocation(key, 1, None)) is None
    assert conflict(await store.begin_closing(key, 1)) is None
    assert conflict(await store.release(key, 1)) is None


async def test_a_row_in_the_wrong_state_is_a_conflict(store: LocationStore) -> None:
    node = await register(store)
    creating = await reserved(store, actor(node, "creating"))
    v = creating.store_version
    assert conflict(await store.change_owner(creating.key, v, node.fence())) == creating
    assert conflict(await store.begin_closing(creating.key, v)) == creating
    assert conflict(await store.release(creating.key, v)) == creating
    rdy = await ready(store, actor(node, "ready"))
    v = rdy.store_version
    assert conflict(await store.commit_ready(rdy.key, v)) == rdy
    assert conflict(await store.abort_creation(rdy.key, v)) == rdy
    closing = applied(await store.begin_closing(rdy.key, v))
    v = closing.store_version
    assert conflict(await store.commit_ready(closing.key, v)) == closing
    assert conflict(await store.abort_creation(closing.key, v)) == closing
    assert conflict(await store.change_owner(closing.key, v, node.fence())) == closing
    assert conflict(await store.begin_closing(closing.key, v)) == closing


async def test_abort_creation_deletes_the_reservation(store: LocationStore) -> None:
    """A04-19/A04-21: after an abort the id is Missing and another owner can win a new
    reservation (a new incarnation)."""
    a, b = await register(store), await register(store)
    row = await reserved(store, actor(a, "p"))
    assert await store.abort_creation(row.key, row.store_version) == Applied(None)
    assert await store.read(row.key) is None
    again = await reserved(store, actor(b, "p"))
    assert again.owner == b.fence()
    assert again.object_generation > row.object_generation


async def test_begin_closing_then_release(store: LocationStore) -> None:
    node = await register(store)
    row = await ready(store, actor(node, "p"))
    closing = applied(await store.begin_closing(row.key, row.store_version))
    assert closing.state is AuthorityState.CLOSING
    assert closing.owner == row.owner
    assert closing.object_generation == row.object_generation
    assert await store.release(closing.key, closing.store_version) == Applied(None)
    assert await store.read(row.key) is None
    # a Ready row can be released directly too
    other = await ready(store, actor(node, "q"))
    assert await store.release(other.key, other.store_version) == Applied(None)


async def test_release_never_targets_a_newer_incarnation(store: LocationStore) -> None:
    """A04-26: destroy is fenced by the incarnation it saw; a re-created row of the same id
    is never removed by the old version."""
    node = await register(store)
    old = await ready(store, actor(node, "p"))
    applied(await store.release(old.key, old.store_version))
    new = await ready(store, actor(node, "p"))
    assert conflict(await store.release(old.key, old.store_version)) == new
    assert conflict(await store.begin_closing(old.key, old.store_version)) == new
    assert await store.read(old.key) == new


async def test_change_owner_moves_the_row(store: LocationStore) -> None:
    a, b = await register(store), await register(store)
    row = await ready(store, actor(a, "p"))
    mark = RelocationMark(OperationId(7), b.fence(), sealed=True)
    marked = applied(await store.set_relocation(row.key, row.store_version, mark))
    assert marked.relocation == mark
    moved = applied(await store.change_owner(row.key, marked.store_version, b.fence()))
    assert moved.owner == b.fence()
    assert moved.owner_generation == AuthorityOwnerGeneration(2)
    assert moved.relocation is None
    assert moved.object_generation == row.object_generation
    assert moved.state is AuthorityState.READY
    assert moved.store_version > marked.store_version
    back = applied(await store.change_owner(row.key, moved.store_version, a.fence()))
    assert back.owner_generation == AuthorityOwnerGeneration(3)
    assert back.object_generation == row.object_generation


async def test_field_updates_are_cas_in_any_state(store: LocationStore) -> None:
    node = await register(store)
    row = await reserved(store, spot(node, "inst", kind=ObjectKind.INSTANCE_SPOT))
    assert row.stable_type == INSTANCE_TYPE
    pointer = RecoveryPointer(ContentRef.of(b"root"), replay_cursor=3)
    row = applied(await store.set_recovery(row.key, row.store_version, pointer))
    assert row.recovery == pointer
    assert row.state is AuthorityState.CREATING
    row = applied(await store.commit_ready(row.key, row.store_version))
    assert row.recovery == pointer  # kept through the commit
    row = applied(await store.set_recovery(row.key, row.store_version, None))
    assert row.recovery is None
    member = await ready(store, actor(node, "p", membership=SpotId("lobby")))
    member = applied(await store.set_membership(member.key, member.store_version, SpotId("r2")))
    assert member.membership == SpotId("r2")
    closing = applied(await store.begin_closing(member.key, member.store_version))
    closing = applied(await store.set_membership(closing.key, closing.store_version, None))
    assert closing.membership is None
    assert closing.state is AuthorityState.CLOSING
    mark = RelocationMark(OperationId(1), node.fence(), sealed=False)
    closing = applied(await store.set_relocation(closing.key, closing.store_version, mark))
    assert closing.relocation == mark
    assert await store.read(closing.key) == closing


async def test_user_spot_rows_use_the_spot_types(store: LocationStore) -> None:
    node = await register(store)
    row = await ready(store, spot(node, "room-1"))
    assert row.kind is ObjectKind.USER_SPOT
    assert row.stable_type == SPOT_TYPE
    assert row.key == ObjectKey.spot("room-1")


async def test_entry_claim_rows_refuse_cas_mutations(store: LocationStore) -> None:
    node = await register(store)
    other = await register(store)
    entry = await store.read(node.entry_key())
    assert entry is not None
    v = entry.store_version
    before = await snapshot(store)
    for call in (
        store.commit_ready(entry.key, v),
        store.abort_creation(entry.key, v),
        store.change_owner(entry.key, v, other.fence()),
        store.set_membership(entry.key, v, None),
        store.set_recovery(entry.key, v, None),
        store.set_relocation(entry.key, v, None),
        store.begin_closing(entry.key, v),
        store.release(entry.key, v),
    ):
        with pytest.raises(InvalidOperation):
            await call
    assert await snapshot(store) == before


async def test_returned_values_are_immutable(store: LocationStore) -> None:
    node = await register(store)
    row = await ready(store, actor(node, "p"))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        row.state = AuthorityState.CLOSING  # type: ignore[misc]
    owned = await store.scan_owned(node.rid)
    if isinstance(owned, list):
        owned.clear()  # a list handed out must be a copy
    assert await store.scan_owned(node.rid) != []
    assert await store.read(row.key) == row


async def test_scan_owned_returns_every_row_of_the_node(store: LocationStore) -> None:
    a, b = await register(store), await register(store)
    mine = {
        await ready(store, actor(a, "a1")),
        await reserved(store, actor(a, "a2")),
        await ready(store, spot(a, "s1")),
    }
    theirs = await ready(store, actor(b, "b1"))
    moved = applied(await store.change_owner(theirs.key, theirs.store_version, a.fence()))
    entry = await store.read(a.entry_key())
    assert entry is not None
    assert set(await store.scan_owned(a.rid)) == {*mine, moved, entry}
    b_entry = await store.read(b.entry_key())
    assert set(await store.scan_owned(b.rid)) == {b_entry}


async def test_counting_store_counts_reads_and_writes(store: LocationStore) -> None:
    counting = CountingStore(store)
    assert isinstance(counting, LocationStore)
    node = await register(counting)
    row = await reserved(counting, actor(node, "p"))
    await counting.read(row.key)
    await counting.now()
    assert counting.writes == 2
    assert counting.reads == 2
    assert counting.count("reserve") == 1
    assert dict(counting.calls) == {"register_node": 1, "reserve": 1, "read": 1, "now": 1}
    counting.reset()
    assert (counting.reads, counting.writes, dict(counting.calls)) == (0, 0, {})
    assert counting.recovery_epoch == store.recovery_epoch
    assert await counting.read(row.key) == row
    assert (counting.reads, counting.writes) == (1, 0)


async def test_change_owner_sets_the_membership_in_the_same_cas(store: LocationStore) -> None:
    """A cross-node Join's one CAS: owner and membership move together; without
    ``membership`` the Actor's Spot is kept; ``None`` clears it."""
    a, b = await register(store), await register(store)
    row = await ready(store, actor(a, "joiner", membership=SpotId("entry-a")))
    moved = applied(
        await store.change_owner(row.key, row.store_version, b.fence(), membership=SpotId("room"))
    )
    assert moved.owner == b.fence() and moved.membership == SpotId("room")
    assert moved.owner_generation == AuthorityOwnerGeneration(2)
    assert moved.object_generation == row.object_generation
    assert await store.read(row.key) == moved
    kept = applied(await store.change_owner(row.key, moved.store_version, a.fence()))
    assert kept.membership == SpotId("room") and kept.owner == a.fence()
    cleared = applied(
        await store.change_owner(row.key, kept.store_version, b.fence(), membership=None)
    )
    assert cleared.membership is None
    stale = applied(await store.set_membership(row.key, cleared.store_version, SpotId("x")))
    lost = conflict(
        await store.change_owner(row.key, cleared.store_version, a.fence(), membership=None)
    )
    assert lost == stale
