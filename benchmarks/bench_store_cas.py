"""Location Store CAS throughput next to a raw asyncpg baseline measured in the same run.

Usage: python benchmarks/bench_store_cas.py [--dsn DSN] [--seconds S] [--rounds N]

Each line is one store with 1 and with 8 concurrent tasks (each task CASes its own row:
``set_membership(key, expected_version, ...)`` with the version it got back). The
baseline is a raw asyncpg ``UPDATE ... WHERE id=$1 AND version=$2 RETURNING version`` loop
on plain asyncio (one connection per task), run in a subprocess so no Trio or bridge is
involved. Rounds interleave baseline and store (the machine is shared and noisy); numbers
are medians, and the ratio (store / baseline of the same round) comes LAST on each line.
Target (notes/performance-baselines.md): PostgreSQL store >= 0.8x raw asyncpg.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import uuid

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

TASKS = 8
MESH = MeshName("bench")
TYPE = StableType("bench-actor")


# ----- raw asyncpg baseline (child process, plain asyncio) -----------------------------------
async def _raw(dsn: str, seconds: float) -> dict[str, float]:
    import asyncpg

    table = f"zlink_bench_raw_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(dsn)
    await admin.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, version bigint NOT NULL)")
    await admin.execute(f"INSERT INTO {table} SELECT g, 0 FROM generate_series(0, {TASKS}) g")
    sql = (
        f"UPDATE {table} SET version = version + 1 WHERE id = $1 AND version = $2 RETURNING version"
    )
    try:

        async def worker(row: int, stop: float) -> int:
            conn = await asyncpg.connect(dsn)
            try:
                version = await conn.fetchval(f"SELECT version FROM {table} WHERE id = $1", row)
                n = 0
                while time.perf_counter() < stop:
                    version = await conn.fetchval(sql, row, version)
                    n += 1
                return n
            finally:
                await conn.close()

        one = await worker(0, time.perf_counter() + seconds) / seconds
        stop = time.perf_counter() + seconds
        many = sum(await asyncio.gather(*(worker(r, stop) for r in range(TASKS)))) / seconds
    finally:
        await admin.execute(f"DROP TABLE {table}")
        await admin.close()
    return {"one": one, "many": many}


def _measure_raw(dsn: str, seconds: float) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--raw-child", "--dsn", dsn, "--seconds", str(seconds)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


# ----- a store under Trio -----------------------------------------------------------------------
async def _setup(store: LocationStore) -> list[AuthorityRow]:
    rid, generation = NodeRid.new(), NodeGeneration.new()
    descriptor = NodeDescriptor(
        mesh_name=MESH,
        node_rid=rid,
        node_generation=generation,
        endpoint=Endpoint("127.0.0.1", 1),
        object_role=ObjectRole.SERVER,
        actor_types=frozenset({TYPE}),
        spot_types=frozenset(),
        instance_types=frozenset(),
        placement_weight=1.0,
        entry_spot_id=new_entry_spot_id("bench"),
    )
    lease = await store.register_node(rid, generation, [descriptor], capacity=100, lease_ttl=3600)
    owner = OwnerFence(MESH, rid, generation, lease.lease_generation)
    rows = []
    for i in range(TASKS):
        r = await store.reserve(
            Reservation(ObjectKey.actor(f"b{i}"), ObjectKind.ACTOR, TYPE, owner)
        )
        assert isinstance(r, Applied)
        c = await store.commit_ready(r.row.key, r.row.store_version)
        assert isinstance(c, Applied)
        rows.append(c.row)
    return rows


async def _cas_rate(
    store: LocationStore, rows: list[AuthorityRow], tasks: int, seconds: float
) -> float:
    members = (SpotId("a"), SpotId("b"))
    counts = [0] * tasks
    stop = time.perf_counter() + seconds

    async def worker(i: int) -> None:
        row = rows[i]
        while time.perf_counter() < stop:
            result = await store.set_membership(row.key, row.store_version, members[counts[i] % 2])
            assert isinstance(result, Applied)
            rows[i] = row = result.row
            counts[i] += 1

    async with trio.open_nursery() as nursery:
        for i in range(tasks):
            nursery.start_soon(worker, i)
    return sum(counts) / seconds


async def _memory(seconds: float) -> dict[str, float]:
    from zlink_trio.store.memory import MemoryLocationStore

    store = MemoryLocationStore()
    rows = await _setup(store)
    return {
        "one": await _cas_rate(store, rows, 1, seconds),
        "many": await _cas_rate(store, rows, TASKS, seconds),
    }


async def _postgres(dsn: str, seconds: float) -> dict[str, float]:
    from zlink_trio.store.postgres import drop_schema, open_postgres_store

    schema = f"zlink_bench_{uuid.uuid4().hex[:12]}"
    try:
        async with open_postgres_store(dsn, schema=schema, connections=TASKS) as store:
            rows = await _setup(store)
            await _cas_rate(store, rows, TASKS, 0.2)  # warm every connection's statements
            return {
                "one": await _cas_rate(store, rows, 1, seconds),
                "many": await _cas_rate(store, rows, TASKS, seconds),
            }
    finally:
        await drop_schema(dsn, schema)


def _line(name: str, rates: list[dict[str, float]], raws: list[dict[str, float]] | None) -> str:
    one = statistics.median(r["one"] for r in rates)
    many = statistics.median(r["many"] for r in rates)
    text = f"{name:22s} 1 task {one:9.0f} ops/s   {TASKS} tasks {many:9.0f} ops/s"
    if raws is not None:
        r1 = statistics.median(s["one"] / b["one"] for s, b in zip(rates, raws, strict=True))
        r8 = statistics.median(s["many"] / b["many"] for s, b in zip(rates, raws, strict=True))
        text += f"   ratio to raw asyncpg {r1:.2f} / {r8:.2f}"
    return text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--raw-child", action="store_true")
    args = parser.parse_args()
    if args.raw_child:
        print(json.dumps(asyncio.run(_raw(args.dsn, args.seconds))))
        return
    raws: list[dict[str, float]] = []
    pgs: list[dict[str, float]] = []
    for _ in range(args.rounds):  # interleaved: baseline and store measured back to back
        raws.append(_measure_raw(args.dsn, args.seconds))
        pgs.append(trio.run(_postgres, args.dsn, args.seconds))
    try:
        mems = [trio.run(_memory, args.seconds) for _ in range(args.rounds)]
    except ImportError:  # pragma: no cover - memory store not there yet
        mems = []
    print(
        f"Location Store CAS (set_membership), medians of {args.rounds} interleaved rounds of "
        f"{args.seconds:g} s; ratio = store / raw asyncpg of the same round (target >= 0.80)"
    )
    print(_line("raw asyncpg (asyncio)", raws, raws))
    print(_line("PostgresLocationStore", pgs, raws))
    if mems:
        print(_line("MemoryLocationStore", mems, raws))


if __name__ == "__main__":
    main()
