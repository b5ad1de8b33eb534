"""The ``zlink-trio`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from ._version import __version__
from .cli_node import add_node_parser, run as run_node
from .demo.run import add_demo_parser, run as run_demo
from .demo.terminal import add_client_parser, run as run_client
from .ops.bench import add_bench_parser, run as run_bench
from .ops.cluster import add_cluster_parser, run as run_cluster
from .ops.status import add_status_parser, run as run_status
from .router_web.cli import add_router_parser, run as run_router
from .store.cli import add_store_parser, run as run_store


class _Parser(argparse.ArgumentParser):
    """A command-line mistake is one line on standard error (and exit status 2), never a
    usage dump: ``zlink-trio node: error: ... (see zlink-trio node --help)``."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="zlink-trio",
        description="Trio runtime for distributed Spots, Actors and STREAM sessions.",
    )
    parser.add_argument("--version", action="version", version=f"zlink-trio {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    parser.set_defaults(_commands=commands.choices)
    add_demo_parser(commands)
    add_client_parser(commands)
    add_store_parser(commands)
    add_node_parser(commands)
    add_status_parser(commands)
    add_cluster_parser(commands)
    add_bench_parser(commands)
    add_router_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # named by the subcommand they were given to, with its --help
        own = args._commands.get(args.command, parser)
        own.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "demo":
        return run_demo(args)
    if args.command == "client":
        return run_client(args)
    if args.command == "store":
        return run_store(args)
    if args.command == "node":
        return run_node(args)
    if args.command == "status":
        return run_status(args)
    if args.command == "cluster":
        return run_cluster(args)
    if args.command == "bench":
        return run_bench(args)
    if args.command == "router":
        return run_router(args)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
