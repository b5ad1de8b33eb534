"""``App.route_packet`` frames for an idle local Actor run that Actor's turn in the
connection's reader, and what the reader queued is written by it directly
(docs/decisions.md, "STREAM: inline Actor turns in the connection reader"). These tests pin
what that must not change: a turn that waits never holds the connection's keep-alive and
control work; the client closing never cancels the Actor's turn; order per session holds
across inline and queued turns; a client that does not read is still closed as a slow
consumer while others are served."""

from __future__ import annotations

from typing import Any

import attrs
import trio
import trio.testing
from stream_kit import connect, raw_websocket, stream_config

from zlink_trio import App, RecreateOnRelocation, ZLinkError, on_request, on_send, open_server
from zlink_trio.stream import Authenticated, AutoBind, Packet
from zlink_trio.wire.stream import (
    Bound,
    Hello,
    Push,
    Request,
    Send,
    decode_server_frame,
    encode_frame,
)


@attrs.define
class Seen:
    events: list[str] = attrs.field(factory=list)
    gate: trio.Event = attrs.field(factory=trio.Event)
    _changed: trio.Event = attrs.field(factory=trio.Event)

    def add(self, event: str) -> None:
        self.events.append(event)
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, event: str) -> None:
        while event not in self.events:
            await self._changed.wait()


def route_app(seen: Seen) -> App:
    """Each client is its own Actor (type player, bound at authentication); ``r_*``
    packets are routed to its handlers, ``local`` is a session packet handler."""
    app = App()
    app.enable_actor_dispatch()

    class Player:
        def __init__(self, context: Any) -> None:
            self.context = context

        @on_send("note")
        async def note(self, payload: bytes) -> None:
            seen.add(f"{self.context.actor_id.value}:{payload.decode()}")
            if payload == b"wait":
                await seen.gate.wait()

        @on_send("push")
        async def push(self, payload: bytes) -> None:
            await self.context.session.push("pushed", payload)

        @on_request("close_then_wait")
        async def close_then_wait(self, payload: bytes) -> bytes:
            await self.context.session.close()  # closes this very connection
            seen.add("closed it")
            try:
                await seen.gate.wait()
            except BaseException as exc:
                seen.add(f"close_then_wait {type(exc).__name__}")
                raise
            seen.add("close_then_wait done")
            return b"never delivered"

        @on_request("slow")
        async def slow(self, payload: bytes) -> bytes:
            seen.add("slow started")
            try:
                await seen.gate.wait()
            except BaseException as exc:
                seen.add(f"slow {type(exc).__name__}")
                raise
            try:
                await self.context.session.push("late", payload)
                seen.add("slow pushed")
            except ZLinkError as exc:
                seen.add(f"slow push {type(exc).__name__}")
            seen.add("slow done")
            return b"slow:" + payload

    app.register_actor("player", Player, relocation=RecreateOnRelocation())

    @app.authenticate
    async def authenticate(request: Any) -> Authenticated:
        return Authenticated(request.credentials.decode(), "player", bind=AutoBind.GET_OR_CREATE)

    @app.on_disconnect_actor
    async def on_disconnect(event: Any) -> None:
        seen.add(f"disconnected {event.actor.actor_id.value}")

    @app.on_packet("local")
    async def local(packet: Packet, payload: bytes) -> bytes:
        return b"local:" + payload

    app.route_packet("r_note", packet="note")
    app.route_packet("r_push", packet="push")
    app.route_packet("r_slow", packet="slow")
    app.route_packet("r_close", packet="close_then_wait")
    return app


async def _bound(client: Any) -> None:
    with trio.fail_after(10):
        while not client.bound:
            await client.receive()


async def test_b02_06_a_routed_turn_that_waits_leaves_the_connection_answering(
    autojump_clock: object,
) -> None:
    """B02-06: a routed request whose Actor turn waits (run in the connection's reader,
    the Actor lane being idle) does not hold the connection: its pings are answered and
    its session packets handled meanwhile (spec 02 §5: keep-alive and control work are
    never queued behind application work); the request is answered once the turn ends."""
    seen = Seen()
    async with (
        open_server(stream_config(0), route_app(seen)) as server,
        connect(server, "p1") as client,
        trio.open_nursery() as nursery,
    ):
        await _bound(client)
        answer: list[bytes | None] = []
        answered = trio.Event()

        async def slow() -> None:
            answer.append(await client.request("r_slow", b"a"))
            answered.set()

        nursery.start_soon(slow)
        with trio.fail_after(5):
            await seen.wait_for("slow started")
            for _ in range(3):
                await client.ping()
            assert await client.request("local", b"x") == b"local:x"
        assert answer == []  # the turn still waits
        seen.gate.set()
        with trio.fail_after(5):
            await answered.wait()
        assert answer == [b"slow:a"]
        assert "slow done" in seen.events


