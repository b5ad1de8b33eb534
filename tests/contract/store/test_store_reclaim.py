"""Location Store contract: bounded reservations and reclaim after owner loss.

``reclaim`` ends an incarnation whose owner lease is no longer current (or a Creating
row whose attempt deadline + grace passed) in one CAS fenced by the row version AND the
owner fence; ``owner_live`` and ``list_reclaimable`` are the reads the runtime's lazy
reclaim and sweep use; a Creating row records its attempt deadline, and a terminal
recorded with its commit/abort lives until that deadline + retention.
"""

from __future__ import annotations

import attrs
import pytest
import trio
from store_kit import (
    TTL,
    actor,
    applied,
    conflict,
    operation_key,
    ready,
    register,
    reserved,
)

from zlink_trio.errors import InvalidOperation, OwnerLeaseExpired
from zlink_trio.ids import OwnerLeaseGeneration
from zlink_trio.store.api import Applied, LocationStore, ObjectKey, TerminalRecord
from zlink_trio.testing import advance_store_clock

RETENTION = 300.0
GRACE = 5.0


async def _usage(store: LocationStore, node_rid: object) -> tuple[int, int]:
    (record,) = [r for r in await store.list_nodes() if r.descriptor.node_rid == node_rid]
    return record.active, record.pending


async def test_reclaim_refused_while_the_owner_lease_is_live(store: LocationStore) -> None:
    node = await register(store)
    row = await ready(store, actor(node, "a"))
    assert await store.owner_live(node.fence())
    assert conflict(await store.reclaim(row.key, row.store_version, row.owner, grace=GRACE)) == row
    assert await store.read(row.key) == row
    assert await store.list_reclaimable(grace=GRACE, limit=10) == ()


@pytest.mark.parametrize("state", ["creating", "ready", "closing"])
async def test_reclaim_after_lease_expiry_frees_the_row_and_its_capacity(
    store: LocationStore, state: str
) -> None:
    node = await register(store)
    survivor = await register(store, ttl=10_000.0)
    if state == "creating":
        row = await reserved(store, actor(node, "a"))
    else:
        row = await ready(store, actor(node, "a"))
        if state == "closing":
            row = applied(await store.begin_closing(row.key, row.store_version))
    await advance_store_clock(store, TTL + 1)
    assert await store.owner_live(survivor.fence())
    assert not await store.owner_live(node.fence())
    assert await store.list_reclaimable(grace=GRACE, limit=10) == (row,)
    assert applied(await store.reclaim(row.key, row.store_version, row.owner, grace=GRACE)) is None
    assert await store.read(row.key) is None
    assert await _usage(store, node.rid) == (0, 0)
    assert await store.list_reclaimable(grace=GRACE, limit=10) == ()
    # a second reclaim of the same row is a lost CAS
    assert conflict(await store.reclaim(row.key, row.store_version, row.owner, grace=GRACE)) is None


async def test_reclaim_is_fenced_by_version_and_owner(store: LocationStore) -> None:
    node = await register(store)
    row = await ready(store, actor(node, "a"))
    await advance_store_clock(store, TTL + 1)
    wrong_fence = attrs.evolve(row.owner, lease_generation=OwnerLeaseGeneration(10**9))
    assert conflict(await store.reclaim(row.key, row.store_version, wrong_fence, grace=0)) == row
    assert conflict(await store.reclaim(row.key, row.store_version + 1, row.owner, grace=0)) == row
    assert await store.read(row.key) == row


async def test_superseded_registration_is_reclaimable(store: LocationStore) -> None:
    """A re-registration of the NodeRid (after its expiry) supersedes the old lease: the
    old lifecycle's rows are reclaimable, the new lifecycle's are not."""
    node = await register(store)
    old = await ready(store, actor(node, "old"))
    await advance_store_clock(store, TTL + 1)
    again = await register(store, rid=node.rid)
    new = await ready(store, actor(again, "new"))
    assert await store.list_reclaimable(grace=GRACE, limit=10) == (old,)
    assert conflict(await store.reclaim(new.key, new.store_version, new.owner, grace=0)) == new
    assert applied(await store.reclaim(old.key, old.store_version, old.owner, grace=0)) is None
    assert await store.read(new.key) == new


async def test_removed_registration_is_reclaimable(store: LocationStore) -> None:
    node = await register(store)
    row = await ready(store, actor(node, "a"))
    assert await store.remove_node(node.rid, node.generation, node.lease.lease_generation)
    assert not await store.owner_live(node.fence())
    assert applied(await store.reclaim(row.key, row.store_version, row.owner, grace=0)) is None


async def test_expired_lease_is_never_revived(store: LocationStore) -> None:
    """Once found reclaimable, a row stays so: the lease cannot be renewed back."""
    node = await register(store)
    row = await ready(store, actor(node, "a"))
    await advance_store_clock(store, TTL + 1)
    with pytest.raises(OwnerLeaseExpired):
        await store.renew_lease(node.rid, node.lease.lease_generation, TTL)
    assert applied(await store.reclaim(row.key, row.store_version, row.owner, grace=0)) is None


