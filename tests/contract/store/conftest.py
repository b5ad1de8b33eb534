"""Fixtures of the Location Store contract suite.

``store`` is parametrized over every implementation and gives each test a fresh, empty
store:

* ``memory``: a new :class:`~zlink_trio.store.memory.MemoryLocationStore`.
* ``postgres``: present only once ``zlink_trio.store.postgres`` exists. That module must
  provide ``open_postgres_store(dsn, *, schema, connections)`` (an async context manager
  yielding a LocationStore) and ``drop_schema(dsn, schema)`` (sync or async). Each test
  gets its own schema, dropped afterwards. The DSN comes from ``pg_dsn``
  (tests/conftest.py): skipped without a server, failed under ``CI=true``. If the module
  exists but fails to import, the postgres tests fail loudly instead of vanishing.

Tests use the protocol only (plus ``zlink_trio.testing.advance_store_clock`` for time), so
they run unchanged on every implementation.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest
import trio

from zlink_trio.store.api import LocationStore
from zlink_trio.store.memory import MemoryLocationStore

StoreFactory = Callable[[], AbstractAsyncContextManager[LocationStore]]

POSTGRES_MODULE = "zlink_trio.store.postgres"
POSTGRES_CONNECTIONS = 4
"""Enough connections for the concurrent-reservation tests to really race."""


def _backends() -> list[object]:
    params: list[object] = [pytest.param("memory", id="memory")]
    if importlib.util.find_spec(POSTGRES_MODULE) is not None:
        params.append(pytest.param("postgres", id="postgres", marks=pytest.mark.postgres))
    return params


@asynccontextmanager
async def _open_memory() -> AsyncIterator[LocationStore]:
    yield MemoryLocationStore()


def _postgres_factory(dsn: str) -> StoreFactory:
    pg = importlib.import_module(POSTGRES_MODULE)

    @asynccontextmanager
    async def open_pg() -> AsyncIterator[LocationStore]:
        schema = f"zlink_contract_{uuid.uuid4().hex[:16]}"
        try:
            async with pg.open_postgres_store(
                dsn, schema=schema, connections=POSTGRES_CONNECTIONS
            ) as store:
                yield store
        finally:
            with trio.CancelScope(shield=True):
                dropped = pg.drop_schema(dsn, schema)
                if inspect.isawaitable(dropped):
                    await dropped

    return open_pg


@pytest.fixture(params=_backends())
def store_factory(request: pytest.FixtureRequest) -> StoreFactory:
    """Opens a fresh store of the parametrized implementation on every call."""
    if request.param == "memory":
        return _open_memory
    return _postgres_factory(request.getfixturevalue("pg_dsn"))


@pytest.fixture
async def store(store_factory: StoreFactory) -> AsyncIterator[LocationStore]:
    async with store_factory() as opened:
        yield opened
