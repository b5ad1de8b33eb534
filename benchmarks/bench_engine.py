"""The serial-execution engine against raw trio channels, measured in one run.

Usage: python benchmarks/bench_engine.py [--rounds R] [--tells N] [--asks N] [--lanes N]

* tell: messages through one lane (``submit_nowait``, falling back to ``await submit``
  when the queue is full: how a fire-and-forget tell is sent) and, separately, with one
  ``await submit`` per message; baseline: a raw ``trio`` memory channel (buffer 1024) with
  one ``await send`` per message and an ``async for`` consumer.
* ask: ``submit_nowait((request, OneShot()))`` then ``await reply.wait()``, the handler
  setting the reply; baseline: a raw ping-pong over two unbuffered memory channels.
* memory: tracemalloc bytes per idle lane over ``--lanes`` lanes (fresh, and after each
  lane ran one message), against a memory channel pair and a parked task + channel per
  owner (5,000 of each; per-owner cost does not depend on the count).

Rates are medians over the rounds; every round measures lane and baseline back to back.
The ratio (lane / baseline; for memory, lane bytes / baseline bytes) comes LAST on each line.
Targets (docs/notes: performance baselines): tell >= 1.0x raw ``await send``, ask >= 0.8x
raw ping-pong, idle lane < 2 KB.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable

import trio
import trio.testing

from zlink_trio.engine import ActorDeliveryLane, Engine, OneShot, open_engine
from zlink_trio.errors import CapacityExceeded

BASELINE_OWNERS = 5_000
USED_LANES = 20_000


# ----- tell --------------------------------------------------------------------------------
async def raw_send_rate(n: int) -> float:
    send, receive = trio.open_memory_channel[int](1024)
    got = 0

    async def consumer() -> None:
        nonlocal got
        async for _ in receive:
            got += 1

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(consumer)
        async with send:
            for i in range(n):
                await send.send(i)
    elapsed = time.perf_counter() - start
    assert got == n
    return n / elapsed


async def lane_tell_rate(engine: Engine, n: int, *, nowait: bool) -> float:
    got = 0

    async def handler(_: int) -> None:
        nonlocal got
        got += 1

    lane = engine.new_lane(ActorDeliveryLane(), handler)
    start = time.perf_counter()
    if nowait:
        for i in range(n):
            try:
                lane.submit_nowait(i)
            except CapacityExceeded:
                await lane.submit(i)
    else:
        for i in range(n):
            await lane.submit(i)
    await engine.wait_idle()
    elapsed = time.perf_counter() - start
    assert got == n
    return n / elapsed


# ----- ask ---------------------------------------------------------------------------------
async def raw_ping_pong_rate(n: int) -> float:
    ping_send, ping_receive = trio.open_memory_channel[int](0)
    pong_send, pong_receive = trio.open_memory_channel[int](0)

    async def server() -> None:
        async for value in ping_receive:
            await pong_send.send(value)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(server)
        start = time.perf_counter()
        for i in range(n):
            await ping_send.send(i)
            assert await pong_receive.receive() == i
        elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    return n / elapsed


async def lane_ask_rate(engine: Engine, n: int) -> float:
    async def handler(request: tuple[int, OneShot[int]]) -> None:
        value, reply = request
        reply.set(value)

    lane = engine.new_lane(ActorDeliveryLane(), handler)
    start = time.perf_counter()
    for i in range(n):
        reply: OneShot[int] = OneShot()
        lane.submit_nowait((i, reply))
        assert await reply.wait() == i
    return n / (time.perf_counter() - start)


# ----- memory ------------------------------------------------------------------------------
async def _idle_handler(_: object) -> None:
    pass


def _traced(build: Callable[[], object]) -> tuple[int, object]:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = build()
        return tracemalloc.get_traced_memory()[0] - before, kept
    finally:
        tracemalloc.stop()


def lane_bytes(engine: Engine, n: int) -> float:
    """Bytes per fresh idle lane (a policy object per lane, worst case; a shared handler)."""
    size, _ = _traced(
        lambda: [engine.new_lane(ActorDeliveryLane(), _idle_handler) for _ in range(n)]
    )
    return size / n - 8  # minus the benchmark's own list slot


async def used_lane_bytes(engine: Engine, n: int) -> float:
    """Bytes per idle lane after each lane ran one message (queues are released)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        lanes = [engine.new_lane(ActorDeliveryLane(), _idle_handler) for _ in range(n)]
        for lane in lanes:
            lane.submit_nowait(None)
        await engine.wait_idle()
        await trio.testing.wait_all_tasks_blocked()
        size = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return size / n - 8


