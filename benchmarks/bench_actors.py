"""Actor messaging and scale, each against a raw trio baseline measured in the same run.

Usage: python benchmarks/bench_actors.py [--seconds S] [--actors N] [--rounds R]
                                          [--dsn DSN | --no-split] [--split-only]
                                          [--callers 1,16]

* local send: one-way sends to a local Actor (``await actors.send(...)``: admission only)
  vs a raw trio memory channel ``await send`` loop with a consumer task.
* local request: request/reply to a local Actor vs a raw ping-pong over two memory channels.
* cross-node request: request/reply to an Actor on another node over loopback TCP (both
  nodes in this process) with 1 and 16 concurrent callers, vs a raw trio TCP length-
  prefixed ping-pong (same topology, same caller counts).
* cross-node request, peer in a 2nd process: the same with the owner node in a second OS
  process (the two nodes share a PostgreSQL Location Store in a private schema, dropped
  afterwards: ``--dsn``, else ``ZLINK_TEST_PG_DSN``, else 127.0.0.1:5432/test; skipped
  when none answers), vs the raw ping-pong with its echo server in a second process. Also
  printed: the CPU time per request of each process (``time.process_time``), ours and
  raw. ``--split-only`` runs just these; ``--callers`` sets their caller counts (1 and 16
  by default).
* scale: N Actors created on one node (creations/s over the first half, untraced), then
  idle; framework memory per idle Actor measured with tracemalloc over the second half
  (allocations made inside the Location Store excluded: they are the Store's, reported
  separately), and a census of what the hosting runtime keeps per Actor. Goal: < 2 KB per
  idle Actor (no parked task per Actor).

Every messaging line is the median of R interleaved rounds (ours, then the baseline) and
ends with the median ratio ours / baseline (for memory: bytes per Actor, and the ratio to
a parked trio task + memory channel per Actor).
"""

from __future__ import annotations

import argparse
import gc
import os
import secrets
import socket
import statistics
import struct
import subprocess
import sys
import time
import tracemalloc
import types
import urllib.parse
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import trio

from zlink_trio import App, MeshConfig, PostgresStoreConfig, ServerConfig, ZLinkError, open_server
from zlink_trio.actors.handlers import on_request, on_send
from zlink_trio.actors.policy import DisableRelocation
from zlink_trio.server import runtime_of
from zlink_trio.store.memory import MemoryLocationStore
from zlink_trio.testing import open_cluster, server_engine


class Sink:
    def __init__(self, context: Any) -> None:
        self.context = context
        self.count = 0

    @on_send("tell")
    async def tell(self, payload: bytes) -> None:
        self.count += 1

    @on_request("ask")
    async def ask(self, payload: bytes) -> bytes:
        return payload


def make_app() -> App:
    app = App()
    app.enable_actor_dispatch()
    app.register_actor("sink", Sink, relocation=DisableRelocation())
    return app


async def timed(seconds: float, step: Callable[[], Awaitable[None]], callers: int = 1) -> float:
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
async def raw_channel_send(seconds: float) -> float:
    send, receive = trio.open_memory_channel[int](1024)

    async def consumer() -> None:
        async for _ in receive:
            pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consumer)
        async with send:
            rate = await timed(seconds, lambda: send.send(1))
    return rate


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


async def _raw_echo(stream: trio.SocketStream) -> None:
    """The raw baseline's server side: echo each length-prefixed frame."""
    buf = bytearray()
    try:
        while True:
            (n,) = struct.unpack(">I", await _read_exact(stream, buf, 4))
            body = await _read_exact(stream, buf, n)
            await stream.send_all(struct.pack(">I", len(body)) + body)
    except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
        return


async def _raw_drive(port: int, seconds: float, callers: int) -> float:
    """``callers`` request/reply loops, one connection each, against an echo on ``port``."""
    streams = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(callers)]
    payload = b"x" * 100
    frame = struct.pack(">I", len(payload)) + payload
    done = 0
    deadline = time.perf_counter() + seconds

    async def loop(stream: trio.SocketStream) -> None:
        nonlocal done
        buf = bytearray()
        while time.perf_counter() < deadline:
            await stream.send_all(frame)
            (n,) = struct.unpack(">I", await _read_exact(stream, buf, 4))
            await _read_exact(stream, buf, n)
            done += 1

    start = time.perf_counter()
    async with trio.open_nursery() as inner:
        for s in streams:
            inner.start_soon(loop, s)
    rate = done / (time.perf_counter() - start)
    for s in streams:
        await s.aclose()
    return rate


async def raw_tcp_pingpong(seconds: float, callers: int) -> float:
    """Length-prefixed request/reply over loopback TCP, one connection per caller."""
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, _raw_echo, 0, host="127.0.0.1"))
        rate = await _raw_drive(listeners[0].socket.getsockname()[1], seconds, callers)
        nursery.cancel_scope.cancel()
    return rate


