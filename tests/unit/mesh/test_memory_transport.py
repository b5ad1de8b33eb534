"""The mesh transport over any ``trio.abc.Stream``: two connections driven by their
TransportStates over ``trio.testing.memory_stream_pair`` (no node, no socket, no Store):
the hello, frames both ways, a request and its reply, goodbye, keepalive on a MockClock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from trio.testing import MockClock

from zlink_trio.config import MeshConfig, ObjectRole, ServerConfig
from zlink_trio.ids import ActorId, MeshName, NodeGeneration, NodeRid, new_entry_spot_id
from zlink_trio.mesh.acceptor import serve_inbound
from zlink_trio.mesh.api import NodeIdentity, PeerAddress, PeerIdentity, PeerState
from zlink_trio.mesh.frameio import StreamFrameIO, open_frame_io
from zlink_trio.mesh.handshake import dial_hello
from zlink_trio.mesh.reasons import CloseReason
from zlink_trio.mesh.state import TransportState
from zlink_trio.mesh.stats import NodePhase
from zlink_trio.store.api import Endpoint, NodeDescriptor
from zlink_trio.wire import ActorSend, Command, MessageKind, PeerPing, TerminalReply, decode, encode

MESH = MeshName("m")
CONFIG = ServerConfig(
    meshes=(MeshConfig(name="m"),), cluster_secret=b"memory-transport-secret", hello_timeout=3.0
)


def _state() -> TransportState:
    identity = NodeIdentity(NodeRid.new(), NodeGeneration.new())
    state = TransportState.for_config(identity, frozenset({MESH}), CONFIG)
    state.phase = NodePhase.RUNNING
    return state


def _descriptor(identity: NodeIdentity) -> NodeDescriptor:
    return NodeDescriptor(
        mesh_name=MESH,
        node_rid=identity.node_rid,
        node_generation=identity.node_generation,
        endpoint=Endpoint("memory", 1),
        object_role=ObjectRole.CLIENT,
        actor_types=frozenset(),
        spot_types=frozenset(),
        instance_types=frozenset(),
        placement_weight=1.0,
        entry_spot_id=new_entry_spot_id("memory"),
    )


def _peer(state: TransportState) -> PeerIdentity:
    return PeerIdentity(MESH, state.identity.node_rid, state.identity.node_generation)


@attrs.define
class Pair:
    dialer: TransportState
    acceptor: TransportState
    closed: dict[str, CloseReason] = attrs.field(factory=dict)
    dialer_done: trio.Event = attrs.field(factory=trio.Event)

    def conn(self, state: TransportState) -> Any:
        other = self.acceptor if state is self.dialer else self.dialer
        return state.links.admitted[_peer(other).address]


@asynccontextmanager
async def connected_pair() -> AsyncIterator[Pair]:
    """A dialer's connection and an acceptor's (through ``serve_inbound``), both admitted."""
    pair = Pair(_state(), _state())
    dialer, acceptor = pair.dialer, pair.acceptor
    descriptor = _descriptor(dialer.identity)
    acceptor.live = lambda mesh, rid: descriptor if rid == descriptor.node_rid else None
    left, right = trio.testing.memory_stream_pair()

    async def dial() -> None:
        io = open_frame_io(left)
        assert isinstance(io, StreamFrameIO)
        peer = await dial_hello(
            io, secret=dialer.secret, local=dialer.identity, expected=_peer(acceptor)
        )
        pair.closed["dialer"] = await dialer.connect(dialer, peer, io, True).run()
        pair.dialer_done.set()

    async def accept() -> None:
        await serve_inbound(acceptor, right)
        pair.closed["acceptor"] = acceptor.counters.closes.most_common(1)[0][0]

    async with trio.open_nursery() as nursery:
        nursery.start_soon(dial)
        nursery.start_soon(accept)
        for state, other in ((dialer, acceptor), (acceptor, dialer)):
            while state.links.state(_peer(other).address) is not PeerState.ADMITTED:
                await state.links.wait_change(_peer(other).address)
        yield pair
        nursery.cancel_scope.cancel()


def _send(source: TransportState, target: TransportState, packet: str) -> ActorSend:
    return ActorSend(
        correlation=0,
        source_rid=source.identity.node_rid,
        source_generation=source.identity.node_generation,
        target_rid=target.identity.node_rid,
        target_generation=target.identity.node_generation,
        actor_id=ActorId("memory-actor"),
        message_kind=MessageKind.SEND,
        packet_name=packet,
        payload=b"x" * 100,
    )


async def test_handshake_frames_both_ways_and_goodbye(autojump_clock: MockClock) -> None:
    with trio.fail_after(30):
        async with connected_pair() as pair:
            dialer, acceptor = pair.dialer, pair.acceptor
            got: dict[str, list[str]] = {"dialer": [], "acceptor": []}
            all_in = {"dialer": trio.Event(), "acceptor": trio.Event()}
            for name, state in (("dialer", dialer), ("acceptor", acceptor)):

                async def handle(peer: PeerIdentity, record: Any, name: str = name) -> None:
                    got[name].append(record.packet_name)
                    if len(got[name]) == 50:
                        all_in[name].set()

                state.handlers[int(Command.ACTOR_SEND)] = handle
            to_acceptor, to_dialer = pair.conn(dialer), pair.conn(acceptor)
            assert to_acceptor.dialed and not to_dialer.dialed
            for i in range(50):
                record = _send(dialer, acceptor, f"d{i}")
                await to_acceptor.send(record, encode(record))
                record = _send(acceptor, dialer, f"a{i}")
                await to_dialer.send(record, encode(record), flush=i % 2 == 0)
            for event in all_in.values():
                await event.wait()
            assert got["acceptor"] == [f"d{i}" for i in range(50)]
            assert got["dialer"] == [f"a{i}" for i in range(50)]
            assert dialer.counters.frames_in >= 50 and acceptor.counters.frames_in >= 50
            # a request and its reply, routed by correlation
            pending = dialer.replies.register(to_acceptor.peer, to_acceptor)

            async def answer(peer: PeerIdentity, record: Any) -> None:
                reply = TerminalReply.ok(record.correlation)
                await to_dialer.send(reply, encode(reply))

            acceptor.handlers[int(Command.ACTOR_SEND)] = answer
            request = attrs.evolve(
                _send(dialer, acceptor, "req"),
                correlation=pending.correlation,
                message_kind=MessageKind.REQUEST,
            )
            await to_acceptor.send(request, encode(request))
            reply = await pending.wait()
            assert isinstance(reply, TerminalReply) and reply.correlation == pending.correlation
            # goodbye: both sides end, the acceptor saw the peer's goodbye
            to_acceptor.say_goodbye()
            address = _peer(dialer).address
            while acceptor.links.state(address) is PeerState.ADMITTED:
                await acceptor.links.wait_change(address)
            await pair.dialer_done.wait()
            assert pair.closed["dialer"] is CloseReason.SHUTDOWN
            assert acceptor.counters.closes[CloseReason.GOODBYE] == 1


async def test_keepalive_keeps_a_quiet_link_up(autojump_clock: MockClock) -> None:
    async with connected_pair() as pair:
        start = trio.current_time()
        await trio.sleep(10 * CONFIG.hello_timeout)
        assert trio.current_time() - start >= 30
        for state in (pair.dialer, pair.acceptor):
            assert len(state.links.admitted) == 1
            assert state.counters.frames_in >= 10  # pings and pongs
            assert not state.counters.closes


async def test_keepalive_closes_a_silent_link(autojump_clock: MockClock) -> None:
    """A peer that proved itself and then says nothing at all is cut after
    ``keepalive_timeout`` of silence."""
    acceptor = _state()
    silent = NodeIdentity(NodeRid.new(), NodeGeneration.new())
    descriptor = _descriptor(silent)
    acceptor.live = lambda mesh, rid: descriptor if rid == descriptor.node_rid else None
    left, right = trio.testing.memory_stream_pair()
    expected = _peer(acceptor)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_inbound, acceptor, right)
            io = open_frame_io(left)
            await dial_hello(io, secret=acceptor.secret, local=silent, expected=expected)
            address = PeerAddress(MESH, silent.node_rid)
            while acceptor.links.state(address) is not PeerState.ADMITTED:
                await acceptor.links.wait_change(address)
            admitted_at = trio.current_time()
            while acceptor.links.state(address) is PeerState.ADMITTED:
                await acceptor.links.wait_change(address)
            silence = trio.current_time() - admitted_at
            assert CONFIG.hello_timeout <= silence <= CONFIG.hello_timeout * 2
            assert acceptor.counters.closes[CloseReason.KEEPALIVE_TIMEOUT] == 1
            records = [decode(body) for body in await io.receive_some()]
            assert len(records) >= 2  # it pinged before giving up
            assert all(isinstance(r, PeerPing) for r in records)
            await io.aclose()


@pytest.mark.parametrize("stream_kind", ["memory", "socket"])
async def test_the_frame_layer_fits_the_stream(stream_kind: str) -> None:
    if stream_kind == "memory":
        left, _right = trio.testing.memory_stream_pair()
        assert isinstance(open_frame_io(left), StreamFrameIO)
        return
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    io = open_frame_io(stream)
    assert not isinstance(io, StreamFrameIO)
    await io.aclose()
    for listener in listeners:
        await listener.aclose()
