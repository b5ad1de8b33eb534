"""SessionRouterConfig: validated at construction (ConfigurationError), derived values."""

from __future__ import annotations

import math

import attrs
import pytest

from zlink_trio.errors import ConfigurationError
from zlink_trio.router import SessionRouterConfig

DURATIONS = [f.name for f in attrs.fields(SessionRouterConfig) if f.name != "max_cached_sessions"]


@pytest.mark.parametrize("name", DURATIONS)
@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan, "3", True, None])
def test_durations_must_be_finite_positive_seconds(name: str, bad: object) -> None:
    with pytest.raises(ConfigurationError, match=name):
        SessionRouterConfig(**{name: bad})  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "10", True])
def test_max_cached_sessions_is_a_positive_int(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="max_cached_sessions"):
        SessionRouterConfig(max_cached_sessions=bad)  # type: ignore[arg-type]


def test_extend_interval_must_be_shorter_than_the_lease() -> None:
    SessionRouterConfig(lock_lease=30.0, lock_extend_interval=29.9)
    with pytest.raises(ConfigurationError, match="lock_extend_interval"):
        SessionRouterConfig(lock_lease=30.0, lock_extend_interval=30.0)


def test_forward_poll_interval_follows_the_secondary_ttl() -> None:
    assert SessionRouterConfig(idempotency_secondary_ttl=8.0).forward_poll_interval == 4.0


def test_config_is_frozen() -> None:
    config = SessionRouterConfig()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        config.idle_ttl = 1.0  # type: ignore[misc]
