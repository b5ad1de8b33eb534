"""Peers admit each other, exchange frames, and refuse everyone else."""

from __future__ import annotations

import attrs
import pytest
import trio
from mesh_kit import MESH, actor_send, address, echoes, fast, per_node, stats
from trio.testing import MockClock

from zlink_trio.config import MeshConfig
from zlink_trio.ids import MeshName, NodeRid
from zlink_trio.mesh.api import PeerAddress, PeerNotAdmitted, PeerState
from zlink_trio.mesh.reasons import DropReason
from zlink_trio.server import _open_server
from zlink_trio.testing import TapDirection, WireTap, node_of, open_cluster
from zlink_trio.wire import Command, TerminalReply, TerminalResult


@pytest.mark.parametrize("n", [2, 3])
async def test_nodes_admit_each_other_and_request_reply(n: int, autojump_clock: MockClock) -> None:
    services = echoes(n)
    with trio.fail_after(30):
        async with open_cluster(n, config=fast(), services=per_node(services)) as cluster:
            await cluster.wait_all_admitted()
            for src in cluster.servers:
                for dst in cluster.servers:
                    if src is dst:
                        continue
                    payload = f"{src.identity.node_rid}->{dst.identity.node_rid}".encode()
                    pending = await node_of(src).request(
                        address(dst), actor_send(src, dst, payload)
                    )
                    reply = await pending.wait()
                    assert isinstance(reply, TerminalReply)
                    assert reply.terminal_result is TerminalResult.OK
                    assert reply.correlation == pending.correlation
                    assert reply.tail.payload == payload
            for i, service in enumerate(services):
                assert len(service.received) == n - 1
                for peer, record in service.received:
                    assert record.target_rid == cluster.servers[i].identity.node_rid
                    assert peer.node_rid == record.source_rid
            for server in cluster.servers:
                s = stats(server)
                assert s.peers_admitted == n - 1
                assert s.peers_connecting == 0
                # Concurrent dials may refuse one hello as a duplicate; nothing else drops.
                assert set(s.frames_dropped) <= {DropReason.DUPLICATE_CONNECTION}


async def test_one_way_send_reaches_the_handler_once(autojump_clock: MockClock) -> None:
    services = echoes(2)
    tap = WireTap()
    async with open_cluster(2, config=fast(), services=per_node(services), tap=tap) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        tap.clear()
        peer = await node_of(a).send(address(b), actor_send(a, b, b"one-way", request=False))
        assert peer.node_rid == b.identity.node_rid
        assert peer.node_generation == b.identity.node_generation
        await services[1].wait_received(1)
        assert services[1].payloads() == [b"one-way"]
        sent = tap.select(node=a.identity.node_rid, direction=TapDirection.SENT, command=24)
        assert len(sent) == 1
        got = tap.select(node=b.identity.node_rid, direction=TapDirection.RECEIVED, command=24)
        assert [e.record for e in got] == [e.record for e in sent]


async def test_send_to_unknown_peer_raises_peer_not_admitted(autojump_clock: MockClock) -> None:
    async with open_cluster(1, config=fast()) as cluster:
        (a,) = cluster.servers
        stranger = PeerAddress(MESH, NodeRid.new())
        assert node_of(a).peer_state(stranger) is PeerState.GONE
        with pytest.raises(PeerNotAdmitted):
            await node_of(a).send(stranger, actor_send(a, a, request=False))
        with pytest.raises(PeerNotAdmitted):
            await node_of(a).request(stranger, actor_send(a, a))


async def test_bad_secret_is_never_admitted_and_its_frames_never_reach_a_handler(
    autojump_clock: MockClock,
) -> None:
    services = echoes(2)
    tap = WireTap()
    async with open_cluster(2, config=fast(), services=per_node(services), tap=tap) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        rogue_config = attrs.evolve(
            cluster.configs[0], cluster_secret=b"not the cluster secret!!", listen_port=0
        )
        rogue_service = echoes(1)[0]
        async with _open_server(rogue_config, services=[rogue_service], tap=tap) as rogue:
            # The rogue registered a live descriptor in the shared Store: the nodes dial
            # it and it dials them; every hello fails a proof and is counted.
            for server in (a, b, rogue):
                await tap.wait_for(
                    node=server.identity.node_rid,
                    direction=TapDirection.RECEIVED,
                    command=Command.PEER_HELLO,
                )
            await trio.sleep(5)  # retries with backoff, all refused
            for server in (a, b):
                assert stats(server).dropped(DropReason.BAD_PROOF) >= 1
                assert node_of(server).peer_state(address(rogue)) is PeerState.CONNECTING
                assert stats(server).peers_admitted == 1
            assert stats(rogue).dropped(DropReason.BAD_PROOF) >= 1
            assert stats(rogue).peers_admitted == 0
            with pytest.raises(PeerNotAdmitted):
                await node_of(rogue).send(address(a), actor_send(rogue, a, request=False))
            assert tap.count(command=Command.ACTOR_SEND) == 0
            assert tap.count(command=Command.PEER_HELLO_CONFIRM, node=rogue.identity.node_rid) == 0
        assert services[0].received == [] and services[1].received == []
        assert rogue_service.received == []


async def test_unknown_mesh_is_never_admitted(autojump_clock: MockClock) -> None:
    services = echoes(2)
    tap = WireTap()
    async with open_cluster(1, config=fast(), services=per_node(services), tap=tap) as cluster:
        (a,) = cluster.servers
        other = attrs.evolve(
            cluster.configs[0],
            meshes=(MeshConfig(name=MeshName("elsewhere")),),
            listen_port=0,
        )
        async with _open_server(other, services=[services[1]], tap=tap) as stranger:
            # Not in a shared mesh: nobody has an intent, so dial it by hand with its
            # own mesh: a's acceptor refuses the hello (counted) before any ack.
            from zlink_trio.mesh.api import PeerIdentity
            from zlink_trio.mesh.frameio import FrameIO
            from zlink_trio.mesh.handshake import HandshakeRejected, dial_hello

            assert a.endpoint is not None
            stream = await trio.open_tcp_stream(a.endpoint.host, a.endpoint.port)
            io = FrameIO.from_stream(stream)
            expected = PeerIdentity(
                MeshName("elsewhere"), a.identity.node_rid, a.identity.node_generation
            )
            with pytest.raises(HandshakeRejected):
                await dial_hello(
                    io, secret=cluster.secret, local=stranger.identity, expected=expected
                )
            io.close()
            assert stats(a).dropped(DropReason.WRONG_MESH) == 1
            assert node_of(a).peers() == {}
            assert node_of(stranger).peers() == {}
        assert tap.count(command=Command.PEER_HELLO_ACK) == 0
        assert services[0].received == []
