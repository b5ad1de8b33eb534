"""Test hooks for the Actor runtime: observe what the spec says to observe without
reaching into internals from the tests."""

from __future__ import annotations

from ..actors.hosted import Ready
from ..actors.runtime import ActorRuntime
from ..errors import NotConfigured
from ..ids import ActorRef
from ..server import Server, runtime_of
from ..spots.entry import EntrySpotStatistics

__all__ = ["entry_spot_statistics", "hosted_actors"]


def _runtime(server: Server) -> ActorRuntime:
    runtime = runtime_of(server).actors
    if runtime is None:
        raise NotConfigured("Actor dispatch is not enabled on this server")
    return runtime


def entry_spot_statistics(server: Server) -> tuple[EntrySpotStatistics, ...]:
    """Turn and callback counters of ``server``'s Entry Spots (one per hosting mesh)."""
    _runtime(server)
    return runtime_of(server).spots.entry_spot_statistics()


def hosted_actors(server: Server) -> tuple[ActorRef, ...]:
    """The Ready Actor incarnations ``server`` hosts right now (published, admitting), in
    no particular order. Fault tests compare them with the Location Store's Ready rows;
    ActorIds are deliberately absent from ``server.statistics()`` (spec 04 §8.2)."""
    return tuple(
        hosted.ref() for hosted in _runtime(server).host if isinstance(hosted.state, Ready)
    )
