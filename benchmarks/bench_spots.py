"""Spot direct calls and cold activation, each against a raw trio baseline measured in the
same run (interleaved rounds; medians).

Usage: python benchmarks/bench_spots.py [--seconds S] [--rounds R] [--activations N]

* warm local request: request/reply to a Ready Instance Spot on this node
  (``server.spots.request(id, "ask", b"x")``) vs a raw ping-pong over two memory channels;
* warm local request with Instance intent: the same call with ``.instance("cart")`` (the
  cached route's kind and type are checked: TypeMismatch) vs the same raw ping-pong;
* warm cross-node request: to a Ready Spot on another node over loopback TCP (both nodes
  in this process, memory Location Store) with 1 and 16 concurrent callers, vs a raw trio
  TCP length-prefixed ping-pong (same topology, same caller counts);
* cold-activation latency: one request with Instance intent to a Missing id, answered by
  the activated Spot on another node (resolve, placement, envelope, root, reserve,
  factory, Ready commit, first handler, its durable completion, reply) — p50 and p99 over
  N fresh ids — vs the p50 of a raw TCP round trip in the same run; and, for reference,
  the p50 of the explicit path it replaces (``get_or_create`` of a User Spot, then one
  request).

Every line ends with the median ratio ours / baseline: for rates, the fraction of the raw
rate reached; for latencies, how many raw round trips one costs.
"""

from __future__ import annotations

import argparse
import statistics
import struct
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import trio

from zlink_trio import (
    App,
    DisableRelocation,
    RecreateOnRelocation,
    SpotKind,
    SpotWide,
    on_request,
)
from zlink_trio.testing import open_cluster


class Cart:
    def __init__(self, context: Any) -> None:
        self.context = context

    @on_request("ask")
    async def ask(self, payload: bytes) -> bytes:
        return payload


def make_app() -> App:
    app = App()
    app.register_spot("cart", Cart, kind=SpotKind.INSTANCE, relocation=DisableRelocation())
    app.register_spot(
        "room", Cart, kind=SpotKind.USER, execution=SpotWide(), relocation=RecreateOnRelocation()
    )
    return app


