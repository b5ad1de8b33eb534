"""Statistics of the Spot runtime: per-type counters (mutable, owned by the hosted Spots of
one type on this node) and the frozen snapshots ``zlink_trio.testing.spot_statistics``
returns. SpotIds are deliberately absent (spec 06 §9: a Spot ID is never a metric label)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import final

import attrs

from ..objects.relocation_stats import RelocationStatistics
from .call_stats import SpotCallStatistics
from .lifecycle import SpotCallback

__all__ = ["SpotCounters", "SpotRuntimeStatistics", "SpotTypeStatistics"]


@final
class SpotCounters:
    """What the Spots of one stable type did on this node (counted by their turns)."""

    __slots__ = (
        "application_turns",
        "callbacks",
        "dropped",
        "expired",
        "factory_runs",
        "handler_failures",
        "lifecycle_turns",
        "no_handler",
        "packets",
        "refused",
        "requests",
    )

    def __init__(self) -> None:
        self.factory_runs = 0
        self.packets = 0
        """One-way packet (send) handlers that ran to their end."""
        self.requests = 0
        """Request handlers that ran to their end (replied)."""
        self.handler_failures = 0
        self.no_handler = 0
        self.expired = 0
        self.dropped = 0
        self.refused = 0
        self.callbacks: Counter[SpotCallback] = Counter()
        """Lifecycle callbacks run, by callback (a type without that callback counts none)."""
        self.application_turns = 0
        """Turns of the application queue (messages and application work)."""
        self.lifecycle_turns = 0
        """Turns of the lifecycle queue (factory + create callback, membership, close)."""


@attrs.frozen
class SpotTypeStatistics:
    stable_type: str
    kind: str
    """``"user"`` or ``"instance"``."""
    ready: int
    """Incarnations of the type hosted Ready here now."""
    factory_runs: int
    packet_handlers: int
    request_handlers: int
    handler_failures: int
    no_handler: int
    expired: int
    dropped: int
    refused: int
    lifecycle_callbacks: Mapping[str, int]
    """Callbacks run, by :class:`SpotCallback` value (every callback present, 0 included)."""
    application_turns: int
    lifecycle_turns: int

    @classmethod
    def of(cls, stable_type: str, kind: str, ready: int, c: SpotCounters) -> SpotTypeStatistics:
        return cls(
            stable_type=stable_type,
            kind=kind,
            ready=ready,
            factory_runs=c.factory_runs,
            packet_handlers=c.packets,
            request_handlers=c.requests,
            handler_failures=c.handler_failures,
            no_handler=c.no_handler,
            expired=c.expired,
            dropped=c.dropped,
            refused=c.refused,
            lifecycle_callbacks={cb.value: c.callbacks[cb] for cb in SpotCallback},
            application_turns=c.application_turns,
            lifecycle_turns=c.lifecycle_turns,
        )


@attrs.frozen
class SpotRuntimeStatistics:
    hosted: int
    """User and Instance Spots hosted here (any state)."""
    staging: int
    """Creation attempts staging a Spot here now."""
    creates_in_flight: int
    creates: int
    """Reservations made by creates of this node (one per attempt)."""
    create_replays: int
    rejected: int
    failed_creates: int
    closes: int
    """Incarnations closed by this node (their authority released here)."""
    types: tuple[SpotTypeStatistics, ...]
    calls: SpotCallStatistics | None = None
    """Direct calls and cold activation (route cache, envelopes, races, recoveries)."""
    relocation: RelocationStatistics = attrs.field(factory=lambda: RelocationStatistics())
    """Live Spot relocations with this node as source or target (docs/relocation.md)."""
