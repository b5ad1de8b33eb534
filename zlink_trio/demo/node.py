"""One demo node as its own OS process (``zlink-trio demo --store postgresql://...``).

::

    python -m zlink_trio.demo.node --label node1 --dsn DSN --schema S --secret-hex HEX [--no-rooms]

Prints ``{"event": "ready", "url": STREAM url}`` once serving, and at SIGTERM/SIGINT (a clean
stop) ``{"event": "tally", ...}`` with what its handlers did, then ``{"event": "stopped"}``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys

import trio

from .._exceptions import startup_failure
from ..config import PostgresStoreConfig
from ..errors import ZLinkError
from ..server import open_server
from .app import Tally, make_app
from .cluster import node_config


async def main(args: argparse.Namespace) -> None:
    tally = Tally()
    store = PostgresStoreConfig(dsn=args.dsn, schema=args.schema, connections=2)
    config = node_config(args.label, store, bytes.fromhex(args.secret_hex))
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with open_server(
            config, make_app(args.label, tally, host_rooms=args.rooms)
        ) as server:
            print(json.dumps({"event": "ready", "url": server.stream.url}), flush=True)
            async for _ in signals:
                break
    counts = {
        "handled": sum(tally.handled.values()),
        "pushed": sum(tally.pushed.values()),
        "turns": sum(tally.turns.values()),
        "lobby_activations": tally.lobby_activations,
        "lobby_moves": tally.lobby_moves,
        "room_moves": tally.room_moves,
    }
    print(json.dumps({"event": "tally", **counts}), flush=True)
    print(json.dumps({"event": "stopped"}), flush=True)


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
