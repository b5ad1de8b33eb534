"""Test hooks for the Actor runtime: observe what the spec says to observe without
reaching into internals from the tests."""

from __future__ import annotations

from ..errors import NotConfigured
from ..server import Server
from ..spots.entry import EntrySpotStatistics

__all__ = ["entry_spot_statistics"]


def entry_spot_statistics(server: Server) -> tuple[EntrySpotStatistics, ...]:
    """Turn and callback counters of ``server``'s Entry Spots (one per hosting mesh)."""
    runtime = server._actors
    if runtime is None:
        raise NotConfigured("Actor dispatch is not enabled on this server")
    return runtime.entry_spot_statistics()
