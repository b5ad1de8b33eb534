"""Schema administration of the PostgreSQL store from Trio: migrate, status, drop.

Each call opens one short-lived connection (``application_name`` ``zlink_trio-admin/<schema>``)
on its own asyncio loop thread. The store's own connections are named by
:func:`application_name`.

Errors are the store's typed ones, as for :func:`~zlink_trio.store.postgres.open_postgres_store`
(which runs its startup migration through :func:`run_admin`): a bad schema name or a
modified/missing migration is ``ConfigurationError``; anything else (server unreachable,
``OSError``, a server-reported error, a bad DSN) is ``Unavailable`` with the cause chained.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from ..errors import ConfigurationError, Unavailable, ZLinkError
from ._aiobridge import LoopThread, open_loop_thread
from ._pgconn import PgConnections
from ._pgmigrate import MigrationStatus, check_schema, migrate, quote_schema, read_status

__all__ = ["application_name", "drop_schema", "migrate_schema", "schema_status"]


def application_name(schema: str) -> str:
    """``application_name`` of the store's connections (find them in pg_stat_activity)."""
    return f"zlink_trio/{schema}"[:63]


def _connect_kwargs(dsn: str, schema: str, *, admin: bool = False) -> dict[str, Any]:
    name = f"zlink_trio-admin/{schema}"[:63] if admin else application_name(schema)
    return {"dsn": dsn, "server_settings": {"application_name": name}}


async def _migrate_dsn(dsn: str, schema: str) -> tuple[int, ...]:
    conn = await asyncpg.connect(**_connect_kwargs(dsn, schema, admin=True))
    try:
        return await migrate(conn, schema)
    finally:
        await conn.close()


async def _status_dsn(dsn: str, schema: str) -> MigrationStatus:
    conn = await asyncpg.connect(**_connect_kwargs(dsn, schema, admin=True))
    try:
        return await read_status(conn, schema)
    finally:
        await conn.close()


async def _drop_dsn(dsn: str, schema: str) -> None:
    conn = await asyncpg.connect(**_connect_kwargs(dsn, schema, admin=True))
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {quote_schema(schema)} CASCADE")
    finally:
        await conn.close()


async def run_admin(bridge: LoopThread, fn: Any, dsn: str, schema: str) -> Any:
    """Run an admin coroutine (``_migrate_dsn``, ``_status_dsn``, ``_drop_dsn``) on
    ``bridge``; ZLinkErrors pass, every other failure becomes ``Unavailable``."""
    try:
        return await bridge.run(fn, dsn, schema)
    except ZLinkError:
        raise
    except Exception as exc:
        sqlstate = getattr(exc, "sqlstate", None)
        why = f"error {sqlstate}: {exc}" if sqlstate else repr(exc)
        raise Unavailable(f"cannot prepare PostgreSQL schema {schema}: {why}") from exc


async def _on_own_loop(fn: Any, dsn: str, schema: str) -> Any:
    async with open_loop_thread(name="zlink-pg-admin") as bridge:
        return await run_admin(bridge, fn, dsn, schema)


async def migrate_schema(dsn: str, schema: str = "zlink") -> tuple[int, ...]:
    """Apply pending migrations to ``schema`` (Trio); returns the versions applied now.

    Raises ConfigurationError (bad schema name, modified migration) or Unavailable."""
    check_schema(schema)
    return tuple(await _on_own_loop(_migrate_dsn, dsn, schema))


async def schema_status(dsn: str, schema: str = "zlink") -> MigrationStatus:
    """Applied and pending migrations of ``schema`` (Trio); raises ConfigurationError
    (bad schema name) or Unavailable."""
    check_schema(schema)
    status: MigrationStatus = await _on_own_loop(_status_dsn, dsn, schema)
    return status


async def drop_schema(dsn: str, schema: str) -> None:
    """Drop ``schema`` and everything in it (tests use one schema each); raises
    ConfigurationError (bad schema name) or Unavailable."""
    check_schema(schema)
    await _on_own_loop(_drop_dsn, dsn, schema)


@asynccontextmanager
async def open_schema_connections(
    dsn: str,
    schema: str,
    connections: int,
    *,
    migrate: bool,
    cancel_grace: float,
    retry_window: float,
    thread_name: str,
    fast: bool = False,
) -> AsyncIterator[tuple[LoopThread, PgConnections]]:
    """The bridge thread and ``connections`` open connections to ``schema``, migrated first
    (``migrate``) or checked to be up to date, for the block: what the Location Store and
    the router's PostgreSQL backends both open. ``fast``: one Trio-native connection more,
    for the lone field CAS (:mod:`._pqfast`; the Location Store's).

    Raises:
        Unavailable: the server cannot be reached.
        ConfigurationError: bad schema name or connection count, or a schema that is not
            up to date with ``migrate=False``.
    """
    check_schema(schema)
    if isinstance(connections, bool) or not isinstance(connections, int) or connections < 1:
        raise ConfigurationError(f"connections must be a positive int, got {connections!r}")
    async with open_loop_thread(name=thread_name) as bridge:
        if migrate:
            await run_admin(bridge, _migrate_dsn, dsn, schema)
        else:
            status: MigrationStatus = await run_admin(bridge, _status_dsn, dsn, schema)
            if not status.up_to_date:
                raise ConfigurationError(
                    f"schema {schema} is not migrated: run `zlink-trio store migrate`"
                )
        conns = PgConnections(
            bridge,
            _connect_kwargs(dsn, schema),
            connections,
            cancel_grace=cancel_grace,
            retry_window=retry_window,
            fast=fast,
        )
        await conns.open()
        try:
            yield bridge, conns
        finally:
            await conns.aclose()
