"""Shared pieces of the STREAM contract tests: an instrumented application, clusters with a
STREAM endpoint on every node, and a real websocket client (``zlink_trio.client``).

Everything goes through the public surface (App, open_server via open_cluster, the
STREAM client protocol, ``server.actors``) and ``zlink_trio.testing``. The application
counts what it observes itself (handler runs, OnDisconnectActor calls, replacement
callbacks), the way a user's test would.

Packet handlers of the test app (payloads are ``|``-separated text):

* ``bind`` ``<actor>`` — ``session.actors.bind(rec.refs[actor])``; replies the binding
  generation;
* ``bind_or_get`` ``<actor>`` — the same through ``bind_or_get``;
* ``relay`` ``<actor>|<packet>|<data>`` — ``find(actor).relay(packet, data,
  packet=<packet>)`` (a request's reply comes from the Actor);
* ``notify`` ``<actor>`` — ``find(actor).notify_disconnected()``;
* ``bound`` — the bound ActorIds, comma-separated; ``find`` ``<actor>`` — ``1``/``0``;
  ``ref`` ``<actor>`` — ``<mesh>|<node rid hex>|<generation>`` of the binding's ref;
* ``local`` — answered by the handler itself (``local:<payload>``); ``hold`` waits for
  ``rec.gate`` first; ``relay_and_return`` ``<actor>`` relays to ``echo`` and returns a
  value of its own (ignored).

Actor handlers (type ``player``): ``note`` (send) and ``echo`` (request) record; ``push``
(send) and ``push_req`` (request) push ``pushed`` back; ``slow`` waits for
``rec.gate`` (``slow_push`` too, then pushes); ``try_push`` / ``try_close`` report
``ok`` or the error's class name; ``close`` closes the bound session; ``whoami`` returns the current SpotId.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import trio

from zlink_trio import (
    App,
    MeshConfig,
    ObjectRole,
    PerActor,
    RecreateOnRelocation,
    ServerConfig,
    SessionNotBound,
    SpotCallback,
    ZLinkError,
    on_join_complete,
    on_lifecycle,
    on_request,
    on_send,
)
from zlink_trio.client import StreamClient, open_stream_client
from zlink_trio.config import StreamConfig
from zlink_trio.ids import ActorRef, MeshName
from zlink_trio.server import Server
from zlink_trio.store.api import LocationStore
from zlink_trio.stream import Authenticated, AutoBind, Packet, Session, SessionReplaced
from zlink_trio.testing import Cluster, FaultPlan, WireTap, open_cluster

SECRET: Final = b"s" * 32
MESH: Final = "test"


@attrs.define
class Record:
    """What the application observed, across every node of a cluster."""

    refs: dict[str, ActorRef] = attrs.field(factory=dict)
    """ActorRefs the test put here for the ``bind`` packet."""
    handled: list[tuple[int, str, str, bytes]] = attrs.field(factory=list)
    """(node index, actor id, packet, payload) of every Actor handler run."""
    disconnects: list[tuple[int, str, bytes]] = attrs.field(factory=list)
    """(node index, actor id, connection id) of every OnDisconnectActor call."""
    replaced: list[tuple[int, bytes, str]] = attrs.field(factory=list)
    """(node index, connection id, actor id) of every duplicate-connection callback."""
    replaced_started: list[float] = attrs.field(factory=list)
    """Trio time each duplicate-connection callback started."""
    replaced_done: list[float] = attrs.field(factory=list)
    """Trio time each duplicate-connection callback returned."""
    fail_disconnect: set[str] = attrs.field(factory=set)
    """Actors whose OnDisconnectActor raises."""
    gate: trio.Event | None = None
    """When set, Actor handler ``slow`` (and the replacement callback, if
    ``replace_gate``) waits on it."""
    replace_gate: trio.Event | None = None
    packets: list[tuple[int, str]] = attrs.field(factory=list)
    """(node index, packet name) of every packet handler run."""
    fail_factory: set[int] = attrs.field(factory=set)
    """Nodes whose Actor factory raises (a relocation target failing its Restore)."""
    joins: list[tuple[str, Any]] = attrs.field(factory=list)
    """(actor id, JoinCompletion) of every Join completion, in order."""
    spot_disconnects: list[tuple[int, str, str, bytes]] = attrs.field(factory=list)
    """(node index, spot id, actor id, connection id) of every User Spot
    DISCONNECT_ACTOR callback."""
    _changed: trio.Event = attrs.field(factory=trio.Event)

    def changed(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Wait (event-driven) until ``condition()`` holds."""
        while not condition():
            await self._changed.wait()
        await trio.lowlevel.checkpoint()

    def handled_by(
        self, actor: str, packet: str | None = None
    ) -> list[tuple[int, str, str, bytes]]:
        return [h for h in self.handled if h[1] == actor and (packet is None or h[2] == packet)]


