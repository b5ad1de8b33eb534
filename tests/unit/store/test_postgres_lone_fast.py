"""The lone field CAS on the store's Trio-native connection (zlink_trio.store._pqfast,
docs/decisions.md "PostgreSQL store: the lone CAS on a Trio-native connection").

After a quiet spell (``LONE_STREAK`` single CAS in a row), a CAS whose caller holds the row
runs on one libpq connection driven from the Trio thread instead of the loop-thread
bridge. Every answer is the bridge's: applied, lost with the current row, the server's
typed error; a connection found dead before the statement is retried, one lost in flight
is StoreOutcomeUnknown and starts an outage (recovery_epoch moves once); a cancelled
statement is settled server-side before Cancelled and its connection is never reused."""

from __future__ import annotations

import pytest
import trio
from pg_kit import Admin, applied, open_admin, ready_actor, register

from zlink_trio.errors import StoreOutcomeUnknown, Unavailable
from zlink_trio.ids import SpotId
from zlink_trio.store import _pgbatch
from zlink_trio.store.api import AuthorityRow, Conflict
from zlink_trio.store.postgres import PostgresLocationStore, open_postgres_store

pytestmark = pytest.mark.postgres

SLIM = "RETURNING store_version"  # the end of FieldCas.single_slim


async def quiet_spell(store: PostgresLocationStore, row: AuthorityRow) -> AuthorityRow:
    """``LONE_STREAK`` + 2 sequential CAS of ``row``: the next one goes alone."""
    for i in range(_pgbatch.LONE_STREAK + 2):
        row = applied(await store.set_membership(row.key, row.store_version, SpotId(f"q{i}")))
    return row


async def fast_backends(admin: Admin, schema: str, bridge: list[int]) -> list[int]:
    """The store's backends other than its bridge connections ``bridge`` whose last
    statement was the slim single-row CAS: the Trio-native connection."""
    rows = await admin.fetch(
        "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE $2"
        " AND NOT pid = ANY($3::int[])",
        f"zlink_trio/{schema}"[:63],
        f"%{SLIM}",
        bridge,
    )
    return [r[0] for r in rows]


async def test_a_lone_cas_runs_on_the_trio_native_connection(pg_dsn: str, pg_schema: str) -> None:
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=1) as store,
        open_admin(pg_dsn) as admin,
    ):
        row = await ready_actor(store, await register(store), "fast")
        bridge = await admin.store_backends(pg_schema)
        assert len(bridge) == 1  # no Trio-native connection before a lone CAS
        row = await quiet_spell(store, row)
        moved = applied(await store.set_membership(row.key, row.store_version, SpotId("f")))
        assert moved.membership == SpotId("f")
        assert moved.store_version > row.store_version
        assert await store.read(row.key) == moved  # what it rebuilt is what PostgreSQL holds
        assert len(await fast_backends(admin, pg_schema, bridge)) == 1
        assert len(await admin.store_backends(pg_schema)) == 2  # the bridge's one + this one
    assert await admin_backends_after_close(pg_dsn, pg_schema) == []


async def admin_backends_after_close(dsn: str, schema: str) -> list[int]:
    async with open_admin(dsn) as admin:
        return await admin.store_backends(schema)


async def test_a_lone_cas_that_lost_gets_the_current_row(pg_dsn: str, pg_schema: str) -> None:
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=1) as store,
        open_admin(pg_dsn) as admin,
    ):
        row = await ready_actor(store, await register(store), "lost")
        bridge = await admin.store_backends(pg_schema)
        row = await quiet_spell(store, row)
        moved = applied(await store.set_membership(row.key, row.store_version, SpotId("a")))
        assert len(await fast_backends(admin, pg_schema, bridge)) == 1
        stale = await store.set_membership(row.key, row.store_version, SpotId("b"))
        assert stale == Conflict(moved)
        assert await store.read(row.key) == moved


async def test_a_lone_cas_the_server_refuses_raises_what_the_bridge_raises(
    pg_dsn: str, pg_schema: str
) -> None:
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=1) as store,
        open_admin(pg_dsn) as admin,
    ):
        row = await quiet_spell(store, await ready_actor(store, await register(store), "no"))
        await admin.execute(
            f"""
            CREATE FUNCTION "{pg_schema}".refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'refused by a trigger'; END $$;
            CREATE TRIGGER refuse BEFORE UPDATE ON "{pg_schema}".authority
                FOR EACH ROW EXECUTE FUNCTION "{pg_schema}".refuse();
            """
        )
        with pytest.raises(Unavailable, match="refused by a trigger") as lone:
            await store.set_membership(row.key, row.store_version, SpotId("x"))
        assert not isinstance(lone.value, StoreOutcomeUnknown)
        await admin.execute(f'DROP TRIGGER refuse ON "{pg_schema}".authority')
        assert await store.read(row.key) == row
        assert store.recovery_epoch == 0  # the session was fine: no outage
        moved = applied(await store.set_membership(row.key, row.store_version, SpotId("y")))
        assert moved.membership == SpotId("y")


