"""How frames leave a connection: a lone request/reply exchange writes each frame
directly; the answers to a burst of frames (many callers) leave together, one write for
the frames of many senders (connection.py, "Coalescing"), or a few writes of
DRAIN_FRAMES as they are produced ("Self-drain")."""

from __future__ import annotations

import socket
import subprocess
import sys
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from zlink_trio.ids import ActorId
from zlink_trio.mesh.api import PeerAddress, PeerIdentity
from zlink_trio.mesh.connection import DRAIN_FRAMES
from zlink_trio.mesh.frameio import FrameIO
from zlink_trio.mesh.reasons import DropReason
from zlink_trio.mesh.replies import ReplyRegistry
from zlink_trio.mesh.services import ServiceContext
from zlink_trio.testing import node_of, open_cluster
from zlink_trio.testing.cluster import DEFAULT_MESH
from zlink_trio.wire import ActorSend, Command, MessageKind, TerminalReply


async def _echo(context: ServiceContext, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    node = context.node

    async def on_send(peer: PeerIdentity, record: ActorSend) -> None:
        await node.send(peer.address, TerminalReply.ok(record.correlation))

    node.on(Command.ACTOR_SEND, on_send)
    task_status.started()
    await trio.sleep_forever()


class _Writes:
    """Counts what one connection writes: frames written directly, and batch writes."""

    def __init__(self, conn: Any) -> None:
        self.direct = 0
        self.batches: list[int] = []
        self.frames = self.writes = 0  # by the node's counters (every frame and write)
        plain_direct, plain_batch = conn.write_direct, conn.write_batch

        async def write_direct(record: Any, body: bytes) -> bool:
            written: bool = await plain_direct(record, body)
            self.direct += written
            return written

        async def write_batch(batch: list[Any]) -> None:
            self.batches.append(sum(1 for record, _ in batch if isinstance(record, ActorSend)))
            await plain_batch(batch)

        conn.write_direct, conn.write_batch = write_direct, write_batch


def _record(a: Any, b: Any, correlation: int) -> ActorSend:
    return ActorSend(
        correlation=correlation,
        source_rid=a.identity.node_rid,
        source_generation=a.identity.node_generation,
        target_rid=b.identity.node_rid,
        target_generation=b.identity.node_generation,
        actor_id=ActorId("echo"),
        message_kind=MessageKind.REQUEST,
        packet_name="ping",
        payload=b"x" * 64,
    )


async def _requests(callers: int, rounds: int, *, plain: bool = True) -> _Writes:
    """``plain=False``: both ends count as instrumented (no self-drain: every frame goes
    through the counting hooks); otherwise the node's counters count writes."""
    async with open_cluster(2, services=[_echo]) as cluster:
        await cluster.wait_all_admitted()
        a, b = (node_of(server) for server in cluster.servers)
        to_b = PeerAddress(DEFAULT_MESH, b.identity.node_rid)
        conn = a._links.admitted[to_b]
        writes = _Writes(conn)
        back = b._links.admitted[PeerAddress(DEFAULT_MESH, a.identity.node_rid)]
        conn.plain = back.plain = plain
        # (Both nodes run in this process, where connections do not self-drain: let
        # these two, as if their peers ran in another process.)
        conn._drains = back._drains = plain
        before = a.statistics()
        record = _record(a, b, 1)

        async def caller() -> None:
            for _ in range(rounds):
                await (await a.request(to_b, record)).wait()

        async with trio.open_nursery() as nursery:
            for _ in range(callers):
                nursery.start_soon(caller)
        after = a.statistics()
        assert conn.in_flight == 0  # every reply came: nothing counted in flight
        writes.frames = after.frames_out - before.frames_out
        writes.writes = after.writes_out - before.writes_out
        return writes


async def test_a_lone_exchange_writes_each_request_directly(autojump_clock: MockClock) -> None:
    writes = await _requests(callers=1, rounds=50)
    assert writes.direct == 50
    assert sum(writes.batches) == 0


async def test_requests_of_many_callers_leave_together(autojump_clock: MockClock) -> None:
    writes = await _requests(callers=16, rounds=20, plain=False)
    sent = writes.direct + sum(writes.batches)
    assert sent == 16 * 20
    # After the first round the callers are woken by bursts of replies: their requests
    # are queued and written together (16 frames of 16 senders in a write, or close).
    assert writes.direct <= 16 + 8
    assert len(writes.batches) <= sent // 8


async def test_a_burst_of_many_callers_leaves_in_groups(autojump_clock: MockClock) -> None:
    """Without instrumentation the callers' requests leave in self-drained groups (half
    of those in flight, or the writer's batches): a few frames per write, every frame
    written once."""
    writes = await _requests(callers=16, rounds=20)
    assert writes.frames == 16 * 20
    # (Both nodes share one scheduler here, so groups are smaller than across processes.)
    assert writes.writes <= writes.frames // 2


async def test_the_sender_of_the_drain_frames_th_queued_frame_writes_the_lane() -> None:
    """Frames queued without a yield (``flush=False``) leave in writes of DRAIN_FRAMES as
    they are queued (no burst read yet, nothing in flight), not after the last; the peer
    gets them all, once each, in order."""
    got: list[int] = []
    count = 2 * DRAIN_FRAMES + 1
    all_in = trio.Event()

    async def collect(
        context: ServiceContext, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        async def on_send(peer: PeerIdentity, record: ActorSend) -> None:
            got.append(record.correlation)
            if len(got) == count:
                all_in.set()

        context.node.on(Command.ACTOR_SEND, on_send)
        task_status.started()
        await trio.sleep_forever()

    async with open_cluster(2, services=[collect]) as cluster:
        await cluster.wait_all_admitted()
        a, b = (node_of(server) for server in cluster.servers)
        to_b = PeerAddress(DEFAULT_MESH, b.identity.node_rid)
        conn = a._links.admitted[to_b]
        assert not conn._drains  # (its peer runs in this process: see the test below)
        conn._drains = True
        assert conn.drain_at() == DRAIN_FRAMES
        before = a.statistics()
        for n in range(1, count + 1):
            await a.send(to_b, _record(a, b, n), flush=False)
        during = a.statistics()
        # No yield yet: two groups went out, drained by the senders; the last is queued.
        assert during.writes_out - before.writes_out == 2
        assert during.frames_out - before.frames_out == 2 * DRAIN_FRAMES
        with trio.fail_after(5):
            await all_in.wait()
        assert got == list(range(1, count + 1))
        assert a.statistics().frames_out - before.frames_out == count


async def test_the_drain_group_is_half_of_what_is_in_flight(autojump_clock: MockClock) -> None:
    """The callers' side drains at half its requests in flight on the connection (so two
    groups are in flight), counted until each is answered or abandoned; the answering
    side at half the last burst it read."""
    arrived = trio.Event()
    unanswered: list[tuple[PeerIdentity, int]] = []

    async def hold(context: ServiceContext, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async def on_send(peer: PeerIdentity, record: ActorSend) -> None:
            unanswered.append((peer, record.correlation))
            if len(unanswered) == 10:
                arrived.set()

        context.node.on(Command.ACTOR_SEND, on_send)
        task_status.started()
        await trio.sleep_forever()

    async with open_cluster(2, services=[hold]) as cluster:
        await cluster.wait_all_admitted()
        a, b = (node_of(server) for server in cluster.servers)
        to_b = PeerAddress(DEFAULT_MESH, b.identity.node_rid)
        conn = a._links.admitted[to_b]
        back = b._links.admitted[PeerAddress(DEFAULT_MESH, a.identity.node_rid)]
        pendings = [await a.request(to_b, _record(a, b, 1)) for _ in range(10)]
        assert conn.in_flight == 10
        assert conn.drain_at() == 5
        pendings.pop().discard()  # abandoned: no longer in flight
        assert (conn.in_flight, conn.drain_at()) == (9, 5)
        with trio.fail_after(5):
            await arrived.wait()  # (b read the ten requests: in one burst or several)
        assert 2 <= back.drain_at() <= 5
        for peer, correlation in unanswered:
            await b.send(peer.address, TerminalReply.ok(correlation))
        with trio.fail_after(5):
            for pending in pendings:
                await pending.wait()
        assert conn.in_flight == 0


async def test_a_connection_whose_peer_runs_in_this_process_does_not_self_drain() -> None:
    """Both nodes in this process: the frames of a burst go to the writer, which sends them
    in one write after the burst (a peer sharing this thread cannot overlap with it)."""
    async with open_cluster(2) as cluster:
        await cluster.wait_all_admitted()
        a, b = (node_of(server) for server in cluster.servers)
        to_b = PeerAddress(DEFAULT_MESH, b.identity.node_rid)
        conn = a._links.admitted[to_b]
        back = b._links.admitted[PeerAddress(DEFAULT_MESH, a.identity.node_rid)]
        assert not conn._drains and not back._drains
        before = a.statistics()
        for n in range(1, 2 * DRAIN_FRAMES + 2):
            await a.send(to_b, _record(a, b, n), flush=False)
        assert a.statistics().writes_out == before.writes_out  # all queued, none drained


def test_a_socket_to_another_process_is_not_in_this_process() -> None:
    """FrameIO tells a socket to a second OS process from one to this process."""
    listener = socket.create_server(("127.0.0.1", 0))
    here = FrameIO(socket.create_connection(listener.getsockname()))
    accepted = FrameIO(listener.accept()[0])
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket, sys; s = socket.create_server(('127.0.0.1', 0)); "
            "print(s.getsockname()[1], flush=True); c, _ = s.accept(); c.recv(1)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        there = FrameIO(socket.create_connection(("127.0.0.1", port)))
        assert here.peer_in_this_process and accepted.peer_in_this_process
        assert not there.peer_in_this_process
        trio.run(_close, there, here)  # (closing notifies trio's I/O manager)
        assert not accepted.peer_in_this_process  # its peer's socket is gone
    finally:
        trio.run(_close, accepted)
        listener.close()
        server.kill()
        server.wait()
        if server.stdout is not None:
            server.stdout.close()


async def _close(*ios: FrameIO) -> None:
    for io in ios:
        io.close()


async def test_a_lone_reply_steps_the_reader_aside_and_the_reader_reads_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a self-draining connection, each reply to the only request in flight steps the
    reader aside until its caller ran (ReplyRegistry.deliver_aside); every reply still
    reaches its caller, and the reader reads on: frames from the peer are handled after."""
    async with open_cluster(2, services=[_echo]) as cluster:
        await cluster.wait_all_admitted()
        a, b = (node_of(server) for server in cluster.servers)
        to_b = PeerAddress(DEFAULT_MESH, b.identity.node_rid)
        to_a = PeerAddress(DEFAULT_MESH, a.identity.node_rid)
        conn = a._links.admitted[to_b]
        conn._drains = True  # (as if b ran in another process)
        asides = 0
        plain_aside = ReplyRegistry.deliver_aside

        def counting(registry: ReplyRegistry, *args: Any) -> Any:
            nonlocal asides
            found = plain_aside(registry, *args)
            asides += found is not None and not isinstance(found, DropReason)
            return found

        monkeypatch.setattr(ReplyRegistry, "deliver_aside", counting)
        with trio.fail_after(10):
            for n in range(1, 21):
                got = await (await a.request(to_b, _record(a, b, n))).wait()
                assert got.correlation  # (the reply, stamped with its request's correlation)
            assert asides == 20
            # Two callers: a reply that leaves the other request in flight does not step
            # aside; the last one may.
            async with trio.open_nursery() as nursery:
                for _ in range(2):
                    nursery.start_soon(_one_request, a, to_b, _record(a, b, 1))
            assert asides <= 21  # (both replies may come in one read: none steps aside)
            # The reader reads on: b's request to a is answered by a's echo.
            back = await (await b.request(to_a, _record(b, a, 1))).wait()
            assert back.terminal_result.name == "OK"
        assert conn.in_flight == 0


async def _one_request(a: Any, to: PeerAddress, record: ActorSend) -> None:
    await (await a.request(to, record)).wait()
