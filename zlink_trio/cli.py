"""The ``zlink-trio`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ._version import __version__
from .cli_node import add_node_parser, run as run_node
from .router_web.cli import add_router_parser, run as run_router
from .store.cli import add_store_parser, run as run_store


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zlink-trio",
        description="Trio runtime for distributed Spots, Actors and STREAM sessions.",
    )
    parser.add_argument("--version", action="version", version=f"zlink-trio {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_store_parser(commands)
    add_node_parser(commands)
    add_router_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "store":
        return run_store(args)
    if args.command == "node":
        return run_node(args)
    if args.command == "router":
        return run_router(args)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