def _actor_class(rec: Record, node: int) -> type:
    class Player:
        def __init__(self, context: Any) -> None:
            if node in rec.fail_factory:
                raise RuntimeError("the factory fails on purpose on this node")
            self.context = context

        def _log(self, packet: str, payload: bytes) -> None:
            rec.handled.append((node, self.context.actor_id.value, packet, payload))
            rec.changed()

        @on_send("note")
        async def note(self, payload: bytes) -> None:
            self._log("note", payload)

        @on_request("echo")
        async def echo(self, payload: bytes) -> bytes:
            self._log("echo", payload)
            return payload

        @on_send("push")
        async def push(self, payload: bytes) -> None:
            self._log("push", payload)
            await self.context.session.push("pushed", payload)

        @on_request("push_req")
        async def push_req(self, payload: bytes) -> bytes:
            self._log("push_req", payload)
            await self.context.session.push("pushed", payload)
            return b"pushed"

        @on_request("slow")
        async def slow(self, payload: bytes) -> bytes:
            self._log("slow", payload)
            if rec.gate is not None:
                await rec.gate.wait()
            return b"slow:" + payload

        @on_request("slow_push")
        async def slow_push(self, payload: bytes) -> bytes:
            """Wait for ``rec.gate``, then push ``pushed`` to the bound session (whatever
            binding it has by then)."""
            self._log("slow_push", payload)
            if rec.gate is not None:
                await rec.gate.wait()
            try:
                await self.context.session.push("pushed", payload)
            except ZLinkError as exc:
                return type(exc).__name__.encode()
            return b"ok"

        @on_request("try_push")
        async def try_push(self, payload: bytes) -> bytes:
            try:
                await self.context.session.push("pushed", payload)
            except ZLinkError as exc:
                return type(exc).__name__.encode()
            return b"ok"

        @on_request("try_close")
        async def try_close(self, payload: bytes) -> bytes:
            try:
                await self.context.session.close()
            except ZLinkError as exc:
                return type(exc).__name__.encode()
            return b"ok"

        @on_request("whoami")
        async def whoami(self, payload: bytes) -> bytes:
            spot = self.context.spot_id
            return b"" if spot is None else spot.value.encode()

        @on_request("join_spot")
        async def join_spot(self, payload: bytes) -> bytes:
            """Join the User Spot ``payload`` (empty: back to this node's Entry Spot)."""
            if payload:
                op = self.context.join_spot(payload.decode()).defer()
            else:
                op = self.context.join_entry_spot().defer()
            return str(op.value).encode()

        @on_join_complete
        async def joined(self, completion: Any) -> None:
            rec.joins.append((self.context.actor_id.value, completion))
            rec.changed()

    return Player


def add_room(app: App, rec: Record, node: int) -> None:
    """A PerActor User Spot type "room" that approves every Join and records its
    DISCONNECT_ACTOR callbacks."""

    class Room:
        def __init__(self, context: Any) -> None:
            self.context = context

        @on_lifecycle(SpotCallback.DISCONNECT_ACTOR)
        async def disconnected(self, event: Any) -> None:
            rec.spot_disconnects.append(
                (node, self.context.spot_id.value, event.actor.actor_id.value, event.connection_id)
            )
            rec.changed()

    app.register_spot("room", Room, execution=PerActor(), relocation=RecreateOnRelocation())


