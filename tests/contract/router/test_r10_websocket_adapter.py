"""The websocket adapter (spec 10 §3.6, §9.2, §10.1): a real websocket client against a
router served by :func:`zlink_trio.router_web.serve_router_websocket` — submit, events,
interrupt and release, and the status mapping (409 conflicting agent, 409 idempotency
conflict, 503 claim failure, 400 for malformed requests, which leave the connection
usable; a non-JSON frame closes it cleanly). Real clock, short turns, bounded."""

from __future__ import annotations

import gc
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from router_app import Registry, Shared, World, builder
from router_kit import AGENT, OTHER_AGENT, CallLog, raising
from trio_websocket import (
    ConnectionClosed,
    WebSocketConnection,
    serve_websocket,
    wrap_client_stream,
)

from zlink_trio.router import SessionRouter, open_session_router
from zlink_trio.router_web import RouterClient, open_router_client, serve_router_websocket

TIMEOUT = 20


@asynccontextmanager
async def raw_websocket(url: str) -> AsyncIterator[WebSocketConnection]:
    """A plain websocket client that owns (and closes) its TCP stream: trio-websocket's
    ``open_websocket_url`` leaves the socket open after a server-initiated close."""
    port = int(url.rsplit(":", 1)[1].strip("/"))
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream, trio.open_nursery() as nursery:
        yield await wrap_client_stream(nursery, stream, "127.0.0.1", "/")
        nursery.cancel_scope.cancel()


@pytest.fixture
async def served(
    shared: Shared, world: World, registry: Registry, nursery: trio.Nursery
) -> AsyncIterator[tuple[SessionRouter, str]]:
    world.duration = lambda text: 30.0 if text.startswith("long") else 0.05
    async with open_session_router(builder(shared, world, registry, "a")) as router:
        server = await nursery.start(serve_router_websocket, router, "127.0.0.1", 0)
        yield router, f"ws://127.0.0.1:{server.port}/"


@pytest.fixture
async def client(served: tuple[SessionRouter, str]) -> AsyncIterator[RouterClient]:
    async with open_router_client(served[1]) as opened:
        yield opened


async def test_submit_answers_accepted_then_the_result_and_events_stream_the_turn(
    client: RouterClient,
) -> None:
    """§3.6: submit answers its disposition and then the result (200); an events
    subscription sees the turn's frames, each with its TurnId, ending with the terminal."""
    accepted: list[dict[str, Any]] = []
    with trio.fail_after(TIMEOUT):
        async with client.events("s-1") as frames:
            answer = await client.submit("s-1", AGENT.value, "hi", on_accepted=accepted.append)
            seen = []
            async for frame in frames:
                seen.append(frame)
                if frame["type"] == "completed":
                    break
    assert answer["type"] == "result" and answer["status"] == 200
    assert answer["text"] == "a:hi:0"
    assert accepted[0]["disposition"] == "EXECUTED_LOCALLY"
    assert [f["type"] for f in seen] == ["textDelta", "completed"]
    assert {f["turnId"] for f in seen} == {accepted[0]["turnId"]}


async def test_r10_statuses_409_for_conflicts_and_503_for_a_claim_failure(
    shared: Shared, world: World, registry: Registry, nursery: trio.Nursery
) -> None:
    """§3.6/§9.2/§10.1 row 1: a second agent on a bound session is 409, a key reused with
    another input is 409, a claim whose backend fails is 503 — each an error frame with
    the router error's kind, on a connection that keeps working."""
    world.duration = lambda _text: 0.05
    broken = CallLog().spy("leases", shared.leases)
    broken.try_acquire = raising(OSError("lease backend down"))
    with trio.fail_after(TIMEOUT):
        async with (
            open_session_router(builder(shared, world, registry, "a")) as router,
            open_session_router(builder(shared, world, registry, "z", lease_store=broken)) as bad,
        ):
            good = await nursery.start(serve_router_websocket, router, "127.0.0.1", 0)
            failing = await nursery.start(serve_router_websocket, bad, "127.0.0.1", 0)
            async with open_router_client(f"ws://127.0.0.1:{good.port}/") as c:
                assert (await c.submit("s-1", AGENT.value, "one", idempotency_key="k"))[
                    "status"
                ] == 200
                other = await c.submit("s-1", OTHER_AGENT.value, "two")
                assert (other["type"], other["status"]) == ("error", 409), other
                assert other["kind"] == "TYPE_MISMATCH"
                reused = await c.submit("s-1", AGENT.value, "changed", idempotency_key="k")
                assert (reused["type"], reused["status"]) == ("error", 409), reused
                still = await c.submit("s-1", AGENT.value, "three")
                assert still["status"] == 200
            async with open_router_client(f"ws://127.0.0.1:{failing.port}/") as c:
                claim = await c.submit("s-2", AGENT.value, "x")
                assert (claim["type"], claim["status"]) == ("error", 503), claim


