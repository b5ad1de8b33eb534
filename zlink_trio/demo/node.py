"""One demo node as its own OS process (``zlink-trio demo --store postgresql://...``).

::

    python -m zlink_trio.demo.node --label node1 --dsn DSN --schema S --secret-hex HEX [--no-rooms]

Prints ``{"event": "ready", "url": STREAM url, "node_rid": hex}`` once serving, and at
SIGTERM/SIGINT (a clean stop) ``{"event": "tally", ...}`` with what its handlers did, then
``{"event": "stopped"}``. While serving it reads control requests on stdin (one JSON line
each: relocate a player or a room to another node) and answers each on stdout with its id
(:mod:`zlink_trio.demo.control`); a line it cannot read gets a typed error answer. The end
of stdin ends the control channel only (the node serves on until SIGTERM). The demo runs
it with stdin a pipe of its own (read non-blocking through ``trio.lowlevel.FdStream``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import Any

import trio

from .._exceptions import startup_failure
from ..config import PostgresStoreConfig
from ..errors import ZLinkError
from ..server import open_server
from .app import Tally, make_app
from .cluster import node_config
from .control import serve_control


def emit(event: dict[str, Any]) -> None:
    print(json.dumps(event), flush=True)


async def main(args: argparse.Namespace) -> None:
    tally = Tally()
    store = PostgresStoreConfig(dsn=args.dsn, schema=args.schema, connections=2)
    config = node_config(args.label, store, bytes.fromhex(args.secret_hex))
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with open_server(
            config, make_app(args.label, tally, host_rooms=args.rooms)
        ) as server:
            rid = server.identity.node_rid.hex
            emit({"event": "ready", "url": server.stream.url, "node_rid": rid})
            stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
            async with stdin, trio.open_nursery() as nursery:
                nursery.start_soon(serve_control, server, stdin, emit)
                async for _ in signals:
                    break
                nursery.cancel_scope.cancel()
    counts = {
        "handled": sum(tally.handled.values()),
        "pushed": sum(tally.pushed.values()),
        "turns": sum(tally.turns.values()),
        "lobby_activations": tally.lobby_activations,
        "lobby_moves": tally.lobby_moves,
        "room_moves": tally.room_moves,
    }
    emit({"event": "tally", **counts})
    emit({"event": "stopped"})


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", required=True)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--schema", required=True)
    parser.add_argument("--secret-hex", required=True)
    parser.add_argument("--no-rooms", dest="rooms", action="store_false")
    arguments = parser.parse_args()
    try:
        trio.run(main, arguments)
    except (ZLinkError, OSError, BaseExceptionGroup) as exc:
        cause = startup_failure(exc, (ZLinkError, OSError))
        if cause is None:
            raise
        print(f"demo {arguments.label}: cannot run: {cause}", file=sys.stderr)
        sys.exit(1)
