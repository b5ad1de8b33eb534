"""The Actor owner role of one node: the registry of hosted Actors and their admission.

Only this node's hosted Actors live here. Admission is the single place an application
payload enters an Actor queue, whatever its ingress (local call, command 24 from a peer,
session relay, Actor-to-Actor): so every ingress kind is ordered by the same queue.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import final

import trio

from ..engine.engine import Engine
from ..engine.lanes import ActorDeliveryLane
from ..errors import StaleRoute, Unavailable
from ..ids import ActorId
from .hosted import DESTROYING, Deliver, Destroying, HostedActor, Ready

__all__ = ["ActorHost"]


@final
class ActorHost:
    __slots__ = ("_actors", "_engine", "_staging")

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._actors: dict[ActorId, HostedActor] = {}
        self._staging: dict[ActorId, trio.Event] = {}

    # --- registry ---------------------------------------------------------------------
    def get(self, actor_id: ActorId) -> HostedActor | None:
        return self._actors.get(actor_id)

    def __len__(self) -> int:
        return len(self._actors)

    def __iter__(self) -> Iterator[HostedActor]:
        return iter(self._actors.values())

    @property
    def staging_count(self) -> int:
        return len(self._staging)

    def begin_staging(self, actor_id: ActorId) -> None:
        """A creation attempt for ``actor_id`` is about to commit here: ingress that races
        the commit waits for :meth:`end_staging` instead of seeing a stale route."""
        self._staging[actor_id] = trio.Event()

    def end_staging(self, actor_id: ActorId) -> None:
        event = self._staging.pop(actor_id, None)
        if event is not None:
            event.set()

    def publish(self, hosted: HostedActor) -> None:
        """Make ``hosted`` reachable (after its Ready commit)."""
        hosted.lane = self._engine.new_lane(
            ActorDeliveryLane(), hosted.turn, on_drop=hosted.dropped
        )
        self._actors[hosted.actor_id] = hosted

    def retire(self, hosted: HostedActor) -> None:
        """Unpublish ``hosted`` (destroy: after its location ownership is gone)."""
        if self._actors.get(hosted.actor_id) is hosted:
            del self._actors[hosted.actor_id]
        if hosted.lane is not None:
            hosted.lane.close()

    def close_admission(self, hosted: HostedActor) -> None:
        hosted.state = DESTROYING

    # --- admission --------------------------------------------------------------------------
    async def admit(self, actor_id: ActorId, item: Deliver) -> HostedActor:
        """Put ``item`` on the current Ready Actor's application queue (waiting for space).

        Raises:
            StaleRoute: the Actor is not hosted here (the route that led here is stale).
            Unavailable: the Actor is being destroyed.
        """
        hosted = self._actors.get(actor_id)
        if hosted is None:
            staging = self._staging.get(actor_id)
            if staging is not None:
                await staging.wait()
                hosted = self._actors.get(actor_id)
            if hosted is None:
                raise StaleRoute(f"actor {actor_id.value!r} is not hosted on this node")
        match hosted.state:
            case Ready():
                pass
            case Destroying():
                raise Unavailable(f"actor {actor_id.value!r} is being destroyed")
        lane = hosted.lane
        assert lane is not None
        await lane.submit(item)
        return hosted