def stream_app(
    rec: Record,
    node: int,
    *,
    host: bool = True,
    auth: bool = True,
    autobind: AutoBind = AutoBind.NONE,
    on_replaced: bool = True,
    rooms: bool = False,
) -> App:
    """The test application of node ``node`` (see the module docstring; ``rooms``: the
    User Spot type "room" too)."""
    app = App()
    app.enable_actor_dispatch()
    if host:
        app.register_actor("player", _actor_class(rec, node), relocation=RecreateOnRelocation())
    if rooms and host:
        add_room(app, rec, node)

    if auth:

        @app.authenticate
        async def authenticate(request: Any) -> Authenticated | None:
            text = request.credentials.decode()
            if text == "refuse":
                return None
            return Authenticated(text, "player", bind=autobind)

    @app.on_disconnect_actor
    async def on_disconnect(event: Any) -> None:
        rec.disconnects.append((node, event.actor.actor_id.value, event.connection_id))
        rec.changed()
        if event.actor.actor_id.value in rec.fail_disconnect:
            raise RuntimeError("OnDisconnectActor failed on purpose")

    if on_replaced:

        @app.on_session_replaced
        async def replaced(session: Session, event: SessionReplaced) -> None:
            rec.replaced.append((node, session.connection_id, event.actor.actor_id.value))
            rec.replaced_started.append(trio.current_time())
            rec.changed()
            await session.send("duplicate", event.actor.actor_id.value.encode())
            if rec.replace_gate is not None:
                await rec.replace_gate.wait()
            rec.replaced_done.append(trio.current_time())
            rec.changed()

    @app.on_packet("bind")
    async def bind(packet: Packet, payload: bytes) -> bytes:
        rec.packets.append((node, "bind"))
        bound = await packet.session.actors.bind(rec.refs[payload.decode()])
        return str(bound.binding_generation).encode()

    @app.on_packet("bind_or_get")
    async def bind_or_get(packet: Packet, payload: bytes) -> bytes:
        bound = await packet.session.actors.bind_or_get(rec.refs[payload.decode()])
        return str(bound.binding_generation).encode()

    @app.on_packet("relay")
    async def relay(packet: Packet, payload: bytes) -> None:
        rec.packets.append((node, "relay"))
        actor, name, data = payload.decode().split("|", 2)
        bound = packet.session.actors.find(actor)
        if bound is None:
            raise SessionNotBound(f"{actor} is not bound to this session")
        await bound.relay(packet, data.encode(), packet=name)

    @app.on_packet("notify")
    async def notify(packet: Packet, payload: bytes) -> bytes:
        bound = packet.session.actors.find(payload.decode())
        if bound is not None:
            await bound.notify_disconnected()
        return b"ok"

    @app.on_packet("bound")
    async def bound_ids(packet: Packet, payload: bytes) -> bytes:
        return ",".join(sorted(b.actor_id.value for b in packet.session.actors.bound)).encode()

    @app.on_packet("find")
    async def find(packet: Packet, payload: bytes) -> bytes:
        return b"1" if packet.session.actors.find(payload.decode()) is not None else b"0"

    @app.on_packet("ref")
    async def ref(packet: Packet, payload: bytes) -> bytes:
        bound = packet.session.actors.find(payload.decode())
        if bound is None:
            return b""
        r = bound.ref
        return f"{r.mesh_name.value}|{r.node_rid.hex}|{r.object_generation.value}".encode()

    @app.on_packet("local")
    async def local(packet: Packet, payload: bytes) -> bytes:
        rec.packets.append((node, "local"))
        return b"local:" + payload

    @app.on_packet("hold")
    async def hold(packet: Packet, payload: bytes) -> bytes:
        rec.packets.append((node, "hold"))
        rec.changed()
        if rec.gate is not None:
            await rec.gate.wait()
        return b"held"

    @app.on_packet("relay_and_return")
    async def relay_and_return(packet: Packet, payload: bytes) -> bytes:
        bound = packet.session.actors.find(payload.decode())
        assert bound is not None
        await bound.relay(packet, b"from-actor", packet="echo")
        return b"from-handler"  # ignored: the relay owns the request's answer

    return app


