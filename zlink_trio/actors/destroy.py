"""The owner side of Actor destroy (spec 04 §6.8).

Destroy names one incarnation (ActorId + ObjectGeneration) and never re-targets another:
the same incarnation already gone → ``False``; another generation of the id → InvalidOperation;
sealed for a move → Unavailable. The order is the spec's: close new payload admission, let
the turn in progress finish (a lifecycle barrier, which then holds the lane), remove the
session binding, then remove location ownership (Closing, then release) and the registry
entry. Payloads accepted but not yet run fail with Unavailable (their callers get a typed
terminal, nothing vanishes silently). Destroy is not a membership move: no leave callback
runs.

The destroy runs as a task of the Actor runtime's nursery; callers only wait for its
outcome, so a cancelled caller never leaves it half done, and a destroy that finds one in
progress waits for it (then looks again). It returns ``True`` only when the release was
applied or the row is gone. Otherwise it ends with ``Unavailable`` and leaves a state a
retry can finish:

* the Store row is still Ready (no CAS applied) → admission re-opens and the payloads
  parked behind the barrier run, in order;
* the row is Closing, or the outcome could not be settled in ``drain_timeout`` → the
  Actor stays Destroying (admission closed, queued payloads failed): nothing runs, and the
  next destroy of that incarnation resumes at the Store step.
"""

from __future__ import annotations

import enum
import logging
from typing import final

import trio

from ..config import ServerConfig
from ..errors import (
    InvalidOperation,
    ShuttingDown,
    StoreOutcomeUnknown,
    Unavailable,
    ZLinkError,
)
from ..ids import ActorId, ObjectGeneration
from ..mesh.api import MeshNodeApi
from ..store.api import Applied, AuthorityState, LocationStore, ObjectKey
from .authority import Authority
from .host import ActorHost
from .hosted import READY, Barrier, HostedActor

__all__ = ["Destroyer"]

logger = logging.getLogger("zlink_trio.actors")

_MAX_CAS_ROUNDS = 16


class _Outcome(enum.Enum):
    GONE = "gone"
    """Released (or the row is gone / another generation): the incarnation is destroyed."""
    READY = "ready"
    """The row was last seen Ready and nothing was applied since: destroy did not happen."""
    UNSETTLED = "unsettled"
    """Closing, or a mutation whose outcome could not be learned in time."""


