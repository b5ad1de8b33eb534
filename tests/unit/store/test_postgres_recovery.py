"""PostgresLocationStore when its connections die (pg_terminate_backend): reads retry
transparently, a mutation caught mid-flight is StoreOutcomeUnknown (never success or
failure), and recovery_epoch moves once per outage."""

from __future__ import annotations

import pytest
from pg_kit import applied, open_admin, ready_actor, register

from zlink_trio.errors import StoreOutcomeUnknown, Unavailable
from zlink_trio.ids import OperationId, SpotId
from zlink_trio.store.api import ContentRef, OperationKey, TerminalRecord
from zlink_trio.store.postgres import open_postgres_store

pytestmark = pytest.mark.postgres

KILL = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1"


async def test_killed_connections_are_replaced_and_reads_retry(pg_dsn: str, pg_schema: str) -> None:
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=3) as store,
        open_admin(pg_dsn) as admin,
    ):
        row = await ready_actor(store, await register(store), "survivor")
        ref = await store.put_root(b"root bytes")
        assert store.recovery_epoch == 0
        before = await admin.store_backends(pg_schema)
        assert len(before) == 3
        assert await admin.fetchval(KILL, f"zlink_trio/{pg_schema}") == 3
        assert await store.read(row.key) == row  # retried on a new connection
        assert store.recovery_epoch == 1
        for _ in range(6):  # every other connection is replaced without a second epoch
            assert await store.read_root(ref) == b"root bytes"
        assert await store.read(row.key) == row
        assert store.recovery_epoch == 1
        after = await admin.store_backends(pg_schema)
        assert not set(after) & set(before)
        # mutations work again
        applied(await store.set_membership(row.key, row.store_version, SpotId("r")))
        # a second outage is a second recovery
        await admin.fetchval(KILL, f"zlink_trio/{pg_schema}")
        assert await store.read_root(ContentRef.of(b"nothing")) is None
        assert store.recovery_epoch == 2


async def test_idle_connection_killed_before_a_cas_is_not_an_unknown_outcome(
    pg_dsn: str, pg_schema: str
) -> None:
    """A connection found closed before the statement was sent: the CAS is retried on a
    new connection (nothing was sent, so the outcome was never in doubt)."""
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=1) as store,
        open_admin(pg_dsn) as admin,
    ):
        row = await ready_actor(store, await register(store), "p")
        (pid,) = await admin.store_backends(pg_schema)
        # wait for the backend to be gone, so the store surely sees a closed connection
        await admin.fetchval(
            "SELECT pg_terminate_backend($1, 5000)", pid
        )  # timeout form waits for exit
        moved = applied(await store.set_membership(row.key, row.store_version, SpotId("r")))
        assert moved.membership == SpotId("r")
        assert store.recovery_epoch == 1


async def test_connection_lost_mid_cas_is_store_outcome_unknown(
    pg_dsn: str, pg_schema: str
) -> None:
    """The backend dies while executing the CAS (a trigger makes it terminate itself):
    the store raises StoreOutcomeUnknown (an Unavailable), a re-read shows the truth, and
    the store keeps working."""
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=2) as store,
        open_admin(pg_dsn) as admin,
    ):
        row = await ready_actor(store, await register(store), "doomed")
        await admin.execute(
            f"""
            CREATE FUNCTION "{pg_schema}".die() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_terminate_backend(pg_backend_pid());
                PERFORM pg_sleep(5);  -- the SIGTERM lands here
                RETURN NEW;
            END $$;
            CREATE TRIGGER die BEFORE UPDATE ON "{pg_schema}".authority
                FOR EACH ROW EXECUTE FUNCTION "{pg_schema}".die();
            """
        )
        with pytest.raises(StoreOutcomeUnknown) as caught:
            await store.set_membership(row.key, row.store_version, SpotId("lost"))
        assert isinstance(caught.value, Unavailable)
        await admin.execute(f'DROP TRIGGER die ON "{pg_schema}".authority')
        assert await store.read(row.key) == row  # the truth: it did not commit
        assert store.recovery_epoch == 1
        applied(await store.set_membership(row.key, row.store_version, SpotId("kept")))


@pytest.mark.parametrize("table", ["roots", "terminals"])
async def test_idempotent_write_lost_in_flight_until_retries_run_out_is_outcome_unknown(
    pg_dsn: str, pg_schema: str, table: str
) -> None:
    """Every attempt of an idempotent write dies mid-statement (a trigger terminates its
    backend) until ``retry_window`` runs out: some attempt may have committed, so the
    store raises StoreOutcomeUnknown, not a plain Unavailable."""
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=1, retry_window=0.2) as store,
        open_admin(pg_dsn) as admin,
    ):
        node = await register(store)
        await admin.execute(
            f"""
            CREATE FUNCTION "{pg_schema}".die() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_terminate_backend(pg_backend_pid());
                PERFORM pg_sleep(5);  -- the SIGTERM lands here
                RETURN NEW;
            END $$;
            CREATE TRIGGER die BEFORE INSERT OR UPDATE ON "{pg_schema}".{table}
                FOR EACH ROW EXECUTE FUNCTION "{pg_schema}".die();
            """
        )
        with pytest.raises(StoreOutcomeUnknown):
            if table == "roots":
                await store.put_root(b"maybe stored")
            else:
                key = OperationKey(node.node_rid, node.node_generation, OperationId(7))
                await store.record_terminal(TerminalRecord(key, b"done"), retain_for=60.0)
        await admin.execute(f'DROP TRIGGER die ON "{pg_schema}".{table}')
        assert await store.read_root(ContentRef.of(b"maybe stored")) is None  # rolled back


async def test_read_lost_in_flight_until_retries_run_out_stays_unavailable(
    pg_dsn: str, pg_schema: str
) -> None:
    """A read has no outcome to doubt: running out of retries is a plain Unavailable."""
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=1, retry_window=0.2) as store,
    ):
        with pytest.raises(Unavailable) as caught:
            await store._conns.call(
                "fetchval",
                "SELECT pg_terminate_backend(pg_backend_pid()), pg_sleep(5)",
                (),
                idempotent=True,
                mutation=False,
            )
        assert not isinstance(caught.value, StoreOutcomeUnknown)
