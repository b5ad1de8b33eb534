"""A client of the router's websocket adapter (:mod:`.adapter`): one connection, requests
multiplexed by id.

``async with open_router_client(url) as client:`` — ``await client.submit(...)`` answers
the final frame (``result`` or ``error``; the ``accepted`` frame goes to ``on_accepted``),
``async with client.events(session) as frames`` yields the event frames until ``end``.
"""

from __future__ import annotations

import itertools
import json
import urllib.parse
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any, final

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, wrap_client_stream

__all__ = ["EventFrames", "RouterClient", "open_router_client"]

Frame = dict[str, Any]
_CLOSE_TIMEOUT = 2.0


@final
class EventFrames:
    """``async for event in frames``: the ``event`` payloads until the subscription ends."""

    def __init__(self, frames: trio.MemoryReceiveChannel[Frame]) -> None:
        self._frames = frames

    def __aiter__(self) -> EventFrames:
        return self

    async def __anext__(self) -> Frame:
        try:
            frame = await self._frames.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StopAsyncIteration from None
        if frame.get("type") != "event":
            raise StopAsyncIteration
        event: Frame = frame["event"]
        return event


@final
class RouterClient:
    def __init__(self, ws: WebSocketConnection) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._waiting: dict[str, trio.MemorySendChannel[Frame]] = {}

    async def _read(self) -> None:
        try:
            while True:
                frame = json.loads(await self._ws.get_message())
                send = self._waiting.get(str(frame.get("id")))
                if send is not None:
                    with suppress(trio.WouldBlock, trio.BrokenResourceError):
                        send.send_nowait(frame)
        except ConnectionClosed:
            pass
        finally:
            for send in self._waiting.values():
                send.close()

    @asynccontextmanager
    async def _request(self, body: Frame) -> AsyncIterator[trio.MemoryReceiveChannel[Frame]]:
        rid = f"r{next(self._ids)}"
        send, receive = trio.open_memory_channel[Frame](4096)
        self._waiting[rid] = send
        try:
            await self._ws.send_message(json.dumps({**body, "id": rid}))
            async with receive:
                yield receive
        finally:
            self._waiting.pop(rid, None)
            send.close()

    async def _one(self, body: Frame, final: set[str]) -> Frame:
        async with self._request(body) as frames:
            async for frame in frames:
                if frame.get("type") in final:
                    return frame
        raise ConnectionError("the connection closed before the answer")

    async def submit(
        self,
        session_id: str,
        agent_ref: str,
        text: str,
        *,
        idempotency_key: str | None = None,
        on_accepted: Callable[[Frame], None] | None = None,
    ) -> Frame:
        body: Frame = {"op": "submit", "sessionId": session_id, "agentRef": agent_ref}
        body["input"] = text
        if idempotency_key is not None:
            body["idempotencyKey"] = idempotency_key
        async with self._request(body) as frames:
            async for frame in frames:
                if frame.get("type") == "accepted" and on_accepted is not None:
                    on_accepted(frame)
                if frame.get("type") in ("result", "error"):
                    return frame
        raise ConnectionError("the connection closed before the answer")

    @asynccontextmanager
    async def events(self, session_id: str) -> AsyncIterator[EventFrames]:
        """The session's event frames (the ``event`` field of each), until it ends here."""
        async with self._request({"op": "events", "sessionId": session_id}) as frames:
            first = await frames.receive()
            if first.get("type") != "subscribed":
                raise ConnectionError(f"events refused: {first}")
            yield EventFrames(frames)

    async def interrupt(self, session_id: str, turn_id: str | None = None) -> Frame:
        body: Frame = {"op": "interrupt", "sessionId": session_id}
        if turn_id is not None:
            body["turnId"] = turn_id
        return await self._one(body, {"ok", "error"})

    async def release(self, session_id: str) -> Frame:
        return await self._one({"op": "release", "sessionId": session_id}, {"ok", "error"})

    async def raw(self, text: str | bytes) -> None:
        """Send a frame as is (tests of bad input)."""
        await self._ws.send_message(text)


@asynccontextmanager
async def open_router_client(url: str) -> AsyncIterator[RouterClient]:
    """Connect to an adapter at ``ws://host:port/path``.

    The client owns its TCP stream and closes it itself: trio-websocket 0.12's reader
    leaves the socket open when the server vanishes without a close handshake (EOF)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "ws" or parts.hostname is None or parts.port is None:
        raise ValueError(f"expected ws://host:port/..., got {url!r}")
    resource = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    stream = await trio.open_tcp_stream(parts.hostname, parts.port)
    async with stream, trio.open_nursery() as nursery:
        ws = await wrap_client_stream(nursery, stream, parts.hostname, resource)
        client = RouterClient(ws)
        nursery.start_soon(client._read)
        try:
            yield client
        finally:
            with trio.move_on_after(_CLOSE_TIMEOUT, shield=True), suppress(Exception):
                await ws.aclose()  # bounded: a peer that never answers the close
            nursery.cancel_scope.cancel()