@final
class _Run:
    """One destroy in progress (its task is in the runtime's nursery)."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: ZLinkError | None = None


@final
class Destroyer:
    def __init__(
        self,
        *,
        config: ServerConfig,
        node: MeshNodeApi,
        store: LocationStore,
        host: ActorHost,
        authority: Authority,
        nursery: trio.Nursery,
    ) -> None:
        self._config = config
        self._node = node
        self._store = store
        self._host = host
        self._authority = authority
        self._nursery = nursery
        self._in_progress: dict[ActorId, _Run] = {}

    async def destroy(self, actor_id: ActorId, generation: ObjectGeneration) -> bool:
        """Destroy that incarnation if this node owns it. Returns False when it is gone.

        Raises InvalidOperation when awaited from one of the Actor's own turns: a destroy
        waits for the turn in progress, so it would wait for ever."""
        current = self._host.get(actor_id)
        if current is not None and current.lane is not None and current.lane.in_turn():
            await trio.lowlevel.checkpoint()
            raise InvalidOperation(
                f"actor {actor_id.value!r} cannot await its own destroy inside its turn"
            )
        while True:
            running = self._in_progress.get(actor_id)
            if running is None:
                break
            await running.done.wait()
        hosted = self._host.get(actor_id)
        if hosted is None or hosted.generation != generation:
            return await self._not_here(actor_id, generation)
        run = _Run()
        self._in_progress[actor_id] = run
        self._nursery.start_soon(self._run, hosted, run, name="zlink_trio.actor.destroy")
        await run.done.wait()
        if run.error is not None:
            raise type(run.error)(run.error.message)
        return True

    async def _not_here(self, actor_id: ActorId, generation: ObjectGeneration) -> bool:
        row = await self._authority.read(actor_id)
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

    async def _run(self, hosted: HostedActor, run: _Run) -> None:
        try:
            run.error = await self._destroy(hosted)
        except trio.Cancelled:
            run.error = ShuttingDown("the Actor runtime stopped during the destroy")
            raise
        except Exception as exc:
            logger.exception("destroy of %r failed", hosted.actor_id)
            run.error = Unavailable(f"destroy failed: {type(exc).__name__}")
        finally:
            if self._in_progress.get(hosted.actor_id) is run:
                del self._in_progress[hosted.actor_id]
            run.done.set()

    async def _destroy(self, hosted: HostedActor) -> ZLinkError | None:
        host = self._host
        actor_id = hosted.actor_id
        barrier: Barrier | None = None
        try:
            if hosted.state is READY:
                lane = hosted.lane
                assert lane is not None
                # 1. close new payload admission
                host.close_admission(hosted)
                # 2. the turn in progress (and lifecycle work queued before) finishes; the
                # barrier then holds the lane: queued payloads stay parked, none runs.
                barrier = Barrier()
                await lane.submit(barrier, lifecycle=True)
                await barrier.reached.wait()
            # else: Destroying, left by an earlier destroy whose Store step did not settle
            # (its lane is retired already): resume at step 4.
            # 3. session binding: none exists before the STREAM binding issue lands.
            # 4. location ownership, then the registry entry
            outcome = await self._release(hosted, fresh=barrier is not None)
            if outcome is _Outcome.READY:
                # Nothing changed in the Store: the Actor is still the Ready incarnation.
                # Re-open admission; the parked payloads run, in order.
                host.reopen(hosted, new_lane=barrier is None)
                if barrier is not None:
                    barrier.finish(retire=False)
                return Unavailable(
                    f"destroy of {actor_id.value!r} could not update the Location Store; "
                    "the Actor is still Ready (retry the destroy)"
                )
            if barrier is not None:
                barrier.finish(retire=True)
                await barrier.done.wait()
            if outcome is _Outcome.GONE:
                host.retire(hosted)
                self._authority.forget(actor_id)
                await hosted.fail_orphans()
                return None
            await hosted.fail_orphans()
            return Unavailable(
                f"destroy of {actor_id.value!r} could not finish removing its location "
                "ownership; admission stays closed (retry the destroy)"
            )
        finally:
            if barrier is not None:
                barrier.finish(retire=True)  # no-op unless an error cut the steps short

    async def _release(self, hosted: HostedActor, *, fresh: bool) -> _Outcome:
        """Closing then release, from fresh reads; unknown outcomes (or a Store briefly
        unreachable) are settled by the next round's read, within ``drain_timeout`` and
        :data:`_MAX_CAS_ROUNDS` rounds. ``fresh``: the Actor was Ready when this destroy
        began (nothing of ours has touched its row yet)."""
        store = self._store
        key = ObjectKey.actor(hosted.actor_id.value)
        # What the row is known to be; None: not known (a mutation of ours may have applied).
        last: AuthorityState | None = AuthorityState.READY if fresh else None
        before = last
        with trio.CancelScope(shield=True), trio.move_on_after(self._config.drain_timeout):
            for _ in range(_MAX_CAS_ROUNDS):
                try:
                    row = await self._authority.read(hosted.actor_id)
                    if row is None or row.object_generation != hosted.generation:
                        return _Outcome.GONE
                    before = last = row.state
                    last = None  # a mutation in flight (cut by the time bound: unknown)
                    if row.state is AuthorityState.READY:
                        closing = await store.begin_closing(key, row.store_version)
                        if not isinstance(closing, Applied):
                            before = None  # someone else changed it: read again
                            continue
                        before = last = AuthorityState.CLOSING
                        row = closing.row
                        last = None
                    released = await store.release(key, row.store_version)
                    if isinstance(released, Applied):
                        return _Outcome.GONE
                except StoreOutcomeUnknown as exc:
                    # It may have applied: the next round's read settles what happened;
                    # never leave the row Closing here.
                    before = None
                    logger.info("destroy of %r: %r; re-reading", hosted.actor_id, exc)
                except Unavailable as exc:
                    # The Store was not reached: nothing applied.
                    last = before
                    logger.info("destroy of %r: %r; retrying", hosted.actor_id, exc)
        if last is AuthorityState.READY:
            return _Outcome.READY
        return _Outcome.UNSETTLED
