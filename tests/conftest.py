"""Shared fixtures: PostgreSQL discovery (fail under CI=true, skip otherwise) and
hypothesis profiles."""

from __future__ import annotations

import os
import socket
import urllib.parse

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "default")

DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def _answers(dsn: str) -> bool:
    url = urllib.parse.urlparse(dsn)
    try:
        socket.create_connection((url.hostname or "127.0.0.1", url.port or 5432), timeout=2).close()
    except OSError:
        return False
    return True


def _discover_pg_dsn() -> tuple[str | None, str]:
    explicit = os.environ.get("ZLINK_TEST_PG_DSN")
    if explicit:
        if _answers(explicit):
            return explicit, ""
        return None, f"ZLINK_TEST_PG_DSN={explicit!r} does not answer"
    if _answers(DEFAULT_PG_DSN):
        return DEFAULT_PG_DSN, ""
    return None, "no PostgreSQL: set ZLINK_TEST_PG_DSN or run one on 127.0.0.1:5432"


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """DSN of a PostgreSQL server that answers. Under CI=true a missing server fails the
    test instead of skipping it."""
    dsn, why = _discover_pg_dsn()
    if dsn is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL required under CI=true: {why}")
        pytest.skip(why)
    return dsn
