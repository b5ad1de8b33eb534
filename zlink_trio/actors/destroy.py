"""The Actor's part of destroy (spec 04 §6.8): the shared
:class:`~zlink_trio.objects.destroy.Destroyer` runs one destroy per incarnation and the
Location Store step; this adapter is what happens to the hosted Actor around that step.

The order is the spec's: close new payload admission, let the turn in progress finish (a
lifecycle barrier, which then holds the lane), remove the session binding, then remove
location ownership (Closing, then release) and the registry entry. Payloads accepted but
not yet run fail with Unavailable (their callers get a typed terminal, nothing vanishes
silently). Destroy is not a membership move: no leave callback runs. When the Store step
does not release the row the destroy ends with ``Unavailable`` and leaves a state a retry
can finish:

* the Store row is still Ready (no CAS applied) → admission re-opens and the payloads
  parked behind the barrier run, in order;
* the row is Closing, or the outcome could not be settled in ``drain_timeout`` → the
  Actor stays Destroying (admission closed, queued payloads failed): nothing runs, and the
  next destroy of that incarnation resumes at the Store step.
"""

from __future__ import annotations

from typing import final

from ..errors import InvalidOperation, Unavailable, ZLinkError
from ..ids import ActorId, ObjectGeneration
from ..objects.destroy import Release, ReleaseOutcome
from .authority import Authority
from .bindings import ActorBindings
from .host import ActorHost
from .hosted import READY, RELOCATING, Barrier, HostedActor

__all__ = ["ActorDestroyKind"]


@final
class ActorDestroyKind:
    """The Actor adapter of :class:`~zlink_trio.objects.destroy.Destroyer`."""

    __slots__ = ("_authority", "_bindings", "_host")

    def __init__(
        self, host: ActorHost, authority: Authority, bindings: ActorBindings | None = None
    ) -> None:
        self._host = host
        self._authority = authority
        self._bindings = bindings

    def hosted(self, object_id: ActorId) -> HostedActor | None:
        return self._host.get(object_id)

    def generation(self, hosted: HostedActor) -> ObjectGeneration:
        return hosted.generation

    def in_own_turn(self, object_id: ActorId) -> bool:
        current = self._host.get(object_id)
        return current is not None and current.lane is not None and current.lane.in_turn()

    async def destroy(
        self, hosted: HostedActor, release: Release, fence: object = None
    ) -> ZLinkError | None:
        host = self._host
        actor_id = hosted.actor_id
        # A membership transition claimed the Actor first (registered or running): the
        # destroy waits for its end, then applies to the state it left (04 §3.1 races).
        pending = hosted.join
        while pending is not None:
            await pending.done.wait()
            pending = hosted.join
        if host.get(actor_id) is not hosted:
            return Unavailable(f"actor {actor_id.value!r} moved to another node during the destroy")
        if hosted.state is RELOCATING:
            # Sealed for a move (docs/relocation.md): the destroy does not race it.
            return Unavailable(f"actor {actor_id.value!r} is being relocated: retry the destroy")
        spot = hosted.context.spot_id
        if hosted.state is READY and spot is not None and not spot.is_reserved_entry_shape:
            # 04 §6.8: a destroy is not a membership move (no leave callback runs).
            return InvalidOperation(
                f"actor {actor_id.value!r} is a member of User Spot {spot.value!r}: it must "
                "leave first (join_entry_spot()), then be destroyed"
            )
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
            # 3. session binding: it ends with this incarnation (the session owner is
            # told; a relay of it is refused from now on).
            if self._bindings is not None:
                self._bindings.ended(hosted)
            # 4. location ownership, then the registry entry
            outcome = await release(fresh=barrier is not None)
            if outcome is ReleaseOutcome.READY:
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
            if outcome is ReleaseOutcome.GONE:
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
