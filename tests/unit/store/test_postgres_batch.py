"""Batched field CAS of the PostgreSQL store (zlink_trio.store._pgbatch): concurrent CAS of
different rows issued in one scheduler tick go as ONE statement; each caller still gets
exactly its own answer (Applied, Conflict with the current row, InvalidOperation), a
whole-statement failure falls back to one-by-one, and cancellation stays safe: a cancelled
caller never returns before the statement is settled, and gets Cancelled (outcome
unknown), never a guess."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import trio
from pg_kit import applied, open_admin, ready_actor, register

from zlink_trio.errors import InvalidOperation, StoreOutcomeUnknown, Unavailable
from zlink_trio.ids import SpotId
from zlink_trio.store import _pgbatch
from zlink_trio.store.api import Applied, AuthorityRow, CasResult, Conflict, ObjectKey
from zlink_trio.store.postgres import PostgresLocationStore, open_postgres_store

pytestmark = pytest.mark.postgres


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[bytes]]]:
    """The object ids of each batched statement that went to the server, in order."""
    sent: list[list[bytes]] = []
    real = _pgbatch._run_batch

    async def counting(slot: Any, grace: float, batch: Any) -> Any:
        first = not batch.sealed
        entries = batch.seal()
        if first:
            sent.append([e.key[1] for e in entries])
        return await real(slot, grace, batch)

    monkeypatch.setattr(_pgbatch, "_run_batch", counting)
    yield sent


async def _rows(store: PostgresLocationStore, n: int, prefix: str = "b") -> list[AuthorityRow]:
    owner = await register(store)
    return [await ready_actor(store, owner, f"{prefix}{i}") for i in range(n)]


async def _all(calls: list[Any]) -> list[Any]:
    """Run the CAS coroutine functions concurrently, started in one scheduler tick."""
    results: list[Any] = [None] * len(calls)

    async def one(i: int) -> None:
        try:
            results[i] = await calls[i]()
        except Exception as exc:
            results[i] = exc

    async with trio.open_nursery() as nursery:
        for i in range(len(calls)):
            nursery.start_soon(one, i)
    return results


async def test_cas_of_one_tick_go_as_one_statement_and_each_gets_its_own_row(
    pg_dsn: str, pg_schema: str, statements: list[list[bytes]]
) -> None:
    async with open_postgres_store(pg_dsn, schema=pg_schema, connections=4) as store:
        rows = await _rows(store, 8)
        statements.clear()
        results = await _all(
            [
                lambda r=r, i=i: store.set_membership(r.key, r.store_version, SpotId(f"m-{i}"))
                for i, r in enumerate(rows)
            ]
        )
        assert statements == [[f"b{i}".encode() for i in range(8)]]
        for i, (row, result) in enumerate(zip(rows, results, strict=True)):
            new = applied(result)
            assert new.membership == SpotId(f"m-{i}")
            assert new.store_version > row.store_version
            assert await store.read(row.key) == new  # the rebuilt row is the stored one
        assert len({applied(r).store_version for r in results}) == 8


async def test_a_batch_answers_applied_lost_missing_and_entry_claims_each_alone(
    pg_dsn: str, pg_schema: str, statements: list[list[bytes]]
) -> None:
    async with open_postgres_store(pg_dsn, schema=pg_schema, connections=2) as store:
        fresh, stale, gone = await _rows(store, 3)
        moved = applied(await store.set_membership(stale.key, stale.store_version, SpotId("x")))
        entry = next(
            r for r in await store.scan_owned(fresh.owner.node_rid) if r.kind.value == "entry_spot"
        )
        statements.clear()
        results = await _all(
            [
                lambda: store.set_membership(fresh.key, fresh.store_version, SpotId("ok")),
                lambda: store.set_membership(stale.key, stale.store_version, SpotId("late")),
                lambda: store.set_membership(ObjectKey.actor("never-made"), 7, None),
                lambda: store.set_membership(entry.key, entry.store_version, SpotId("no")),
            ]
        )
        assert len(statements) == 1 and len(statements[0]) == 4
        assert applied(results[0]).membership == SpotId("ok")
        assert results[1] == Conflict(moved)
        assert results[2] == Conflict(None)
        assert isinstance(results[3], InvalidOperation)
        assert await store.read(gone.key) == gone


async def test_two_cas_of_one_key_in_one_tick_go_in_two_statements(
    pg_dsn: str, pg_schema: str, statements: list[list[bytes]]
) -> None:
    async with open_postgres_store(pg_dsn, schema=pg_schema, connections=2) as store:
        (row,) = await _rows(store, 1)
        statements.clear()
        results: list[CasResult[AuthorityRow]] = await _all(
            [
                lambda: store.set_membership(row.key, row.store_version, SpotId("a")),
                lambda: store.set_membership(row.key, row.store_version, SpotId("b")),
            ]
        )
        assert statements == [[b"b0"], [b"b0"]]
        won = [r for r in results if isinstance(r, Applied)]
        lost = [r for r in results if isinstance(r, Conflict)]
        assert len(won) == 1 and lost == [Conflict(won[0].row)]


async def test_rows_not_held_come_back_whole(
    pg_dsn: str, pg_schema: str, statements: list[list[bytes]]
) -> None:
    """A caller whose row the store never returned (another store instance made it) gets
    the whole row from the statement; both stores agree on it."""
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=2) as one,
        open_postgres_store(pg_dsn, schema=pg_schema, connections=2) as other,
    ):
        rows = await _rows(one, 3)
        results = await _all(
            [lambda r=r: other.set_membership(r.key, r.store_version, SpotId("w")) for r in rows]
        )
        for row, result in zip(rows, results, strict=True):
            assert applied(result) == await one.read(row.key)
            assert applied(result).membership == SpotId("w")


async def test_a_statement_refused_as_a_whole_falls_back_to_one_by_one(
    pg_dsn: str, pg_schema: str, statements: list[list[bytes]]
) -> None:
    """A trigger refuses one row: the batch statement fails as a whole (nothing applied),
    then each CAS runs alone: the others apply, the refused one gets its own error."""
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=2) as store,
        open_admin(pg_dsn) as admin,
    ):
        rows = await _rows(store, 4)
        await admin.execute(
            f"""
            CREATE FUNCTION "{pg_schema}".refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.object_id = 'b2'::bytea THEN RAISE EXCEPTION 'refused'; END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER refuse BEFORE UPDATE ON "{pg_schema}".authority
                FOR EACH ROW EXECUTE FUNCTION "{pg_schema}".refuse();
            """
        )
        statements.clear()
        results = await _all(
            [lambda r=r: store.set_membership(r.key, r.store_version, SpotId("f")) for r in rows]
        )
        assert statements == [[b"b0", b"b1", b"b2", b"b3"]]
        assert isinstance(results[2], Unavailable)
        assert not isinstance(results[2], StoreOutcomeUnknown)
        for i in (0, 1, 3):
            assert applied(results[i]).membership == SpotId("f")
        assert await store.read(rows[2].key) == rows[2]


async def test_connection_lost_mid_batch_is_unknown_for_every_caller(
    pg_dsn: str, pg_schema: str
) -> None:
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=2) as store,
        open_admin(pg_dsn) as admin,
    ):
        rows = await _rows(store, 3)
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
        results = await _all(
            [lambda r=r: store.set_membership(r.key, r.store_version, SpotId("x")) for r in rows]
        )
        assert all(isinstance(r, StoreOutcomeUnknown) for r in results)
        await admin.execute(f'DROP TRIGGER die ON "{pg_schema}".authority')
        for row in rows:
            assert await store.read(row.key) == row  # it did not commit
        assert store.recovery_epoch == 1


async def _lock(admin: Any, schema: str, object_id: bytes) -> None:
    await admin.execute("BEGIN")
    await admin.execute(
        f'SELECT 1 FROM "{schema}".authority WHERE object_id = $1 FOR UPDATE', object_id
    )


async def test_a_batch_whose_callers_all_gave_up_is_cancelled_promptly(
    pg_dsn: str, pg_schema: str, statements: list[list[bytes]]
) -> None:
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=1) as store,
        open_admin(pg_dsn) as admin,
    ):
        rows = await _rows(store, 3)
        await _lock(admin, pg_schema, b"b1")
        statements.clear()
        start = trio.current_time()
        with trio.move_on_after(0.1) as scope:
            await _all(
                [
                    lambda r=r: store.set_membership(r.key, r.store_version, SpotId("n"))
                    for r in rows
                ]
            )
        assert scope.cancelled_caught
        assert trio.current_time() - start < 2.0
        assert len(statements) == 1
        assert await admin.store_backends(pg_schema) == []  # settled, never reused
        await admin.execute("COMMIT")
        for row in rows:
            assert await store.read(row.key) == row  # the cancelled statement rolled back


async def test_a_cancelled_caller_waits_for_the_others_statement_then_raises_cancelled(
    pg_dsn: str, pg_schema: str, statements: list[list[bytes]]
) -> None:
    """One caller of a sealed batch gives up while the statement waits on a row lock:
    it returns only once the statement settled (its outcome was unknown until then),
    with Cancelled; the others get their answers; the re-read is final."""
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=1) as store,
        open_admin(pg_dsn) as admin,
    ):
        rows = await _rows(store, 3)
        await _lock(admin, pg_schema, b"b2")
        log: list[tuple[str, Any]] = []

        async def patient(row: AuthorityRow) -> None:
            log.append(("patient", await store.set_membership(row.key, row.store_version, None)))

        async def impatient(row: AuthorityRow) -> None:
            with trio.move_on_after(0.05) as scope:
                await store.set_membership(row.key, row.store_version, SpotId("i"))
            log.append(("impatient", scope.cancelled_caught))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(patient, rows[0])
            nursery.start_soon(impatient, rows[1])
            nursery.start_soon(patient, rows[2])
            await trio.sleep(0.3)
            assert log == []  # the cancelled caller is still waiting for the settle
            await admin.execute("COMMIT")
        assert len(statements) == 1
        assert ("impatient", True) in log
        assert [type(r) for who, r in log if who == "patient"] == [Applied, Applied]
        current = await store.read(rows[1].key)
        assert current is not None and current.membership == SpotId("i")  # it did commit


async def test_cancelled_callers_are_bounded_by_the_cancel_grace(
    pg_dsn: str, pg_schema: str
) -> None:
    """A cancelled caller never waits more than ``cancel_grace`` for callers that do not
    give up: then the statement is cancelled and they get StoreOutcomeUnknown."""
    grace = 0.3
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=1, cancel_grace=grace) as store,
        open_admin(pg_dsn) as admin,
    ):
        rows = await _rows(store, 2)
        await _lock(admin, pg_schema, b"b0")
        got: dict[str, Any] = {}

        async def patient() -> None:
            try:
                await store.set_membership(rows[0].key, rows[0].store_version, None)
            except StoreOutcomeUnknown as exc:
                got["patient"] = exc

        async def impatient() -> None:
            with trio.move_on_after(0.05) as scope:
                await store.set_membership(rows[1].key, rows[1].store_version, None)
            got["impatient"] = (scope.cancelled_caught, trio.current_time())

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(patient)
            nursery.start_soon(impatient)
        await admin.execute("COMMIT")
        assert isinstance(got["patient"], StoreOutcomeUnknown)
        cancelled, returned = got["impatient"]
        assert cancelled
        assert grace <= returned - start < 0.05 + grace + 2.0
        for row in rows:
            assert await store.read(row.key) == row


async def test_a_caller_cancelled_before_the_batch_was_sent_leaves_it(
    pg_dsn: str, pg_schema: str, statements: list[list[bytes]]
) -> None:
    """While the batch's leader waits for a connection, a caller that joined and then
    gives up is taken out: nothing of it is sent."""
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=1) as store,
        open_admin(pg_dsn) as admin,
    ):
        blocker, leader, quitter = await _rows(store, 3)
        await _lock(admin, pg_schema, b"b0")
        statements.clear()
        got: dict[str, Any] = {}

        async def run(name: str, row: AuthorityRow, timeout: float) -> None:
            with trio.move_on_after(timeout) as scope:
                got[name] = await store.set_membership(row.key, row.store_version, SpotId(name))
            if scope.cancelled_caught:
                got[name] = "cancelled"

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "blocker", blocker, 60)  # holds the only connection
            await trio.sleep(0.1)
            nursery.start_soon(run, "leader", leader, 60)  # waits for the connection
            await trio.sleep(0.05)
            nursery.start_soon(run, "quitter", quitter, 0.05)  # joins, then gives up
            await trio.sleep(0.2)
            assert got == {"quitter": "cancelled"}
            await admin.execute("COMMIT")
        assert statements == [[b"b0"], [b"b1"]]
        assert applied(got["leader"]).membership == SpotId("leader")
        assert await store.read(quitter.key) == quitter


async def test_a_lone_caller_goes_at_once_and_a_burst_batches_again(
    pg_dsn: str, pg_schema: str, statements: list[list[bytes]]
) -> None:
    """After a quiet spell of lone CAS (which skip the end-of-tick wait), the first burst
    may split, the next one goes as one statement again."""
    async with open_postgres_store(pg_dsn, schema=pg_schema, connections=4) as store:
        rows = await _rows(store, 4)
        row = rows[0]
        for _ in range(_pgbatch.LONE_STREAK + 4):
            row = applied(await store.set_membership(row.key, row.store_version, None))
        rows[0] = row
        for _ in range(2):
            statements.clear()
            results = await _all(
                [lambda r=r: store.set_membership(r.key, r.store_version, None) for r in rows]
            )
            rows = [applied(r) for r in results]
        assert statements == [[b"b0", b"b1", b"b2", b"b3"]]


async def test_a_lone_caller_cancelled_in_flight_gets_cancelled_after_the_rollback(
    pg_dsn: str, pg_schema: str, statements: list[list[bytes]]
) -> None:
    """A lone CAS (after a quiet spell: no batch at all) that is cancelled while its
    statement waits on a row lock returns only once the statement was cancelled and
    settled, with Cancelled; nothing of it committed, and the next CAS goes through."""
    async with (
        open_postgres_store(pg_dsn, schema=pg_schema, connections=1) as store,
        open_admin(pg_dsn) as admin,
    ):
        rows = await _rows(store, 2)
        row = rows[0]
        for _ in range(_pgbatch.LONE_STREAK + 1):
            row = applied(await store.set_membership(row.key, row.store_version, None))
        statements.clear()
        await _lock(admin, pg_schema, b"b1")
        with trio.move_on_after(0.05) as scope:
            await store.set_membership(rows[1].key, rows[1].store_version, SpotId("x"))
        assert scope.cancelled_caught
        assert statements == []  # it went alone, not as a batch
        await admin.execute("COMMIT")
        assert await store.read(rows[1].key) == rows[1]  # rolled back
        moved = applied(await store.set_membership(rows[1].key, rows[1].store_version, None))
        assert moved.store_version > rows[1].store_version
        stale = await store.set_membership(rows[1].key, rows[1].store_version, SpotId("y"))
        assert stale == Conflict(moved)