async def test_interrupt_and_release_reach_the_router(client: RouterClient) -> None:
    """§8: an interrupt through the adapter stops the running turn (its caller gets an
    INTERRUPTED error); release answers ok and ends the session's event subscription."""
    with trio.fail_after(TIMEOUT):
        async with client.events("s-1") as frames, trio.open_nursery() as nursery:
            answer: dict[str, Any] = {}
            started = trio.Event()

            async def long_turn() -> None:
                answer.update(
                    await client.submit(
                        "s-1", AGENT.value, "long", on_accepted=lambda _f: started.set()
                    )
                )

            nursery.start_soon(long_turn)
            await started.wait()
            async for frame in frames:  # the turn is running once its first delta arrives
                assert frame["type"] == "textDelta"
                break
            assert (await client.interrupt("s-1"))["type"] == "ok"
        assert answer["type"] == "error" and answer.get("code") == "INTERRUPTED", answer
        async with client.events("s-1") as frames:
            assert (await client.release("s-1"))["type"] == "ok"
            assert [f async for f in frames] == []  # the subscription ended


async def test_malformed_requests_get_400_and_a_non_json_frame_closes_cleanly(
    served: tuple[SessionRouter, str],
) -> None:
    """Bad input gets a typed error or a clean close, never touches a session: unknown
    op, a missing or invalid id, an unknown priority are 400 on a connection that keeps
    working; a frame that is not JSON closes the connection with 1003."""
    _, url = served
    with trio.fail_after(TIMEOUT):
        async with raw_websocket(url) as ws:
            for bad in (
                {"op": "nope", "id": 1},
                {"op": "submit", "id": 2, "agentRef": "agent-x", "input": "x"},
                {"op": "submit", "id": 3, "sessionId": "", "agentRef": "agent-x", "input": "x"},
                {"op": "submit", "id": 4, "sessionId": "s", "agentRef": "agent-x", "input": 5},
                {"op": "submit", "id": 5, "sessionId": "s", "agentRef": "agent-x", "input": "x",
                 "priority": "SOMETIME"},
                {"op": "events", "id": 6, "sessionId": 7},
                [1, 2],
            ):  # fmt: skip
                await ws.send_message(json.dumps(bad))
                frame = json.loads(await ws.get_message())
                assert (frame["type"], frame["status"]) == ("error", 400), (bad, frame)
                assert frame["id"] == (bad.get("id") if isinstance(bad, dict) else None)
            await ws.send_message("{not json")
            with pytest.raises(ConnectionClosed) as closed:
                await ws.get_message()
            assert closed.value.reason.code == 1003


async def test_a_vanished_server_leaves_no_client_socket_open(nursery: trio.Nursery) -> None:
    """Regression (found by the SIGKILL process test): a server that disappears without a
    close handshake ends the client's requests with ConnectionError, and leaving the
    client closes its socket (trio-websocket's own reader leaves it open on EOF)."""
    gone = trio.Event()

    async def vanish(request: Any) -> None:
        ws = await request.accept()
        await gone.wait()
        await ws._stream.aclose()  # the peer's socket goes away, no close frame

    server = await nursery.start(serve_websocket, vanish, "127.0.0.1", 0, None)
    with trio.fail_after(TIMEOUT):
        async with open_router_client(f"ws://127.0.0.1:{server.port}/") as c:
            gone.set()
            with pytest.raises(ConnectionError):
                await c.submit("s-1", AGENT.value, "x")
    gc.collect()  # an unclosed socket warns here (filterwarnings = error fails the test)
