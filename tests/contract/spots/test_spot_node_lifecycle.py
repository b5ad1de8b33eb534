"""User Spots across node lifecycles (docs/decisions.md, "Graceful drain on a clean stop"
and "Owner loss", applied to Spots), on two and three nodes, through both stores: a
clean stop lets a Spot create in flight finish, refuses new ones (ShuttingDown) and
releases every Spot row it owns before its descriptor goes; a crashed owner's Spots are
reclaimed once its lease expired (find is None, close ends it, get_or_create makes a new
incarnation)."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from spot_kit import SpotRecorder, hosts, short_leases, wait_gone

from zlink_trio import ShuttingDown, SpotCreated, Unavailable
from zlink_trio.store.api import ObjectKey
from zlink_trio.testing import (
    CountingStore,
    FlowEvent,
    flow_count,
    hosted_spots,
    node_of,
    open_cluster,
)

LONG = 10.0


async def test_a_clean_stop_releases_the_spot_rows_it_owns(
    clock: object, store: CountingStore
) -> None:
    """Node 0 hosts three User Spots and stops cleanly: each row is released at once
    (RELEASED_AT_STOP), so node 1 sees every id Missing without waiting for a lease; a
    new lifecycle then creates them anew with a new ObjectGeneration."""
    rec = SpotRecorder()
    async with open_cluster(2, store=store, app=hosts(rec)) as cluster:
        await cluster.wait_all_admitted()
        owner, caller = cluster.servers
        refs = []
        for name in ("s1", "s2", "s3"):
            created = await caller.spots.get_or_create(name, "room").timeout(LONG)
            assert isinstance(created, SpotCreated)
            refs.append(created.spot)
        stopped = trio.current_time()
        await cluster.stop(0)
        assert flow_count(owner, FlowEvent.RELEASED_AT_STOP) == 3
        for ref in refs:
            assert await store.read(ObjectKey.spot(ref.spot_id.value)) is None
            assert await caller.spots.find(ref.spot_id) is None
            assert await caller.spots.close(ref) is False
        if clock is not None:
            assert trio.current_time() == stopped  # nothing waited for a lease
        await cluster.start(0)
        again = await caller.spots.get_or_create("s1", "room").timeout(LONG)
        assert isinstance(again, SpotCreated)
        assert again.spot.object_generation != refs[0].object_generation


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_a_spot_create_in_flight_at_stop_finishes_and_new_ones_are_refused(
    clock: object, store: CountingStore
) -> None:
    """A create from node 1 is in node 0's create callback when node 0 stops cleanly: the
    stop lets it finish (SpotCreated), while node 0 refuses new Spot creations
    (ShuttingDown) and node 1's creations placed on it fail typed (Unavailable); then the
    stop releases the new row."""
    rec = SpotRecorder(gate=trio.Event())
    async with open_cluster(2, store=store, app=hosts(rec)) as cluster:
        await cluster.wait_all_admitted()
        owner, caller = cluster.servers
        outcome: list[object] = []

        async def create() -> None:
            outcome.append(await caller.spots.get_or_create("late", "room").timeout(LONG))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(create)
            await rec.entered.wait()
            nursery.start_soon(cluster.stop, 0)
            await trio.testing.wait_all_tasks_blocked()  # the stop runs: its drain waits
            assert not node_of(owner).admitting
            with pytest.raises(ShuttingDown):
                await owner.spots.create("room").timeout(LONG)
            with pytest.raises(Unavailable):
                await caller.spots.get_or_create("refused", "room").timeout(1)
            assert rec.gate is not None
            rec.gate.set()
        (created,) = outcome
        assert isinstance(created, SpotCreated)
        assert created.spot.node_rid == owner.identity.node_rid
        assert flow_count(owner, FlowEvent.RELEASED_AT_STOP) == 1
        assert await store.read(ObjectKey.spot("late")) is None
        assert await store.read(ObjectKey.spot("refused")) is None
        assert rec.runs("refused") == 0


async def test_a_crashed_owners_spots_are_reclaimed_once_its_lease_expired(
    clock: object, store: CountingStore
) -> None:
    """Node 0 hosts User Spots and crashes (no release): once its lease expired by the
    Store's clock, find of one is None (its row reclaimed), close of another ends it
    (True, without asking the dead owner), and get_or_create of a third makes a new
    incarnation on a live node."""
    rec = SpotRecorder()

    def app(index: int) -> object:
        return hosts(rec)(0) if index in (0, 2) else hosts(rec)(1)

    async with open_cluster(3, store=store, app=app, config=short_leases()) as cluster:
        await cluster.wait_all_admitted()
        victim, caller, spare = cluster.servers
        dead = victim.identity.node_rid
        refs = {}
        index = 0
        while len(refs) < 3:
            created = await caller.spots.get_or_create(f"v{index}", "room").timeout(LONG)
            index += 1
            assert isinstance(created, SpotCreated)
            if created.spot.node_rid == dead:
                refs[len(refs)] = created.spot
        await cluster.kill(0)
        await wait_gone([caller, spare], dead)
        found, closed, recreated = refs[0], refs[1], refs[2]
        assert await caller.spots.find(found.spot_id) is None
        assert await store.read(ObjectKey.spot(found.spot_id.value)) is None
        assert await caller.spots.close(closed) is True
        assert await caller.spots.close(closed) is False
        again = await caller.spots.get_or_create(recreated.spot_id, "room").timeout(LONG)
        assert isinstance(again, SpotCreated)
        assert again.spot.node_rid == spare.identity.node_rid
        assert again.spot.object_generation != recreated.object_generation
        assert again.spot in hosted_spots(spare)
