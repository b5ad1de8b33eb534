"""The demo's multiplayer room application (payloads are JSON text).

* **player** (Actor, bound to the client's STREAM session: the session's identity, bound
  at authentication; a live relocation carries its room: ``PreserveStateWith``): ``join`` a room, ``chat``, ``move``, ``where`` (which node hosts the
  player and its room right now); ``deliver`` (one-way, from another player) pushes a chat
  line to the bound session.
* **room** (User Spot, SpotWide; the players are not framework members of it: the room
  tracks them in its own state): members, positions, the chat history (each line once,
  with its sender's message id), a timer ticking twice a second (registered by its
  factory: on a relocation target the framework's restored timer replaces it). A live
  relocation carries members, history and ticks (``PreserveStateWith``): a moved room
  keeps every chat it accepted.
* **lobby** (Instance Spot, id ``lobby``): cold-activated by the first player's first
  ``visit``; counts visits per room. A live relocation (a clean stop drains it to a live
  node) carries its counts (``PreserveStateWith``): its factory runs again on the target,
  then the restore, counted in :attr:`Tally.lobby_moves`.

A client's packets ``join``, ``chat``, ``move`` and ``where`` are relayed to its bound
player (``App.route_packet``). Every handler notes what it did in the process-wide
:class:`Tally` of its node (the demo's summary reads it).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import attrs

from ..actors.handlers import on_request, on_send, on_timer
from ..actors.policy import PreserveStateWith
from ..app import App
from ..spots.execution import SpotWide
from ..spots.spot_kind import SpotKind
from ..stream import Authenticated, AutoBind

__all__ = ["LOBBY", "TICK", "Tally", "make_app"]

LOBBY = "lobby"
TICK = 0.5


@attrs.define
class Tally:
    """What the handlers of one process did, by node label."""

    handled: Counter[str] = attrs.field(factory=Counter)
    """Chat lines a room appended, by the room's node."""
    pushed: Counter[str] = attrs.field(factory=Counter)
    """Chat pushes a player made to its session, by the player's node."""
    turns: Counter[str] = attrs.field(factory=Counter)
    """Handler turns by node (players, rooms, lobby)."""
    ticks: Counter[str] = attrs.field(factory=Counter)
    lobby_activations: int = 0
    """Lobby instances built (its factory runs: a cold activation, or a move's target)."""
    lobby_moves: int = 0
    """Lobby instances restored by a live relocation (cold activations are
    ``lobby_activations - lobby_moves``)."""
    room_moves: int = 0
    """Room instances restored by a live relocation."""


def _load(payload: bytes) -> Any:
    return json.loads(payload.decode()) if payload else None


