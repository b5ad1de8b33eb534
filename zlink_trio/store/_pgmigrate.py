"""Versioned schema migrations of the PostgreSQL Location Store.

Migrations are the package's ``store/migrations/NNNN_name.sql`` files, applied in version
order, each recorded in ``<schema>.zlink_schema_migrations`` (version, name, SHA-256 of
the file, time). :func:`migrate` runs in ONE transaction that first takes
``pg_advisory_xact_lock`` on a key derived from the schema name, so nodes starting at the
same time apply each migration exactly once and the others find it done; it is idempotent.
A released migration never changes: an applied version whose checksum differs from the
packaged file is reported by :func:`read_status` and refused by :func:`migrate`.

The coroutines here are asyncio code taking an ``asyncpg.Connection`` (they run on the
store's loop thread, or under ``asyncio`` in the CLI).
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from typing import Any, Final

import attrs

from ..config import check_schema
from ..errors import ConfigurationError

__all__ = [
    "Migration",
    "MigrationStatus",
    "check_schema",
    "migrate",
    "packaged_migrations",
    "quote_schema",
    "read_status",
]

_FILE: Final = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")
PLACEHOLDER: Final = "@schema@"
TABLE: Final = "zlink_schema_migrations"


@attrs.frozen
class Migration:
    version: int
    name: str
    sql: str = attrs.field(repr=False)
    checksum: str
    """SHA-256 (hex) of the file as packaged."""


@attrs.frozen
class MigrationStatus:
    """What a schema has applied, next to what this release ships."""

    schema: str
    applied: tuple[int, ...]
    pending: tuple[Migration, ...]
    unknown: tuple[int, ...]
    """Applied versions this release does not ship (a newer release migrated)."""
    modified: tuple[int, ...]
    """Applied versions whose recorded checksum differs from the packaged file."""

    @property
    def up_to_date(self) -> bool:
        return not self.pending and not self.modified


def quote_schema(schema: str) -> str:
    return f'"{check_schema(schema)}"'


def packaged_migrations() -> tuple[Migration, ...]:
    folder = resources.files("zlink_trio.store").joinpath("migrations")
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = _FILE.fullmatch(entry.name)
        if match is None:
            continue
        raw = entry.read_bytes()
        found.append(
            Migration(
                version=int(match[1]),
                name=match[2],
                sql=raw.decode("utf-8"),
                checksum=hashlib.sha256(raw).hexdigest(),
            )
        )
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise ConfigurationError(f"two migrations share a version: {versions}")
    return tuple(found)


def _status(schema: str, recorded: dict[int, str]) -> MigrationStatus:
    shipped = packaged_migrations()
    known = {m.version: m for m in shipped}
    return MigrationStatus(
        schema=schema,
        applied=tuple(sorted(recorded)),
        pending=tuple(m for m in shipped if m.version not in recorded),
        unknown=tuple(sorted(v for v in recorded if v not in known)),
        modified=tuple(
            sorted(v for v, c in recorded.items() if v in known and known[v].checksum != c)
        ),
    )


async def read_status(conn: Any, schema: str) -> MigrationStatus:
    """The schema's migration status (a schema that does not exist has applied nothing)."""
    q = quote_schema(schema)
    exists = await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", f"{q}.{TABLE}")
    recorded: dict[int, str] = {}
    if exists:
        rows = await conn.fetch(f"SELECT version, checksum FROM {q}.{TABLE}")
        recorded = {int(r[0]): str(r[1]) for r in rows}
    return _status(schema, recorded)


async def migrate(conn: Any, schema: str) -> tuple[int, ...]:
    """Apply the pending migrations (one transaction, under the schema's advisory lock);
    return the versions this call applied (empty when up to date)."""
    q = quote_schema(schema)
    applied: list[int] = []
    # READ COMMITTED whatever the server's default_transaction_isolation: under REPEATABLE
    # READ / SERIALIZABLE the snapshot would be taken by the lock statement, BEFORE waiting,
    # and a node that waited would not see the versions the winner recorded.
    async with conn.transaction(isolation="read_committed"):
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", f"zlink_trio.migrate:{schema}"
        )
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {q}")
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {q}.{TABLE} ("
            " version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        rows = await conn.fetch(f"SELECT version, checksum FROM {q}.{TABLE}")
        status = _status(schema, {int(r[0]): str(r[1]) for r in rows})
        if status.modified:
            raise ConfigurationError(
                f"schema {schema}: applied migrations {list(status.modified)} differ from "
                "the files this release ships (never edit a released migration)"
            )
        for migration in status.pending:
            await conn.execute(migration.sql.replace(PLACEHOLDER, q))
            await conn.execute(
                f"INSERT INTO {q}.{TABLE} (version, name, checksum) VALUES ($1, $2, $3)",
                migration.version,
                migration.name,
                migration.checksum,
            )
            applied.append(migration.version)
    return tuple(applied)
