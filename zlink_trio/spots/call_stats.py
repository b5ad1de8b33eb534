"""The direct-call part of the Spot runtime's statistics (no SpotId anywhere: spec 06 §9
keeps Spot ids out of metrics)."""

from __future__ import annotations

import attrs

__all__ = ["SpotCallStatistics"]


@attrs.frozen
class SpotCallStatistics:
    route_cache_entries: int
    route_cache_hits: int
    route_cache_misses: int
    route_cache_invalidations: int
    activations_sent: int
    """Cold-activation envelopes this node sent (or started here) as a source."""
    envelopes: int
    """Cold-activation envelopes this node handled as a target."""
    reservations: int
    """Of those, the reservations this node won (a factory run follows)."""
    forwarded: int
    """Messages this node forwarded once to the Ready owner after losing the race."""
    recovered: int
    """Activations of dead owners this node resumed."""
    aborted: int
    """Activations of dead owners this node aborted with the exact fence."""
