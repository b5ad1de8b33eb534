"""Dispatch counters and the Actor owner's observable state (spec 04 §8.2).

ActorId is never a label: counters are per node (and per stable type in snapshots).
"""

from __future__ import annotations

from typing import final

import attrs

from ..objects.relocation_stats import RelocationStatistics

__all__ = ["ActorRuntimeStatistics", "ActorTypeStatistics", "DispatchStats"]


@final
class DispatchStats:
    """Mutable counters, one instance per stable type (shared by that type's Actors)."""

    __slots__ = ("dropped", "expired", "failed", "no_handler", "ok", "refused")

    def __init__(self) -> None:
        self.ok = 0
        self.failed = 0
        self.no_handler = 0
        self.expired = 0
        self.dropped = 0
        self.refused = 0
        """Payloads from peers refused at a full Actor queue (a request gets
        CapacityExceeded; a one-way send has no terminal: it is counted and logged)."""


@attrs.frozen
class ActorTypeStatistics:
    stable_type: str
    mesh_names: tuple[str, ...]
    ready: int
    destroying: int
    application_backlog: int
    control_backlog: int
    dispatch_ok: int
    dispatch_failed: int
    dispatch_no_handler: int
    dispatch_expired: int
    dispatch_dropped: int
    dispatch_refused: int
    """Payloads from other nodes refused because the Actor's queue was full (requests
    answered CapacityExceeded; one-way sends counted and logged)."""


@attrs.frozen
class ActorRuntimeStatistics:
    hosted: int
    staging: int
    creates_in_flight: int
    types: tuple[ActorTypeStatistics, ...]
    route_cache_entries: int
    route_cache_hits: int
    route_cache_misses: int
    route_cache_invalidations: int
    stale_route_ingress: int
    stale_route_results: int
    repeated_ingress: int
    """Command 24 frames dropped as repeats of a message already accepted."""
    creates: int
    create_replays: int
    rejected: int
    failed_creates: int
    relocation: RelocationStatistics = attrs.field(factory=lambda: RelocationStatistics())
    """Live relocations with this node as source or target (docs/relocation.md)."""
    joins_accepted: int = 0
    """Joins of this node's Actors that ended ACCEPTED with the Actor staying here (a
    same-node Join, or already a member); a cross-node one is ``joins_moved_out``."""
    joins_rejected: int = 0
    """Joins a Spot's JOIN callback rejected."""
    joins_failed: int = 0
    """Joins that ended FAILED (NotFound, InvalidOperation, Unavailable, ...)."""
    joins_moved_out: int = 0
    """Cross-node Joins that moved an Actor of this node to another node."""
    joins_moved_in: int = 0
    """Cross-node Joins that moved an Actor here (this node as their target)."""