# ----- ours -----------------------------------------------------------------------------------
async def messaging(seconds: float, rounds: int) -> list[tuple[str, float, float, float]]:
    """(scenario, ours, raw, median ratio): ``rounds`` interleaved rounds of ours then
    raw per scenario (the machine is shared and noisy); rates are medians too."""
    app = make_app()
    client = App()
    client.enable_actor_dispatch()
    apps = [app, client]
    rows: list[tuple[str, float, float, float]] = []
    async with open_cluster(2, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        local = cluster.servers[0].actors
        remote = cluster.servers[1].actors
        await local.create("target", "sink")
        payload = b"x" * 100
        scenarios: list[tuple[str, Callable[[], Awaitable[float]], Callable[[], Awaitable[float]]]]
        scenarios = [
            (
                "local send",
                lambda: timed(seconds, lambda: local.send("target", "tell", b"x").submit()),
                lambda: raw_channel_send(seconds),
            ),
            (
                "local request",
                lambda: timed(seconds, lambda: local.request("target", "ask", b"x").submit()),
                lambda: raw_channel_pingpong(seconds),
            ),
        ]
        for callers in (1, 16):
            scenarios.append(
                (
                    f"cross-node request, {callers} caller(s)",
                    partial(
                        timed,
                        seconds,
                        lambda: remote.request("target", "ask", payload).submit(),
                        callers,
                    ),
                    partial(raw_tcp_pingpong, seconds, callers),
                )
            )
        for name, run_ours, run_raw in scenarios:
            ours_rates: list[float] = []
            raw_rates: list[float] = []
            for _ in range(rounds):
                ours_rates.append(await run_ours())
                raw_rates.append(await run_raw())
            ratios = [o / r for o, r in zip(ours_rates, raw_rates, strict=True)]
            rows.append(
                (
                    name,
                    statistics.median(ours_rates),
                    statistics.median(raw_rates),
                    statistics.median(ratios),
                )
            )
    return rows


# ----- the peer in a second process ---------------------------------------------------------
SPLIT_MESH = "bench"


@asynccontextmanager
async def _peer_process(*args: str) -> AsyncIterator[tuple[trio.Process, _PeerLines]]:
    """This script in a peer mode; yields the process and its stdout lines (the first line
    is read before this yields: the peer is ready)."""
    process = await trio.lowlevel.open_process(
        [sys.executable, __file__, *args], stdout=subprocess.PIPE, stdin=subprocess.PIPE
    )
    try:
        assert process.stdout is not None and process.stdin is not None
        lines = _PeerLines(process.stdin, process.stdout)
        lines.first = await lines.read()
        yield process, lines
    finally:
        with trio.CancelScope(shield=True):
            process.kill()
            await process.wait()


class _PeerLines:
    """Line protocol with a peer process: ``cpu`` asks for its process CPU seconds."""

    def __init__(self, stdin: trio.abc.SendStream, stdout: trio.abc.ReceiveStream) -> None:
        self._stdin = stdin
        self._stdout = stdout
        self._buf = b""
        self.first = ""

    async def read(self) -> str:
        while b"\n" not in self._buf:
            chunk = await self._stdout.receive_some(4096)
            if not chunk:
                raise RuntimeError("the peer process exited")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode().strip()

    async def cpu(self) -> float:
        await self._stdin.send_all(b"cpu\n")
        return float(await self.read())


async def _answer_cpu() -> None:
    """Peer side of :class:`_PeerLines`: answer each ``cpu`` line on stdin."""
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    buf = b""
    while True:
        chunk = await stdin.receive_some(4096)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            _, buf = buf.split(b"\n", 1)
            print(time.process_time(), flush=True)


def _split_config(dsn: str, schema: str, secret: str) -> ServerConfig:
    return ServerConfig(
        meshes=(MeshConfig(name=SPLIT_MESH),),
        cluster_secret=bytes.fromhex(secret),
        location_store=PostgresStoreConfig(dsn=dsn, schema=schema, connections=2),
    )


async def _serve_actor_peer(dsn: str, schema: str, secret: str) -> None:
    """Peer mode: a node hosting the Actor ``target`` (created here, before ``ready``)."""
    async with open_server(_split_config(dsn, schema, secret), make_app()) as server:
        await server.actors.create("target", "sink")
        print("ready", flush=True)
        await _answer_cpu()


async def _serve_raw_peer() -> None:
    """Peer mode: the raw baseline's echo server."""
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, _raw_echo, 0, host="127.0.0.1"))
        print(listeners[0].socket.getsockname()[1], flush=True)
        await _answer_cpu()
        nursery.cancel_scope.cancel()


