"""Observe flow-trace events (:class:`~zlink_trio.observe.FlowEvent`) of a running server."""

from __future__ import annotations

from collections.abc import Mapping

from ..observe import FlowEvent
from ..server import Server, runtime_of

__all__ = ["flow_count", "flow_counts"]


def flow_counts(server: Server) -> Mapping[FlowEvent, int]:
    """Every flow event's count in ``server``'s lifecycle so far (a read-only copy)."""
    return runtime_of(server).flow.snapshot()


def flow_count(server: Server, event: FlowEvent) -> int:
    """How often ``event`` happened in ``server``'s lifecycle so far."""
    return runtime_of(server).flow.count(event)
