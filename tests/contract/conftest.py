"""Fixtures of the contract tests that run nodes on both stores (actors/, spots/; store/
has its own ``store`` fixture).

``backend`` runs each test on the in-memory store and (once it is importable and a server
answers; under CI=true a missing server fails) on PostgreSQL. ``clock`` is a
``MockClock(autojump_threshold=0)`` on the memory backend — virtual time, exact deadlines —
and the real clock on PostgreSQL, whose driver thread would make an autojumping clock leap
while a query is in flight. Tests that assert exact virtual times parametrize ``backend`` to memory only.
``store`` is a CountingStore around a fresh store (its own schema on PostgreSQL).
"""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing

from zlink_trio.store.memory import MemoryLocationStore
from zlink_trio.testing import CountingStore

POSTGRES_MODULE = "zlink_trio.store.postgres"


def _backends() -> list[object]:
    params: list[object] = [pytest.param("memory", id="memory")]
    if importlib.util.find_spec(POSTGRES_MODULE) is not None:
        params.append(pytest.param("postgres", id="postgres", marks=pytest.mark.postgres))
    return params


@pytest.fixture(params=_backends())
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock(backend: str) -> trio.testing.MockClock | None:
    if backend == "memory":
        return trio.testing.MockClock(autojump_threshold=0)
    return None


@pytest.fixture
async def store(backend: str, request: pytest.FixtureRequest) -> AsyncIterator[CountingStore]:
    if backend == "memory":
        yield CountingStore(MemoryLocationStore())
        return
    from zlink_trio.store.postgres import drop_schema, open_postgres_store

    dsn = request.getfixturevalue("pg_dsn")
    schema = f"zlink_actors_{uuid.uuid4().hex[:16]}"
    try:
        async with open_postgres_store(dsn, schema=schema, connections=4) as pg:
            yield CountingStore(pg)
    finally:
        with trio.CancelScope(shield=True):
            await drop_schema(dsn, schema)