async def test_its_connection_killed_while_idle_the_cas_is_retried_not_unknown(
    pg_dsn: str, pg_schema: str
) -> None:
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=1) as store,
        open_admin(pg_dsn) as admin,
    ):
        row = await ready_actor(store, await register(store), "idle")
        bridge = await admin.store_backends(pg_schema)
        row = await quiet_spell(store, row)
        (pid,) = await fast_backends(admin, pg_schema, bridge)
        await admin.fetchval("SELECT pg_terminate_backend($1, 5000)", pid)  # waits for exit
        moved = applied(await store.set_membership(row.key, row.store_version, SpotId("r")))
        assert moved.membership == SpotId("r")
        assert store.recovery_epoch == 1  # a dead connection is an outage, as for a slot
        bridge = await admin.store_backends(pg_schema)  # replaced in the outage
        row = await quiet_spell(store, moved)  # the fast path comes back after it
        (again,) = await fast_backends(admin, pg_schema, bridge)
        assert again != pid
        assert store.recovery_epoch == 1


async def test_its_connection_lost_mid_cas_is_store_outcome_unknown(
    pg_dsn: str, pg_schema: str
) -> None:
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=1) as store,
        open_admin(pg_dsn) as admin,
    ):
        row = await quiet_spell(store, await ready_actor(store, await register(store), "mid"))
        await admin.execute(
            f"""
            CREATE FUNCTION "{pg_schema}".die() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_terminate_backend(pg_backend_pid());
                PERFORM pg_sleep(5);
                RETURN NEW;
            END $$;
            CREATE TRIGGER die BEFORE UPDATE ON "{pg_schema}".authority
                FOR EACH ROW EXECUTE FUNCTION "{pg_schema}".die();
            """
        )
        with pytest.raises(StoreOutcomeUnknown):
            await store.set_membership(row.key, row.store_version, SpotId("x"))
        await admin.execute(f'DROP TRIGGER die ON "{pg_schema}".authority')
        assert await store.read(row.key) == row  # it did not commit
        assert store.recovery_epoch == 1
        moved = applied(await store.set_membership(row.key, row.store_version, SpotId("y")))
        assert moved.membership == SpotId("y")


async def test_a_lone_cas_cancelled_on_a_row_lock_is_settled_before_cancelled(
    pg_dsn: str, pg_schema: str
) -> None:
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=1) as store,
        open_admin(pg_dsn) as admin,
    ):
        row = await quiet_spell(store, await ready_actor(store, await register(store), "lock"))
        await admin.execute("BEGIN")
        await admin.execute(
            f'SELECT 1 FROM "{pg_schema}".authority WHERE object_id = $1 FOR UPDATE', b"lock"
        )
        waiting: list[list[int]] = []

        async def cas() -> None:
            await store.set_membership(row.key, row.store_version, SpotId("x"))

        with trio.move_on_after(5) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(cas)
                while not waiting or not waiting[-1]:  # each check is a round trip
                    waiting.append(
                        [
                            r[0]
                            for r in await admin.fetch(
                                "SELECT pid FROM pg_stat_activity WHERE application_name = $1"
                                " AND wait_event_type = 'Lock' AND query LIKE $2",
                                f"zlink_trio/{pg_schema}"[:63],
                                f"%{SLIM}",
                            )
                        ]
                    )
                nursery.cancel_scope.cancel()  # the CAS waits on the lock: give it up
        assert not scope.cancelled_caught
        (pid,) = waiting[-1]
        await admin.execute("COMMIT")  # (its own snapshot of pg_stat_activity ends too)
        # Cancelled only once settled server-side: with the lock gone it did not apply,
        # nothing of the store runs, and the connection that settled (idle, outside any
        # transaction) is kept.
        assert await store.read(row.key) == row
        assert await admin.busy_store_backends(pg_schema) == []
        assert pid in await admin.store_backends(pg_schema)
        moved = applied(await store.set_membership(row.key, row.store_version, SpotId("y")))
        assert moved.membership == SpotId("y")
        assert store.recovery_epoch == 0  # a cancel is no outage
