"""The router's own configuration: the defaults table of spec 10 §11.2, validated when built.

Durations are seconds (``float``), the way Trio counts time. Every value is checked when the
object is constructed, so a bad config raises
:class:`~zlink_trio.errors.ConfigurationError` before any router exists. This module imports
nothing of the runtime: the router is usable on its own (DESIGN.md §3).
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from ..errors import ConfigurationError

__all__ = ["SessionRouterConfig"]


def _duration(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{attr.name}: expected seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"{attr.name}: must be finite and > 0, got {value!r}")


def _positive_int(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigurationError(f"{attr.name}: must be a positive int, got {value!r}")


@attrs.frozen(kw_only=True)
class SessionRouterConfig:
    """SessionRouter tunables with the defaults of spec 10 §11.2 (and §4.1, §6.3 D).

    ``lock_extend_interval`` must be shorter than ``lock_lease`` (the spec recommends a
    third: two ticks of margin). ``forward_poll_interval`` is derived: half the secondary
    idempotency TTL (§6.3 D).
    """

    idle_ttl: float = attrs.field(default=600.0, validator=_duration)
    """§6.3 B: a cached handle idle longer than this is closed by the sweeper (10 min)."""
    max_cached_sessions: int = attrs.field(default=1000, validator=_positive_int)
    """§5.2: the LRU bound of the handle cache, the heap limit."""
    lock_lease: float = attrs.field(default=30.0, validator=_duration)
    """§7.4: the session-lifetime lease TTL."""
    lock_extend_interval: float = attrs.field(default=10.0, validator=_duration)
    """§7.4: the renewer's period (lease / 3)."""
    status_heartbeat_interval: float = attrs.field(default=10.0, validator=_duration)
    """§3.3: STATUS publish period; the same number as the extend interval, unrelated."""
    holder_loss_sweep_interval: float = attrs.field(default=15.0, validator=_duration)
    """§6.3 D: the holder-loss sweeper's period."""
    cache_sweep_interval: float = attrs.field(default=60.0, validator=_duration)
    """§4.1: the handle-cache sweeper's period (1 min)."""
    idempotency_primary_ttl: float = attrs.field(default=86_400.0, validator=_duration)
    """§9.2: how long a DONE result answers a retry (24 h)."""
    idempotency_secondary_ttl: float = attrs.field(default=30.0, validator=_duration)
    """§9.2: an IN_FLIGHT reservation untouched this long is stale (30 s, = the lease)."""
    idempotency_forward_ttl: float = attrs.field(default=300.0, validator=_duration)
    """§9.1: the deadline of a forwarded result (5 min)."""
    release_interrupt_timeout: float = attrs.field(default=5.0, validator=_duration)
    """§6.3 A, §7.7: how long release waits for an interrupted turn, and delete for a yield.
    Also the bound of each shielded clean-up step (hand a queued turn back, give a lease
    back) so no clean-up can hold the router's exit."""
    handle_close_timeout: float = attrs.field(default=5.0, validator=_duration)
    """How long the router waits for an application's ``LiveSession.aclose()`` before it
    abandons the handle (with a warning): a close that never returns cannot hang
    ``release_session``, ``delete_session``, a sweep or the router's exit. Not in the
    JVM table (its close is synchronous and trusted)."""
    metrics_drain_timeout: float = attrs.field(default=1.0, validator=_duration)
    """At exit, how long the router waits for queued and running ``SessionMetrics`` hooks,
    in wall-clock seconds (hooks run in threads, outside Trio's clock); hooks still running
    then are abandoned. Not in the JVM table."""

    inject_timeout: float = attrs.field(default=2.0, validator=_duration)
    """How long the router waits for an application's synchronous ``LiveSession.inject``,
    in wall-clock seconds (it runs in a thread of its own, so a slow one delays only its
    session's NOW injection, never the router); one still running then is abandoned and
    counted as injected (its outcome unknown: the message is not run a second time). Not
    in the JVM table."""

    def __attrs_post_init__(self) -> None:
        if self.lock_extend_interval >= self.lock_lease:
            raise ConfigurationError(
                "lock_extend_interval must be shorter than lock_lease "
                f"(got {self.lock_extend_interval} and {self.lock_lease})"
            )

    @property
    def forward_poll_interval(self) -> float:
        """§6.3 D: the polling fallback's period, secondary TTL / 2 (15 s by default)."""
        return self.idempotency_secondary_ttl / 2
