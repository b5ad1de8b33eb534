"""Test hooks for the User/Instance Spot runtime: observe what the spec says to observe
without reaching into internals from the tests."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import NotConfigured, NotFound
from ..ids import ActorId, SpotId, SpotRef
from ..server import Server, runtime_of
from ..spots.hosted import SpotReady
from ..spots.runtime import SpotRuntime
from ..spots.stats import SpotRuntimeStatistics

__all__ = [
    "forget_spot_member",
    "hosted_spots",
    "record_spot_member",
    "set_spot_id_source",
    "spot_members",
    "spot_statistics",
]


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


def spot_members(server: Server, spot_id: str | SpotId) -> frozenset[ActorId]:
    """The current members of the User Spot ``spot_id`` hosted on ``server``, as the
    Spot itself records them (empty when it is not hosted there)."""
    hosted = _runtime(server).host.get(SpotId.parse(spot_id))
    return frozenset() if hosted is None else hosted.members


async def record_spot_member(server: Server, spot_id: str | SpotId, actor_id: str) -> None:
    """Record ``actor_id`` as a member of the User Spot ``spot_id`` hosted on ``server``,
    in one lifecycle turn of the Spot -- the Spot's side of a committed Join, for tests of
    what a membership means to the Spot (close keeps a Spot with members) without a Join.
    Raises NotFound when the Spot is not hosted there."""
    hosted = _runtime(server).host.get(SpotId.parse(spot_id))
    if hosted is None:
        raise NotFound(f"spot {spot_id!r} is not hosted on this server")
    member = ActorId.parse(actor_id)

    async def add(_: object) -> None:
        hosted.add_member(member)

    await hosted.run_lifecycle_work(add)


async def forget_spot_member(server: Server, spot_id: str | SpotId, actor_id: str) -> None:
    """The Spot's side of a committed leave (see :func:`record_spot_member`)."""
    hosted = _runtime(server).host.get(SpotId.parse(spot_id))
    if hosted is None:
        raise NotFound(f"spot {spot_id!r} is not hosted on this server")
    member = ActorId.parse(actor_id)

    async def remove(_: object) -> None:
        hosted.remove_member(member)

    await hosted.run_lifecycle_work(remove)
