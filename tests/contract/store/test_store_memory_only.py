"""What only the in-memory store promises (not parametrized): its clock is Trio's clock,
its recovery hook, and atomicity under cancellation."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from store_kit import TTL, actor, node_record, register, reserved, snapshot

from zlink_trio.errors import OwnerLeaseExpired
from zlink_trio.store.api import ObjectKey
from zlink_trio.store.memory import MemoryLocationStore
from zlink_trio.testing import advance_store_clock


async def test_store_time_follows_the_mock_clock(autojump_clock: trio.testing.MockClock) -> None:
    store = MemoryLocationStore()
    start = await store.now()
    node = await register(store)
    await trio.sleep(TTL / 2)
    assert await store.now() == start + TTL / 2
    assert (await node_record(store, node)).live
    await trio.sleep(TTL)
    assert not (await node_record(store, node)).live
    with pytest.raises(OwnerLeaseExpired):
        await store.reserve(actor(node, "p"))


async def test_hook_and_mock_clock_add_up(autojump_clock: trio.testing.MockClock) -> None:
    store = MemoryLocationStore()
    start = await store.now()
    await advance_store_clock(store, 5)
    await trio.sleep(2)
    assert await store.now() == start + 7


async def test_store_time_cannot_move_backwards() -> None:
    with pytest.raises(ValueError):
        await advance_store_clock(MemoryLocationStore(), -1)


async def test_recovery_epoch_is_zero_until_simulated() -> None:
    store = MemoryLocationStore()
    assert store.recovery_epoch == 0
    await store._simulate_recovery_for_tests()
    assert store.recovery_epoch == 1


async def test_a_cancelled_mutation_changes_nothing() -> None:
    """Every method checkpoints before it mutates: cancelled at the checkpoint, the
    mutation did not happen (the memory store's outcome is never unknown)."""
    store = MemoryLocationStore()
    node = await register(store)
    before = await snapshot(store)
    with trio.CancelScope() as scope:
        scope.cancel()
        await store.reserve(actor(node, "p"))
    assert scope.cancelled_caught
    assert await snapshot(store) == before
    assert await store.read(ObjectKey.actor("p")) is None


async def test_concurrent_reservations_interleave_atomically() -> None:
    store = MemoryLocationStore()
    node = await register(store, capacity=50)
    async with trio.open_nursery() as nursery:
        for i in range(50):
            nursery.start_soon(reserved, store, actor(node, f"a{i}"))
    record = await node_record(store, node)
    assert (record.active, record.pending) == (0, 50)
    rows = await store.scan_owned(node.rid)
    versions = [r.store_version for r in rows]
    assert len(set(versions)) == len(versions) == 51  # 50 actors + the Entry claim