async def _measured(
    peer: _PeerLines, run: Callable[[], Awaitable[float]]
) -> tuple[float, float, float]:
    """(rate, CPU µs per operation here, CPU µs per operation in the peer process)."""
    here, there = time.process_time(), await peer.cpu()
    start = time.perf_counter()
    rate = await run()
    operations = rate * (time.perf_counter() - start)
    here, there = time.process_time() - here, await peer.cpu() - there
    return rate, here * 1e6 / operations, there * 1e6 / operations


async def split_messaging(
    dsn: str, seconds: float, rounds: int, counts: tuple[int, ...] = (1, 16)
) -> list[tuple[str, ...]]:
    """Cross-node requests with the owner in a second process (a PostgreSQL Location
    Store in a private schema, dropped afterwards) vs the raw ping-pong with its echo in a
    second process: rows of (scenario, ours, raw, median ratio, CPU here/there per op)."""
    from zlink_trio.store.postgres import drop_schema

    schema = f"zlink_bench_{uuid.uuid4().hex[:12]}"
    secret = secrets.token_hex(32)
    client = App()
    client.enable_actor_dispatch()
    rows: list[tuple[str, ...]] = []
    try:
        async with (
            _peer_process("--peer-raw") as (_, raw_peer),
            _peer_process("--peer-actor", dsn, schema, secret) as (_, actor_peer),
            open_server(_split_config(dsn, schema, secret), client) as server,
        ):
            port = int(raw_peer.first)
            remote = server.actors
            payload = b"x" * 100
            with trio.fail_after(30):  # until this node sees the peer and its Actor
                while True:
                    try:
                        await remote.request("target", "ask", payload)
                        break
                    except ZLinkError:
                        await trio.sleep(0.05)
            for callers in counts:
                ours: list[tuple[float, float, float]] = []
                raw: list[tuple[float, float, float]] = []
                for _ in range(rounds):
                    ours.append(
                        await _measured(
                            actor_peer,
                            partial(
                                timed,
                                seconds,
                                lambda: remote.request("target", "ask", payload).submit(),
                                callers,
                            ),
                        )
                    )
                    raw.append(
                        await _measured(raw_peer, partial(_raw_drive, port, seconds, callers))
                    )
                ratio = statistics.median(o[0] / r[0] for o, r in zip(ours, raw, strict=True))
                median = statistics.median
                rows.append(
                    (
                        f"cross-node request, {callers} caller(s), peer in a 2nd process",
                        f"{median(o[0] for o in ours):12,.0f}/s  raw {median(r[0] for r in raw):12,.0f}/s"
                        f"  ratio {ratio:5.2f}",
                        f"  CPU per request: caller {median(o[1] for o in ours):5.0f} us, owner "
                        f"{median(o[2] for o in ours):5.0f} us; raw {median(r[1] for r in raw):5.0f}"
                        f" / {median(r[2] for r in raw):5.0f} us",
                    )
                )
    finally:
        with trio.CancelScope(shield=True):
            await drop_schema(dsn, schema)
    return rows


def _pg_dsn(explicit: str | None) -> str | None:
    dsn = (
        explicit
        or os.environ.get("ZLINK_TEST_PG_DSN")
        or "postgresql://postgres@127.0.0.1:5432/test"
    )
    url = urllib.parse.urlparse(dsn)
    try:
        socket.create_connection((url.hostname or "127.0.0.1", url.port or 5432), timeout=2).close()
    except OSError:
        return None
    return dsn


def census(server: Any) -> dict[str, float]:
    """Bytes per hosted Actor of the objects the hosting runtime keeps for it, by part
    (``sys.getsizeof``; objects shared by all Actors of a type counted once, not per
    Actor). Reads runtime internals: a benchmark's look inside, not an API."""
    host = runtime_of(server).actors.host
    n = len(host)
    parts: Counter[str] = Counter()
    policies: set[int] = set()
    for hosted in host:
        parts["activation (HostedActor)"] += sys.getsizeof(hosted)
        lane = hosted.lane
        parts["lane (Lane + LaneCore)"] += sys.getsizeof(lane) + sys.getsizeof(lane._core)
        for attr in ("_handler", "_on_drop"):
            callback = getattr(lane, attr)
            if isinstance(callback, types.MethodType):
                parts["per-lane callback objects"] += sys.getsizeof(callback)
        policies.add(id(lane._core._policy))
        context = hosted.context
        parts["ActorContext"] += sys.getsizeof(context)
        parts["ActorId (+ cached hash)"] += sys.getsizeof(context.actor_id) + sys.getsizeof(
            hash(context.actor_id)
        )
        instance = hosted.instance
        parts["application object"] += sys.getsizeof(instance) + sys.getsizeof(vars(instance))
    if len(policies) > 1:
        parts["lane policy objects"] += len(policies) * 40
    parts["registry slot"] += sys.getsizeof(host._actors)
    return {name: size / n for name, size in parts.items()}