def _dump(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def make_app(node: str = "node", tally: Tally | None = None, *, host_rooms: bool = True) -> App:
    """The application of the node labelled ``node`` (players everywhere; rooms and the
    lobby only where ``host_rooms``)."""
    tally_: Tally = tally if tally is not None else Tally()

    class Player:
        def __init__(self, context: Any) -> None:
            self.context = context
            self.room: str | None = None

        @on_request("join")
        async def join(self, payload: bytes) -> bytes:
            tally_.turns[node] += 1
            room = _load(payload)["room"]
            me = self.context.actor_id.value
            if self.room is not None and self.room != room:
                await self.context.spots.request(self.room, "leave", _dump({"player": me}))
            state = _load(await self.context.spots.request(room, "enter", _dump({"player": me})))
            self.room = room
            await self.context.spots.send(LOBBY, "visit", _dump({"room": room})).instance(LOBBY)
            return _dump({**state, "player_node": node})

        @on_request("chat")
        async def chat(self, payload: bytes) -> bytes:
            tally_.turns[node] += 1
            if self.room is None:
                return _dump({"error": "join a room first"})
            line = {**_load(payload), "player": self.context.actor_id.value}
            result = _load(await self.context.spots.request(self.room, "chat", _dump(line)))
            line["seq"] = result["seq"]
            for member in result["members"]:
                await self.context.actors.send(member, "deliver", _dump(line))
            return _dump({"seq": result["seq"]})

        @on_request("move")
        async def move(self, payload: bytes) -> bytes:
            tally_.turns[node] += 1
            if self.room is None:
                return _dump({"error": "join a room first"})
            step = {**_load(payload), "player": self.context.actor_id.value}
            return await self.context.spots.request(self.room, "move", _dump(step)) or b""

        @on_request("where")
        async def where(self, payload: bytes) -> bytes:
            tally_.turns[node] += 1
            room = None
            if self.room is not None:
                room = _load(await self.context.spots.request(self.room, "state", b""))
            return _dump({"player": self.context.actor_id.value, "player_node": node, "room": room})

        @on_send("deliver")
        async def deliver(self, payload: bytes) -> None:
            tally_.turns[node] += 1
            if self.context.session.bound:
                await self.context.session.push("chat", payload)
                tally_.pushed[node] += 1

    class Room:
        def __init__(self, context: Any) -> None:
            self.context = context
            self.members: dict[str, list[int]] = {}
            self.history: list[dict[str, Any]] = []
            self.ticks = 0
            context.timers.every("tick", TICK)

        def _state(self, last: int = 8) -> dict[str, Any]:
            return {
                "room": self.context.spot_id.value,
                "room_node": node,
                "members": {p: pos for p, pos in sorted(self.members.items())},
                "ticks": self.ticks,
                "chat": self.history[-last:],
                "lines": len(self.history),
            }

        @on_request("enter")
        async def enter(self, payload: bytes) -> bytes:
            tally_.turns[node] += 1
            self.members.setdefault(_load(payload)["player"], [0, 0])
            return _dump(self._state())

        @on_request("leave")
        async def leave(self, payload: bytes) -> bytes:
            tally_.turns[node] += 1
            self.members.pop(_load(payload)["player"], None)
            return b"{}"

        @on_request("chat")
        async def chat(self, payload: bytes) -> bytes:
            tally_.turns[node] += 1
            line = _load(payload)
            self.members.setdefault(line["player"], [0, 0])
            line["seq"] = len(self.history) + 1
            self.history.append(line)
            tally_.handled[node] += 1
            return _dump({"seq": line["seq"], "members": sorted(self.members)})

        @on_request("move")
        async def move(self, payload: bytes) -> bytes:
            tally_.turns[node] += 1
            step = _load(payload)
            x, y = self.members.setdefault(step["player"], [0, 0])
            self.members[step["player"]] = [x + int(step.get("dx", 0)), y + int(step.get("dy", 0))]
            return _dump({"position": self.members[step["player"]]})

        @on_request("state")
        async def state(self, payload: bytes) -> bytes:
            tally_.turns[node] += 1
            return _dump(self._state())

        @on_request("history")
        async def full_history(self, payload: bytes) -> bytes:
            return _dump(self.history)

        @on_timer("tick")
        async def tick(self, payload: bytes) -> None:
            self.ticks += 1
            tally_.ticks[node] += 1

    class PlayerState:
        """A player's state across a live relocation: its room (a player re-created
        without it would answer every chat "join a room first")."""

        async def capture(self, player: Player) -> bytes:
            return _dump({"room": player.room})

        async def restore(self, player: Player, payload: bytes) -> None:
            player.room = _load(payload)["room"]

    class RoomState:
        """A room's state across a live relocation: members, history, ticks (a room
        re-created without them would lose every chat it accepted)."""

        async def capture(self, room: Room) -> bytes:
            return _dump({"members": room.members, "history": room.history, "ticks": room.ticks})

        async def restore(self, room: Room, payload: bytes) -> None:
            state = _load(payload)
            room.members = {p: list(pos) for p, pos in state["members"].items()}
            room.history = state["history"]
            room.ticks = state["ticks"]
            tally_.room_moves += 1

    class Lobby:
        def __init__(self, context: Any) -> None:
            self.context = context
            self.visits: Counter[str] = Counter()
            tally_.lobby_activations += 1

        @on_send("visit")
        async def visit(self, payload: bytes) -> None:
            tally_.turns[node] += 1
            self.visits[_load(payload)["room"]] += 1

        @on_request("visits")
        async def counts(self, payload: bytes) -> bytes:
            return _dump(dict(self.visits))

    class LobbyState:
        """The lobby's visit counts across a live relocation."""

        async def capture(self, lobby: Lobby) -> bytes:
            return _dump(dict(lobby.visits))

        async def restore(self, lobby: Lobby, payload: bytes) -> None:
            lobby.visits = Counter(_load(payload))
            tally_.lobby_moves += 1

    app = App()
    app.enable_actor_dispatch()
    app.register_actor("player", Player, relocation=PreserveStateWith(PlayerState()))
    if host_rooms:
        app.register_spot(
            "room", Room, execution=SpotWide(), relocation=PreserveStateWith(RoomState())
        )
        app.register_spot(
            LOBBY, Lobby, kind=SpotKind.INSTANCE, relocation=PreserveStateWith(LobbyState())
        )

    @app.authenticate
    async def authenticate(request: Any) -> Authenticated | None:
        name = request.credentials.decode(errors="replace").strip()
        if not name or len(name.encode()) > 64:
            return None
        return Authenticated(name, "player", bind=AutoBind.GET_OR_CREATE)

    for packet in ("join", "chat", "move", "where"):
        app.route_packet(packet)
    return app
