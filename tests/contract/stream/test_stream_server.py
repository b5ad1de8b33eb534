"""The STREAM server itself (issue 13, spec 02 §5, §9, §10, §12): authentication,
typed packet handlers, request correlation once, keep-alive before application work,
shutdown, owner loss and destroy of a bound Actor, the endpoint."""

from __future__ import annotations

import attrs
import pytest
import trio
from stream_kit import (
    Record,
    bind,
    connect,
    create,
    relay,
    stream_app,
    stream_cluster,
    stream_config,
)

from zlink_trio import (
    App,
    InvalidOperation,
    MemoryLocationStore,
    NotFound,
    RecreateOnRelocation,
    ShuttingDown,
    open_server,
)
from zlink_trio.client import open_stream_client
from zlink_trio.stream import Authenticated, AutoBind, Packet
from zlink_trio.testing import CountingStore, open_cluster
from zlink_trio.wire.stream import Bound, CloseReason, Unbound, UnboundReason


async def test_no_authentication_callback_refuses_every_session(autojump_clock: object) -> None:
    """Without an authentication callback every session is refused: an InvalidOperation
    error frame, a Closing frame and close code 4003; no packet handler runs."""
    rec = Record()
    async with open_server(stream_config(0), stream_app(rec, 0, auth=False)) as server:
        assert server.stream.port > 0
        with pytest.raises(InvalidOperation, match="no authentication callback"):
            async with open_stream_client(server.stream.url, b"alice"):
                pytest.fail("the session must be refused")
        assert rec.packets == []


async def test_authentication_decides_the_identity_and_may_refuse(autojump_clock: object) -> None:
    """The authentication callback decides the session's Actor identity and type; with
    AutoBind.GET_OR_CREATE the framework gets or creates that Actor and binds it before
    the first packet; None refuses the session."""
    rec = Record()
    app = stream_app(rec, 0, autobind=AutoBind.GET_OR_CREATE)
    async with open_server(stream_config(0), app) as server:
        async with connect(server, "carol") as client:
            bound = await client.receive()
            assert isinstance(bound, Bound) and bound.actor_id.value == "carol"
            assert await client.request("bound") == b"carol"
            ref = await server.actors.find("carol")
            assert ref is not None and ref.object_generation == bound.object_generation
        with pytest.raises(InvalidOperation, match="refused"):
            async with connect(server, "refuse"):
                pytest.fail("the session must be refused")


@attrs.frozen
class Move:
    x: int
    y: int


@attrs.frozen
class Moved:
    distance: int


async def test_typed_packet_handlers(autojump_clock: object) -> None:
    """Packet handlers take and return registered payload classes as Actor handlers do:
    the client's bytes are decoded as the handler's class (bytes that are not one end
    InvalidOperation and never reach it), the reply is encoded."""
    app = App()
    app.register_codec(Move)
    app.register_codec(Moved)
    seen: list[Move] = []

    @app.authenticate
    async def auth(request: object) -> Authenticated:
        return Authenticated("t", "nobody", bind=AutoBind.NONE)

    @app.on_packet("move")
    async def move(packet: Packet, payload: Move) -> Moved:
        seen.append(payload)
        return Moved(abs(payload.x) + abs(payload.y))

    from zlink_trio.wire.payloads import codec_for_class

    move_codec, moved_codec = codec_for_class(Move), codec_for_class(Moved)
    async with open_server(stream_config(0), app) as server, connect(server, "t") as client:
        reply = await client.request("move", move_codec.encode(Move(3, -4)))
        assert reply is not None and moved_codec.decode(reply) == Moved(7)
        with pytest.raises(InvalidOperation):
            await client.request("move", b"not a Move")
        assert seen == [Move(3, -4)]


