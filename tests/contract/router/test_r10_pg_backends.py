"""The PostgreSQL router backends on the real clock (short TTLs), under races, and across a
lost listening connection (spec 10 §5.3, §5.4, §5.6, §9.2, §10.1).

The SPI suites run on PostgreSQL on the real clock too (and, for exact instants, on the
frozen clock); here the backends are also raced and their listener cut, and TTLs of a
fraction of a second expire on the database's own clock. Every test is bounded with
``fail_after``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from router_kit import AGENT, KEY, NODE_A, NODE_B, S1, message, reserver

from zlink_trio.router import (
    HolderAcquired,
    IdempotencyTtls,
    LeaseGranted,
    LeaseHeld,
    Priority,
    Reserved,
    SessionSignal,
    SignalKind,
    StaleInFlight,
    TextInput,
    TranscriptEntry,
    input_hash,
)
from zlink_trio.router_pg import (
    PostgresIdempotencyStore,
    PostgresSessionInbox,
    PostgresSessionLeaseStore,
    PostgresSessionRecordStore,
    PostgresSessionSignalBus,
    RouterDatabase,
    open_router_database,
)
from zlink_trio.store.postgres import drop_schema

pytestmark = pytest.mark.postgres

TTL = 1.0
"""A short lease / secondary TTL on the database's real clock."""


@pytest.fixture
async def db(pg_dsn: str) -> AsyncIterator[RouterDatabase]:
    schema = f"zlink_router_{uuid.uuid4().hex[:16]}"
    try:
        async with open_router_database(pg_dsn, schema=schema, connections=4) as opened:
            yield opened
    finally:
        with trio.CancelScope(shield=True):
            await drop_schema(pg_dsn, schema)


async def _lapse(seconds: float) -> None:
    """Let ``seconds`` of real time pass (the TTL under test runs on the database clock)."""
    await trio.sleep(seconds)


async def test_a_lease_expires_on_the_database_clock(db: RouterDatabase) -> None:
    """§5.3 on the real clock: an unrenewed lease is gone once its TTL passed on the
    database's clock; the next acquisition gets a larger token; a renewed one lives on."""
    leases = PostgresSessionLeaseStore(db)
    with trio.fail_after(10):
        first = await leases.try_acquire(S1, NODE_A, TTL)
        assert isinstance(first, LeaseGranted)
        assert isinstance(await leases.try_acquire(S1, NODE_B, TTL), LeaseHeld)
        await _lapse(TTL / 2)
        renewed = await leases.renew(first.lease, TTL)
        assert renewed is not None and renewed.expires_at > first.lease.expires_at
        await _lapse(TTL * 0.75)  # past the first expiry, before the renewed one
        assert await leases.current(S1) == renewed
        await _lapse(TTL)
        assert await leases.current(S1) is None
        assert await leases.renew(renewed, TTL) is None
        second = await leases.try_acquire(S1, NODE_B, TTL)
        assert isinstance(second, LeaseGranted)
        assert second.lease.fencing_token > first.lease.fencing_token


async def test_a_held_reservation_goes_stale_on_the_database_clock(db: RouterDatabase) -> None:
    """§9.2 row 7 on the real clock: untouched past the secondary TTL, an IN_FLIGHT entry is
    reported stale; touching it keeps it fresh."""
    store = PostgresIdempotencyStore(
        db, ttls=IdempotencyTtls(primary=60, secondary=TTL, forward=60)
    )
    holder = reserver(NODE_A)
    h = input_hash(TextInput("hello"))
    with trio.fail_after(10):
        assert isinstance(await store.put_if_absent(KEY, h, holder), Reserved)
        await _lapse(TTL / 2)
        assert await store.touch(KEY, holder)
        await _lapse(TTL / 2)
        assert await store.find_stale_in_flight() == ()
        await _lapse(TTL)
        stale = await store.put_if_absent(KEY, h, reserver(NODE_B))
        assert isinstance(stale, StaleInFlight)
        assert [e.key for e in await store.find_stale_in_flight()] == [KEY]


