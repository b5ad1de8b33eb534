"""Transport rules: keepalive, the writer lane's send timeout, strict ingress (protocol
errors and stamped identities), connection per (mesh, peer)."""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing
from mesh_kit import (
    MESH,
    Echo,
    actor_send,
    address,
    echoes,
    fake_peer,
    fast,
    per_node,
    stats,
    wait_state,
)
from trio.testing import MockClock

from zlink_trio.config import MeshConfig
from zlink_trio.errors import DeadlineExceeded
from zlink_trio.ids import MeshName
from zlink_trio.mesh.api import PeerAddress, PeerState
from zlink_trio.mesh.frames import pack_frame
from zlink_trio.mesh.reasons import CloseReason, DropReason
from zlink_trio.testing import FaultPlan, node_of, open_cluster
from zlink_trio.wire import encode


async def test_keepalive_detects_a_silent_peer(autojump_clock: MockClock) -> None:
    plan = FaultPlan()
    with trio.fail_after(60):
        async with open_cluster(2, config=fast(), fault_plan=plan) as c:
            await c.wait_all_admitted()
            a, b = c.servers
            silence = plan.drop(sender=b.identity.node_rid)  # b's frames never arrive
            start = trio.current_time()
            await wait_state(a, address(b), PeerState.CONNECTING)
            assert stats(a).closed(CloseReason.KEEPALIVE_TIMEOUT) == 1
            assert trio.current_time() - start <= c.configs[0].hello_timeout + 1
            assert silence.fired >= 1
            plan.clear()
            await c.wait_all_admitted()


class Stuck(Echo):
    """Never returns from its handler: the reader of that connection stops reading."""

    async def _on_send(self, peer: object, record: object) -> None:
        await trio.sleep_forever()


async def test_full_writer_lane_raises_deadline_exceeded(autojump_clock: MockClock) -> None:
    services = [Echo(), Stuck()]
    config = fast(peer_send_queue=2, peer_send_timeout=2.0, hello_timeout=30.0)
    with trio.fail_after(120):
        async with open_cluster(2, config=config, services=per_node(services)) as c:
            await c.wait_all_admitted()
            a, b = c.servers
            big = b"z" * 512 * 1024
            sent = 0
            with pytest.raises(DeadlineExceeded):
                for _ in range(1000):
                    started = trio.current_time()
                    await node_of(a).send(address(b), actor_send(a, b, big, request=False))
                    sent += 1
            assert trio.current_time() - started == pytest.approx(2.0)
            assert sent >= 3  # the kernel buffers and the lane took some first
            assert node_of(a).peer_state(address(b)) is PeerState.ADMITTED  # no break by itself


async def test_protocol_errors_close_only_that_connection(autojump_clock: MockClock) -> None:
    services = echoes(2)
    async with open_cluster(2, config=fast(), services=per_node(services)) as c:
        await c.wait_all_admitted()
        a, b = c.servers
        for garbage in (b"\xff\x00garbage", b"\x82\x18\x2d\x00"):  # bad CBOR; command 45
            async with fake_peer(c.store, c.secret, a) as (io, _):
                await io.write_all(pack_frame(io.sent + 1, garbage))
                with pytest.raises(Exception):  # noqa: B017 - the connection is closed
                    while True:
                        await io.receive_some()
        assert stats(a).dropped(DropReason.PROTOCOL_ERROR) == 2
        assert stats(a).closed(CloseReason.PROTOCOL_ERROR) == 2
        assert node_of(a).peer_state(address(b)) is PeerState.ADMITTED
        reply = await (await node_of(b).request(address(a), actor_send(b, a))).wait()
        assert reply.correlation >= 1


async def test_sequence_gap_closes_the_connection(autojump_clock: MockClock) -> None:
    services = echoes(1)
    async with open_cluster(1, config=fast(), services=per_node(services)) as c:
        (a,) = c.servers
        async with fake_peer(c.store, c.secret, a) as (io, identity):
            record = actor_send(a, a, b"skipped a number", request=False)
            record = type(record)(
                **{
                    **{f: getattr(record, f) for f in record.__slots__ if f != "__weakref__"},
                    "source_rid": identity.node_rid,
                    "source_generation": identity.node_generation,
                }
            )
            await io.write_all(pack_frame(io.sent + 2, encode(record)))
            with pytest.raises(Exception):  # noqa: B017 - closed by a
                while True:
                    await io.receive_some()
        assert stats(a).dropped(DropReason.SEQUENCE_GAP) == 1
        assert services[0].received == []