async def test_creating_row_records_its_attempt_deadline(store: LocationStore) -> None:
    node = await register(store)
    before = await store.now()
    row = await reserved(store, attrs.evolve(actor(node, "a"), attempt_ttl=30.0))
    after = await store.now()
    assert row.attempt_expires_at is not None
    assert before + 30.0 <= row.attempt_expires_at <= after + 30.0
    assert await store.read(row.key) == row
    committed = applied(await store.commit_ready(row.key, row.store_version))
    assert committed.attempt_expires_at is None
    plain = await reserved(store, actor(node, "b"))
    assert plain.attempt_expires_at is None


async def test_creating_row_past_its_attempt_deadline_is_reclaimable(
    store: LocationStore,
) -> None:
    """A Creating reservation has a bounded life even while its owner lives: past its
    attempt deadline + grace anyone may abort it by CAS, and its capacity comes back."""
    node = await register(store, ttl=10_000.0)
    row = await reserved(store, attrs.evolve(actor(node, "a"), attempt_ttl=30.0))
    await advance_store_clock(store, 30.0 + GRACE - 1)
    assert conflict(await store.reclaim(row.key, row.store_version, row.owner, grace=GRACE)) == row
    assert await store.list_reclaimable(grace=GRACE, limit=10) == ()
    await advance_store_clock(store, 2)
    assert await store.list_reclaimable(grace=GRACE, limit=10) == (row,)
    assert applied(await store.reclaim(row.key, row.store_version, row.owner, grace=GRACE)) is None
    assert await _usage(store, node.rid) == (0, 0)
    # a Ready row of a live owner is never reclaimable, whatever the grace
    done = await ready(store, attrs.evolve(actor(node, "b"), attempt_ttl=0.0))
    await advance_store_clock(store, 100)
    assert conflict(await store.reclaim(done.key, done.store_version, done.owner, grace=0)) == done


async def test_concurrent_reclaimers_exactly_one_wins(store: LocationStore) -> None:
    node = await register(store)
    rows = [await ready(store, actor(node, f"a{i}")) for i in range(5)]
    await advance_store_clock(store, TTL + 1)
    wins: list[ObjectKey] = []

    async def race(row_index: int) -> None:
        row = rows[row_index]
        result = await store.reclaim(row.key, row.store_version, row.owner, grace=0)
        if isinstance(result, Applied):
            wins.append(row.key)

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            for i in range(len(rows)):
                nursery.start_soon(race, i)
    assert sorted(wins, key=lambda k: k.object_id) == [r.key for r in rows]
    assert await _usage(store, node.rid) == (0, 0)


async def test_entry_claims_are_not_reclaimed(store: LocationStore) -> None:
    node = await register(store)
    await advance_store_clock(store, TTL + 1)
    claim = await store.read(node.entry_key())
    assert claim is not None
    assert await store.list_reclaimable(grace=0, limit=10) == ()
    with pytest.raises(InvalidOperation):
        await store.reclaim(claim.key, claim.store_version, claim.owner, grace=0)


async def test_list_reclaimable_pages(store: LocationStore) -> None:
    node = await register(store)
    rows = [await ready(store, actor(node, f"a{i:02}")) for i in range(7)]
    await advance_store_clock(store, TTL + 1)
    assert await store.list_reclaimable(grace=0, limit=3) == tuple(rows[:3])
    with pytest.raises(ValueError):
        await store.list_reclaimable(grace=0, limit=0)
    with pytest.raises(ValueError):
        await store.list_reclaimable(grace=-1, limit=10)


async def test_terminal_retention_is_anchored_on_the_attempt_deadline(
    store: LocationStore,
) -> None:
    """A04-20 at the Store: the terminal of a reservation that recorded its attempt
    deadline lives until that deadline + retention, however long the attempt took (an
    approval that outlived the deadline does not stretch it)."""
    node = await register(store, ttl=100_000.0)
    for op, commit in ((1, True), (2, False)):
        key = operation_key(node, op)
        row = await reserved(
            store, attrs.evolve(actor(node, f"r{op}", operation=key), attempt_ttl=100.0)
        )
        deadline = row.attempt_expires_at
        assert deadline is not None
        await advance_store_clock(store, 160.0)  # the attempt took 60 s past its deadline
        record = TerminalRecord(key, b"terminal")
        if commit:
            applied(
                await store.commit_ready(
                    row.key, row.store_version, terminal=record, retain_for=RETENTION
                )
            )
        else:
            applied(
                await store.abort_creation(
                    row.key, row.store_version, terminal=record, retain_for=RETENTION
                )
            )
        now = await store.now()
        await advance_store_clock(store, deadline + RETENTION - 1 - now)
        assert await store.read_terminal(key) == record
        await advance_store_clock(store, 2)
        assert await store.read_terminal(key) is None


async def test_invalid_attempt_ttl_and_grace_are_refused(store: LocationStore) -> None:
    node = await register(store)
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            attrs.evolve(actor(node, "a"), attempt_ttl=bad)
    row = await ready(store, actor(node, "a"))
    with pytest.raises(ValueError):
        await store.reclaim(row.key, row.store_version, row.owner, grace=float("nan"))
