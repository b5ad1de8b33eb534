"""The writer lane's bookkeeping, driven through a real connection between two nodes."""

from __future__ import annotations

import socket

import trio
from trio.testing import MockClock

from zlink_trio.config import ServerConfig
from zlink_trio.ids import ActorId
from zlink_trio.mesh.api import PeerAddress, PeerState
from zlink_trio.mesh.reasons import CloseReason, DropReason
from zlink_trio.testing import node_of, open_cluster
from zlink_trio.testing.cluster import DEFAULT_MESH
from zlink_trio.wire import ActorSend, MessageKind


async def test_a_frame_sent_after_a_goodbye_was_queued_never_splits_it(
    autojump_clock: MockClock,
) -> None:
    with trio.fail_after(60):
        async with open_cluster(2, config=ServerConfig(hello_timeout=3.0)) as c:
            await c.wait_all_admitted()
            a, b = (node_of(server) for server in c.servers)
            to_b = PeerAddress(DEFAULT_MESH, b.identity.node_rid)
            to_a = PeerAddress(DEFAULT_MESH, a.identity.node_rid)
            conn = a._links.admitted[to_b]
            conn._io.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            conn.say_goodbye()  # as aclose() does; the writer has not run yet
            # Too large for the socket buffer: a direct write would leave a rest behind
            # the goodbye already in the lane (half a frame, then the goodbye).
            record = ActorSend(
                correlation=0,
                source_rid=a.identity.node_rid,
                source_generation=a.identity.node_generation,
                target_rid=b.identity.node_rid,
                target_generation=b.identity.node_generation,
                actor_id=ActorId("actor-1"),
                message_kind=MessageKind.SEND,
                packet_name="test",
                payload=b"z" * 1_000_000,
            )
            await a.send(to_b, record)
            while b.peer_state(to_a) is PeerState.ADMITTED:
                await b.wait_peer_change(to_a)
            assert b.statistics().dropped(DropReason.PROTOCOL_ERROR) == 0
            assert b.statistics().closed(CloseReason.GOODBYE) == 1