async def test_records_stamped_with_another_identity_are_dropped(
    autojump_clock: MockClock,
) -> None:
    services = echoes(3)
    async with open_cluster(3, config=fast(), services=per_node(services)) as c:
        await c.wait_all_admitted()
        a, b, other = c.servers
        forged = actor_send(other, b, b"forged", request=False)  # stamped as `other`
        await node_of(a).send(address(b), forged)
        await node_of(a).send(address(b), actor_send(a, b, b"honest", request=False))
        await services[1].wait_received(1)
        assert services[1].payloads() == [b"honest"]
        assert stats(b).dropped(DropReason.SOURCE_MISMATCH) == 1


async def test_one_connection_per_mesh_and_peer(autojump_clock: MockClock) -> None:
    two_meshes = fast(
        meshes=(MeshConfig(name="red"), MeshConfig(name="blue")), cluster_secret=b"k" * 16
    )
    async with open_cluster(3, config=two_meshes) as c:
        await c.wait_all_admitted()
        await trio.testing.wait_all_tasks_blocked()
        for server in c.servers:
            peers = node_of(server).peers()
            assert len(peers) == 4  # 2 peers x 2 meshes
            assert set(peers.values()) == {PeerState.ADMITTED}
            assert stats(server).peers_admitted == 4
        a, b, _ = c.servers
        red = PeerAddress(MeshName("red"), b.identity.node_rid)
        assert node_of(a).peer_state(red) is PeerState.ADMITTED
        assert node_of(a).peer_state(PeerAddress(MESH, b.identity.node_rid)) is PeerState.GONE


async def test_a_large_frame_right_after_the_hello_is_delivered(
    autojump_clock: MockClock,
) -> None:
    # The dialer is admitted once it wrote its 105; its first frame (above the 512-byte
    # handshake bound) may reach the acceptor in the same read as that 105.
    services = echoes(1)
    with trio.fail_after(30):
        async with open_cluster(1, config=fast(), services=per_node(services)) as c:
            (a,) = c.servers
            async with fake_peer(c.store, c.secret, a) as (io, identity):
                record = attrs.evolve(
                    actor_send(a, a, b"x" * 4000, request=False),
                    source_rid=identity.node_rid,
                    source_generation=identity.node_generation,
                )
                await io.write_all(pack_frame(io.sent + 1, encode(record)))
                await services[0].wait_received(1)
            assert services[0].payloads() == [b"x" * 4000]
            assert stats(a).dropped(DropReason.PROTOCOL_ERROR) == 0


async def test_a_peer_descriptor_with_an_unusable_host_does_not_crash_the_node(
    autojump_clock: MockClock,
) -> None:
    from zlink_trio.config import ObjectRole
    from zlink_trio.ids import NodeGeneration, NodeRid, new_entry_spot_id
    from zlink_trio.store.api import Endpoint, NodeDescriptor

    services = echoes(2)
    with trio.fail_after(60):
        async with open_cluster(2, config=fast(), services=per_node(services)) as c:
            await c.wait_all_admitted()
            a, b = c.servers
            bad = NodeDescriptor(
                mesh_name=MESH,
                node_rid=NodeRid.new(),
                node_generation=NodeGeneration.new(),
                endpoint=Endpoint("a" * 64 + ".invalid", 9),  # idna refuses a 64-char label
                object_role=ObjectRole.CLIENT,
                actor_types=frozenset(),
                spot_types=frozenset(),
                instance_types=frozenset(),
                placement_weight=1.0,
                entry_spot_id=new_entry_spot_id("bad"),
            )
            await c.store.register_node(
                bad.node_rid, bad.node_generation, [bad], capacity=1, lease_ttl=3600
            )
            peer = PeerAddress(MESH, bad.node_rid)
            await node_of(a).refresh_peers()
            assert node_of(a).peer_state(peer) is PeerState.CONNECTING
            await trio.sleep(10)  # several failed dials
            assert node_of(a).peer_state(peer) is PeerState.CONNECTING
            reply = await (await node_of(a).request(address(b), actor_send(a, b))).wait()
            assert reply.correlation >= 1


class Slow(Echo):
    """Takes ``3 * hello_timeout`` per record before answering: the reader of that
    connection reads nothing meanwhile."""

    async def _on_send(self, peer: object, record: object) -> None:
        await trio.sleep(3 * self.node.config.hello_timeout)
        await super()._on_send(peer, record)  # type: ignore[arg-type]


async def test_a_slow_handler_is_not_a_silent_peer(autojump_clock: MockClock) -> None:
    services = [Echo(), Slow()]
    with trio.fail_after(60):
        async with open_cluster(2, config=fast(), services=per_node(services)) as c:
            await c.wait_all_admitted()
            a, b = c.servers
            pending = await node_of(a).request(address(b), actor_send(a, b, b"slow"))
            reply = await pending.wait()  # no LinkLost: b's keepalive kept the link
            assert reply.correlation == pending.correlation
            for server in (a, b):
                assert stats(server).closed(CloseReason.KEEPALIVE_TIMEOUT) == 0
            assert node_of(a).peer_state(address(b)) is PeerState.ADMITTED
