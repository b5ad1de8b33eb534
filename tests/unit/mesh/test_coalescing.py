"""How frames leave a connection: a lone request/reply exchange writes each frame
directly; the answers to a burst of frames (many callers) leave together, one write for
the frames of many senders (connection.py, "Coalescing")."""

from __future__ import annotations

from typing import Any

import trio
from trio.testing import MockClock

from zlink_trio.ids import ActorId
from zlink_trio.mesh.api import PeerAddress, PeerIdentity
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
        plain_direct, plain_batch = conn.write_direct, conn.write_batch

        async def write_direct(record: Any, body: bytes) -> bool:
            written: bool = await plain_direct(record, body)
            self.direct += written
            return written

        async def write_batch(batch: list[Any]) -> None:
            self.batches.append(sum(1 for record, _ in batch if isinstance(record, ActorSend)))
            await plain_batch(batch)

        conn.write_direct, conn.write_batch = write_direct, write_batch


async def _requests(callers: int, rounds: int) -> _Writes:
    async with open_cluster(2, services=[_echo]) as cluster:
        await cluster.wait_all_admitted()
        a, b = (node_of(server) for server in cluster.servers)
        to_b = PeerAddress(DEFAULT_MESH, b.identity.node_rid)
        writes = _Writes(a._links.admitted[to_b])
        record = ActorSend(
            correlation=1,
            source_rid=a.identity.node_rid,
            source_generation=a.identity.node_generation,
            target_rid=b.identity.node_rid,
            target_generation=b.identity.node_generation,
            actor_id=ActorId("echo"),
            message_kind=MessageKind.REQUEST,
            packet_name="ping",
            payload=b"x" * 64,
        )

        async def caller() -> None:
            for _ in range(rounds):
                await (await a.request(to_b, record)).wait()

        async with trio.open_nursery() as nursery:
            for _ in range(callers):
                nursery.start_soon(caller)
        return writes


async def test_a_lone_exchange_writes_each_request_directly(autojump_clock: MockClock) -> None:
    writes = await _requests(callers=1, rounds=50)
    assert writes.direct == 50
    assert sum(writes.batches) == 0


async def test_requests_of_many_callers_leave_together(autojump_clock: MockClock) -> None:
    writes = await _requests(callers=16, rounds=20)
    sent = writes.direct + sum(writes.batches)
    assert sent == 16 * 20
    # After the first round the callers are woken by bursts of replies: their requests
    # are queued and written together (16 frames of 16 senders in a write, or close).
    assert writes.direct <= 16 + 8
    assert len(writes.batches) <= sent // 8
