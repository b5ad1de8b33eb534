"""``zlink-trio router node|client|example``: the router example from the command line."""

from __future__ import annotations

import argparse
import signal
from typing import Any

import trio

from ..router.config import SessionRouterConfig

__all__ = ["add_router_parser", "run"]


def add_router_parser(commands: Any) -> None:
    parser = commands.add_parser("router", help="the SessionRouter example (PostgreSQL)")
    sub = parser.add_subparsers(dest="router_command", metavar="ROUTER_COMMAND", required=True)
    node = sub.add_parser("node", help="serve one router node over websocket")
    node.add_argument("--dsn", required=True)
    node.add_argument("--schema", default="zlink_router_example")
    node.add_argument("--node", required=True, help="this node's id")
    node.add_argument("--host", default="127.0.0.1")
    node.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    node.add_argument("--turn-seconds", type=float, default=3.0)
    node.add_argument("--lease", type=float, default=30.0, help="lock_lease, seconds")
    node.add_argument("--secondary-ttl", type=float, default=30.0)
    node.add_argument("--sweep", type=float, default=15.0, help="holder-loss sweep interval")
    node.add_argument("--no-listen", action="store_true", help="never hear the signal bus")
    node.add_argument("--log-turns", action="store_true", help="a JSON line per turn")
    client = sub.add_parser("client", help="send requests to random nodes, print events")
    client.add_argument("--url", action="append", required=True, help="a node (repeat)")
    client.add_argument("--session", default="example-session")
    client.add_argument("text", nargs="+")
    example = sub.add_parser("example", help="three node processes and the client")
    example.add_argument("--dsn", required=True)
    example.add_argument("--schema", default="zlink_router_example")


async def _until_signalled(fn: Any) -> None:
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    return

        nursery.start_soon(watch)
        await fn()
        nursery.cancel_scope.cancel()


def run(args: argparse.Namespace) -> int:
    from .example import run_client, run_example, run_node

    if args.router_command == "node":
        lease = args.lease
        config = SessionRouterConfig(
            lock_lease=lease,
            lock_extend_interval=lease / 3,
            idempotency_secondary_ttl=args.secondary_ttl,
            holder_loss_sweep_interval=args.sweep,
            status_heartbeat_interval=min(10.0, lease / 3),
        )

        async def node() -> None:
            await run_node(
                args.dsn,
                schema=args.schema,
                node=args.node,
                host=args.host,
                port=args.port,
                turn_seconds=args.turn_seconds,
                config=config,
                listen=not args.no_listen,
                log_turns=args.log_turns,
            )

        trio.run(_until_signalled, node)
    elif args.router_command == "client":

        async def client() -> None:
            await run_client(args.url, args.session, args.text)

        trio.run(client)
    else:

        async def example() -> None:
            await run_example(args.dsn, schema=args.schema)

        trio.run(example)
    return 0