async def timed(seconds: float, step: Callable[[], Awaitable[Any]], callers: int = 1) -> float:
    """Run ``step`` in ``callers`` loops for ``seconds``; operations per second."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def loop() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            for _ in range(64):
                await step()
            done += 64

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(callers):
            nursery.start_soon(loop)
    return done / (time.perf_counter() - start)


# ----- raw baselines -----------------------------------------------------------------------
async def raw_channel_pingpong(seconds: float) -> float:
    ping_s, ping_r = trio.open_memory_channel[int](0)
    pong_s, pong_r = trio.open_memory_channel[int](0)

    async def echo() -> None:
        async for item in ping_r:
            await pong_s.send(item)

    async def step() -> None:
        await ping_s.send(1)
        await pong_r.receive()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(echo)
        rate = await timed(seconds, step)
        nursery.cancel_scope.cancel()
    return rate


async def _read_exact(stream: trio.SocketStream, buf: bytearray, n: int) -> bytes:
    while len(buf) < n:
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise EOFError
        buf += chunk
    out = bytes(buf[:n])
    del buf[:n]
    return out


async def _serve_echo(stream: trio.SocketStream) -> None:
    buf = bytearray()
    try:
        while True:
            (n,) = struct.unpack(">I", await _read_exact(stream, buf, 4))
            body = await _read_exact(stream, buf, n)
            await stream.send_all(struct.pack(">I", len(body)) + body)
    except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
        return


async def raw_tcp(
    run: Callable[[list[trio.SocketStream], bytes], Awaitable[Any]], callers: int
) -> Any:
    """``run(streams, frame)`` against a raw length-prefixed echo server on loopback."""
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, _serve_echo, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        streams = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(callers)]
        payload = b"x" * 100
        try:
            return await run(streams, struct.pack(">I", len(payload)) + payload)
        finally:
            for s in streams:
                await s.aclose()
            nursery.cancel_scope.cancel()


async def _round_trip(stream: trio.SocketStream, frame: bytes, buf: bytearray) -> None:
    await stream.send_all(frame)
    (n,) = struct.unpack(">I", await _read_exact(stream, buf, 4))
    await _read_exact(stream, buf, n)


async def raw_tcp_pingpong(seconds: float, callers: int) -> float:
    async def run(streams: list[trio.SocketStream], frame: bytes) -> float:
        done = 0
        deadline = time.perf_counter() + seconds

        async def loop(stream: trio.SocketStream) -> None:
            nonlocal done
            buf = bytearray()
            while time.perf_counter() < deadline:
                await _round_trip(stream, frame, buf)
                done += 1

        start = time.perf_counter()
        async with trio.open_nursery() as inner:
            for s in streams:
                inner.start_soon(loop, s)
        return done / (time.perf_counter() - start)

    rate: float = await raw_tcp(run, callers)
    return rate


async def raw_tcp_latencies(n: int) -> list[float]:
    async def run(streams: list[trio.SocketStream], frame: bytes) -> list[float]:
        buf = bytearray()
        out = []
        for _ in range(n):
            start = time.perf_counter()
            await _round_trip(streams[0], frame, buf)
            out.append(time.perf_counter() - start)
        return out

    latencies: list[float] = await raw_tcp(run, 1)
    return latencies


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ----- ours -----------------------------------------------------------------------------------
Row = tuple[str, float, float, float, str]


async def bench(seconds: float, rounds: int, activations: int) -> list[Row]:
    """(scenario, ours, raw, median ratio, unit) per scenario; ``rounds`` interleaved
    rounds of ours then raw (the machine is shared and noisy)."""
    apps = [make_app(), App()]
    rows: list[Row] = []
    async with open_cluster(2, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        host, caller = (s.spots for s in cluster.servers)
        # A Ready Spot on node 0 (it is the only host of "cart").
        assert await caller.request("warm", "ask", b"x").instance("cart") == b"x"
        payload = b"x" * 100
        scenarios: list[tuple[str, Callable[[], Awaitable[float]], Callable[[], Awaitable[float]]]]
        scenarios = [
            (
                "warm local spot request",
                lambda: timed(seconds, lambda: host.request("warm", "ask", b"x").submit()),
                lambda: raw_channel_pingpong(seconds),
            ),
            (
                "warm local spot request, instance()",
                lambda: timed(
                    seconds, lambda: host.request("warm", "ask", b"x").instance("cart").submit()
                ),
                lambda: raw_channel_pingpong(seconds),
            ),
        ]
        for callers in (1, 16):
            scenarios.append(
                (
                    f"warm cross-node spot request, {callers:2d} caller(s)",
                    partial(
                        timed,
                        seconds,
                        lambda: caller.request("warm", "ask", payload).submit(),
                        callers,
                    ),
                    partial(raw_tcp_pingpong, seconds, callers),
                )
            )
        for name, run_ours, run_raw in scenarios:
            ours: list[float] = []
            raw: list[float] = []
            for _ in range(rounds):
                ours.append(await run_ours())
                raw.append(await run_raw())
            ratios = [o / r for o, r in zip(ours, raw, strict=True)]
            rows.append(
                (
                    name,
                    statistics.median(ours),
                    statistics.median(raw),
                    statistics.median(ratios),
                    "/s",
                )
            )

        cold: list[float] = []
        explicit: list[float] = []
        raw_p50: list[float] = []
        counter = 0
        for _ in range(rounds):
            batch: list[float] = []
            for _ in range(activations):
                counter += 1
                start = time.perf_counter()
                await caller.request(f"cold-{counter}", "ask", b"x").instance("cart").timeout(10)
                batch.append(time.perf_counter() - start)
            cold.extend(batch)
            batch = []
            for _ in range(activations):
                counter += 1
                start = time.perf_counter()
                await caller.get_or_create(f"room-{counter}", "room").timeout(10)
                await caller.request(f"room-{counter}", "ask", b"x").timeout(10)
                batch.append(time.perf_counter() - start)
            explicit.extend(batch)
            raw_p50.append(p(await raw_tcp_latencies(activations), 0.5))
        base = statistics.median(raw_p50)
        rows.append(
            (
                "cold activation + reply, p50",
                p(cold, 0.5) * 1e6,
                base * 1e6,
                p(cold, 0.5) / base,
                "us",
            )
        )
        rows.append(
            (
                "cold activation + reply, p99",
                p(cold, 0.99) * 1e6,
                base * 1e6,
                p(cold, 0.99) / base,
                "us",
            )
        )
        rows.append(
            (
                "  (get_or_create + request, p50)",
                p(explicit, 0.5) * 1e6,
                base * 1e6,
                p(explicit, 0.5) / base,
                "us",
            )
        )
    return rows


async def main(seconds: float, rounds: int, activations: int) -> None:
    for name, ours, base, ratio, unit in await bench(seconds, rounds, activations):
        print(f"{name:42s} {ours:12,.0f}{unit:3s} raw {base:12,.0f}{unit:3s} ratio {ratio:6.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--activations", type=int, default=300)
    args = parser.parse_args()
    trio.run(main, args.seconds, args.rounds, args.activations)
