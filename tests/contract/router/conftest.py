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
The router-level cases of ``ROUTER_PG_CASES`` also run on PostgreSQL (``shared``), on the
real clock with short TTLs.
"""

from __future__ import annotations

import inspect
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing
from router_kit import EXACT_TIMING, REAL_TIMING, TTLS, Advance, Timing

from zlink_trio.router import (
    IdempotencyStore,
    IdempotencyTtls,
    MemoryIdempotencyStore,
    MemorySessionInbox,
    MemorySessionLeaseStore,
    MemorySessionRecordStore,
    MemorySessionSignalBus,
    SessionInbox,
    SessionLeaseStore,
    SessionRecordStore,
    SessionRouterConfig,
    SessionSignalBus,
)
from zlink_trio.testing import settle as settle_all

PG_SUITES = frozenset(
    {
        "test_r10_session_store",
        "test_r10_inbox",
        "test_r10_inbox_scan",
        "test_r10_signal_bus",
        "test_r10_idempotency_store",
    }
)
"""The SPI contract suites that also run on PostgreSQL (the database's clock frozen and
stepped in lockstep with a non-jumping MockClock)."""

ROUTER_PG_CASES: dict[str, frozenset[str]] = {
    "test_r10_router_submit": frozenset(
        {
            "test_r10_24_submit_answers_a_disposition_or_raises_conflict",
            "test_r10_53_no_warm_up_lazy_record_one_open",
            "test_r10_79_f1_a_conflict_touches_neither_lease_nor_idempotency",
            "test_r10_80_f2_losing_the_lease_forwards_through_the_inbox",
            "test_r10_81_the_lease_is_tried_before_a_session_is_opened",
        }
    ),
    "test_r10_router_turns": frozenset({"test_r10_07_the_first_turn_decides_the_agent"}),
    "test_r10_router_serialization": frozenset(
        {"test_r10_04_alternating_routers_share_history_and_each_opens_once"}
    ),
    "test_r10_router_local_path": frozenset(
        {
            "test_r10_05_a_warm_local_submit_writes_no_record",
            "test_r10_84_a_submit_during_the_pass_tail_collect_runs_locally",
        }
    ),
}
"""The router-level cases that also run on PostgreSQL, on the REAL clock (a MockClock at
rate 1 that never jumps; the database's router clock is not frozen) with the short TTLs of
:data:`PG_ROUTER_CONFIG`: those whose every wait is on a result or a real second (turns
of 1 s). The rest of the router-level suites stay in memory: they order steps with
``wait_all_tasks_blocked`` (which returns while a statement is in flight on the bridge
thread) or jump virtual minutes and hours (sweeps, TTL expiries, idle eviction)."""

PG_ROUTER_CONFIG = SessionRouterConfig(
    lock_lease=6.0,
    lock_extend_interval=2.0,
    status_heartbeat_interval=2.0,
    holder_loss_sweep_interval=3.0,
    idempotency_primary_ttl=600.0,
    idempotency_secondary_ttl=6.0,
    idempotency_forward_ttl=30.0,
    release_interrupt_timeout=2.0,
    handle_close_timeout=2.0,
)


def _module(node: Any) -> str:
    name: str = node.module.__name__
    return name.rsplit(".", 1)[-1]


def _router_pg_case(module: str, function: str) -> bool:
    if module in PG_SUITES:
        return False
    if os.environ.get("ZLINK_ROUTER_PG_ALL"):
        return True  # experiment only (the fixtures of a case PG_ALL enabled)
    return function in ROUTER_PG_CASES.get(module, frozenset())


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    params = [pytest.param("memory", id="memory")]
    module = _module(metafunc)
    function = metafunc.function.__name__
    pg_all = os.environ.get("ZLINK_ROUTER_PG_ALL") and inspect.iscoroutinefunction(
        metafunc.function
    )
    if (
        module in PG_SUITES
        or (pg_all and module not in PG_SUITES)
        or _router_pg_case(module, function)
    ):
        params.append(pytest.param("postgres", id="postgres", marks=pytest.mark.postgres))
    if module in PG_SUITES and "advance" in metafunc.fixturenames:
        params.append(
            pytest.param("postgres-frozen", id="postgres-frozen", marks=pytest.mark.postgres)
        )
    metafunc.parametrize("backend", params, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """``memory`` (MockClock, autojump), ``postgres`` (the database's real clock, short
    TTLs) or ``postgres-frozen`` (the database's router clock frozen and stepped in lockstep
    with a non-jumping MockClock: every TTL is still computed by the database, to the
    instant). On PostgreSQL each test has a schema of its own."""
    name: str = request.param
    return name


@pytest.fixture
def timing(backend: str) -> Timing:
    """How the SPI test moves time (:class:`router_kit.Timing`)."""
    return REAL_TIMING if backend == "postgres" else EXACT_TIMING


@pytest.fixture
def autojump_clock(backend: str) -> trio.testing.MockClock:
    """Overrides pytest-trio's: on PostgreSQL the clock must not jump while a statement is
    in flight. ``postgres``: it runs at the real rate and never jumps (the database's
    clock is the real one); ``postgres-frozen``: it stands still (rate 0) and moves only by
    ``advance``, with the database's router clock."""
    if backend == "postgres":
        return trio.testing.MockClock(rate=1.0)
    if backend == "postgres-frozen":
        return trio.testing.MockClock(rate=0.0)
    return trio.testing.MockClock(autojump_threshold=0)


@pytest.fixture
async def pg_db(backend: str, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """The SPI test's own PostgreSQL schema (None on the memory backend and for the
    router-level cases, which use ``pg_router_spis``)."""
    if backend == "memory" or _module(request) not in PG_SUITES:
        yield None
        return
    from zlink_trio.router_pg import open_router_database
    from zlink_trio.store.postgres import drop_schema

    dsn: str = request.getfixturevalue("pg_dsn")
    schema = f"zlink_router_{uuid.uuid4().hex[:16]}"
    try:
        async with open_router_database(dsn, schema=schema, connections=4) as db:
            if backend == "postgres-frozen":
                await db.freeze_clock_for_tests()
            yield db
    finally:
        with trio.CancelScope(shield=True):
            await drop_schema(dsn, schema)


@pytest.fixture
def advance(backend: str, autojump_clock: trio.testing.MockClock, pg_db: Any) -> Advance:
    async def advance(seconds: float) -> None:
        """Move time forward, then let every task woken by it run until all block (and,
        on PostgreSQL, no statement is in flight): memory jumps the MockClock;
        ``postgres-frozen`` steps the database's clock and the MockClock together;
        ``postgres`` waits that long on the real clock."""
        if backend == "postgres":
            await trio.sleep(seconds)
            await settle_all()
            return
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
def idempotency(
    pg_db: Any, timing: Timing, autojump_clock: trio.testing.MockClock
) -> IdempotencyStore:
    if pg_db is not None:
        from zlink_trio.router_pg import PostgresIdempotencyStore

        return PostgresIdempotencyStore(pg_db, ttls=timing.ttls)
    return MemoryIdempotencyStore(ttls=timing.ttls)


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
def shared(backend: str, pg_cluster: Any) -> Any:
    """One cluster's shared SPIs: in memory (MockClock, autojump), or — for the cases of
    :data:`ROUTER_PG_CASES` — the PostgreSQL backends of ``pg_cluster``. (A plain fixture:
    the router's synchronous tests, e.g. the builder's, use it too; only on PostgreSQL
    does it depend on a Trio fixture.)"""
    from router_app import Shared

    if pg_cluster is not None:
        return pg_cluster
    return Shared(
        MemorySessionRecordStore(),
        MemorySessionLeaseStore(),
        MemorySessionInbox(),
        MemorySessionSignalBus(),
        MemoryIdempotencyStore(ttls=TTLS),
    )


@pytest.fixture
def pg_cluster(backend: str, request: pytest.FixtureRequest) -> Any:
    """None in memory; on PostgreSQL, ``pg_router_spis`` (requested only then, so the
    in-memory synchronous tests never depend on a Trio fixture)."""
    if backend != "postgres":
        return None
    return request.getfixturevalue("pg_router_spis")


@pytest.fixture
async def pg_router_spis(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """The PostgreSQL backends of one cluster on a schema of the test's own, on the
    database's real clock, with the short TTLs of :data:`PG_ROUTER_CONFIG`."""
    from router_app import Shared

    from zlink_trio.router_pg import open_postgres_spis
    from zlink_trio.store.postgres import drop_schema

    dsn: str = request.getfixturevalue("pg_dsn")
    schema = f"zlink_router_{uuid.uuid4().hex[:16]}"
    config = PG_ROUTER_CONFIG
    try:
        async with open_postgres_spis(dsn, schema=schema) as spis:
            yield Shared(
                spis.records,
                spis.leases,
                spis.inbox,
                spis.bus,
                spis.idempotency(
                    IdempotencyTtls(
                        primary=config.idempotency_primary_ttl,
                        secondary=config.idempotency_secondary_ttl,
                        forward=config.idempotency_forward_ttl,
                    )
                ),
                config,
            )
    finally:
        with trio.CancelScope(shield=True):
            await drop_schema(dsn, schema)


@pytest.fixture
def world() -> Any:
    from router_app import World

    return World()


@pytest.fixture
def registry(world: Any) -> Any:
    from router_app import Registry
    from router_kit import AGENT, OTHER_AGENT

    return Registry(world, [AGENT, OTHER_AGENT])
