"""Node-to-node request/reply over loopback, next to a raw framed-TCP ping-pong.

Usage: python benchmarks/bench_mesh.py [--seconds S] [--rounds N] [--dsn DSN | --no-split]

Two topologies, each measured for the mesh AND the raw baseline in the same run:

* in-process: both sides in ONE process (one ``trio.run``);
* split: the peer in a second process (mesh: a second node sharing a PostgreSQL Location
  Store in a private schema, dropped afterwards; raw: an echo server process). Needs
  PostgreSQL (``--dsn``, else ``ZLINK_TEST_PG_DSN``, else 127.0.0.1:5432/test; skipped
  when none answers).

What is measured:

* ``mesh``: two MeshNodes (``open_server`` internals with an in-memory Location Store);
  the caller does ``await (await node.request(peer, ActorSend(...))).wait()``; the peer's
  command-24 handler answers with ``node.send(peer, TerminalReply.ok(...))`` inline
  (wire encode/decode, writer lanes, correlation routing, sequence numbers included).
* ``raw``: trio TCP, 4-byte length-prefixed frames of the same sizes, one connection per
  caller, a server task that echoes each frame (no CBOR, no framework).

With 1 caller and with 16 concurrent callers (the mesh multiplexes all 16 on its single
connection per peer; raw uses 16 connections), for ``--seconds`` each, ``--rounds``
times; the best round of each is printed, ratio mesh/raw LAST on each line.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from zlink_trio.config import MeshConfig, PostgresStoreConfig, ServerConfig
from zlink_trio.ids import ActorId, MeshName
from zlink_trio.mesh.api import PeerAddress, PeerIdentity, PeerState
from zlink_trio.mesh.services import ServiceContext
from zlink_trio.server import _open_server
from zlink_trio.store.memory import MemoryLocationStore
from zlink_trio.testing import node_of, server_store
from zlink_trio.wire import ActorSend, Command, MessageKind, TerminalReply, encode

MESH = MeshName("bench")
PAYLOAD = b"x" * 64


async def _drive(callers: int, seconds: float, one: Callable[[], Awaitable[None]]) -> float:
    """Run ``callers`` loops of ``one()`` for ``seconds``; return completed calls/s."""
    done = 0

    async def loop() -> None:
        nonlocal done
        while True:
            await one()
            done += 1

    start = time.perf_counter()
    with trio.move_on_after(seconds):
        async with trio.open_nursery() as nursery:
            for _ in range(callers):
                nursery.start_soon(loop)
    return done / (time.perf_counter() - start)


# ----- mesh --------------------------------------------------------------------------------
async def _echo(context: ServiceContext, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    node = context.node

    async def on_send(peer: PeerIdentity, record: ActorSend) -> None:
        await node.send(peer.address, TerminalReply.ok(record.correlation))

    node.on(Command.ACTOR_SEND, on_send)
    task_status.started()
    await trio.sleep_forever()


def _request_record(a: Any, b_rid: Any, b_generation: Any) -> ActorSend:
    return ActorSend(
        correlation=1,
        source_rid=a.identity.node_rid,
        source_generation=a.identity.node_generation,
        target_rid=b_rid,
        target_generation=b_generation,
        actor_id=ActorId("bench-actor"),
        message_kind=MessageKind.REQUEST,
        packet_name="ping",
        payload=PAYLOAD,
    )


async def _drive_mesh(a: Any, peer: PeerAddress, callers: int, seconds: float) -> float:
    while node_of(a).peer_state(peer) is not PeerState.ADMITTED:
        await node_of(a).wait_peer_change(peer)
    generation = next(
        r.descriptor.node_generation
        for r in await server_store(a).list_nodes(MESH)
        if r.descriptor.node_rid == peer.node_rid
    )
    record = _request_record(a, peer.node_rid, generation)
    node = node_of(a)

    async def one() -> None:
        pending = await node.request(peer, record)
        await pending.wait()

    return await _drive(callers, seconds, one)


async def bench_mesh(callers: int, seconds: float) -> float:
    store = MemoryLocationStore()
    config = ServerConfig(
        meshes=(MeshConfig(name=MESH),), cluster_secret=b"b" * 32, location_store=store
    )
    async with (
        _open_server(config, services=[_echo]) as a,
        _open_server(config, services=[_echo]) as b,
    ):
        return await _drive_mesh(a, PeerAddress(MESH, b.identity.node_rid), callers, seconds)


# ----- raw -----------------------------------------------------------------------------------
_LEN = struct.Struct(">I")


async def _read_frame(stream: trio.SocketStream, buf: bytearray) -> bytes:
    while True:
        if len(buf) >= 4:
            (size,) = _LEN.unpack_from(buf)
            if len(buf) >= 4 + size:
                frame = bytes(buf[4 : 4 + size])
                del buf[: 4 + size]
                return frame
        data = await stream.receive_some(65536)
        if not data:
            raise trio.EndOfChannel
        buf += data


async def _raw_echo(stream: trio.SocketStream) -> None:
    buf = bytearray()
    reply = _LEN.pack(16) + b"r" * 16
    try:
        while True:
            await _read_frame(stream, buf)
            await stream.send_all(reply)
    except (trio.EndOfChannel, trio.BrokenResourceError):
        pass


async def _drive_raw(port: int, callers: int, seconds: float) -> float:
    request_size = len(encode(TerminalReply.ok(1))) + 100  # about an ActorSend body
    frame = _LEN.pack(request_size) + b"q" * request_size
    streams = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(callers)]
    free = list(streams)
    buffers = {id(s): bytearray() for s in streams}

    async def one() -> None:
        stream = free.pop()
        try:
            await stream.send_all(frame)
            await _read_frame(stream, buffers[id(stream)])
        finally:
            free.append(stream)

    rate = await _drive(callers, seconds, one)
    for stream in streams:
        await stream.aclose()
    return rate


async def bench_raw(callers: int, seconds: float) -> float:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, _raw_echo, 0)
        rate = await _drive_raw(listeners[0].socket.getsockname()[1], callers, seconds)
        nursery.cancel_scope.cancel()
    return rate


# ----- split topology: the peer in a second process ------------------------------------------
@asynccontextmanager
async def _peer_process(*args: str) -> AsyncIterator[tuple[trio.Process, str]]:
    """This script in peer mode; yields the process and its first stdout line."""
    process = await trio.lowlevel.open_process(
        [sys.executable, __file__, *args], stdout=subprocess.PIPE, stdin=subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        line = b""
        while not line.endswith(b"\n"):
            chunk = await process.stdout.receive_some(1)
            if not chunk:
                raise RuntimeError(f"peer process {args[0]} exited")
            line += chunk
        yield process, line.decode().strip()
    finally:
        with trio.CancelScope(shield=True):
            process.kill()
            await process.wait()


async def _serve_mesh_peer(dsn: str, schema: str, secret: str) -> None:
    config = ServerConfig(
        meshes=(MeshConfig(name=MESH),),
        cluster_secret=bytes.fromhex(secret),
        location_store=PostgresStoreConfig(dsn=dsn, schema=schema, connections=2),
    )
    async with _open_server(config, services=[_echo]) as server:
        print(server.identity.node_rid.hex, flush=True)
        await trio.sleep_forever()


async def _serve_raw_peer() -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, _raw_echo, 0)
        print(listeners[0].socket.getsockname()[1], flush=True)
        await trio.sleep_forever()


async def bench_split(dsn: str, seconds: float, rounds: int) -> list[tuple[int, float, float]]:
    from zlink_trio.ids import NodeRid
    from zlink_trio.store.postgres import drop_schema

    schema = f"zlink_bench_{uuid.uuid4().hex[:12]}"
    secret = secrets.token_hex(32)
    config = ServerConfig(
        meshes=(MeshConfig(name=MESH),),
        cluster_secret=bytes.fromhex(secret),
        location_store=PostgresStoreConfig(dsn=dsn, schema=schema, connections=2),
    )
    results = []
    try:
        async with (
            _peer_process("--peer-raw") as (_, port),
            _open_server(config, services=[_echo]) as a,
            _peer_process("--peer-mesh", dsn, schema, secret) as (_, rid),
        ):
            peer = PeerAddress(MESH, NodeRid.from_hex(rid))
            for callers in (1, 16):
                best_mesh = best_raw = 0.0
                for _ in range(rounds):
                    best_raw = max(best_raw, await _drive_raw(int(port), callers, seconds))
                    best_mesh = max(best_mesh, await _drive_mesh(a, peer, callers, seconds))
                results.append((callers, best_mesh, best_raw))
    finally:
        with trio.CancelScope(shield=True):
            await drop_schema(dsn, schema)
    return results


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


def _line(topology: str, callers: int, mesh: float, raw: float) -> str:
    return (
        f"request/reply, {callers:2d} caller(s), {topology}: "
        f"mesh {mesh:9,.0f}/s  raw framed TCP {raw:9,.0f}/s  ratio {mesh / raw:.2f}"
    )


async def main(seconds: float, rounds: int, dsn: str | None) -> None:
    for callers in (1, 16):
        best_mesh = best_raw = 0.0
        for _ in range(rounds):
            best_raw = max(best_raw, await bench_raw(callers, seconds))
            best_mesh = max(best_mesh, await bench_mesh(callers, seconds))
        print(_line("in-process loopback", callers, best_mesh, best_raw), flush=True)
    if dsn is None:
        print("split topology skipped: no PostgreSQL answers (give --dsn)")
        return
    for callers, best_mesh, best_raw in await bench_split(dsn, seconds, rounds):
        print(_line("peer in a 2nd process", callers, best_mesh, best_raw), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--peer-mesh"]:
        trio.run(_serve_mesh_peer, *sys.argv[2:5])
    elif sys.argv[1:2] == ["--peer-raw"]:
        trio.run(_serve_raw_peer)
    else:
        parser = argparse.ArgumentParser()
        parser.add_argument("--seconds", type=float, default=3.0)
        parser.add_argument("--rounds", type=int, default=2)
        parser.add_argument("--dsn", help="PostgreSQL for the split topology")
        parser.add_argument("--no-split", action="store_true")
        options = parser.parse_args()
        dsn = None if options.no_split else _pg_dsn(options.dsn)
        trio.run(main, options.seconds, options.rounds, dsn)
