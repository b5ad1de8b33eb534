"""The Spot owner role of one node: its Entry Spots now (User and Instance Spots later).

Started by the composition root (:mod:`zlink_trio._runtime`) with ``nursery.start`` before
the Actor owner, which receives the :class:`SpotOwner` handle: an Actor creation asks the
Entry Spot of its mesh for approval. Entry Spots are lanes on the engine, not tasks; the
role's task holds them open and closes them (failing queued approvals with
``ShuttingDown``) when it is cancelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import final

import trio

from ..engine.engine import Engine
from ..ids import MeshName, SpotId
from .approval import OnCreateActor
from .entry import EntrySpot, EntrySpotStatistics

__all__ = ["SpotOwner", "serve_spots"]


@final
class SpotOwner:
    """The handle of this node's Spot role, given to the roles above it."""

    def __init__(
        self,
        engine: Engine,
        entry_ids: Mapping[MeshName, SpotId],
        on_create_actor: OnCreateActor | None,
    ) -> None:
        self.entry_spots: Mapping[MeshName, EntrySpot] = {
            mesh: EntrySpot(engine, spot_id, mesh, on_create_actor)
            for mesh, spot_id in entry_ids.items()
        }

    def entry_spot_statistics(self) -> tuple[EntrySpotStatistics, ...]:
        return tuple(spot.statistics() for spot in self.entry_spots.values())

    def close(self) -> None:
        for spot in self.entry_spots.values():
            spot.close()


async def serve_spots(
    engine: Engine,
    entry_ids: Mapping[MeshName, SpotId],
    on_create_actor: OnCreateActor | None,
    *,
    task_status: trio.TaskStatus[SpotOwner] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the Spot role until cancelled: one Entry Spot lane per ``entry_ids`` mesh."""
    owner = SpotOwner(engine, entry_ids, on_create_actor)
    try:
        task_status.started(owner)
        await trio.sleep_forever()
    finally:
        owner.close()
