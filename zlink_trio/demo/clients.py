"""The demo's scripted clients: real STREAM websocket sessions that join a room, chat and
move, and reconnect (a new session, the same player name) when their node stops or their
player's node goes away."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs
import trio

from ..client import ConnectionLost, StreamClient, open_stream_client
from ..errors import ZLinkError
from ..wire.stream import Push, Unbound

__all__ = ["ClientStats", "ScriptedClient"]

REQUEST_TIMEOUT = 5.0


@attrs.define
class ClientStats:
    """What every scripted client observed, together."""

    sent: int = 0
    """Chat requests sent."""
    accepted: set[tuple[str, int]] = attrs.field(factory=set)
    """(player, message id) of every chat the server answered with a sequence number."""
    failed: Counter[str] = attrs.field(factory=Counter)
    """Chat requests answered by an error or by the application without a sequence number
    (not accepted: never retried), by kind."""
    moves: int = 0
    received: Counter[tuple[str, str, int]] = attrs.field(factory=Counter)
    """Chat pushes received: (receiver, sender, message id) -> times."""
    connects: int = 0
    rebinds: int = 0
    """Sessions after the first of a client (its node stopped, its player's node went away,
    or the script disconnected it)."""


@attrs.define(eq=False)
class ScriptedClient:
    index: int
    room: str
    stats: ClientStats
    log: Callable[[str], None]
    pick_url: Callable[[int], str | None]
    """A live node's STREAM url, starting the search at the given index."""
    rng: random.Random
    name: str = ""
    node_hint: int = 0
    session_node: str = "-"
    player_node: str = "-"
    next_id: int = 0
    sessions: int = 0
    """Sessions this client opened so far."""
    refused: int = 0
    """This client's chats answered by an error so far."""
    refused_at: list[float] = attrs.field(factory=list)
    """When each of them was refused (``trio.current_time()``)."""
    _client: StreamClient | None = None
    _reconnect: trio.Event = attrs.field(factory=trio.Event)

    def __attrs_post_init__(self) -> None:
        self.name = f"player-{self.index}"
        self.node_hint = self.index

    def disconnect(self, next_node: int) -> None:
        """Close this client's session now; it reconnects to node ``next_node``."""
        self.node_hint = next_node
        self._reconnect.set()

    async def run(self, until: trio.Event) -> None:
        while not until.is_set():
            url = self.pick_url(self.node_hint)
            if url is None:
                await trio.sleep(0.1)
                continue
            try:
                await self._session(url, until)
            except (ConnectionLost, ZLinkError, OSError) as exc:
                if not until.is_set():
                    self.log(f"{self.name}: session ended ({type(exc).__name__}); reconnecting")
            if not until.is_set():
                self.stats.rebinds += 1
                self.node_hint += 1
                await trio.sleep(0.05)

    async def _session(self, url: str, until: trio.Event) -> None:
        self._reconnect = trio.Event()
        async with open_stream_client(url, self.name.encode(), hello_timeout=5) as client:
            self._client = client
            self.stats.connects += 1
            self.sessions += 1
            joined = await self._request("join", {"room": self.room})
            self.player_node = joined.get("player_node", "?")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._receive, client, nursery.cancel_scope)

                async def reconnect_on_request() -> None:
                    await self._reconnect.wait()
                    nursery.cancel_scope.cancel()

                async def stop_at_end() -> None:
                    await until.wait()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(reconnect_on_request)
                nursery.start_soon(stop_at_end)
                nursery.start_soon(self._play, nursery.cancel_scope)
            self._client = None

    async def _request(self, packet: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self._client is not None
        with trio.fail_after(REQUEST_TIMEOUT):
            reply = await self._client.request(packet, json.dumps(body).encode())
        return json.loads(reply) if reply else {}

    async def _play(self, scope: trio.CancelScope) -> None:
        while True:
            await trio.sleep(self.rng.uniform(0.05, 0.15))
            if self.rng.random() < 0.6:
                self.next_id += 1
                message_id = self.next_id
                self.stats.sent += 1
                try:
                    chat = {"id": message_id, "text": f"hello #{message_id}"}
                    reply = await self._request("chat", chat)
                except (ZLinkError, trio.TooSlowError) as exc:
                    self.stats.failed[type(exc).__name__] += 1
                    self.refused += 1
                    self.refused_at.append(trio.current_time())
                    if isinstance(exc, ConnectionLost):
                        scope.cancel()
                        return
                    continue
                if "seq" in reply:
                    self.stats.accepted.add((self.name, message_id))
                else:  # the application's own refusal (e.g. "join a room first")
                    self.stats.failed[f"answered {reply.get('error', 'without a seq')!r}"] += 1
                    self.refused += 1
                    self.refused_at.append(trio.current_time())
            else:
                step = {"dx": self.rng.choice((-1, 1)), "dy": self.rng.choice((-1, 1))}
                try:
                    await self._request("move", step)
                except (ZLinkError, trio.TooSlowError) as exc:
                    if isinstance(exc, ConnectionLost):
                        scope.cancel()
                        return
                    continue
                self.stats.moves += 1

    async def _receive(self, client: StreamClient, scope: trio.CancelScope) -> None:
        while True:
            try:
                event = await client.receive()
            except ConnectionLost:
                scope.cancel()
                return
            if isinstance(event, Push) and event.packet == "chat":
                line = json.loads(event.payload)
                self.stats.received[(self.name, line["player"], line["id"])] += 1
            elif isinstance(event, Unbound):
                self.log(f"{self.name}: its player was unbound ({event.reason.name}); rebinding")
                scope.cancel()
                return
