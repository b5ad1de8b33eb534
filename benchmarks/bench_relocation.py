"""Relocation pause under load: how long a moving Actor handles nothing while it moves.

Usage: python benchmarks/bench_relocation.py [--moves M] [--rate R]

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

from zlink_trio import App, PreserveStateWith, on_request, on_send
from zlink_trio.testing import open_cluster


class Stamps(list[tuple[int, float]]):
    """Handled messages (number, time); ``all_in`` is set once ``expected`` arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.expected = -1
        self.all_in = trio.Event()

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

    class Adapter:
        async def capture(self, actor: Counter) -> bytes:
            return str(actor.total).encode()

        async def restore(self, actor: Counter, payload: bytes) -> None:
            actor.total = int(payload)

    app = App()
    app.enable_actor_dispatch()
    app.register_actor("counter", Counter, relocation=PreserveStateWith(Adapter()))
    return app


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def gaps_in(stamps: list[tuple[int, float]], start: float, end: float) -> float:
    times = [t for _, t in stamps if start <= t <= end]
    if len(times) < 2:
        return end - start
    return max(b - a for a, b in itertools.pairwise(times))


async def run(moves: int, rate: float) -> None:
    stamps = Stamps()
    async with open_cluster(3, app=make_app(stamps)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor_id = None
        for i in range(64):
            result = await c.actors.create(f"bench-{i}", "counter").timeout(30)
            assert result.ref is not None
            if result.ref.node_rid == a.identity.node_rid:
                actor_id = f"bench-{i}"
                break
            await c.actors.destroy(result.ref)
        assert actor_id is not None
        sent = 0
        stop = trio.Event()

        async def stream() -> None:
            nonlocal sent
            period = 1.0 / rate
            while not stop.is_set():
                if sent % 10 == 9:
                    await c.actors.request(actor_id, "get", str(sent).encode()).timeout(30)
                else:
                    await c.actors.send(actor_id, "add", str(sent).encode())
                sent += 1
                await trio.sleep(period)

        windows: list[tuple[float, float]] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream)
            await trio.sleep(0.5)
            owner, other = a, b
            for _ in range(moves):
                start = time.perf_counter()
                result = await owner.relocate(actor_id, to=other.identity.node_rid)
                assert result.committed
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
    args = parser.parse_args()
    trio.run(run, args.moves, args.rate)


if __name__ == "__main__":
    main()
