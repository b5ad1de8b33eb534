"""The Spot owner role of one node: its Entry Spots and its User and Instance Spots.

Started by the composition root (:mod:`zlink_trio._runtime`) with ``nursery.start`` before
the Actor owner, which receives the :class:`SpotOwner` handle: an Actor creation asks the
Entry Spot of its mesh for approval. Entry Spots are lanes on the engine, not tasks; the
role's task holds them open and closes them (failing queued approvals with
``ShuttingDown``) when it is cancelled.

With a Location Store and an Object mesh the role also runs the User/Instance Spot
runtime (:class:`~zlink_trio.spots.runtime.SpotRuntime`: hosting, Create / GetOrCreate,
close, ``server.spots``) as a child task started before the role reports started, so its
inbound commands (47, 48) are registered before the node serves.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, final

import trio

from ..config import ServerConfig
from ..engine.engine import Engine
from ..ids import MeshName, SpotId
from ..objects.timers import TimerService
from ..observe import FlowTrace
from ..store.api import LocationStore
from ..wire.payloads import EMPTY_REGISTRY, PayloadRegistry
from .approval import OnCreateActor
from .entry import EntrySpot, EntrySpotStatistics
from .registry import SpotTypes
from .runtime import SpotRuntime, serve_spot_runtime

if TYPE_CHECKING:
    from ..mesh.node import MeshNode

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
        self.runtime: SpotRuntime | None = None
        """The User/Instance Spot runtime (None without a Location Store or an Object
        mesh)."""

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
    config: ServerConfig | None = None,
    spot_types: SpotTypes | None = None,
    payloads: PayloadRegistry | None = None,
    store: LocationStore | None = None,
    node: MeshNode | None = None,
    flow: FlowTrace | None = None,
    timers: TimerService | None = None,
    task_status: trio.TaskStatus[SpotOwner] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the Spot role until cancelled: one Entry Spot lane per ``entry_ids`` mesh, and
    the User/Instance Spot runtime when ``store``, ``node`` and an Object mesh of
    ``config`` are there."""
    owner = SpotOwner(engine, entry_ids, on_create_actor)
    try:
        async with trio.open_nursery() as nursery:
            if (
                config is not None
                and store is not None
                and node is not None
                and config.object_meshes()
            ):
                owner.runtime = await nursery.start(
                    partial(serve_spot_runtime, timers=timers),
                    config,
                    spot_types or {},
                    store,
                    node,
                    engine,
                    flow or FlowTrace(),
                    payloads or EMPTY_REGISTRY,
                    name="zlink_trio.spots.runtime",
                )
            task_status.started(owner)
            await trio.sleep_forever()
    finally:
        owner.close()