async def test_concurrent_acquisitions_and_takeovers_have_one_winner(db: RouterDatabase) -> None:
    """§5.3, §9.2: eight nodes racing for one lease get one grant; eight takeovers of one
    holderless reservation give one holder; eight concurrent collects take each message
    exactly once."""
    leases = PostgresSessionLeaseStore(db)
    store = PostgresIdempotencyStore(db)
    inbox = PostgresSessionInbox(db)
    grants: list[Any] = []
    takes: list[Any] = []
    collected: list[str] = []
    owner = reserver(NODE_A)
    assert isinstance(await store.put_if_absent(KEY, "h", owner), Reserved)
    assert await store.release_holder(KEY, owner)
    for i in range(40):
        await inbox.deliver(message(f"m{i}", priority=Priority.NEXT))

    async def acquire(i: int) -> None:
        outcome = await leases.try_acquire(S1, NODE_A if i % 2 else NODE_B, 30)
        if isinstance(outcome, LeaseGranted):
            grants.append(outcome)
        taken = await store.acquire_holder(KEY, reserver(NODE_B))
        if isinstance(taken, HolderAcquired):
            takes.append(taken)
        for m in await inbox.collect(S1, Priority.LATER):
            assert isinstance(m.user_input, TextInput)
            collected.append(m.user_input.text)

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(acquire, i)
    assert len(grants) == 1
    assert len(takes) == 1
    assert sorted(collected) == sorted(f"m{i}" for i in range(40))


async def test_records_keep_text_ids_and_history_exactly(db: RouterDatabase) -> None:
    """§5.3: ids and history round-trip unchanged (NUL and non-ASCII included); a lower
    fencing token is refused by the database."""
    records = PostgresSessionRecordStore(db)
    from zlink_trio.router import FencingRejected, SessionId, TurnId

    odd = SessionId("s\x00\u00e9\U0001f600")
    with trio.fail_after(10):
        await records.provision(odd, AGENT, 5)
        entries = [TranscriptEntry("user", "a\x00b \u00e9"), TranscriptEntry("x", "", TurnId("t"))]
        view = await records.append(odd, entries, 5)
        assert view.transcript == tuple(entries)
        loaded = await records.load(odd)
        assert loaded is not None and loaded.transcript == tuple(entries)
        assert loaded.session_id == odd and loaded.fence == 5
        with pytest.raises(FencingRejected):
            await records.append(odd, entries, 4)


async def _round_trip(bus: PostgresSessionSignalBus) -> None:
    """Retry a LISTEN/NOTIFY round trip until one completes (markers sent while the
    subscription reconnects are lost): proves the subscription hears again."""
    while True:
        with trio.move_on_after(0.25):
            await bus.barrier()
            return


async def test_the_bus_reconnects_and_resubscribes_after_losing_its_connection(
    db: RouterDatabase, nursery: trio.Nursery
) -> None:
    """§10.1 (bus outage): the listening connection is terminated by the server; the
    subscription reconnects, LISTENs again, and hears later signals (those sent during
    the gap may be lost: counted as a reconnect)."""
    bus = PostgresSessionSignalBus(db, keepalive=0.5)
    await nursery.start(bus.serve)
    signal = SessionSignal(kind=SignalKind.EVICT, session_id=S1, origin=NODE_A)
    with trio.fail_after(20):
        async with bus.subscribe() as receive:
            killed = await db.call(
                "fetchval",
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND query LIKE 'LISTEN%'"
                " AND application_name = $1",
                f"zlink_trio/{db.schema}"[:63],
                idempotent=False,
            )
            assert killed == 1
            await _round_trip(bus)
            await bus.publish(signal)
            assert await receive.receive() == signal
    assert bus.statistics().reconnects >= 1


async def test_a_bus_that_does_not_listen_hears_nothing(
    db: RouterDatabase, nursery: trio.Nursery
) -> None:
    """``listen=False`` (notifications blocked for a node): it publishes, others hear, it
    hears nothing."""
    deaf = PostgresSessionSignalBus(db, listen=False)
    hearing = PostgresSessionSignalBus(db)
    await nursery.start(deaf.serve)
    await nursery.start(hearing.serve)
    signal = SessionSignal(kind=SignalKind.EVICT, session_id=S1, origin=NODE_A)
    with trio.fail_after(10):
        async with deaf.subscribe() as nothing, hearing.subscribe() as receive:
            await deaf.publish(signal)
            assert await receive.receive() == signal
            await hearing.barrier()
            with pytest.raises(trio.WouldBlock):
                nothing.receive_nowait()
