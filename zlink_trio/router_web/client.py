"""A client of the router's websocket adapter (:mod:`.adapter`): one connection, requests
multiplexed by id.

``async with open_router_client(url) as client:`` — ``await client.submit(...)`` answers
the final frame (``result`` or ``error``; the ``accepted`` frame goes to ``on_accepted``),
``async with client.events(session) as frames`` yields the event frames until ``end``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any, final

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, open_websocket_url

__all__ = ["RouterClient", "open_router_client"]

Frame = dict[str, Any]


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
    async def events(self, session_id: str) -> AsyncIterator[AsyncIterator[Frame]]:
        """The session's event frames (the ``event`` field of each), until it ends here."""
        async with self._request({"op": "events", "sessionId": session_id}) as frames:
            first = await frames.receive()
            if first.get("type") != "subscribed":
                raise ConnectionError(f"events refused: {first}")

            async def iterate() -> AsyncIterator[Frame]:
                async for frame in frames:
                    if frame.get("type") != "event":
                        return
                    yield frame["event"]

            yield iterate()

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
    async with open_websocket_url(url) as ws, trio.open_nursery() as nursery:
        client = RouterClient(ws)
        nursery.start_soon(client._read)
        try:
            yield client
        finally:
            nursery.cancel_scope.cancel()
