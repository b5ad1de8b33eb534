"""The aggregate owner change (``change_owners``) next to single-row ``change_owner`` calls
measured in the same run on the same store.

Usage: python benchmarks/bench_store_change_owners.py [--dsn DSN] [--moves N] [--rounds R]

A SpotWide User Spot relocation moves the Spot and its member Actors in one commit. For a
Spot with ``size - 1`` members, each line times ``--moves`` moves of all ``size`` rows back
and forth between two nodes: as ONE ``change_owners`` (ours) and as ``size`` sequential
``change_owner`` calls (the baseline: what a caller without the aggregate would do, with
no atomicity). Rounds interleave baseline and batch (the machine is shared and noisy);
numbers are medians, and the ratio (batch rows/s / single-row rows/s of the same round)
comes LAST on each line.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

import trio

from zlink_trio.config import ObjectRole
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid, SpotId, StableType, new_entry_spot_id
from zlink_trio.store.api import (
    Applied,
    AuthorityRow,
    Endpoint,
    LocationStore,
    NodeDescriptor,
    ObjectKey,
    ObjectKind,
    OwnerFence,
    Reservation,
)

MESH = MeshName("bench")
ACTOR = StableType("bench-actor")
SPOT = StableType("bench-spot")
SIZES = (1, 8, 64)


async def _node(store: LocationStore) -> OwnerFence:
    rid, generation = NodeRid.new(), NodeGeneration.new()
    descriptor = NodeDescriptor(
        mesh_name=MESH,
        node_rid=rid,
        node_generation=generation,
        endpoint=Endpoint("127.0.0.1", 7000),
        object_role=ObjectRole.SERVER,
        actor_types=frozenset({ACTOR}),
        spot_types=frozenset({SPOT}),
        instance_types=frozenset(),
        placement_weight=1.0,
        entry_spot_id=new_entry_spot_id("bench"),
    )
    lease = await store.register_node(
        rid, generation, [descriptor], capacity=10_000, lease_ttl=3600
    )
    return OwnerFence(MESH, rid, generation, lease.lease_generation)


async def _ready(store: LocationStore, reservation: Reservation) -> AuthorityRow:
    reserved = await store.reserve(reservation)
    assert isinstance(reserved, Applied)
    committed = await store.commit_ready(reserved.row.key, reserved.row.store_version)
    assert isinstance(committed, Applied)
    return committed.row


async def _spot(
    store: LocationStore, owner: OwnerFence, name: str, size: int
) -> list[AuthorityRow]:
    key = ObjectKey.spot(name)
    rows = [await _ready(store, Reservation(key, ObjectKind.USER_SPOT, SPOT, owner))]
    for i in range(size - 1):
        member = ObjectKey.actor(f"{name}-m{i}")
        rows.append(
            await _ready(
                store, Reservation(member, ObjectKind.ACTOR, ACTOR, owner, membership=SpotId(name))
            )
        )
    return rows


Mover = Callable[[list[AuthorityRow], OwnerFence], Awaitable[list[AuthorityRow]]]


def _movers(store: LocationStore) -> tuple[Mover, Mover]:
    async def singles(rows: list[AuthorityRow], to: OwnerFence) -> list[AuthorityRow]:
        moved = []
        for row in rows:
            result = await store.change_owner(row.key, row.store_version, to)
            assert isinstance(result, Applied)
            moved.append(result.row)
        return moved

    async def batch(rows: list[AuthorityRow], to: OwnerFence) -> list[AuthorityRow]:
        result = await store.change_owners([(r.key, r.store_version) for r in rows], to)
        assert isinstance(result, Applied)
        return list(result.row)

    return singles, batch


async def _rate(
    move: Mover, rows: list[AuthorityRow], a: OwnerFence, b: OwnerFence, moves: int
) -> tuple[float, list[AuthorityRow]]:
    """Rows moved per second over ``moves`` moves (alternating b, a, b, ...)."""
    start = time.perf_counter()
    for i in range(moves):
        rows = await move(rows, b if i % 2 == 0 else a)
    return len(rows) * moves / (time.perf_counter() - start), rows


async def _round(store: LocationStore, moves: int, tag: str) -> dict[int, tuple[float, float]]:
    a, b = await _node(store), await _node(store)
    singles, batch = _movers(store)
    rates: dict[int, tuple[float, float]] = {}
    for size in SIZES:
        rows = await _spot(store, a, f"{tag}-{size}", size)
        rows = (await _rate(batch, rows, a, b, 2))[1]  # warm the statements
        single_rate, rows = await _rate(singles, rows, a, b, moves)
        batch_rate, rows = await _rate(batch, rows, a, b, moves)
        rates[size] = (single_rate, batch_rate)
    return rates


async def _memory(moves: int) -> dict[int, tuple[float, float]]:
    from zlink_trio.store.memory import MemoryLocationStore

    return await _round(MemoryLocationStore(), moves, "m")


async def _postgres(dsn: str, moves: int) -> dict[int, tuple[float, float]]:
    from zlink_trio.store.postgres import drop_schema, open_postgres_store

    schema = f"zlink_bench_{uuid.uuid4().hex[:12]}"
    try:
        async with open_postgres_store(dsn, schema=schema, connections=2) as store:
            return await _round(store, moves, "p")
    finally:
        await drop_schema(dsn, schema)


def _lines(name: str, rounds: list[dict[int, tuple[float, float]]]) -> list[str]:
    lines = []
    for size in SIZES:
        single = statistics.median(r[size][0] for r in rounds)
        batch = statistics.median(r[size][1] for r in rounds)
        ratio = statistics.median(r[size][1] / r[size][0] for r in rounds)
        lines.append(
            f"{name:22s} {size:3d} rows  change_owner x{size:<3d} {single:8.0f} rows/s"
            f"   change_owners {batch:8.0f} rows/s   ratio to single-row {ratio:.2f}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--moves", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    pgs = [trio.run(_postgres, args.dsn, args.moves) for _ in range(args.rounds)]
    mems = [trio.run(_memory, args.moves) for _ in range(args.rounds)]
    print(
        f"Aggregate owner change, medians of {args.rounds} rounds of {args.moves} moves per "
        "size; ratio = change_owners rows/s / sequential change_owner rows/s, same round"
    )
    for line in (*_lines("PostgresLocationStore", pgs), *_lines("MemoryLocationStore", mems)):
        print(line)


if __name__ == "__main__":
    main()
