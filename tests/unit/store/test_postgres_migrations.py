"""Versioned schema migrations: idempotent, safe when several nodes start at once,
checked at startup, reported by `zlink-trio store status`."""

from __future__ import annotations

import subprocess
import sys
import urllib.parse

import pytest
import trio
from pg_kit import open_admin

from zlink_trio.cli import main
from zlink_trio.errors import ConfigurationError, Unavailable
from zlink_trio.store._pgmigrate import check_schema, packaged_migrations
from zlink_trio.store.postgres import (
    drop_schema,
    migrate_schema,
    open_postgres_store,
    schema_status,
)

LATEST = packaged_migrations()[-1].version


def test_packaged_migrations_are_numbered_from_one() -> None:
    versions = [m.version for m in packaged_migrations()]
    assert versions == list(range(1, len(versions) + 1))
    assert all(len(m.checksum) == 64 for m in packaged_migrations())


@pytest.mark.parametrize("bad", ["", "1abc", "has-dash", 'quo"te', "x" * 64, "sp ace"])
def test_schema_names_are_plain_identifiers(bad: str) -> None:
    with pytest.raises(ConfigurationError):
        check_schema(bad)
    assert check_schema("Zlink_2") == "Zlink_2"


CLOSED_PORT_DSN = "postgresql://postgres@127.0.0.1:1/nowhere"
ADMIN_CALLS = {"migrate_schema": migrate_schema, "schema_status": schema_status}


@pytest.mark.parametrize("call", ["migrate_schema", "schema_status", "drop_schema"])
async def test_admin_calls_raise_unavailable_when_the_server_is_unreachable(call: str) -> None:
    """Like open_postgres_store: an OSError from connecting is Unavailable, not raw."""
    fn = {**ADMIN_CALLS, "drop_schema": drop_schema}[call]
    with pytest.raises(Unavailable) as caught:
        await fn(CLOSED_PORT_DSN, "zlink")
    assert isinstance(caught.value.__cause__, OSError)


@pytest.mark.postgres
@pytest.mark.parametrize("call", ["migrate_schema", "schema_status", "drop_schema"])
async def test_admin_calls_raise_unavailable_on_a_server_error(
    pg_dsn: str, pg_schema: str, call: str
) -> None:
    """A server-reported error (here: no such database) is Unavailable, not raw asyncpg."""
    parts = urllib.parse.urlsplit(pg_dsn)
    missing = urllib.parse.urlunsplit(parts._replace(path="/zlink_no_such_database"))
    fn = {**ADMIN_CALLS, "drop_schema": drop_schema}[call]
    with pytest.raises(Unavailable, match="3D000"):
        await fn(missing, pg_schema)


@pytest.mark.postgres
async def test_migrate_is_idempotent(pg_dsn: str, pg_schema: str) -> None:
    status = await schema_status(pg_dsn, pg_schema)
    assert status.applied == ()
    assert [m.version for m in status.pending] == list(range(1, LATEST + 1))
    assert not status.up_to_date
    assert await migrate_schema(pg_dsn, pg_schema) == tuple(range(1, LATEST + 1))
    assert await migrate_schema(pg_dsn, pg_schema) == ()
    status = await schema_status(pg_dsn, pg_schema)
    assert status.up_to_date
    assert status.applied == tuple(range(1, LATEST + 1))
    # a store opening an up-to-date schema applies nothing and works
    async with open_postgres_store(pg_dsn, schema=pg_schema, connections=1) as store:
        assert isinstance(await store.now(), float)


@pytest.mark.postgres
async def test_concurrent_migrations_apply_each_version_once(pg_dsn: str, pg_schema: str) -> None:
    """Several nodes starting at once (each on its own connection): the advisory lock
    serializes them; exactly one applies the migrations, the others find them done."""
    results: list[tuple[int, ...]] = []

    async def one() -> None:
        results.append(await migrate_schema(pg_dsn, pg_schema))

    async with trio.open_nursery() as nursery:
        for _ in range(6):
            nursery.start_soon(one)
    assert sorted(results) == [()] * 5 + [tuple(range(1, LATEST + 1))]
    async with open_admin(pg_dsn) as admin:
        rows = await admin.fetch(f'SELECT version FROM "{pg_schema}".zlink_schema_migrations')
    assert sorted(r[0] for r in rows) == list(range(1, LATEST + 1))


def _with_server_setting(dsn: str, name: str, value: str) -> str:
    """``dsn`` plus a server setting (asyncpg sends unknown URI query parameters as
    server settings of the session)."""
    parts = urllib.parse.urlsplit(dsn)
    query = [*urllib.parse.parse_qsl(parts.query), (name, value)]
    encoded = urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
    return urllib.parse.urlunsplit(parts._replace(query=encoded))


