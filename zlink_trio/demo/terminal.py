"""``zlink-trio client ws://...``: an interactive terminal client of the demo's room app.

::

    zlink-trio client ws://127.0.0.1:PORT/ [--name alice] [--room room-1] [--codec json]

It opens a STREAM session (its player is bound at authentication), joins the room and then
reads commands from standard input, one a line:

* ``/join ROOM`` -- move to another room;
* ``/where`` -- which node hosts your player and your room now, the room's players;
* ``/move DX DY`` -- step in the room;
* ``/quit`` (or end of input) -- close the session;
* anything else is a chat line to the room.

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

__all__ = ["add_client_parser", "run"]


def add_client_parser(commands: Any) -> None:
    client = commands.add_parser("client", help="an interactive terminal client of the demo")
    client.add_argument("url", help="a demo node's STREAM endpoint, ws://host:port/")
    client.add_argument("--name", help="your player's name (default: a random one)")
    client.add_argument("--room", default="room-1", help="the room to join (room-1)")
    client.add_argument("--codec", choices=("cbor", "json"), default="cbor")


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
        message_id = 0
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_pushes, client, room, nursery.cancel_scope)
            while True:
                line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
                if not line or line.strip() == "/quit":
                    break
                text = line.strip()
                if not text:
                    continue
                try:
                    if text.startswith("/join "):
                        room[0] = text.split(None, 1)[1]
                        state = await _request(client, "join", {"room": room[0]})
                        print(f"* joined {room[0]} (on {state['room_node']})", flush=True)
                    elif text == "/where":
                        print(
                            f"* where: {json.dumps(await _request(client, 'where', {}))}",
                            flush=True,
                        )
                    elif text.startswith("/move"):
                        dx, dy = (int(v) for v in text.split()[1:3])
                        print(
                            f"* {await _request(client, 'move', {'dx': dx, 'dy': dy})}", flush=True
                        )
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
