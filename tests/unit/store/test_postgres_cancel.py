"""PostgresLocationStore under Trio cancellation: a cancelled mutation's outcome is
unknown to the caller (trio.Cancelled), but it is settled before Cancelled propagates, so
a re-read tells the final truth."""

from __future__ import annotations

import random

import pytest
import trio
from pg_kit import applied, open_admin, ready_actor, register

from zlink_trio.ids import SpotId
from zlink_trio.store.api import Applied
from zlink_trio.store.postgres import open_postgres_store

pytestmark = pytest.mark.postgres


async def test_cas_blocked_on_a_row_lock_is_cancelled_promptly(pg_dsn: str, pg_schema: str) -> None:
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=1) as store,
        open_admin(pg_dsn) as admin,
    ):
        row = await ready_actor(store, await register(store), "locked")
        await admin.execute("BEGIN")
        await admin.execute(
            f'SELECT 1 FROM "{pg_schema}".authority WHERE object_id = $1 FOR UPDATE',
            b"locked",
        )
        deadline = trio.current_time() + 0.1
        with trio.move_on_after(0.1) as scope:
            await store.set_membership(row.key, row.store_version, SpotId("never"))
        assert scope.cancelled_caught
        assert trio.current_time() - deadline < 2.0
        # Settled server-side before Cancelled propagated: the store's only connection is
        # closed (not waiting on the lock, never reused).
        assert await admin.store_backends(pg_schema) == []
        await admin.execute("COMMIT")
        assert await store.read(row.key) == row  # the cancelled CAS did not commit
        moved = applied(await store.set_membership(row.key, row.store_version, SpotId("r")))
        assert moved.membership == SpotId("r")
        assert store.recovery_epoch == 0


async def test_cancelled_but_committed_is_reported_as_cancelled_and_reread_is_final(
    pg_dsn: str, pg_schema: str
) -> None:
    """Trap 2: with sub-millisecond deadlines some CAS raise Cancelled although they
    committed. The store never reports success or failure for them, and when Cancelled
    arrives the statement is settled: the re-read shows the final state."""
    rng = random.Random(5)
    outcomes = {"applied": 0, "cancelled, committed": 0, "cancelled, not committed": 0}
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=1) as store,
        open_admin(pg_dsn) as admin,
    ):
        row = await ready_actor(store, await register(store), "racy")
        for i in range(60):
            target = SpotId(f"m{i}")
            result = None
            with trio.move_on_after(rng.uniform(0.0, 0.004)) as scope:
                result = await store.set_membership(row.key, row.store_version, target)
            current = await store.read(row.key)
            assert current is not None
            if scope.cancelled_caught:
                assert result is None
                assert current.membership in (row.membership, target)
                if current.membership == target:
                    outcomes["cancelled, committed"] += 1
                    assert current.store_version > row.store_version
                else:
                    outcomes["cancelled, not committed"] += 1
                    assert current == row
                # nothing of the cancelled statement is still running: no store backend
                # is busy (one bridge connection and the lone CAS's one may be idle)
                assert await admin.busy_store_backends(pg_schema) == []
            else:
                assert isinstance(result, Applied)
                assert result.row == current
                outcomes["applied"] += 1
            assert await store.read(row.key) == current  # final
            row = current
    assert sum(outcomes.values()) == 60
    print(outcomes)


async def test_cancelled_reservation_leaves_consistent_counters(
    pg_dsn: str, pg_schema: str
) -> None:
    """A multi-row mutation (row + capacity counters) cancelled at random points is
    all-or-nothing: counters always match the rows that exist."""
    rng = random.Random(11)
    async with open_postgres_store(pg_dsn, schema=pg_schema, connections=2) as store:
        owner = await register(store, capacity=1000)
        for i in range(40):
            with trio.move_on_after(rng.uniform(0.0, 0.004)):
                await ready_actor(store, owner, f"a{i}")
        rows = [
            r for r in await store.scan_owned(owner.node_rid) if r.key.namespace.value == "actor"
        ]
        (record,) = await store.list_nodes()
        ready = sum(r.state.value == "ready" for r in rows)
        creating = sum(r.state.value == "creating" for r in rows)
        assert (record.active, record.pending) == (ready, creating)
