"""Fixtures of the router SPI contract suite.

Every SPI fixture is parametrized over ``backend`` and gives each test fresh, empty
instances that share one clock. Tests use only the SPI protocols plus ``advance`` (move the
backend's clock forward), so the PostgreSQL implementations (issue 15 part 3) run the same
suite by adding a ``backend`` parameter and a branch in each fixture.

Time: a test that moves time takes ``autojump_clock`` (a ``MockClock(autojump_threshold=0)``;
pytest-trio installs a clock only when the test function itself asks for it) and ``advance``;
the in-memory backends read ``trio.current_time``, so ``advance`` is a jump of that clock.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

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
    SessionSignalBus,
)

Advance = Callable[[float], Awaitable[None]]

TTLS = IdempotencyTtls()  # the §11.2 defaults: 24 h / 30 s / 5 min


@pytest.fixture(params=[pytest.param("memory", id="memory")])
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def advance(autojump_clock: trio.testing.MockClock) -> Advance:
    async def advance(seconds: float) -> None:
        """Jump the clock, then let every task woken by the jump run until all block."""
        autojump_clock.jump(seconds)
        await trio.testing.wait_all_tasks_blocked()

    return advance


@pytest.fixture
def lease_backend(backend: str, autojump_clock: trio.testing.MockClock) -> SessionLeaseStore:
    assert backend == "memory"
    return MemorySessionLeaseStore()


@pytest.fixture
def record_backend(backend: str) -> SessionRecordStore:
    assert backend == "memory"
    return MemorySessionRecordStore()


@pytest.fixture
def inbox(backend: str) -> SessionInbox:
    assert backend == "memory"
    return MemorySessionInbox()


@pytest.fixture
def new_bus(backend: str) -> Callable[[], SessionSignalBus]:
    """A bus factory; routers of one cluster share one bus."""
    assert backend == "memory"
    return MemorySessionSignalBus


@pytest.fixture
def idempotency(backend: str, autojump_clock: trio.testing.MockClock) -> IdempotencyStore:
    assert backend == "memory"
    return MemoryIdempotencyStore(ttls=TTLS)


@pytest.fixture
def inject_raw(backend: str) -> Callable[[SessionSignalBus, str], None]:
    """Put raw signal text on a bus, as if it arrived from a node of another build."""
    assert backend == "memory"

    def inject(bus: SessionSignalBus, text: str) -> None:
        assert isinstance(bus, MemorySessionSignalBus)
        bus.publish_text_nowait(text)

    return inject


@pytest.fixture
def shared(
    lease_backend: SessionLeaseStore,
    record_backend: SessionRecordStore,
    inbox: SessionInbox,
    new_bus: Callable[[], SessionSignalBus],
    idempotency: IdempotencyStore,
) -> Any:
    """One cluster's shared SPIs."""
    from router_app import Shared

    return Shared(record_backend, lease_backend, inbox, new_bus(), idempotency)


@pytest.fixture
def world() -> Any:
    from router_app import World

    return World()


@pytest.fixture
def registry(world: Any) -> Any:
    from router_app import Registry
    from router_kit import AGENT, OTHER_AGENT

    return Registry(world, [AGENT, OTHER_AGENT])
