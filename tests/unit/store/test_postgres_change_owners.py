"""PostgresLocationStore.change_owners when it is interrupted: a Trio cancellation or a
connection lost mid-statement leaves the aggregate owner change all-or-nothing (the
rows and the capacity counters agree), reported as ``trio.Cancelled`` or
``StoreOutcomeUnknown`` exactly like change_owner, and a batch waiting on a row lock
is cancelled promptly."""

from __future__ import annotations

import random

import pytest
import trio
from pg_kit import open_admin, ready_actor, register

from zlink_trio.errors import StoreOutcomeUnknown
from zlink_trio.store.api import Applied, AuthorityRow, LocationStore, OwnerFence
from zlink_trio.store.postgres import open_postgres_store

pytestmark = pytest.mark.postgres


async def _counters(store: LocationStore, owner: OwnerFence) -> int:
    (record,) = (r for r in await store.list_nodes() if r.descriptor.node_rid == owner.node_rid)
    return record.active


async def test_a_cancelled_batch_is_all_or_nothing(pg_dsn: str, pg_schema: str) -> None:
    """Cancelled at random points, each batch either moved every row or none, the store
    never reports an outcome for it, and the counters always match the rows."""
    rng = random.Random(14)
    outcomes = {"applied": 0, "cancelled, committed": 0, "cancelled, not committed": 0}
    async with open_postgres_store(pg_dsn, schema=pg_schema, connections=2) as store:
        a, b = await register(store), await register(store)
        rows = [await ready_actor(store, a, f"m{i}") for i in range(5)]
        for _ in range(40):
            target = b if rows[0].owner == a else a
            result = None
            changes = [(row.key, row.store_version) for row in rows]
            with trio.move_on_after(rng.uniform(0.0, 0.012)) as scope:
                result = await store.change_owners(changes, target)
            now: list[AuthorityRow] = []
            for row in rows:
                current = await store.read(row.key)
                assert current is not None
                now.append(current)
            if scope.cancelled_caught:
                assert result is None
                if now == rows:
                    outcomes["cancelled, not committed"] += 1
                else:
                    assert all(row.owner == target for row in now)
                    outcomes["cancelled, committed"] += 1
            else:
                assert isinstance(result, Applied)
                assert list(result.row) == now
                outcomes["applied"] += 1
            holder = now[0].owner
            assert all(row.owner == holder for row in now)
            other = b if holder == a else a
            assert (await _counters(store, holder), await _counters(store, other)) == (5, 0)
            rows = now
    assert sum(outcomes.values()) == 40
    print(outcomes)


async def test_connection_lost_mid_batch_is_store_outcome_unknown(
    pg_dsn: str, pg_schema: str
) -> None:
    """The backend dies while updating the second row (a trigger makes it terminate
    itself): StoreOutcomeUnknown, and a re-read shows that no row changed (one
    transaction), then the store works again."""
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=2) as store,
        open_admin(pg_dsn) as admin,
    ):
        a, b = await register(store), await register(store)
        rows = [await ready_actor(store, a, name) for name in ("first", "second")]
        await admin.execute(
            f"""
            CREATE FUNCTION "{pg_schema}".die() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.object_id = 'second'::bytea THEN
                    PERFORM pg_terminate_backend(pg_backend_pid());
                    PERFORM pg_sleep(5);  -- the SIGTERM lands here
                END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER die BEFORE UPDATE ON "{pg_schema}".authority
                FOR EACH ROW EXECUTE FUNCTION "{pg_schema}".die();
            """
        )
        changes = [(row.key, row.store_version) for row in rows]
        with pytest.raises(StoreOutcomeUnknown):
            await store.change_owners(changes, b)
        await admin.execute(f'DROP TRIGGER die ON "{pg_schema}".authority')
        assert [await store.read(row.key) for row in rows] == rows
        assert (await _counters(store, a), await _counters(store, b)) == (2, 0)
        moved = await store.change_owners(changes, b)
        assert isinstance(moved, Applied)
        assert (await _counters(store, a), await _counters(store, b)) == (0, 2)


async def test_a_batch_blocked_on_a_row_lock_is_cancelled_promptly(
    pg_dsn: str, pg_schema: str
) -> None:
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=1) as store,
        open_admin(pg_dsn) as admin,
    ):
        a, b = await register(store), await register(store)
        rows = [await ready_actor(store, a, name) for name in ("free", "locked")]
        await admin.execute("BEGIN")
        await admin.execute(
            f'SELECT 1 FROM "{pg_schema}".authority WHERE object_id = $1 FOR UPDATE', b"locked"
        )
        deadline = trio.current_time() + 0.1
        with trio.move_on_after(0.1) as scope:
            await store.change_owners([(row.key, row.store_version) for row in rows], b)
        assert scope.cancelled_caught
        assert trio.current_time() - deadline < 2.0
        assert await admin.store_backends(pg_schema) == []  # settled, never reused
        await admin.execute("COMMIT")
        assert [await store.read(row.key) for row in rows] == rows
        assert (await _counters(store, a), await _counters(store, b)) == (2, 0)
