"""The websocket round trip relay → Actor → push, next to a raw trio-websocket echo.

Usage: python benchmarks/bench_stream.py [--seconds S] [--rounds N] [--same-process] [--count]
    [--profile [--profile-dump FILE]] [--stream-client bare|full]

One server process runs both endpoints in one ``trio.run``:

* ``stream``: a zlink_trio node with a STREAM endpoint. Each client authenticates as its
  own Actor (AutoBind.GET_OR_CREATE binds it before the timing starts); the client sends a
  ``Send`` frame; it is relayed to the bound Actor (its own queue, a turn on the engine)
  and the Actor's handler pushes the payload back (``context.session.push``): a ``Push``
  frame. One round trip = Send out, Push in. Two forms of the relay: ``route_packet``
  (declarative: the framework relays it from the connection's reader while the session
  has nothing queued) and an ``on_packet`` handler (a session turn calls ``relay``).
* ``raw``: a trio-websocket echo server (``serve_websocket``; the handler echoes each
  message): one round trip = one message out, the same message back, with the payload of
  the same size as the stream's frame.

The clients run in a SECOND OS process (``--same-process``: in the server's process), 1
client and 64 clients, each for ``--seconds``, ``--rounds`` times interleaved (stream, raw,
stream, raw, ...); the best round of each is printed, the ratio stream/raw LAST.
Machines are shared and noisy: only the same-run ratio means anything.

The clients of both modes are written alike (``--stream-client bare``, the default): a bare
trio-websocket connection each, one message out, wait for the answer; the stream client
encodes its frames with the STREAM codec (CBOR) and decodes every frame it gets, in the
same task. ``--stream-client full`` uses :func:`zlink_trio.client.open_stream_client`
instead, whose reader task and event queue cost the client process about a third more per
round trip than the raw echo's client: with both processes CPU-bound on a shared machine,
the ratio then also measures that client. Each figure line gives, per mode, the server's
CPU per round trip over the whole round (connects, binds and closes included), over the
steady state only, and the client process's CPU per round trip over its measuring window.

``--count``: instead of rates, the server's scheduler work per round trip, which depends
far less on the machine's load: trio run-loop passes (``before_io_wait`` calls), task
steps (``before_task_step`` calls) and tasks spawned in the server process, over the round
trips it served in a steady-state window of one ``--seconds`` round of each mode, counted
by a trio Instrument (the clients in the second process are not counted; the window's own
polling task adds its few steps); the ratio raw/stream last (>= 1 would mean the stream
path wakes no more tasks than the raw echo).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from typing import Any

import trio
from trio_websocket import open_websocket_url, serve_websocket

from zlink_trio import (
    App,
    MeshConfig,
    RecreateOnRelocation,
    ServerConfig,
    on_send,
    open_server,
)
from zlink_trio.client import open_stream_client
from zlink_trio.config import StreamConfig
from zlink_trio.stream import Authenticated, AutoBind, Packet
from zlink_trio.wire.stream import PROTOCOL_VERSION, Bound, Hello, Push, Send, encode_frame
from zlink_trio.wire.stream_codec import CBOR

PAYLOAD = b"x" * 64
FRAME = encode_frame(Send(packet="move", payload=PAYLOAD))
SERVED = [0]
"""Round trips the server completed (Actor pushes and raw echoes): CPU per round trip."""
STREAM_CLIENT = ["bare"]
"""``--stream-client``: ``bare`` (a trio-websocket connection and the codec, as the raw
echo's client) or ``full`` (:func:`~zlink_trio.client.open_stream_client`)."""
CLIENT_CPU = [0.0]
"""The client process's CPU µs per round trip over its measuring window."""
WATCH: list[tuple[int, trio.Event]] = []
"""``--count``: (a SERVED value, the event set when it is reached)."""


def served() -> None:
    SERVED[0] += 1
    if WATCH and SERVED[0] >= WATCH[0][0]:
        WATCH.pop()[1].set()


def stream_app() -> App:
    app = App()
    app.enable_actor_dispatch()

    class Player:
        def __init__(self, context: Any) -> None:
            self.context = context

        @on_send("move")
        async def move(self, payload: bytes) -> None:
            served()
            await self.context.session.push("moved", payload)

    app.register_actor("player", Player, relocation=RecreateOnRelocation())

    @app.authenticate
    async def authenticate(request: Any) -> Authenticated:
        return Authenticated(request.credentials.decode(), "player", bind=AutoBind.GET_OR_CREATE)

    @app.on_packet("move")
    async def move(packet: Packet, payload: bytes) -> None:
        # The packet handler form: a session turn relays it.
        session = packet.session
        bound = session.actors.find(session.identity.actor_id)
        assert bound is not None
        await bound.relay(packet, payload)

    # The declarative form: the framework relays it without a session turn.
    app.route_packet("step", packet="move")
    return app


async def echo(request: Any) -> None:
    ws = await request.accept()
    try:
        while True:
            message = await ws.get_message()
            served()
            await ws.send_message(message)
    except Exception:
        return


class StepCounter(trio.abc.Instrument):
    """Scheduler passes and task steps of this process (``--count``)."""

    def __init__(self) -> None:
        self.passes = 0
        self.steps = 0
        self.spawned = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1

    def before_io_wait(self, timeout: float) -> None:
        self.passes += 1

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1


# ----- clients -----------------------------------------------------------------------------
async def _stream_clients(url: str, clients: int, seconds: float, packet: str) -> float:
    done = 0
    ready = trio.Event()
    started = 0

    async def one(index: int) -> None:
        nonlocal done, started
        async with open_stream_client(url, f"bench-{index}".encode()) as client:
            await client.receive()  # Bound
            started += 1
            if started == clients:
                ready.set()
            await ready.wait()
            while True:
                await client.send(packet, PAYLOAD)
                while not isinstance(await client.receive(), Push):
                    pass
                done += 1

    async with trio.open_nursery() as nursery:
        for i in range(clients):
            nursery.start_soon(one, i)
        await ready.wait()
        base, start, cpu = done, time.perf_counter(), time.process_time()
        await trio.sleep(seconds)
        rate = (done - base) / (time.perf_counter() - start)
        CLIENT_CPU[0] = (time.process_time() - cpu) * 1e6 / max(1, done - base)
        nursery.cancel_scope.cancel()
    return rate


async def _bare_stream_clients(url: str, clients: int, seconds: float, packet: str) -> float:
    """The stream clients as the raw echo's clients are written: a bare trio-websocket
    connection each, the frames encoded and decoded by the STREAM codec (CBOR) in the
    client's own task (no :class:`~zlink_trio.client.StreamClient` reader task and event
    queue in between), so that the two modes' clients cost about the same."""
    done = 0
    ready = trio.Event()
    started = 0
    frame = CBOR.encode(Send(packet=packet, payload=PAYLOAD))
    decode = CBOR.decode_server

    async def one(index: int) -> None:
        nonlocal done, started
        async with open_websocket_url(url) as ws:
            hello = Hello(version=PROTOCOL_VERSION, credentials=f"bench-{index}".encode())
            await ws.send_message(CBOR.encode(hello))
            while type(decode(await ws.get_message())) is not Bound:
                pass  # Welcome, then the automatic bind's Bound
            started += 1
            if started == clients:
                ready.set()
            await ready.wait()
            while True:
                await ws.send_message(frame)
                while type(decode(await ws.get_message())) is not Push:
                    pass
                done += 1

    async with trio.open_nursery() as nursery:
        for i in range(clients):
            nursery.start_soon(one, i)
        await ready.wait()
        base, start, cpu = done, time.perf_counter(), time.process_time()
        await trio.sleep(seconds)
        rate = (done - base) / (time.perf_counter() - start)
        CLIENT_CPU[0] = (time.process_time() - cpu) * 1e6 / max(1, done - base)
        nursery.cancel_scope.cancel()
    return rate


async def _raw_clients(url: str, clients: int, seconds: float) -> float:
    done = 0
    ready = trio.Event()
    started = 0

    async def one() -> None:
        nonlocal done, started
        async with open_websocket_url(url) as ws:
            started += 1
            if started == clients:
                ready.set()
            await ready.wait()
            while True:
                await ws.send_message(FRAME)
                await ws.get_message()
                done += 1

    async with trio.open_nursery() as nursery:
        for _ in range(clients):
            nursery.start_soon(one)
        await ready.wait()
        base, start, cpu = done, time.perf_counter(), time.process_time()
        await trio.sleep(seconds)
        rate = (done - base) / (time.perf_counter() - start)
        CLIENT_CPU[0] = (time.process_time() - cpu) * 1e6 / max(1, done - base)
        nursery.cancel_scope.cancel()
    return rate


async def client_main(mode: str, url: str, clients: int, seconds: float) -> float:
    if mode == "raw":
        return await _raw_clients(url, clients, seconds)
    packet = "move" if mode == "handler" else "step"
    if STREAM_CLIENT[0] == "full":
        return await _stream_clients(url, clients, seconds, packet)
    return await _bare_stream_clients(url, clients, seconds, packet)


# ----- server + driver ---------------------------------------------------------------------
async def _measure(
    mode: str, url: str, clients: int, seconds: float, same_process: bool
) -> tuple[float, float, float, float]:
    """(round trips/s; server CPU µs per round trip: this process's CPU time over the
    whole measurement, connects included, divided by the round trips served; the same
    over the steady state only, as ``--count`` windows it: from once every client made 5
    round trips on average, for ``seconds / 2``; the client process's CPU µs per round
    trip over its own measuring window (0 with ``--same-process``))."""
    cpu, served = time.process_time(), SERVED[0]
    window: list[tuple[float, int]] = []

    async def steady() -> None:
        reached = trio.Event()
        WATCH.append((SERVED[0] + 5 * clients, reached))
        await reached.wait()
        window.append((time.process_time(), SERVED[0]))
        await trio.sleep(seconds / 2)
        window.append((time.process_time(), SERVED[0]))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(steady)
        rate, client_us = await _run_clients(mode, url, clients, seconds, same_process)
        nursery.cancel_scope.cancel()
    WATCH.clear()
    cpu_us = (time.process_time() - cpu) * 1e6 / max(1, SERVED[0] - served)
    steady_us = float("nan")
    if len(window) == 2:
        (c0, n0), (c1, n1) = window
        steady_us = (c1 - c0) * 1e6 / max(1, n1 - n0)
    return rate, cpu_us, steady_us, client_us


async def _run_clients(
    mode: str, url: str, clients: int, seconds: float, same_process: bool
) -> tuple[float, float]:
    """(round trips/s, the client process's CPU µs per round trip)."""
    if same_process:
        return await client_main(mode, url, clients, seconds), 0.0
    command = [
        sys.executable,
        __file__,
        "--client",
        mode,
        "--url",
        url,
        "--clients",
        str(clients),
        "--seconds",
        str(seconds),
        "--stream-client",
        STREAM_CLIENT[0],
    ]
    result = await trio.run_process(command, capture_stdout=True)
    answer = json.loads(result.stdout.decode().strip().splitlines()[-1])
    return float(answer["rate"]), float(answer["cpu_us"])


PROFILE: list[cProfile.Profile] = []
"""``--profile``: the profiler of the current counting window (Python calls per round trip)."""
PROFILE_DUMP: list[str] = []


async def _count(mode: str, url: str, clients: int, seconds: float) -> tuple[float, float, float]:
    """(scheduler passes, task steps, tasks spawned) of this process per round trip,
    over the steady state only: from once every client made 5 round trips on average
    (the connects, handshakes and binds are over) for ``seconds / 3`` (well before the
    clients stop)."""
    counter = StepCounter()
    window: list[tuple[int, int, int, int]] = []

    def snapshot() -> None:
        window.append((counter.passes, counter.steps, counter.spawned, SERVED[0]))
        if PROFILE:
            if len(window) == 1:
                PROFILE[0].enable()
            else:
                PROFILE[0].disable()

    async def measure() -> None:
        reached = trio.Event()
        WATCH.append((SERVED[0] + 5 * clients, reached))
        await reached.wait()
        snapshot()
        await trio.sleep(seconds / 3)
        snapshot()

    trio.lowlevel.add_instrument(counter)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(measure)
            await _run_clients(mode, url, clients, seconds, False)
            if len(window) < 2:
                raise RuntimeError("the clients ended before the counting window did")
    finally:
        trio.lowlevel.remove_instrument(counter)
    (p0, s0, t0, n0), (p1, s1, t1, n1) = window
    trips = max(1, n1 - n0)
    if PROFILE:
        stats = pstats.Stats(PROFILE[0])
        calls = sum(entry[1] for entry in stats.stats.values())  # type: ignore[attr-defined]
        print(
            f"python calls per round trip, {clients:2d} client(s), {mode}: {calls / trips:7.1f}",
            flush=True,
        )
        if PROFILE_DUMP and PROFILE_DUMP[0]:
            stats.dump_stats(f"{PROFILE_DUMP[0]}-{mode}-{clients}.prof")
        PROFILE[0] = cProfile.Profile()
    return (p1 - p0) / trips, (s1 - s0) / trips, (t1 - t0) / trips


async def count_main(url: str, raw_url: str, seconds: float) -> None:
    for clients in (1, 64):
        counts = {
            mode: await _count(mode, u, clients, seconds)
            for mode, u in (("route", url), ("raw", raw_url), ("handler", url))
        }
        raw_passes, raw_steps, _ = counts["raw"]
        for mode, what in (
            ("route", "route_packet relay->actor->push"),
            ("handler", "on_packet handler relay->actor->push"),
        ):
            passes, steps, spawned = counts[mode]
            print(
                f"server scheduler work per round trip, {clients:2d} client(s): {what} "
                f"{passes:5.2f} passes {steps:5.2f} task steps {spawned:5.3f} tasks spawned"
                " | raw trio-websocket echo "
                f"{raw_passes:5.2f} passes {raw_steps:5.2f} task steps | "
                f"ratio raw/stream steps {raw_steps / steps:.2f}",
                flush=True,
            )


async def server_main(seconds: float, rounds: int, same_process: bool, count: bool) -> None:
    config = ServerConfig(
        meshes=(MeshConfig(name="bench"),),
        cluster_secret=b"b" * 32,
        stream=StreamConfig(outbound_queue=4096),
    )
    async with open_server(config, stream_app()) as server, trio.open_nursery() as nursery:
        raw = await nursery.start(serve_websocket, echo, "127.0.0.1", 0, None)
        stream_url = server.stream.url
        raw_url = f"ws://127.0.0.1:{raw.port}/"
        if count:
            await count_main(stream_url, raw_url, seconds)
            nursery.cancel_scope.cancel()
            return
        where = "same process" if same_process else "client in a 2nd process"
        if STREAM_CLIENT[0] == "full":
            where += ", StreamClient"
        for clients in (1, 64):
            best = {"handler": 0.0, "route": 0.0, "raw": 0.0}
            cpu = {"handler": 1e9, "route": 1e9, "raw": 1e9}
            steady = {"handler": 1e9, "route": 1e9, "raw": 1e9}
            client = {"handler": 1e9, "route": 1e9, "raw": 1e9}
            for _ in range(rounds):
                for mode, url in (
                    ("route", stream_url),
                    ("raw", raw_url),
                    ("handler", stream_url),
                ):
                    rate, cpu_us, steady_us, client_us = await _measure(
                        mode, url, clients, seconds, same_process
                    )
                    best[mode] = max(best[mode], rate)
                    cpu[mode] = min(cpu[mode], cpu_us)
                    if steady_us == steady_us:  # (nan: the window did not end in time)
                        steady[mode] = min(steady[mode], steady_us)
                    client[mode] = min(client[mode], client_us)

            cpus = {
                mode: f"{cpu[mode]:4.0f} us server CPU, {steady[mode]:4.0f} steady, "
                f"{client[mode]:4.0f} client"
                for mode in cpu
            }

            for mode, what in (
                ("route", "route_packet relay->actor->push"),
                ("handler", "on_packet handler relay->actor->push"),
            ):
                print(
                    f"websocket round trip, {clients:2d} client(s), {where}: "
                    f"{what} {best[mode]:8.0f}/s ({cpus[mode]}) | "
                    f"raw trio-websocket echo {best['raw']:8.0f}/s ({cpus['raw']}) | "
                    f"ratio {best[mode] / best['raw']:.2f}",
                    flush=True,
                )
        nursery.cancel_scope.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--same-process", action="store_true")
    parser.add_argument("--count", action="store_true", help="scheduler work per round trip")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="with --count: the server's Python calls per round trip (cProfile)",
    )
    parser.add_argument("--profile-dump", help="with --profile: write FILE-mode-clients.prof")
    parser.add_argument(
        "--stream-client",
        choices=["bare", "full"],
        default="bare",
        help="the stream mode's client: a bare trio-websocket connection with the STREAM "
        "codec, as the raw echo's client (default), or zlink_trio.client's StreamClient",
    )
    parser.add_argument("--client", choices=["handler", "route", "raw"])
    parser.add_argument("--url")
    parser.add_argument("--clients", type=int, default=1)
    args = parser.parse_args()
    STREAM_CLIENT[0] = args.stream_client
    if args.client:
        rate = trio.run(client_main, args.client, args.url, args.clients, args.seconds)
        print(json.dumps({"rate": rate, "cpu_us": CLIENT_CPU[0]}))
        return
    if args.profile:
        PROFILE.append(cProfile.Profile())
        PROFILE_DUMP.append(args.profile_dump or "")
    trio.run(server_main, args.seconds, args.rounds, args.same_process, args.count)


if __name__ == "__main__":
    main()
