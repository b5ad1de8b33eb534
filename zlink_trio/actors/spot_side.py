"""The Spot side of a Join: what runs on a User Spot's lifecycle lane (spec 04 §4).

Each helper is ONE lifecycle turn of the Spot (``HostedSpot.run_lifecycle_work``), so it
never interleaves with the Spot's close, its other callbacks or another Join:

* :func:`admit` — the Join's decision: the Spot must be Ready, its JOIN callback (if any)
  approves or rejects, and an approved Actor is added to the member set in the same turn
  (so a Close racing the Join sees it and returns False); ``before`` runs first in that
  turn (a cross-node Join's target factory);
* :func:`unadmit` — the membership commit failed: the tentative member is removed;
* :func:`joined` — the JOINED callback, after the commit;
* :func:`leave` — the Spot an Actor left: the member is removed and LEAVE runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import ApplicationError, Unavailable
from ..ids import ActorId
from ..spots.approval import Approve, Reject
from ..spots.hosted import HostedSpot
from ..spots.lifecycle import SpotCallback
from ..spots.states import SPOT_READY
from .membership import JoinEvent, LeaveEvent

__all__ = ["admit", "joined", "leave", "unadmit"]


def _callback(spot: HostedSpot, which: SpotCallback) -> Callable[[Any, Any], Awaitable[Any]] | None:
    fn = spot.spot_type.callbacks.get(which)
    if fn is not None:
        spot.shared.counters.callbacks[which] += 1
    return fn


async def admit(
    spot: HostedSpot,
    make_event: Callable[[Any], JoinEvent],
    *,
    before: Callable[[], Awaitable[Any]] | None = None,
) -> tuple[Approve | Reject, Any]:
    """One lifecycle turn of ``spot``: ``before()`` (its result is passed to
    ``make_event``), then the JOIN decision; an approved Actor becomes a member."""

    async def turn(instance: Any) -> tuple[Approve | Reject, Any]:
        if spot.state is not SPOT_READY:
            raise Unavailable(f"spot {spot.spot_id.value!r} is not Ready ({spot.state!r})")
        built = await before() if before is not None else None
        event = make_event(built)
        fn = _callback(spot, SpotCallback.JOIN)
        decision: object = Approve()
        if fn is not None:
            try:
                decision = await fn(instance, event)
            except Exception as exc:
                raise ApplicationError(
                    f"the JOIN callback raised {type(exc).__name__}: {exc}"
                ) from None
            if decision is None:
                decision = Approve()
        if not isinstance(decision, Approve | Reject):
            raise ApplicationError(
                f"the JOIN callback must return Approve or Reject, got {decision!r}"
            )
        if isinstance(decision, Approve):
            spot.add_member(event.actor_id)
        return decision, built

    return await spot.run_lifecycle_work(turn)


async def unadmit(spot: HostedSpot, actor_id: ActorId) -> None:
    async def turn(instance: Any) -> None:
        spot.remove_member(actor_id)

    try:
        await spot.run_lifecycle_work(turn)
    except Unavailable:
        spot.remove_member(actor_id)  # its lane is gone: nothing can interleave


async def joined(spot: HostedSpot, event: JoinEvent) -> None:
    async def turn(instance: Any) -> None:
        fn = _callback(spot, SpotCallback.JOINED)
        if fn is not None:
            await fn(instance, event)

    await spot.run_lifecycle_work(turn)


async def leave(spot: HostedSpot, event: LeaveEvent) -> None:
    async def turn(instance: Any) -> None:
        spot.remove_member(event.actor_id)
        fn = _callback(spot, SpotCallback.LEAVE)
        if fn is not None:
            await fn(instance, event)

    await spot.run_lifecycle_work(turn)