def stream_config(node: int, *, host: bool = True, **stream: Any) -> ServerConfig:
    role = ObjectRole.SERVER if host else ObjectRole.CLIENT
    return ServerConfig(
        meshes=(MeshConfig(name=MESH, object_role=role),),
        cluster_secret=SECRET,
        stream=StreamConfig(**stream),
    )


@asynccontextmanager
async def stream_cluster(
    n: int,
    rec: Record,
    *,
    store: LocationStore | None = None,
    hosts: Callable[[int], bool] = lambda i: True,
    tap: WireTap | None = None,
    fault_plan: FaultPlan | None = None,
    config: Callable[[int], ServerConfig] | None = None,
    app: Callable[[int], App] | None = None,
    **options: Any,
) -> AsyncIterator[Cluster]:
    """``n`` nodes, each with a STREAM endpoint and the test app (``hosts(i)``: whether
    node ``i`` hosts the Actor type)."""
    async with open_cluster(
        n,
        store=store,
        app=app or (lambda i: stream_app(rec, i, host=hosts(i), **options)),
        config=config or (lambda i: stream_config(i, host=hosts(i))),
        tap=tap,
        fault_plan=fault_plan,
    ) as cluster:
        await cluster.wait_all_admitted()
        yield cluster


def connect(server: Server, credentials: str = "alice") -> Any:
    """A real websocket client session to ``server``'s STREAM endpoint."""
    return open_stream_client(server.stream.url, credentials.encode())


async def create(server: Server, rec: Record, actor_id: str) -> ActorRef:
    """Create ``actor_id`` (type player) from ``server`` and keep its ref for ``bind``."""
    result = await server.actors.get_or_create(actor_id, "player").timeout(10)
    ref: ActorRef = result.actor  # type: ignore[union-attr]
    rec.refs[actor_id] = ref
    return ref


async def bind(client: StreamClient, actor_id: str) -> int:
    """Bind ``actor_id`` to the client's session; the binding generation."""
    reply = await client.request("bind", actor_id.encode())
    assert reply is not None
    return int(reply)


async def relay(
    client: StreamClient, actor_id: str, packet: str, data: bytes = b""
) -> bytes | None:
    return await client.request("relay", f"{actor_id}|{packet}|".encode() + data)


async def blackout(cluster: Cluster, plan: FaultPlan, source: int, target: int) -> None:
    """Partition node ``source`` from node ``target`` and return once ``source`` sees the
    peer as no longer admitted (its intent stays: CONNECTING, not GONE)."""
    from zlink_trio.mesh.api import PeerAddress, PeerState
    from zlink_trio.testing import node_of
    from zlink_trio.wire.peer import PeerPing

    node = node_of(cluster.servers[source])
    host = cluster.servers[target].identity.node_rid
    address = PeerAddress(MeshName(MESH), host)
    plan.partition(cluster.servers[source].identity.node_rid, host)
    if node.peer_state(address) is PeerState.ADMITTED:
        await node.send(address, PeerPing(token=1))  # its link is cut at this frame
    while node.peer_state(address) is PeerState.ADMITTED:
        await node.wait_peer_change(address)


@asynccontextmanager
async def raw_websocket(url: str, *, message_queue_size: int = 1) -> AsyncIterator[Any]:
    """A bare trio-websocket client connection (no STREAM client on top), for bad input.
    It owns its TCP stream and closes it (trio-websocket's own client leaves the socket
    open after a close the server started)."""
    import urllib.parse

    from trio_websocket import wrap_client_stream

    parsed = urllib.parse.urlsplit(url)
    assert parsed.hostname is not None and parsed.port is not None
    async with trio.open_nursery() as nursery:
        stream = await trio.open_tcp_stream(parsed.hostname, parsed.port)
        try:
            ws = await wrap_client_stream(
                nursery, stream, parsed.hostname, "/", message_queue_size=message_queue_size
            )
            yield ws
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()
            nursery.cancel_scope.cancel()
