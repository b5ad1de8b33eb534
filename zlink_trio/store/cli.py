"""``zlink-trio store ...``: PostgreSQL Location Store administration.

* ``zlink-trio store migrate --dsn DSN [--schema S]`` applies pending migrations (the
  same idempotent, advisory-locked step every node runs at startup); exit 0, or 1 on error.
* ``zlink-trio store status --dsn DSN [--schema S]`` prints applied and pending
  migrations; exit 0 when the schema is up to date, 1 when migrations are pending or
  modified, or on error.

Plain asyncio (no Trio needed for a one-shot command); the loop is built explicitly so the
command also works in a process where trio-asyncio was imported.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TextIO, TypeVar

from ._pgmigrate import MigrationStatus, check_schema, migrate, packaged_migrations, read_status

__all__ = ["add_store_parser", "run"]

T = TypeVar("T")


def add_store_parser(commands: Any) -> None:
    """Add the ``store`` command to the ``zlink-trio`` sub-command parsers."""
    store = commands.add_parser("store", help="PostgreSQL Location Store administration")
    actions = store.add_subparsers(dest="store_action", metavar="ACTION", required=True)
    for name, text in (
        ("migrate", "apply pending schema migrations"),
        ("status", "show applied and pending migrations (exit 1 when any are pending)"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument("--dsn", required=True, help="PostgreSQL connection string")
        action.add_argument("--schema", default="zlink", help="schema (default: zlink)")


def _with_connection(dsn: str, fn: Callable[[Any], Awaitable[T]]) -> T:
    async def main() -> T:
        import asyncpg

        conn = await asyncpg.connect(dsn, server_settings={"application_name": "zlink_trio/cli"})
        try:
            return await fn(conn)
        finally:
            await conn.close()

    with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
        return runner.run(main())


def _print_status(status: MigrationStatus, out: TextIO) -> None:
    names = {m.version: m.name for m in packaged_migrations()}
    print(f"schema {status.schema}:", file=out)
    for version in status.applied:
        note = " (MODIFIED since applied)" if version in status.modified else ""
        note = note or (" (unknown to this release)" if version in status.unknown else "")
        print(f"  applied {version:04d} {names.get(version, '?')}{note}", file=out)
    for migration in status.pending:
        print(f"  pending {migration.version:04d} {migration.name}", file=out)
    verdict = "up to date" if status.up_to_date else "NOT up to date"
    print(f"{len(status.applied)} applied, {len(status.pending)} pending: {verdict}", file=out)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out if out is not None else sys.stdout
    try:
        schema = check_schema(args.schema)
        if args.store_action == "migrate":
            applied = _with_connection(args.dsn, lambda conn: migrate(conn, schema))
            if applied:
                names = {m.version: m.name for m in packaged_migrations()}
                done = ", ".join(f"{v:04d} {names[v]}" for v in applied)
                print(f"schema {schema}: applied {done}", file=out)
            else:
                print(f"schema {schema}: already up to date", file=out)
            return 0
        status = _with_connection(args.dsn, lambda conn: read_status(conn, schema))
    except Exception as exc:  # a command line reports, it does not crash
        print(f"zlink-trio store {args.store_action}: error: {exc}", file=sys.stderr)
        return 1
    _print_status(status, out)
    return 0 if status.up_to_date else 1
