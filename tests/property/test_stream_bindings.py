"""Random interleavings of bind / rebind / relay / push / NotifyDisconnected / disconnect
across two STREAM sessions on two nodes (one of them hosting the Actor), against a model
of who holds the binding (issue 13, "Done means"). Real websocket clients, a real
two-node cluster, MockClock: each example is its own ``trio.run``.

What must hold in every interleaving, whatever the model says:

* at most one session has the Actor bound at any time (asked through each open session);
* a push reaches only the session that holds the current binding, exactly once, and a push
  without a binding is session-not-bound;
* each binding (connection id + binding generation) gets its OnDisconnectActor at most
  once (a connection may bind again after a NotifyDisconnected: a new binding);
* a relay succeeds exactly when the session holds the current binding.
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from hypothesis import given, settings, strategies as st

from zlink_trio import (
    App,
    MeshConfig,
    ObjectRole,
    RecreateOnRelocation,
    ServerConfig,
    ZLinkError,
    on_request,
)
from zlink_trio.client import StreamClient, open_stream_client
from zlink_trio.config import StreamConfig
from zlink_trio.ids import ActorRef
from zlink_trio.stream import Authenticated, AutoBind, Packet
from zlink_trio.testing import open_cluster

SECRET = b"p" * 32

OPS = st.lists(
    st.tuples(
        st.sampled_from(["connect", "bind", "relay", "push", "notify", "disconnect"]),
        st.sampled_from([0, 1]),
    ),
    min_size=1,
    max_size=14,
)


def _app(node: int, refs: dict[str, ActorRef], disconnects: list[bytes]) -> App:
    app = App()
    app.enable_actor_dispatch()
    if node == 1:

        class Player:
            def __init__(self, context: Any) -> None:
                self.context = context

            @on_request("echo")
            async def echo(self, payload: bytes) -> bytes:
                return payload

            @on_request("push")
            async def push(self, payload: bytes) -> bytes:
                try:
                    await self.context.session.push("pushed", payload)
                except ZLinkError as exc:
                    return type(exc).__name__.encode()
                return b"ok"

        app.register_actor("player", Player, relocation=RecreateOnRelocation())

    @app.authenticate
    async def auth(request: Any) -> Authenticated:
        return Authenticated(request.credentials.decode(), "player", bind=AutoBind.NONE)

    @app.on_disconnect_actor
    async def on_disconnect(event: Any) -> None:
        # one notification per binding: a connection may bind again after a notify
        disconnects.append(event.connection_id + event.binding_generation.to_bytes(8, "big"))

    @app.on_packet("bind")
    async def bind(packet: Packet, payload: bytes) -> None:
        await packet.session.actors.bind(refs["a"])

    @app.on_packet("relay")
    async def relay(packet: Packet, payload: bytes) -> None:
        bound = packet.session.actors.find("a")
        if bound is None:
            from zlink_trio import SessionNotBound

            raise SessionNotBound("not bound")
        await bound.relay(packet, payload, packet="echo")

    @app.on_packet("notify")
    async def notify(packet: Packet, payload: bytes) -> None:
        bound = packet.session.actors.find("a")
        if bound is not None:
            await bound.notify_disconnected()

    @app.on_packet("bound")
    async def bound_ids(packet: Packet, payload: bytes) -> bytes:
        return b"a" if packet.session.actors.find("a") is not None else b""

    return app


def _config(node: int) -> ServerConfig:
    role = ObjectRole.SERVER if node == 1 else ObjectRole.CLIENT
    return ServerConfig(
        meshes=(MeshConfig(name="test", object_role=role),),
        cluster_secret=SECRET,
        stream=StreamConfig(),
    )


async def _run(ops: list[tuple[str, int]]) -> None:
    refs: dict[str, ActorRef] = {}
    disconnects: list[bytes] = []
    async with (
        open_cluster(2, app=lambda i: _app(i, refs, disconnects), config=_config) as cluster,
        trio.open_nursery() as nursery,
    ):
        await cluster.wait_all_admitted()
        servers = cluster.servers
        created = await servers[0].actors.get_or_create("a", "player").timeout(10)
        refs["a"] = created.actor  # type: ignore[union-attr]
        clients: dict[int, StreamClient] = {}
        stops: dict[int, tuple[trio.Event, trio.Event]] = {}
        current: int | None = None  # the slot whose session holds the binding (model)
        pushes = {0: 0, 1: 0}

        async def settle() -> None:
            await trio.testing.wait_all_tasks_blocked()

        async def session(
            slot: int, *, task_status: trio.TaskStatus[StreamClient] = trio.TASK_STATUS_IGNORED
        ) -> None:
            stop, done = trio.Event(), trio.Event()
            stops[slot] = (stop, done)
            try:
                url = servers[slot].stream.url
                async with open_stream_client(url, f"user{slot}".encode()) as connected:
                    task_status.started(connected)
                    await stop.wait()
            finally:
                done.set()

        async def drop(slot: int) -> None:
            clients.pop(slot)
            stop, done = stops.pop(slot)
            stop.set()
            await done.wait()

        for op, slot in ops:
            client = clients.get(slot)
            if op == "connect" and client is None:
                clients[slot] = await nursery.start(session, slot)
                pushes[slot] = 0
            elif op == "bind" and client is not None:
                await client.request("bind")
                previous = current
                current = slot
                if previous is not None and previous != slot and previous in clients:
                    await clients[previous].wait_closed()  # replaced: it closes
                    await drop(previous)
            elif op == "relay" and client is not None:
                try:
                    ok = await client.request("relay", b"r") == b"r"
                except ZLinkError:
                    ok = False
                assert ok == (current == slot)
            elif op == "push":
                answer = await servers[1].actors.request("a", "push", b"p")
                await settle()
                if current is None:
                    assert answer == b"SessionNotBound"
                else:
                    assert answer == b"ok"
                    pushes[current] += 1
            elif op == "notify" and client is not None:
                await client.request("notify")
                if current == slot:
                    current = None
            elif op == "disconnect" and client is not None:
                await drop(slot)
                if current == slot:
                    current = None
            await settle()
            # invariants
            holders = [s for s, c in clients.items() if await c.request("bound") == b"a"]
            assert len(holders) <= 1
            assert holders == ([] if current is None or current not in clients else [current])
            for s, c in clients.items():
                assert c.received["Push"] == pushes[s]
            assert len(disconnects) == len(set(disconnects))
        for slot in list(clients):
            await drop(slot)
        await settle()
        assert len(disconnects) == len(set(disconnects))


@settings(max_examples=25, deadline=None)
@given(ops=OPS)
def test_random_interleavings_keep_one_binding_and_route_pushes_to_it(
    ops: list[tuple[str, int]],
) -> None:
    """Bind / rebind / relay / push / notify / disconnect in any order over two sessions:
    one current binding at most, pushes only to it (each exactly once), relays succeed
    exactly for it, at most one OnDisconnectActor per connection."""
    trio.run(_run, ops, clock=trio.testing.MockClock(autojump_threshold=0))
