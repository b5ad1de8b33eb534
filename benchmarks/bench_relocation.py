"""Relocation pause under load: how long a moving Actor handles nothing while it moves.

Usage: python benchmarks/bench_relocation.py [--moves M] [--rate R]
    [--kind actor|spot|spotwide]

``--kind spot`` measures the same for an Instance Spot (PreserveStateWith) moved with
``server.relocate(SpotId)`` and called by SpotId. ``--kind spotwide``: a SpotWide User
Spot (PreserveStateWith) with two member Actors moves with them (one aggregate commit,
docs/relocation.md "Spots"); the stream goes to one member by ActorId, so the pause is a
member's.

Three nodes in this process (in-memory Location Store, loopback TCP). One PreserveStateWith
Actor; a caller on the third node streams numbered one-way sends to it (one every
``1/R`` s) and, every few messages, a request, while the Actor moves back and forth
between nodes 0 and 1 ``M`` times (``server.relocate``; each returns once the target
committed). The handler stamps every message it runs.

* pause of one move = the longest gap between two consecutive handled messages inside
  [the relocate call, its return + 50 ms]: the time the Actor handled nothing;
* baseline (same run) = the same measure over windows of the same lengths while the
  Actor does NOT move (the stream's own jitter).

Printed: p50 / p99 / max pause with and without moves, that every message ran exactly once
and in order, and last the ratio ours p99 / baseline p99. Goal: p99 <= 50 ms, nothing lost.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from typing import Any

import trio

from zlink_trio import (
    App,
    PreserveStateWith,
    SpotId,
    SpotKind,
    SpotWide,
    on_join_complete,
    on_request,
    on_send,
)
from zlink_trio.testing import open_cluster


class Stamps(list[tuple[int, float]]):
    """Handled messages (number, time); ``all_in`` is set once ``expected`` arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.expected = -1
        self.all_in = trio.Event()
        self.joined: set[str] = set()

    def stamp(self, number: int) -> None:
        self.append((number, time.perf_counter()))
        if len(self) == self.expected:
            self.all_in.set()


def make_app(stamps: Stamps) -> App:
    class Counter:
        def __init__(self, context: Any) -> None:
            self.context = context
            self.total = 0

        @on_send("add")
        async def add(self, payload: bytes) -> None:
            self.total += 1
            stamps.stamp(int(payload))

        @on_request("get")
        async def get(self, payload: bytes) -> bytes:
            stamps.stamp(int(payload))
            return str(self.total).encode()

        @on_request("join")
        async def join(self, payload: bytes) -> bytes:
            return str(self.context.join_spot(payload.decode()).defer().value).encode()

        @on_join_complete
        async def joined(self, completion: Any) -> None:
            stamps.joined.add(self.context.actor_id.value)

    class Adapter:
        async def capture(self, actor: Counter) -> bytes:
            return str(actor.total).encode()

        async def restore(self, actor: Counter, payload: bytes) -> None:
            actor.total = int(payload)

    app = App()
    app.enable_actor_dispatch()
    app.register_actor("counter", Counter, relocation=PreserveStateWith(Adapter()))
    app.register_spot(
        "counter-spot", Counter, kind=SpotKind.INSTANCE, relocation=PreserveStateWith(Adapter())
    )
    app.register_spot(
        "counter-hall", Counter, execution=SpotWide(), relocation=PreserveStateWith(Adapter())
    )
    return app


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def gaps_in(stamps: list[tuple[int, float]], start: float, end: float) -> float:
    times = [t for _, t in stamps if start <= t <= end]
    if len(times) < 2:
        return end - start
    return max(b - a for a, b in itertools.pairwise(times))


async def _actor_on(a: Any, c: Any) -> str:
    for i in range(64):
        result = await c.actors.create(f"bench-{i}", "counter").timeout(30)
        assert result.ref is not None
        if result.ref.node_rid == a.identity.node_rid:
            return f"bench-{i}"
        await c.actors.destroy(result.ref)
    raise AssertionError("placement never chose node 0")


async def _spot_on(a: Any, c: Any) -> str:
    for i in range(64):
        spot_id = f"bench-spot-{i}"
        await c.spots.request(spot_id, "get", b"-1").instance("counter-spot").timeout(30)
        ref = await c.spots.find(spot_id)
        if ref is not None and ref.node_rid == a.identity.node_rid:
            # a move waits until the activation's recovery pointer is gone
            for _ in range(1000):
                try:
                    await a.relocate(SpotId(spot_id), to=c.identity.node_rid)
                except Exception:
                    await trio.sleep(0.01)
                    continue
                await c.relocate(SpotId(spot_id), to=a.identity.node_rid)
                return spot_id
    raise AssertionError("placement never chose node 0")


