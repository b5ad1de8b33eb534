"""The live-relocation counters of one node's object kind (an Actor runtime's, a Spot
runtime's): a frozen record in their statistics."""

from __future__ import annotations

import attrs

__all__ = ["RelocationStatistics"]


@attrs.frozen
class RelocationStatistics:
    sealed: int = 0
    """Objects hosted here that a relocation sealed (their ingress is held)."""
    in_flight: int = 0
    """Relocations this node coordinates now (as the source)."""
    moved_out: int = 0
    """Relocations whose relay-ready reply this node accepted as the source."""
    aborted: int = 0
    """Relocations aborted before relay-ready acceptance (the object stayed here)."""
    restores: int = 0
    """Instances built by a Restore here (the target factory runs)."""
    committed: int = 0
    """Relocations committed here (target owner CAS applied, dispatch opened)."""
    discarded: int = 0
    """Temporary queues discarded here without a commit."""
    cutover_timeouts: int = 0
    """Commits that went on after ``cutover_fallback`` without a cutover."""
    followed: int = 0
    """Messages this node forwarded over a Message Follow route."""
