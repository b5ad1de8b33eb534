"""Fixtures of the PostgreSQL store unit tests: a unique schema per test, dropped after."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
from pg_kit import new_schema

from zlink_trio.store.postgres import drop_schema


@pytest.fixture
async def pg_schema(pg_dsn: str) -> AsyncIterator[str]:
    schema = new_schema()
    try:
        yield schema
    finally:
        with trio.CancelScope(shield=True):
            await drop_schema(pg_dsn, schema)