async def _spot_wide_on(a: Any, c: Any, stamps: Stamps) -> tuple[str, str]:
    """A SpotWide "counter-hall" on node 0 with two joined members; (hall, a member)."""
    for i in range(64):
        created = await c.spots.get_or_create(f"bench-hall-{i}", "counter-hall").timeout(30)
        if created.spot.node_rid == a.identity.node_rid:
            hall = created.spot.spot_id.value
            break
        await c.spots.close(created.spot)
    else:
        raise AssertionError("placement never chose node 0")
    members = [f"bench-member-{i}" for i in range(2)]
    for member in members:
        await c.actors.get_or_create(member, "counter").timeout(30)
        await c.actors.request(member, "join", hall.encode()).timeout(30)
    for _ in range(1000):
        refs = [await c.actors.find(m) for m in members]
        if set(members) <= stamps.joined and all(
            r is not None and r.node_rid == a.identity.node_rid for r in refs
        ):
            return hall, members[0]
        await trio.sleep(0.01)
    raise AssertionError("the members did not join")


async def run(moves: int, rate: float, kind: str) -> None:
    stamps = Stamps()
    async with open_cluster(3, app=make_app(stamps)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        spot = kind == "spot"
        hall = ""
        if kind == "spotwide":
            hall, target_id = await _spot_wide_on(a, c, stamps)
        else:
            target_id = await (_spot_on(a, c) if spot else _actor_on(a, c))
        calls = c.spots if spot else c.actors
        stamps.clear()
        sent = 0
        stop = trio.Event()

        async def stream() -> None:
            nonlocal sent
            period = 1.0 / rate
            while not stop.is_set():
                if sent % 10 == 9:
                    await calls.request(target_id, "get", str(sent).encode()).timeout(30)
                else:
                    await calls.send(target_id, "add", str(sent).encode())
                sent += 1
                await trio.sleep(period)

        windows: list[tuple[float, float]] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream)
            await trio.sleep(0.5)
            owner, other = a, b
            for _ in range(moves):
                start = time.perf_counter()
                moving = SpotId(target_id) if spot else target_id
                if hall:
                    moving = SpotId(hall)
                result = await owner.relocate(moving, to=other.identity.node_rid)
                assert result.committed
                assert not hall or len(result.members) == 2
                windows.append((start, time.perf_counter() + 0.05))
                owner, other = other, owner
                await trio.sleep(0.2)
            # baseline windows: the same lengths, no move
            quiet: list[tuple[float, float]] = []
            for start, end in windows:
                t0 = time.perf_counter()
                await trio.sleep(end - start)
                quiet.append((t0, time.perf_counter()))
                await trio.sleep(0.05)
            stop.set()
        stamps.expected = sent
        if len(stamps) >= sent:
            stamps.all_in.set()
        with trio.move_on_after(30):
            await stamps.all_in.wait()
    numbers = [n for n, _ in stamps]
    exact = numbers == list(range(sent))
    ours = [gaps_in(stamps, s, e) * 1000 for s, e in windows]
    base = [gaps_in(stamps, s, e) * 1000 for s, e in quiet]
    print(f"messages sent {sent}, handled {len(stamps)}, exactly once and in order: {exact}")
    what = {
        "spot": "spot (Instance, PreserveStateWith)",
        "spotwide": "spotwide (a SpotWide User Spot with 2 members; the stream to a member)",
    }.get(kind, "actor")
    print(f"moving: {what}")
    print(
        f"relocation pause  p50 {pct(ours, 0.5):7.2f} ms  p99 {pct(ours, 0.99):7.2f} ms"
        f"  max {max(ours):7.2f} ms  ({moves} moves, {rate:.0f} msg/s)"
    )
    print(
        f"baseline (no move) p50 {pct(base, 0.5):7.2f} ms  p99 {pct(base, 0.99):7.2f} ms"
        f"  max {max(base):7.2f} ms  (median window {statistics.median(e - s for s, e in windows) * 1000:.1f} ms)"
    )
    print(f"ratio p99 ours / baseline {pct(ours, 0.99) / max(pct(base, 0.99), 1e-9):7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--moves", type=int, default=50)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--kind", choices=("actor", "spot", "spotwide"), default="actor")
    args = parser.parse_args()
    trio.run(run, args.moves, args.rate, args.kind)


if __name__ == "__main__":
    main()
