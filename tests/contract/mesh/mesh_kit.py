"""Builders and services shared by the MeshNode contract tests (which run in virtual
time: each requests pytest-trio's ``autojump_clock``; in-process loopback writes complete
synchronously, so autojump advances time only when every task waits on a timer)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from zlink_trio.config import ServerConfig
from zlink_trio.ids import ActorId
from zlink_trio.mesh.api import PeerAddress, PeerIdentity, PeerState
from zlink_trio.mesh.services import ServiceContext
from zlink_trio.server import Server
from zlink_trio.testing import node_of
from zlink_trio.testing.cluster import DEFAULT_MESH
from zlink_trio.wire import ActorSend, Command, MessageKind, ReplyPayloadTail, TerminalReply

MESH = DEFAULT_MESH


@attrs.define
class Echo:
    """A runtime service answering command 24: records every ActorSend it gets and, for
    requests (when ``auto_reply``), replies with the payload at once."""

    auto_reply: bool = True
    received: list[tuple[PeerIdentity, ActorSend]] = attrs.field(factory=list)
    node: Any = None
    _changed: trio.Event = attrs.field(factory=trio.Event)

    async def __call__(
        self, context: ServiceContext, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        self.node = context.node
        context.node.on(Command.ACTOR_SEND, self._on_send)
        task_status.started()
        await trio.sleep_forever()

    async def _on_send(self, peer: PeerIdentity, record: ActorSend) -> None:
        self.received.append((peer, record))
        changed, self._changed = self._changed, trio.Event()
        changed.set()
        if self.auto_reply and record.correlation:
            await self.reply(peer, record)

    async def reply(self, peer: PeerIdentity, record: ActorSend) -> None:
        tail = ReplyPayloadTail(payload=record.payload)
        await self.node.send(peer.address, TerminalReply.ok(record.correlation, tail))

    async def wait_received(self, count: int) -> list[tuple[PeerIdentity, ActorSend]]:
        while len(self.received) < count:
            await self._changed.wait()
        return self.received

    def payloads(self) -> list[bytes]:
        return [record.payload for _, record in self.received]


def echoes(n: int, *, auto_reply: bool = True) -> list[Echo]:
    return [Echo(auto_reply=auto_reply) for _ in range(n)]


def per_node(services: list[Echo]) -> Callable[[int], list[Echo]]:
    return lambda i: [services[i]]


def address(server: Server) -> PeerAddress:
    return PeerAddress(MESH, server.identity.node_rid)


def actor_send(
    src: Server, dst: Server, payload: bytes = b"hello", *, request: bool = True
) -> ActorSend:
    return ActorSend(
        correlation=1 if request else 0,
        source_rid=src.identity.node_rid,
        source_generation=src.identity.node_generation,
        target_rid=dst.identity.node_rid,
        target_generation=dst.identity.node_generation,
        actor_id=ActorId("actor-1"),
        message_kind=MessageKind.REQUEST if request else MessageKind.SEND,
        packet_name="test",
        payload=payload,
    )


async def wait_state(server: Server, peer: PeerAddress, state: PeerState) -> None:
    node = node_of(server)
    while node.peer_state(peer) is not state:
        await node.wait_peer_change(peer)


def fast(**changes: Any) -> ServerConfig:
    """A cluster config template with short timers (virtual time anyway)."""
    defaults: dict[str, Any] = {
        "owner_lease_ttl": 10.0,
        "owner_lease_renew_interval": 3.0,
        "descriptor_poll_interval": 1.0,
        "hello_timeout": 3.0,
        "peer_send_timeout": 2.0,
        "drain_timeout": 2.0,
    }
    defaults.update(changes)
    return ServerConfig(**defaults)


def stats(server: Server) -> Any:
    return node_of(server).statistics()


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


class FlakyStore:
    """Delegates to ``inner``; renewals of the NodeRids in ``fail_renewals_of`` raise an
    OSError (the Store is unreachable for that node)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.fail_renewals_of: set[Any] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def renew_lease(self, rid: Any, generation: Any, ttl: float) -> Any:
        if rid in self.fail_renewals_of:
            await trio.lowlevel.checkpoint()
            raise OSError("the Location Store does not answer")
        return await self.inner.renew_lease(rid, generation, ttl)


def task_count() -> int:
    """Every task of this run (walking the tree from the root task)."""
    count = 0
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        count += 1
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return count


def task_names() -> list[str]:
    names = []
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        names.append(task.name)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return sorted(names)


@asynccontextmanager
async def fake_peer(store: Any, secret: bytes, target: Server) -> AsyncIterator[Any]:
    """A hand-driven peer: registers a descriptor of its own in ``store`` (endpoint
    unused), proves itself to ``target`` with ``secret`` and yields ``(io, identity)``:
    the admitted connection's FrameIO (write raw frames numbered ``io.sent + 1``) and the
    fake node's identity."""
    from zlink_trio.config import ObjectRole
    from zlink_trio.ids import NodeGeneration, NodeRid, new_entry_spot_id
    from zlink_trio.mesh.api import NodeIdentity
    from zlink_trio.mesh.frameio import FrameIO
    from zlink_trio.mesh.handshake import HandshakeRejected, dial_hello
    from zlink_trio.store.api import Endpoint, NodeDescriptor

    identity = NodeIdentity(NodeRid.new(), NodeGeneration.new())
    descriptor = NodeDescriptor(
        mesh_name=MESH,
        node_rid=identity.node_rid,
        node_generation=identity.node_generation,
        endpoint=Endpoint("127.0.0.1", 9),
        object_role=ObjectRole.CLIENT,
        actor_types=frozenset(),
        spot_types=frozenset(),
        instance_types=frozenset(),
        placement_weight=1.0,
        entry_spot_id=new_entry_spot_id("fake"),
    )
    lease = await store.register_node(
        identity.node_rid, identity.node_generation, [descriptor], capacity=1, lease_ttl=3600
    )
    assert target.endpoint is not None
    expected = PeerIdentity(MESH, target.identity.node_rid, target.identity.node_generation)
    while True:  # the target may be dialing our (unreachable) endpoint: retry like a dialer
        stream = await trio.open_tcp_stream(target.endpoint.host, target.endpoint.port)
        io = FrameIO.from_stream(stream)
        try:
            await dial_hello(io, secret=secret, local=identity, expected=expected)
        except HandshakeRejected:
            io.close()
            await trio.sleep(0.1)
            continue
        break
    try:
        yield io, identity
    finally:
        io.close()
        await store.remove_node(identity.node_rid, identity.node_generation, lease.lease_generation)