def channel_pair_bytes(n: int) -> float:
    size, _ = _traced(lambda: [trio.open_memory_channel[object](1024) for _ in range(n)])
    return size / n - 8


async def parked_task_bytes(n: int) -> float:
    async def owner(receive: trio.MemoryReceiveChannel[object]) -> None:
        async for _ in receive:
            pass  # pragma: no cover

    async with trio.open_nursery() as nursery:
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            senders = []
            for _ in range(n):
                send, receive = trio.open_memory_channel[object](1024)
                senders.append(send)
                nursery.start_soon(owner, receive)
            await trio.testing.wait_all_tasks_blocked()
            size = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        nursery.cancel_scope.cancel()
    return size / n - 8


# ----- report ------------------------------------------------------------------------------
def _median(fn_results: list[float]) -> float:
    return statistics.median(fn_results)


async def _rounds(rounds: int, fn: Callable[[], Awaitable[float]]) -> list[float]:
    return [await fn() for _ in range(rounds)]


async def main(args: argparse.Namespace) -> None:
    async with open_engine() as engine:
        raw_tell, lane_nowait, lane_await = [], [], []
        raw_ask, lane_ask = [], []
        for _ in range(args.rounds):
            raw_tell.append(await raw_send_rate(args.tells))
            lane_nowait.append(await lane_tell_rate(engine, args.tells, nowait=True))
            lane_await.append(await lane_tell_rate(engine, args.tells, nowait=False))
            raw_ask.append(await raw_ping_pong_rate(args.asks))
            lane_ask.append(await lane_ask_rate(engine, args.asks))
        fresh = lane_bytes(engine, args.lanes)
        used = await used_lane_bytes(engine, USED_LANES)
    channel = channel_pair_bytes(BASELINE_OWNERS)
    parked = await parked_task_bytes(BASELINE_OWNERS)

    def rate_line(what: str, lane: list[float], base_name: str, base: list[float]) -> str:
        ratios = [a / b for a, b in zip(lane, base, strict=True)]
        return (
            f"{what:<52} {_median(lane):>11,.0f}/s   {base_name:<26} {_median(base):>9,.0f}/s"
            f"   ratio {_median(ratios):.2f}"
        )

    print(
        f"zlink_trio engine vs raw trio, {args.rounds} rounds (medians);"
        " the ratio (lane / same-run baseline) is LAST on each line"
    )
    print(
        rate_line(
            "tell: submit_nowait, await submit when full", lane_nowait, "raw await send", raw_tell
        )
    )
    print(rate_line("tell: await submit per message", lane_await, "raw await send", raw_tell))
    print(
        rate_line("ask: submit_nowait + OneShot reply", lane_ask, "raw channel ping-pong", raw_ask)
    )
    for what, value in (
        (f"memory per idle lane, fresh ({args.lanes:,} lanes)", fresh),
        (f"memory per idle lane, after 1 msg each ({USED_LANES:,})", used),
    ):
        for base_name, base in (
            ("memory channel pair", channel),
            ("parked task + channel", parked),
        ):
            print(
                f"{what:<52} {value:>11,.0f} B    {base_name:<26} {base:>9,.0f} B"
                f"    ratio {value / base:.2f}"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tells", type=int, default=50_000)
    parser.add_argument("--asks", type=int, default=20_000)
    parser.add_argument("--lanes", type=int, default=100_000)
    trio.run(main, parser.parse_args())
