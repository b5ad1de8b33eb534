"""A node process hosting Actors, for the owner-loss process tests (run as a script).

::

    python tests/faults/actor_host.py --dsn DSN --schema S --secret-hex HEX \\
        [--node-name NAME] [--actors N] [--prefix P]

Opens a server on the shared PostgreSQL Location Store (mesh "test", 1 s owner leases
renewed every 0.3 s, no background sweep after the startup round), creates ``N`` Actors
of type "player" from itself (``<prefix><i>``; placed on this node when it is the only
node hosting the type), then prints one JSON line::

    {"event": "ready", "rid": HEX, "generation": INT, "reclaimed": INT,
     "actors": [[id, object generation, owner rid hex], ...]}

``reclaimed`` is how many rows this lifecycle reclaimed before ``open_server`` returned
(its sweep's first round, FlowEvent.RECLAIMED). Then it serves until SIGTERM (exit 0).
"""

from __future__ import annotations

import argparse
import json
import signal
from typing import Any

import trio

from zlink_trio import (
    App,
    Created,
    MeshConfig,
    PostgresStoreConfig,
    RecreateOnRelocation,
    ServerConfig,
    on_request,
    on_send,
    open_server,
)
from zlink_trio.testing import FlowEvent, flow_count


class Player:
    def __init__(self, context: Any) -> None:
        self.context = context

    @on_request("echo")
    async def echo(self, payload: bytes) -> bytes:
        return payload

    @on_send("note")
    async def note(self, payload: bytes) -> None:
        pass


async def main(args: argparse.Namespace) -> None:
    app = App()
    app.enable_actor_dispatch()
    app.register_actor("player", Player, relocation=RecreateOnRelocation())
    config = ServerConfig(
        node_name=args.node_name,
        meshes=(MeshConfig(name="test"),),
        cluster_secret=bytes.fromhex(args.secret_hex),
        location_store=PostgresStoreConfig(dsn=args.dsn, schema=args.schema, connections=2),
        owner_lease_ttl=1.0,
        owner_lease_renew_interval=0.3,
        descriptor_poll_interval=0.2,
        hello_timeout=1.0,
        reclaim_sweep_interval=3600.0,
    )
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with open_server(config, app) as server:
            reclaimed = flow_count(server, FlowEvent.RECLAIMED)
            actors = []
            for i in range(args.actors):
                created = await server.actors.get_or_create(f"{args.prefix}{i}", "player")
                assert isinstance(created, Created)
                ref = created.actor
                actors.append([ref.actor_id.value, ref.object_generation.value, ref.node_rid.hex])
            line = {
                "event": "ready",
                "rid": server.identity.node_rid.hex,
                "generation": server.identity.node_generation.value,
                "reclaimed": reclaimed,
                "actors": actors,
            }
            print(json.dumps(line), flush=True)
            async for _ in signals:
                break


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--schema", required=True)
    parser.add_argument("--secret-hex", required=True)
    parser.add_argument("--node-name", default="worker")
    parser.add_argument("--actors", type=int, default=0)
    parser.add_argument("--prefix", default="a")
    trio.run(main, parser.parse_args())