async def scale(n: int) -> tuple[float, float, float, dict[str, float]]:
    """(creations/s, framework bytes per idle Actor, store bytes per Actor, census).

    The first half of the Actors is created untraced (the rate); the second half under
    tracemalloc (the memory: each of those Actors' marginal cost on a node that already
    hosts n/2)."""
    store = MemoryLocationStore()
    config = ServerConfig(meshes=[MeshConfig(name="scale")], cluster_secret=b"s" * 32,
                          location_store=store)  # fmt: skip
    async with open_cluster(1, store=store, app=make_app(), config=config) as cluster:
        actors = cluster.servers[0].actors
        half = n // 2
        start = time.perf_counter()
        for i in range(half):
            await actors.create(f"a{i}", "sink")
        rate = half / (time.perf_counter() - start)
        await server_engine(cluster.servers[0]).wait_idle()
        gc.collect()
        tracemalloc.start(6)
        base_snapshot = tracemalloc.take_snapshot()
        for i in range(half, n):
            await actors.create(f"a{i}", "sink")
        await server_engine(cluster.servers[0]).wait_idle()
        gc.collect()
        snapshot = tracemalloc.take_snapshot()
        tracemalloc.stop()
        stats = snapshot.compare_to(base_snapshot, "traceback")
        # Allocations made inside the Store are the Store's (its rows, indexes, terminal
        # records); whatever else stays allocated per Actor is counted as framework, also
        # the ids and records the framework built and handed to the Store to keep.
        store_bytes = sum(
            s.size_diff for s in stats if any("/store/" in f.filename for f in s.traceback)
        )
        total = sum(s.size_diff for s in stats)
        traced = n - half
        return (
            rate,
            (total - store_bytes) / traced,
            store_bytes / traced,
            census(cluster.servers[0]),
        )


async def parked_task_bytes(n: int = 5000) -> float:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    async with trio.open_nursery() as nursery:
        channels = []
        for _ in range(n):
            s, r = trio.open_memory_channel[int](0)
            channels.append(s)

            async def park(r: Any = r) -> None:
                async for _ in r:
                    pass

            nursery.start_soon(park)
        await trio.testing.wait_all_tasks_blocked()
        used = tracemalloc.get_traced_memory()[0] - before
        nursery.cancel_scope.cancel()
    tracemalloc.stop()
    return used / n


async def main(
    seconds: float,
    n: int,
    rounds: int,
    dsn: str | None,
    split_only: bool,
    callers: tuple[int, ...] = (1, 16),
) -> None:
    if not split_only:
        for name, ours, base, ratio in await messaging(seconds, rounds):
            print(f"{name:38s} {ours:12,.0f}/s  raw {base:12,.0f}/s  ratio {ratio:5.2f}")
    if dsn is None:
        print("cross-node requests with the peer in a 2nd process skipped: no PostgreSQL (--dsn)")
    else:
        for name, rates, cpu in await split_messaging(dsn, seconds, rounds, callers):
            print(f"{name}:\n{'':38s} {rates}\n{cpu}", flush=True)
    if split_only:
        return
    rate, per_actor, store_per_actor, parts = await scale(n)
    parked = await parked_task_bytes()
    print(f"{'create ' + format(n, ',') + ' actors on one node':38s} {rate:12,.0f}/s")
    print(f"{'store bytes per actor (memory store)':38s} {store_per_actor:12,.0f} B")
    print(
        f"{'framework bytes per idle actor':38s} {per_actor:12,.0f} B  "
        f"parked task+channel {parked:8,.0f} B  ratio {per_actor / parked:5.2f}"
    )
    print(f"{'  of which the hosting runtime keeps':38s} {sum(parts.values()):12,.0f} B:")
    for name, size in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"{'    ' + name:38s} {size:12,.0f} B")


if __name__ == "__main__":
    import trio.testing

    if sys.argv[1:2] == ["--peer-actor"]:
        trio.run(_serve_actor_peer, *sys.argv[2:5])
        sys.exit()
    if sys.argv[1:2] == ["--peer-raw"]:
        trio.run(_serve_raw_peer)
        sys.exit()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--actors", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dsn", help="PostgreSQL for the peer-in-a-2nd-process scenarios")
    parser.add_argument("--no-split", action="store_true", help="skip those scenarios")
    parser.add_argument("--split-only", action="store_true", help="run only those scenarios")
    parser.add_argument(
        "--callers",
        default="1,16",
        help="caller counts of those scenarios, comma-separated (default 1,16)",
    )
    args = parser.parse_args()
    dsn = None if args.no_split else _pg_dsn(args.dsn)
    counts = tuple(int(c) for c in args.callers.split(","))
    trio.run(main, args.seconds, args.actors, args.rounds, dsn, args.split_only, counts)
