"""A node process that is the TARGET of Actor relocations, for the relocation fault tests
(run as a script)::

    python tests/faults/relocation_host.py --dsn DSN --schema S --secret-hex HEX \\
        [--block-restore]

Opens a server on the shared PostgreSQL Location Store (mesh "test") with the Actor type
"counter" (PreserveStateWith; its adapter's restore prints ``{"event": "restoring"}`` and,
with ``--block-restore``, never returns), the Instance Spot type "bag" (the same, for
Spot moves) and the SpotWide User Spot type "hall" (the same, for a Spot moving with its
member "counter"s), prints one JSON line
``{"event": "ready", "rid": HEX}`` and serves until SIGTERM; every handled "add" prints
``{"event": "handled", "payload": TEXT}``.
"""

from __future__ import annotations

import argparse
import json
import signal
from typing import Any

import trio

from zlink_trio import (
    App,
    MeshConfig,
    PostgresStoreConfig,
    PreserveStateWith,
    ServerConfig,
    SpotKind,
    SpotWide,
    on_request,
    on_send,
    open_server,
)


def say(**line: Any) -> None:
    print(json.dumps(line), flush=True)


def make_app(block_restore: bool) -> App:
    class Counter:
        def __init__(self, context: Any) -> None:
            self.context = context
            self.total = 0

        @on_send("add")
        async def add(self, payload: bytes) -> None:
            self.total += 1
            say(event="handled", payload=payload.decode())

        @on_request("get")
        async def get(self, payload: bytes) -> bytes:
            return str(self.total).encode()

        @on_request("join")
        async def join(self, payload: bytes) -> bytes:
            return str(self.context.join_spot(payload.decode()).defer().value).encode()

    class Adapter:
        async def capture(self, actor: Counter) -> bytes:
            return str(actor.total).encode()

        async def restore(self, actor: Counter, payload: bytes) -> None:
            say(event="restoring")
            if block_restore:
                await trio.sleep_forever()
            actor.total = int(payload.decode())

    class Bag:
        def __init__(self, context: Any) -> None:
            self.context = context
            self.total = 0

        @on_send("add")
        async def add(self, payload: bytes) -> None:
            self.total += 1
            say(event="handled", payload=payload.decode())

        @on_request("add-req")
        async def add_req(self, payload: bytes) -> bytes:
            self.total += 1
            say(event="handled", payload=payload.decode())
            return payload

        @on_request("get")
        async def get(self, payload: bytes) -> bytes:
            return str(self.total).encode()

    app = App()
    app.enable_actor_dispatch()
    app.register_actor("counter", Counter, relocation=PreserveStateWith(Adapter()))
    app.register_spot("bag", Bag, kind=SpotKind.INSTANCE, relocation=PreserveStateWith(Adapter()))
    app.register_spot("hall", Bag, execution=SpotWide(), relocation=PreserveStateWith(Adapter()))
    return app


async def main(args: argparse.Namespace) -> None:
    config = ServerConfig(
        node_name="target",
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
        async with open_server(config, make_app(args.block_restore)) as server:
            say(event="ready", rid=server.identity.node_rid.hex)
            async for _ in signals:
                break


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--schema", required=True)
    parser.add_argument("--secret-hex", required=True)
    parser.add_argument("--block-restore", action="store_true")
    trio.run(main, parser.parse_args())