@pytest.mark.postgres
@pytest.mark.parametrize("isolation", ["repeatable read", "serializable"])
async def test_concurrent_migrations_under_a_stricter_default_isolation(
    pg_dsn: str, pg_schema: str, isolation: str
) -> None:
    """A server whose default_transaction_isolation is stricter than READ COMMITTED (a
    common database-wide setting): a node that waited on the advisory lock must still see
    the migrations the winner recorded, not re-apply them from a snapshot taken before.
    The test holds the schema's lock until every migrator waits on it."""
    dsn = _with_server_setting(pg_dsn, "default_transaction_isolation", isolation)
    key = f"zlink_trio.migrate:{pg_schema}"
    results: list[tuple[int, ...]] = []

    async def one() -> None:
        results.append(await migrate_schema(dsn, pg_schema))

    async with open_admin(pg_dsn) as admin, trio.open_nursery() as nursery:
        await admin.execute("SELECT pg_advisory_lock(hashtextextended($1, 0))", key)
        for _ in range(3):
            nursery.start_soon(one)
        with trio.fail_after(10):
            while (
                await admin.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1"
                    " AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
                    f"zlink_trio-admin/{pg_schema}",
                )
                < 3
            ):
                pass  # each check is a round trip: no sleep needed
        await admin.execute("SELECT pg_advisory_unlock(hashtextextended($1, 0))", key)
    assert sorted(results) == [()] * 2 + [tuple(range(1, LATEST + 1))]


@pytest.mark.postgres
async def test_stores_opening_at_once_share_one_migration(pg_dsn: str, pg_schema: str) -> None:
    nows: list[float] = []

    async def node() -> None:
        async with open_postgres_store(pg_dsn, schema=pg_schema, connections=1) as store:
            nows.append(await store.now())

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(node)
    assert len(nows) == 4


@pytest.mark.postgres
async def test_unmigrated_schema_is_refused_without_migrate(pg_dsn: str, pg_schema: str) -> None:
    with pytest.raises(ConfigurationError, match="not migrated"):
        async with open_postgres_store(pg_dsn, schema=pg_schema, migrate=False):
            pytest.fail("must not open")  # pragma: no cover
    await migrate_schema(pg_dsn, pg_schema)
    async with open_postgres_store(pg_dsn, schema=pg_schema, migrate=False, connections=1) as s:
        assert isinstance(await s.now(), float)


@pytest.mark.postgres
async def test_a_modified_migration_is_reported_and_refused(pg_dsn: str, pg_schema: str) -> None:
    await migrate_schema(pg_dsn, pg_schema)
    async with open_admin(pg_dsn) as admin:
        await admin.execute(
            f"UPDATE \"{pg_schema}\".zlink_schema_migrations SET checksum = 'x' WHERE version = 1"
        )
    status = await schema_status(pg_dsn, pg_schema)
    assert status.modified == (1,)
    assert not status.up_to_date
    with pytest.raises(ConfigurationError, match="differ"):
        await migrate_schema(pg_dsn, pg_schema)


# ----- the CLI --------------------------------------------------------------------------------
def _cli(*argv: str) -> tuple[int, str]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


@pytest.mark.postgres
async def test_cli_status_and_migrate(pg_dsn: str, pg_schema: str) -> None:
    args = ("--dsn", pg_dsn, "--schema", pg_schema)
    code, text = await trio.to_thread.run_sync(_cli, "store", "status", *args)
    assert code == 1
    assert "pending 0001 init" in text
    assert "NOT up to date" in text
    code, text = await trio.to_thread.run_sync(_cli, "store", "migrate", *args)
    assert code == 0
    assert "applied 0001 init" in text
    code, text = await trio.to_thread.run_sync(_cli, "store", "migrate", *args)
    assert (code, text.strip()) == (0, f"schema {pg_schema}: already up to date")
    code, text = await trio.to_thread.run_sync(_cli, "store", "status", *args)
    assert code == 0
    assert "applied 0001 init" in text
    assert text.strip().endswith(", 0 pending: up to date")


async def test_cli_reports_errors_with_exit_code_1(capsys: pytest.CaptureFixture[str]) -> None:
    dsn = "postgresql://postgres@127.0.0.1:1/nowhere"
    assert await trio.to_thread.run_sync(main, ["store", "status", "--dsn", dsn]) == 1
    assert "error" in capsys.readouterr().err
    assert main(["store", "migrate", "--dsn", dsn, "--schema", "bad-name"]) == 1


@pytest.mark.postgres
@pytest.mark.process
async def test_cli_entry_point_in_a_subprocess(pg_dsn: str, pg_schema: str) -> None:
    async def run(action: str) -> subprocess.CompletedProcess[bytes]:
        return await trio.run_process(
            [
                *(sys.executable, "-m", "zlink_trio.cli", "store", action),
                *("--dsn", pg_dsn, "--schema", pg_schema),
            ],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )

    assert (await run("status")).returncode == 1
    assert (await run("migrate")).returncode == 0
    done = await run("status")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip().endswith(": up to date")