async def test_b02_10_a_client_closing_during_a_routed_turn_does_not_cancel_it(
    autojump_clock: object,
) -> None:
    """B02-10: the client closes while its routed request's Actor turn (run in the
    connection's reader) waits: the connection closes and its binding is cleaned up, but
    the turn belongs to the Actor and is not cancelled; it completes, and its push and
    reply to the closed session are dropped cleanly (no crash; the server serves a new
    session of the same Actor afterwards)."""
    seen = Seen()
    async with open_server(stream_config(0), route_app(seen)) as server:
        async with connect(server, "p1") as client:
            await _bound(client)
            await client.send_raw(
                encode_frame(Request(correlation=1, packet="r_slow", payload=b"a"))
            )
            with trio.fail_after(5):
                await seen.wait_for("slow started")
        # (event-driven: the server has handled the close once every task is blocked;
        # the mock clock's own waiter breaks the tie last)
        await trio.testing.wait_all_tasks_blocked()
        assert server.stream.statistics().bindings == 0  # the session closed
        # Long past every bound of the close procedure (close, disconnect: 2 + 2 + 10 s
        # by default): the connection is done but for the Actor's turn, which waits on.
        await trio.sleep(60)
        assert "slow started" in seen.events and "slow done" not in seen.events
        seen.gate.set()
        with trio.fail_after(5):
            await seen.wait_for("slow done")
        assert "slow Cancelled" not in seen.events
        # its push went nowhere (admitted for a session that is gone, or refused)
        assert "slow pushed" in seen.events or "slow push SessionNotBound" in seen.events
        await trio.testing.wait_all_tasks_blocked()
        assert server.stream.statistics().sessions == 0
        async with connect(server, "p1") as again:
            await _bound(again)
            await again.send("r_push", b"b")
            with trio.fail_after(5):
                event = await again.receive()
            assert isinstance(event, Push) and event.payload == b"b"


async def test_b02_06_routed_frames_keep_session_order_across_inline_and_queued_turns(
    autojump_clock: object,
) -> None:
    """B02-06: two sessions each send a numbered run of routed sends, pings between,
    the 5th of one of them waiting in its turn (the reading moves to another task, the
    rest queues on the Actor's lane): each Actor handles its own run in the order sent."""
    seen = Seen()
    async with (
        open_server(stream_config(0), route_app(seen)) as server,
        connect(server, "a") as a,
        connect(server, "b") as b,
    ):
        await _bound(a)
        await _bound(b)
        for i in range(30):
            await a.send("r_note", b"wait" if i == 5 else str(i).encode())
            await b.send("r_note", str(i).encode())
            if i % 7 == 0:
                with trio.fail_after(5):
                    await a.ping()
                    await b.ping()
        with trio.fail_after(5):
            await seen.wait_for("b:29")
            await seen.wait_for("a:wait")
            await a.ping()
        assert "a:29" not in seen.events  # queued behind the waiting turn
        seen.gate.set()
        with trio.fail_after(5):
            await seen.wait_for("a:29")
        for name in ("a", "b"):
            mine = [e.split(":", 1)[1] for e in seen.events if e.startswith(f"{name}:")]
            expected = [str(i) for i in range(30)]
            if name == "a":
                expected[5] = "wait"
            assert mine == expected


async def test_a_client_that_never_reads_its_routed_pushes_is_closed_as_a_slow_consumer(
    autojump_clock: object,
) -> None:
    """A client floods routed sends whose Actor pushes big payloads back and never reads:
    the writes stall on its socket, yet its connection goes on reading (the write that
    waits hands the reading over), so its outbound queue fills and the server closes it
    as a slow consumer; another client is served throughout and after."""
    seen = Seen()
    config = stream_config(0, outbound_queue=8)
    big = b"y" * (256 * 1024)
    async with (
        open_server(config, route_app(seen)) as server,
        connect(server, "good") as good,
    ):
        await _bound(good)
        async with raw_websocket(server.stream.url, message_queue_size=1) as slow:
            await slow.send_message(encode_frame(Hello(version=1, credentials=b"slow")))
            with trio.fail_after(10):
                while not isinstance(decode_server_frame(await slow.get_message()), Bound):
                    pass
            closed = False
            with trio.move_on_after(120):  # (a reader stuck writing: the flood blocks)
                for i in range(400):
                    try:
                        await slow.send_message(encode_frame(Send(packet="r_push", payload=big)))
                    except Exception:
                        closed = True
                        break
                    if i % 20 == 0:
                        with trio.fail_after(5):
                            await good.ping()
                            assert await good.request("local", b"x") == b"local:x"
                    if server.stream.statistics().sessions == 1:
                        closed = True
                        break
            assert closed
        with trio.fail_after(30):
            await seen.wait_for("disconnected slow")
        assert server.stream.statistics().bindings == 1
        await good.send("r_push", b"after")
        with trio.fail_after(5):
            event = await good.receive()
        assert isinstance(event, Push) and event.payload == b"after"


async def test_b02_10_an_actor_closing_its_session_in_a_routed_turn_is_not_cancelled(
    autojump_clock: object,
) -> None:
    """B02-10: a routed turn (run in the connection's reader) asks for its own session's
    close, then waits: the connection closes (the client sees it) but the turn is not
    cancelled with the reading; it completes when released, its reply dropped."""
    seen = Seen()
    async with open_server(stream_config(0), route_app(seen)) as server:
        async with connect(server, "p1") as client:
            await _bound(client)
            await client.send_raw(
                encode_frame(Request(correlation=1, packet="r_close", payload=b""))
            )
            with trio.fail_after(5):
                closed = await client.wait_closed()
            assert closed.code == 1000
        await trio.testing.wait_all_tasks_blocked()
        assert seen.events[-1] == "closed it"
        seen.gate.set()
        with trio.fail_after(5):
            await seen.wait_for("close_then_wait done")
            await seen.wait_for("disconnected p1")
        assert "close_then_wait Cancelled" not in seen.events
        await trio.testing.wait_all_tasks_blocked()
        assert server.stream.statistics().sessions == 0
