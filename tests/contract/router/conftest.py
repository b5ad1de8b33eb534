"""Fixtures of the router SPI contract suite.

Every SPI fixture is parametrized over ``backend`` and gives each test fresh, empty
instances that share one clock. Tests use only the SPI protocols plus ``advance`` (move the
backend's clock forward), so the PostgreSQL implementations (issue 15 part 3) run the same
suite by adding a ``backend`` parameter and a branch in each fixture.

On PostgreSQL (``backend`` = ``postgres``, the SPI suites of ``PG_SUITES``) each test has
a schema of its own (parallel workers never collide) and needs ``pg_dsn`` (skipped without a
server). Time: a test that moves time takes ``autojump_clock`` (a ``MockClock(autojump_threshold=0)``;
pytest-trio installs a clock only when the test function itself asks for it) and ``advance``;
the in-memory backends read ``trio.current_time``, so ``advance`` is a jump of that clock.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing
from router_kit import TTLS, Advance

from zlink_trio.router import (
    IdempotencyStore,
    MemoryIdempotencyStore,
    MemorySessionInbox,
    MemorySessionLeaseStore,
    MemorySessionRecordStore,
    MemorySessionSignalBus,
    SessionInbox,
    SessionLeaseStore,
    SessionRecordStore,
    SessionSignalBus,
)

PG_SUITES = frozenset(
    {
        "test_r10_session_store",
        "test_r10_inbox",
        "test_r10_inbox_scan",
        "test_r10_signal_bus",
        "test_r10_idempotency_store",
    }
)
"""The SPI contract suites that also run on PostgreSQL. The router-level suites stay on the
in-memory SPIs: they drive every timer with an autojumping MockClock, which cannot wait
for real I/O."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    params = [pytest.param("memory", id="memory")]
    if metafunc.module.__name__.rsplit(".", 1)[-1] in PG_SUITES:
        params.append(pytest.param("postgres", id="postgres", marks=pytest.mark.postgres))
    metafunc.parametrize("backend", params, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """``memory`` (MockClock, autojump) or ``postgres`` (a schema of its own per test, on the
    database's router clock, frozen and stepped in lockstep with a non-jumping MockClock:
    every TTL is still computed by the database)."""
    name: str = request.param
    return name


@pytest.fixture
def autojump_clock(backend: str) -> trio.testing.MockClock:
    """Overrides pytest-trio's: on PostgreSQL the clock must not jump while a statement is
    in flight, so it stands still (rate 0) and moves only by ``advance``."""
    if backend == "postgres":
        return trio.testing.MockClock(rate=0.0)
    return trio.testing.MockClock(autojump_threshold=0)


@pytest.fixture
async def pg_db(backend: str, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """The test's own PostgreSQL schema (None on the memory backend)."""
    if backend != "postgres":
        yield None
        return
    from zlink_trio.router_pg import open_router_database
    from zlink_trio.store.postgres import drop_schema

    dsn: str = request.getfixturevalue("pg_dsn")
    schema = f"zlink_router_{uuid.uuid4().hex[:16]}"
    try:
        async with open_router_database(dsn, schema=schema, connections=4) as db:
            await db.freeze_clock_for_tests()
            yield db
    finally:
        with trio.CancelScope(shield=True):
            await drop_schema(dsn, schema)


@pytest.fixture
def advance(autojump_clock: trio.testing.MockClock, pg_db: Any) -> Advance:
    async def advance(seconds: float) -> None:
        """Jump the clock (and the database's, on PostgreSQL), then let every task woken
        by the jump run until all block."""
        if pg_db is not None:
            await pg_db.advance_clock_for_tests(seconds)
        autojump_clock.jump(seconds)
        await trio.testing.wait_all_tasks_blocked()

    return advance


@pytest.fixture
def lease_backend(pg_db: Any, autojump_clock: trio.testing.MockClock) -> SessionLeaseStore:
    if pg_db is not None:
        from zlink_trio.router_pg import PostgresSessionLeaseStore

        return PostgresSessionLeaseStore(pg_db)
    return MemorySessionLeaseStore()


@pytest.fixture
def record_backend(pg_db: Any) -> SessionRecordStore:
    if pg_db is not None:
        from zlink_trio.router_pg import PostgresSessionRecordStore

        return PostgresSessionRecordStore(pg_db)
    return MemorySessionRecordStore()


@pytest.fixture
def inbox(pg_db: Any) -> SessionInbox:
    if pg_db is not None:
        from zlink_trio.router_pg import PostgresSessionInbox

        return PostgresSessionInbox(pg_db)
    return MemorySessionInbox()


@pytest.fixture
def new_bus(pg_db: Any, nursery: trio.Nursery) -> Callable[[], SessionSignalBus]:
    """A bus factory; routers of one cluster share one bus (on PostgreSQL: one database;
    each bus is served in the test's nursery, and ``subscribe`` waits until it listens)."""
    if pg_db is not None:
        from zlink_trio.router_pg import PostgresSessionSignalBus

        def new() -> SessionSignalBus:
            bus = PostgresSessionSignalBus(pg_db)
            nursery.start_soon(bus.serve)
            return bus

        return new
    return MemorySessionSignalBus


@pytest.fixture
def settle() -> Callable[[SessionSignalBus], Awaitable[None]]:
    """Wait until every signal published so far has reached the bus's subscribers."""

    async def settle(bus: SessionSignalBus) -> None:
        barrier = getattr(bus, "barrier", None)
        if barrier is not None:  # PostgreSQL: one LISTEN/NOTIFY round trip
            with trio.fail_after(10):
                await barrier()
        await trio.testing.wait_all_tasks_blocked()

    return settle


@pytest.fixture
def idempotency(pg_db: Any, autojump_clock: trio.testing.MockClock) -> IdempotencyStore:
    if pg_db is not None:
        from zlink_trio.router_pg import PostgresIdempotencyStore

        return PostgresIdempotencyStore(pg_db, ttls=TTLS)
    return MemoryIdempotencyStore(ttls=TTLS)


@pytest.fixture
def inject_raw(pg_db: Any) -> Callable[[SessionSignalBus, str], Awaitable[None]]:
    """Put raw signal text on a bus, as if it arrived from a node of another build."""

    async def inject(bus: SessionSignalBus, text: str) -> None:
        if pg_db is not None:
            from zlink_trio.router_pg import PostgresSessionSignalBus

            assert isinstance(bus, PostgresSessionSignalBus)
            await bus.publish_text(text)
            return
        assert isinstance(bus, MemorySessionSignalBus)
        bus.publish_text_nowait(text)

    return inject


@pytest.fixture
def shared(backend: str) -> Any:
    """One cluster's shared SPIs, in memory (the router-level suites run on MockClock)."""
    from router_app import Shared

    return Shared(
        MemorySessionRecordStore(),
        MemorySessionLeaseStore(),
        MemorySessionInbox(),
        MemorySessionSignalBus(),
        MemoryIdempotencyStore(ttls=TTLS),
    )


@pytest.fixture
def world() -> Any:
    from router_app import World

    return World()


@pytest.fixture
def registry(world: Any) -> Any:
    from router_app import Registry
    from router_kit import AGENT, OTHER_AGENT

    return Registry(world, [AGENT, OTHER_AGENT])
