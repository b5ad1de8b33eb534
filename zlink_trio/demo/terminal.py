"""``zlink-trio client ws://...``: an interactive terminal client of the demo's room app.

::

    zlink-trio client ws://127.0.0.1:PORT/ [--name alice] [--room room-1] [--codec json]

It opens a STREAM session (its player is bound at authentication), joins the room and then
reads commands from standard input, one a line:

* ``/join ROOM`` -- move to another room;
* ``/where`` -- which node hosts your player and your room now, the room's players;
* ``/move DX DY`` -- step in the room;
* ``/help`` -- these commands;
* ``/quit`` (or end of input) -- close the session;
* anything else not starting with ``/`` is a chat line to the room.

Chat lines of the room arrive as pushes and are printed as ``[room] player: text``.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from typing import Any

import trio

from ..client import ConnectionLost, StreamClient, open_stream_client
from ..errors import ZLinkError
from ..wire.stream import Push, Unbound

__all__ = ["HELP", "add_client_parser", "describe_where", "parse_command", "run"]

HELP = (
    "* type a line to chat to your room; /where: which node hosts your player and your room; "
    "/join ROOM; /move DX DY; /help; /quit"
)


def add_client_parser(commands: Any) -> None:
    client = commands.add_parser("client", help="an interactive terminal client of the demo")
    client.add_argument("url", help="a demo node's STREAM endpoint, ws://host:port/")
    client.add_argument("--name", help="your player's name (default: a random one)")
    client.add_argument("--room", default="room-1", help="the room to join (room-1)")
    client.add_argument("--codec", choices=("cbor", "json"), default="cbor")


def parse_command(text: str) -> tuple[str, tuple[str, ...]]:
    """One input line as ``(command, arguments)``: ``("chat", (text,))`` for a chat line,
    ``("usage", (message,))`` for a command given wrong arguments or not known."""
    if not text.startswith("/"):
        return "chat", (text,)
    name, *rest = text.split()
    if name == "/join":
        return ("join", (rest[0],)) if len(rest) == 1 else ("usage", ("usage: /join ROOM",))
    if name == "/move":
        try:
            dx, dy = (str(int(v)) for v in rest)
        except ValueError:
            return "usage", ("usage: /move DX DY (two whole numbers)",)
        return "move", (dx, dy)
    if name in ("/where", "/help", "/quit") and not rest:
        return name[1:], ()
    return "usage", (f"unknown command {text!r}; /help lists the commands",)


def describe_where(state: dict[str, Any]) -> str:
    """The ``where`` reply, readable: the nodes of your player and your room, its players."""
    line = f"* you ({state['player']}) are on {state['player_node']}"
    room = state.get("room")
    if not room:
        return line + "; you are in no room"
    members = ", ".join(f"{p} ({x}, {y})" for p, (x, y) in room["members"].items())
    return (
        f"{line}; {room['room']} is on {room['room_node']} with {len(room['members'])} "
        f"player(s): {members}; {room['lines']} chat line(s), {room['ticks']} tick(s)"
    )


async def _request(client: StreamClient, packet: str, body: object) -> Any:
    with trio.fail_after(10):
        reply = await client.request(packet, json.dumps(body).encode())
    return json.loads(reply) if reply else None


async def _pushes(client: StreamClient, room: list[str], done: trio.CancelScope) -> None:
    while True:
        try:
            event = await client.receive()
        except ConnectionLost:
            print("* the session closed", flush=True)
            done.cancel()
            return
        if isinstance(event, Push) and event.packet == "chat":
            line = json.loads(event.payload)
            print(f"[{room[0]}] {line['player']}: {line['text']}", flush=True)
        elif isinstance(event, Unbound):
            print(f"* your player was unbound ({event.reason.name})", flush=True)


async def _main(args: argparse.Namespace) -> int:
    name = args.name or f"term-{secrets.token_hex(3)}"
    async with open_stream_client(args.url, name.encode(), codec=args.codec) as client:
        joined = await _request(client, "join", {"room": args.room})
        room = [args.room]
        print(
            f"* {name} joined {args.room} (your player on {joined['player_node']}, the room on "
            f"{joined['room_node']}, {len(joined['members'])} players)",
            flush=True,
        )
        print(HELP, flush=True)
        message_id = 0
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_pushes, client, room, nursery.cancel_scope)
            while True:
                line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
                if not line:
                    break
                text = line.strip()
                if not text:
                    continue
                command, arguments = parse_command(text)
                try:
                    if command == "quit":
                        break
                    if command == "help":
                        print(HELP, flush=True)
                    elif command == "usage":
                        print(f"* {arguments[0]}", flush=True)
                    elif command == "join":
                        room[0] = arguments[0]
                        state = await _request(client, "join", {"room": room[0]})
                        print(f"* joined {room[0]} (on {state['room_node']})", flush=True)
                    elif command == "where":
                        print(describe_where(await _request(client, "where", {})), flush=True)
                    elif command == "move":
                        dx, dy = (int(v) for v in arguments)
                        moved = await _request(client, "move", {"dx": dx, "dy": dy})
                        x, y = moved["position"]
                        print(f"* you are at ({x}, {y})", flush=True)
                    else:
                        message_id += 1
                        await _request(client, "chat", {"id": message_id, "text": text})
                except (ZLinkError, trio.TooSlowError, ValueError) as exc:
                    print(f"* refused: {type(exc).__name__}: {exc}", flush=True)
            nursery.cancel_scope.cancel()
    return 0


def run(args: argparse.Namespace) -> int:
    """The ``client`` command."""
    try:
        return trio.run(_main, args)
    except (ZLinkError, OSError, ValueError) as exc:
        print(f"zlink-trio client: cannot connect: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
