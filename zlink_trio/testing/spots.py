"""Test hooks for the User/Instance Spot runtime: observe what the spec says to observe
without reaching into internals from the tests."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import NotConfigured
from ..ids import SpotId, SpotRef
from ..server import Server, runtime_of
from ..spots.hosted import SpotReady
from ..spots.runtime import SpotRuntime
from ..spots.stats import SpotRuntimeStatistics

__all__ = ["hosted_spots", "set_spot_id_source", "spot_statistics"]


def _runtime(server: Server) -> SpotRuntime:
    runtime = runtime_of(server).spots.runtime
    if runtime is None:
        raise NotConfigured("this server runs no Spot runtime")
    return runtime


def spot_statistics(server: Server) -> SpotRuntimeStatistics:
    """Per-type counters of ``server``'s User and Instance Spots (factory runs, packet and
    request handlers run, lifecycle callbacks by callback, application-queue turns) and
    the runtime's create/close counts."""
    return _runtime(server).statistics()


def hosted_spots(server: Server) -> tuple[SpotRef, ...]:
    """The Ready Spot incarnations ``server`` hosts right now, in no particular order."""
    return tuple(h.ref() for h in _runtime(server).host if isinstance(h.state, SpotReady))


def set_spot_id_source(server: Server, source: Callable[[], SpotId]) -> None:
    """Make ``server.spots.create(type)`` issue ids from ``source()`` (a collision test
    injects an id that is taken)."""
    _runtime(server).manager.id_source = source
