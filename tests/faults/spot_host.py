"""A node process hosting the Instance Spot type "cart", for the cold-activation process
tests (run as a script).

::

    python tests/faults/spot_host.py --dsn DSN --schema S --secret-hex HEX
        [--hold none|factory|commit]

Opens a server on the shared PostgreSQL Location Store (mesh "test", 1 s owner leases
renewed every 0.3 s, a reclaim sweep every 0.3 s: an expired lifecycle's activations are
recovered within a second of its lease's end) and prints JSON lines:

* ``{"event": "ready", "rid": HEX, "generation": INT}`` once ``open_server`` returned;
* ``{"event": "factory", "spot": ID}`` when a Spot's factory starts; with
  ``--hold factory`` it then never returns (the process is killed between Reserve and the
  Ready commit);
* ``{"event": "committed", "spot": ID}`` when a Ready commit of an Instance Spot applied;
  with ``--hold commit`` the node then never returns from it (killed between the Ready
  commit and the first handler);
* ``{"event": "handled", "spot": ID, "generation": INT, "packet": P, "payload": TEXT}``
  for every message a Spot handled (after the handler's work, before its completion is
  recorded);
* ``{"event": "root_deleted", "removed": BOOL}`` after every ``delete_root`` of this node
  (a cold activation's recovery root goes once its first message completed).

The "cart" Spot's handlers: send ``note`` (append the payload), request ``log`` (the
payloads handled so far, newline-separated). Serves until SIGTERM (exit 0).
"""

from __future__ import annotations

import argparse
import json
import signal
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from zlink_trio import (
    App,
    DisableRelocation,
    MeshConfig,
    MessageKind,
    ServerConfig,
    SpotKind,
    on_request,
    on_send,
    open_server,
)
from zlink_trio.store.api import Applied, ObjectKind
from zlink_trio.store.postgres import open_postgres_store
from zlink_trio.testing import StoreWrapper

T = TypeVar("T")


def emit(**line: Any) -> None:
    print(json.dumps(line), flush=True)


class HoldAfterCommit(StoreWrapper):
    """Reports every applied Ready commit of an Instance Spot; with ``hold`` never
    returns from it."""

    def __init__(self, inner: Any, hold: bool) -> None:
        super().__init__(inner)
        self._hold = hold

    async def _around(self, method: str, call: Callable[[], Awaitable[T]], *args: object) -> T:
        result = await call()
        if method == "delete_root":
            emit(event="root_deleted", removed=bool(result))
        if (
            method == "commit_ready"
            and isinstance(result, Applied)
            and result.row.kind is ObjectKind.INSTANCE_SPOT
        ):
            emit(event="committed", spot=result.row.key.object_id)
            if self._hold:
                await trio.sleep_forever()
        return result


def make_app(hold_factory: bool) -> App:
    class Cart:
        def __init__(self, context: Any) -> None:
            self.context = context
            self.notes: list[str] = []

        def _handled(self, packet: str, payload: bytes) -> None:
            context = self.context
            emit(
                event="handled",
                spot=context.spot_id.value,
                generation=context.object_generation.value,
                packet=packet,
                payload=payload.decode(),
            )

        @on_send("note")
        async def note(self, payload: bytes) -> None:
            self.notes.append(payload.decode())
            self._handled("note", payload)

        @on_request("log")
        async def log(self, payload: bytes) -> bytes:
            self._handled("log", payload)
            return "\n".join(self.notes).encode()

    async def factory(context: Any) -> Any:
        emit(event="factory", spot=context.spot_id.value)
        if hold_factory:
            await trio.sleep_forever()
        return Cart(context)

    app = App()
    app.register_spot("cart", factory, kind=SpotKind.INSTANCE, relocation=DisableRelocation())
    app.register_spot_handler("cart", MessageKind.SEND, "note", Cart.note)
    app.register_spot_handler("cart", MessageKind.REQUEST, "log", Cart.log)
    return app


async def main(args: argparse.Namespace) -> None:
    async with open_postgres_store(args.dsn, schema=args.schema, connections=2) as pg:
        store = HoldAfterCommit(pg, hold=args.hold == "commit")
        config = ServerConfig(
            node_name="spot-host",
            meshes=(MeshConfig(name="test"),),
            cluster_secret=bytes.fromhex(args.secret_hex),
            location_store=store,
            owner_lease_ttl=1.0,
            owner_lease_renew_interval=0.3,
            descriptor_poll_interval=0.2,
            hello_timeout=1.0,
            reclaim_sweep_interval=0.3,
        )
        with trio.open_signal_receiver(signal.SIGTERM) as signals:
            async with open_server(config, make_app(args.hold == "factory")) as server:
                emit(
                    event="ready",
                    rid=server.identity.node_rid.hex,
                    generation=server.identity.node_generation.value,
                )
                async for _ in signals:
                    break


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--schema", required=True)
    parser.add_argument("--secret-hex", required=True)
    parser.add_argument("--hold", choices=("none", "factory", "commit"), default="none")
    trio.run(main, parser.parse_args())
