"""The owner side of Actor destroy (spec 04 §6.8).

Destroy names one incarnation (ActorId + ObjectGeneration) and never re-targets another:
the same incarnation already gone → ``False``; another generation of the id → InvalidOperation;
sealed for a move → Unavailable. The order is the spec's: close new payload admission, let
the turn in progress finish (a lifecycle barrier), remove the session binding, then remove
location ownership (Closing, then release) and the registry entry. Payloads accepted but not
yet run fail with Unavailable (their callers get a typed terminal, nothing vanishes silently).
Destroy is not a membership move: no leave callback runs.
"""

from __future__ import annotations

import logging
from typing import final

import trio

from ..config import ServerConfig
from ..errors import InvalidOperation, Unavailable
from ..ids import ActorId, ObjectGeneration
from ..mesh.api import MeshNodeApi
from ..store.api import Applied, AuthorityState, LocationStore, ObjectKey
from .host import ActorHost
from .hosted import Barrier, Destroying, HostedActor

__all__ = ["Destroyer"]

logger = logging.getLogger("zlink_trio.actors")

_MAX_CAS_ROUNDS = 16


@final
class Destroyer:
    def __init__(
        self, *, config: ServerConfig, node: MeshNodeApi, store: LocationStore, host: ActorHost
    ) -> None:
        self._config = config
        self._node = node
        self._store = store
        self._host = host
        self._in_progress: dict[ActorId, trio.Event] = {}

    async def destroy(self, actor_id: ActorId, generation: ObjectGeneration) -> bool:
        """Destroy that incarnation if this node owns it. Returns False when it is gone."""
        running = self._in_progress.get(actor_id)
        if running is not None:
            await running.wait()
        hosted = self._host.get(actor_id)
        if hosted is None or hosted.generation != generation:
            return await self._not_here(actor_id, generation)
        if isinstance(hosted.state, Destroying):  # pragma: no cover - guarded above
            return False
        done = trio.Event()
        self._in_progress[actor_id] = done
        try:
            await self._destroy(hosted)
        finally:
            del self._in_progress[actor_id]
            done.set()
        return True

    async def _not_here(self, actor_id: ActorId, generation: ObjectGeneration) -> bool:
        row = await self._store.read(ObjectKey.actor(actor_id.value))
        if row is None:
            return False
        if row.object_generation != generation:
            raise InvalidOperation(
                f"actor {actor_id.value!r} is now generation {row.object_generation.value}, "
                f"not {generation.value}"
            )
        if row.state is AuthorityState.CREATING:
            return False  # that incarnation never became Ready
        raise Unavailable(f"actor {actor_id.value!r} is not hosted on this node lifecycle")

    async def _destroy(self, hosted: HostedActor) -> None:
        host = self._host
        lane = hosted.lane
        assert lane is not None
        # 1. close new payload admission
        host.close_admission(hosted)
        # 2. the turn in progress (and lifecycle work queued before) finishes
        barrier = Barrier()
        await lane.submit(barrier, lifecycle=True)
        await barrier.done.wait()
        # 3. session binding: none exists before the STREAM binding issue lands.
        # 4. location ownership, then the registry entry
        key = ObjectKey.actor(hosted.actor_id.value)
        with trio.CancelScope(shield=True), trio.move_on_after(self._config.drain_timeout):
            for _ in range(_MAX_CAS_ROUNDS):
                try:
                    row = await self._store.read(key)
                    if row is None or row.object_generation != hosted.generation:
                        break
                    if row.state is AuthorityState.READY:
                        closing = await self._store.begin_closing(key, row.store_version)
                        if not isinstance(closing, Applied):
                            continue
                        row = closing.row
                    released = await self._store.release(key, row.store_version)
                    if isinstance(released, Applied):
                        break
                except Unavailable as exc:
                    # StoreOutcomeUnknown (or the Store unreachable): the next round's
                    # read settles what happened; never leave the row Closing here.
                    logger.info("destroy of %r: %r; re-reading", hosted.actor_id, exc)
        host.retire(hosted)
        await hosted.fail_orphans()
