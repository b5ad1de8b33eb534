"""Live Spot relocation (spec 06 §6, §6.1, §8; spec 04 §6.1, §6.7; docs/relocation.md,
"Spots"): ``server.relocate`` of User and Instance Spots between nodes over real TCP, on
both stores."""

from __future__ import annotations

from spot_relocation_kit import (
    LONG,
    SpotLog,
    apps,
    instance_on,
    owner_row,
)

from zlink_trio import AuthorityOwnerGeneration
from zlink_trio.ids import SpotId
from zlink_trio.store.api import ObjectKey
from zlink_trio.testing import CountingStore, open_cluster


async def test_a04_13_instance_spot_state_moves_generation_stays(
    clock: object, store: CountingStore
) -> None:
    """A04-13 (PreserveStateWith, an Instance Spot): a Spot activated on node 0 moves to
    node 1 and back: the adapter's captured state is restored on each target, the
    ObjectGeneration never changes, the AuthorityOwnerGeneration rises by one per move
    (target-only CAS, the relocation mark cleared), and requests by SpotId from a third
    node reach the current owner."""
    log = SpotLog()
    async with open_cluster(3, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        spot = await instance_on(c, cluster.servers, 0, "bag", "bag")
        for i in range(3):
            await c.spots.send(spot, "add", str(i).encode())
        row = await store.read(ObjectKey.spot(spot))
        assert row is not None
        generation = row.object_generation.value
        assert await c.spots.request(spot, "get").timeout(LONG) == f"4@node0:{generation}".encode()

        result = await a.relocate(SpotId(spot), to=b.identity.node_rid)
        assert result.committed and result.spot_id == SpotId(spot)
        assert result.owner_generation == AuthorityOwnerGeneration(row.owner_generation.value + 1)
        assert result.object_generation.value == generation
        moved = await owner_row(store, spot, b, row.owner_generation.value + 1)
        assert moved.object_generation.value == generation and moved.relocation is None
        assert await c.spots.request(spot, "get").timeout(LONG) == f"4@node1:{generation}".encode()
        assert log.restored == [(spot, b"4")]

        await b.relocate(SpotId(spot), to=a.identity.node_rid)
        await owner_row(store, spot, a, row.owner_generation.value + 2)
        assert await c.spots.request(spot, "get").timeout(LONG) == f"4@node0:{generation}".encode()
        assert log.factory_runs[spot] == 3
        ref = await c.spots.find(spot)
        assert ref is not None and ref.object_generation.value == generation