async def test_startup_refuses_a_badly_typed_packet_handler(autojump_clock: object) -> None:
    """A packet handler annotated with an unregistered payload class, or a plain def, is a
    startup ConfigurationError."""
    from zlink_trio import ConfigurationError

    app = App()

    @app.on_packet("move")
    async def move(packet: Packet, payload: Move) -> None: ...

    with pytest.raises(ConfigurationError, match="move"):
        async with open_server(stream_config(0), app):
            pytest.fail("startup must fail")
    app = App()
    app.on_packet("plain")(lambda packet, payload: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(ConfigurationError, match="async def"):
        async with open_server(stream_config(0), app):
            pytest.fail("startup must fail")


async def test_a_relayed_request_is_answered_once_by_the_actor(
    clock: object, store: CountingStore
) -> None:
    """A request whose handler relays it is answered by the Actor's reply, exactly once:
    the handler's own return value is ignored (the relay owns the correlation)."""
    rec = Record()
    async with stream_cluster(2, rec, store=store, hosts=lambda i: i == 1) as cluster:
        session_node = cluster.servers[0]
        await create(session_node, rec, "a")
        async with connect(session_node, "user") as client:
            await bind(client, "a")
            assert await client.request("relay_and_return", b"a") == b"from-actor"
            assert await client.request("local", b"x") == b"local:x"
            assert client.received["Reply"] == 3


async def test_keep_alive_is_never_queued_behind_application_work(autojump_clock: object) -> None:
    """While the session's packet handler is stuck (its turn holds the session lane),
    pings are still answered at once, and a packet that finds the session's queue at its
    bound is refused (CapacityExceeded) instead of waiting; other sessions go on."""
    rec = Record()
    rec.gate = trio.Event()
    from zlink_trio import CapacityExceeded, ServerConfig

    config = attrs.evolve(stream_config(0), lane_capacity=4)
    assert isinstance(config, ServerConfig)
    async with (
        open_server(config, stream_app(rec, 0)) as server,
        connect(server, "one") as one,
        connect(server, "two") as two,
    ):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(one.request, "hold")
            await rec.wait_until(lambda: (0, "hold") in rec.packets)
            with trio.fail_after(1):
                for _ in range(5):
                    await one.ping()
            for _ in range(4):
                await one.send("local", b"queued")
            with pytest.raises(CapacityExceeded):
                await one.request("local", b"one too many")
            assert await two.request("local", b"other") == b"local:other"
            rec.gate.set()
        assert await one.request("local", b"after") == b"local:after"


async def test_shutdown_refuses_new_sessions_and_finishes_accepted_work(
    autojump_clock: object,
) -> None:
    """On Shutdown of the session owner host (spec 02 §10) new sessions and new binds are
    refused at once; a relayed request accepted before is still answered (until the
    drain deadline); then the connection closes (SHUTTING_DOWN) and its bindings are
    cleaned up (OnDisconnectActor)."""
    rec = Record()
    rec.gate = trio.Event()
    store = CountingStore(MemoryLocationStore())
    async with open_cluster(
        1, store=store, app=lambda i: stream_app(rec, i), config=lambda i: stream_config(i)
    ) as cluster:
        server = cluster.servers[0]
        await create(server, rec, "a")
        await create(server, rec, "b")
        async with connect(server, "user") as client:
            await bind(client, "a")
            answers: list[bytes | None] = []
            async with trio.open_nursery() as nursery:

                async def ask() -> None:
                    answers.append(await relay(client, "a", "slow", b"accepted"))

                nursery.start_soon(ask)
                await rec.wait_until(lambda: len(rec.handled_by("a", "slow")) == 1)
                nursery.start_soon(cluster.stop, 0)
                await trio.sleep(0.5)  # the stop has begun: admission is closed
                with pytest.raises(ShuttingDown):
                    await client.request("bind", b"b")
                with pytest.raises(ShuttingDown):
                    async with connect(server, "late"):
                        pytest.fail("no new session during shutdown")
                rec.gate.set()
            assert answers == [b"slow:accepted"]
            closed = await client.wait_closed()
            assert closed.closing is not None
            assert closed.closing.reason is CloseReason.SHUTTING_DOWN
        assert [d[1] for d in rec.disconnects] == ["a"]


async def test_a_destroyed_actor_ends_its_binding(clock: object, store: CountingStore) -> None:
    """Destroying a bound Actor ends its binding: the client is told (Unbound DESTROYED)
    and a relay through it is session-not-bound."""
    rec = Record()
    async with stream_cluster(2, rec, store=store, hosts=lambda i: i == 1) as cluster:
        session_node = cluster.servers[0]
        ref = await create(session_node, rec, "a")
        async with connect(session_node, "user") as client:
            await bind(client, "a")
            assert isinstance(await client.receive(), Bound)
            assert await session_node.actors.destroy(ref)
            event = await client.receive()
            assert isinstance(event, Unbound) and event.reason is UnboundReason.DESTROYED
            with pytest.raises(InvalidOperation, match="not bound"):  # session-not-bound
                await relay(client, "a", "echo", b"x")


async def test_owner_loss_ends_the_binding_with_a_typed_reason(autojump_clock: object) -> None:
    """When the bound Actor's owner dies and its lifecycle ends (lease expired, its
    registration swept: no connection intent and no admitted peer left), the session
    learns it: the client gets Unbound OWNER_LOST, and a relay ends session-not-bound
    instead of going into the void."""
    rec = Record()
    store = CountingStore(MemoryLocationStore())
    async with stream_cluster(2, rec, store=store, hosts=lambda i: i == 1) as cluster:
        session_node = cluster.servers[0]
        await create(session_node, rec, "a")
        async with connect(session_node, "user") as client:
            await bind(client, "a")
            assert isinstance(await client.receive(), Bound)
            await cluster.kill(1)
            with trio.fail_after(120):
                event = await client.receive()
            assert isinstance(event, Unbound) and event.reason is UnboundReason.OWNER_LOST
            with pytest.raises(InvalidOperation, match="not bound"):  # session-not-bound
                await relay(client, "a", "echo", b"x")
            assert client.closed is None


async def test_an_unknown_packet_name_is_not_found(autojump_clock: object) -> None:
    """A packet with no handler is answered NotFound (a request) or an error frame with
    correlation 0 (a send); the connection stays."""
    rec = Record()
    async with (
        open_server(stream_config(0), stream_app(rec, 0)) as server,
        connect(server, "user") as client,
    ):
        with pytest.raises(NotFound):
            await client.request("no-such-packet")
        await client.send("no-such-packet")
        from zlink_trio.wire.stream import ErrorFrame

        event = await client.receive()
        assert isinstance(event, ErrorFrame) and event.correlation == 0
        assert await client.request("local", b"ok") == b"local:ok"


async def test_session_callbacks_are_serial_and_never_run_actor_handlers(
    autojump_clock: object,
) -> None:
    """(spec 02 §10, white-box) Two session callbacks of one connection never run at the
    same time, and an Actor handler never runs in a session callback's context: the
    Actor's turn is its own (another task or a later turn), even when the packet handler
    waits after relaying."""
    from zlink_trio import on_request

    state = {"running": 0, "most": 0, "session_task": None, "overlaps": 0}

    app = App()
    app.enable_actor_dispatch()

    class Player:
        def __init__(self, context: object) -> None:
            self.context = context

        @on_request("echo")
        async def echo(self, payload: bytes) -> bytes:
            if state["running"] and state["session_task"] is trio.lowlevel.current_task():
                state["overlaps"] += 1
            return payload

    app.register_actor("player", Player, relocation=RecreateOnRelocation())

    @app.authenticate
    async def auth(request: object) -> Authenticated:
        return Authenticated("p", "player")

    @app.on_packet("work")
    async def work(packet: Packet, payload: bytes) -> None:
        state["running"] += 1
        state["most"] = max(state["most"], state["running"])
        state["session_task"] = trio.lowlevel.current_task()
        try:
            bound = packet.session.actors.find("p")
            assert bound is not None
            await bound.relay(packet, payload, packet="echo")
            await trio.sleep(0.01)  # the Actor's turn may run meanwhile: elsewhere
        finally:
            state["running"] -= 1

    async with open_server(stream_config(0), app) as server, connect(server, "p") as client:
        await client.receive()  # Bound
        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(client.request, "work", str(i).encode())
    assert state["most"] == 1
    assert state["overlaps"] == 0


def _api_md_stream_example() -> dict[str, object]:
    """The "STREAM sessions" example of docs/api.md, executed."""
    import pathlib

    text = (pathlib.Path(__file__).resolve().parents[3] / "docs" / "api.md").read_text()
    section = text[text.index("## STREAM sessions") :]
    code = section.split("```python", 1)[1].split("```", 1)[0]
    namespace: dict[str, object] = {"__name__": "api_md_stream"}
    exec(compile(code, "docs/api.md", "exec"), namespace)
    return namespace


async def test_the_api_md_stream_example_runs(autojump_clock: object) -> None:
    """The documented example, as written: a client authenticates, its Actor is bound,
    both packet forms relay to it and it pushes back."""
    from zlink_trio.wire.stream import Push

    example = _api_md_stream_example()
    app = example["app"]
    assert isinstance(app, App)
    async with open_server(stream_config(0), app) as server, connect(server, "dana") as client:
        assert isinstance(await client.receive(), Bound)
        for packet in ("move", "step"):
            await client.send(packet, packet.encode())
            event = await client.receive()
            assert isinstance(event, Push) and event.payload == packet.encode()


async def test_a_store_outage_never_extends_a_stored_route(autojump_clock: object) -> None:
    """A stored route is valid only within its owner's lease (spec 02 §5): the Actor
    owner cut off from the Location Store fail-stops at its local lease deadline — from
    then on a relay to it ends Unavailable (never run, never re-routed to another owner),
    and once its lifecycle is gone the binding ends OWNER_LOST for the client."""
    from zlink_trio import Unavailable
    from zlink_trio.testing import CutOffStore

    rec = Record()
    shared = MemoryLocationStore()
    cut = CutOffStore(shared)

    def config(i: int) -> object:
        base = stream_config(i, host=i == 1)
        return attrs.evolve(base, location_store=cut) if i == 1 else base

    async with stream_cluster(
        2,
        rec,
        store=shared,
        hosts=lambda i: i == 1,
        config=config,  # type: ignore[arg-type]
    ) as cluster:
        session_node, actor_node = cluster.servers
        await create(session_node, rec, "a")
        async with connect(session_node, "user") as client:
            await bind(client, "a")
            assert isinstance(await client.receive(), Bound)
            assert await relay(client, "a", "echo", b"before") == b"before"
            cut.cut()
            await actor_node.wait_lease_lost()
            with pytest.raises((Unavailable, InvalidOperation)):
                await relay(client, "a", "echo", b"after")
            assert [h[3] for h in rec.handled_by("a", "echo")] == [b"before"]
            with trio.fail_after(300):
                while True:
                    event = await client.receive()
                    if isinstance(event, Unbound):
                        break
            assert event.reason is UnboundReason.OWNER_LOST
