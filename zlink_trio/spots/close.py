"""Close of a hosted User or Instance Spot (spec 06 §7, §7.1), on the owner.

The shared :class:`~zlink_trio.objects.destroy.Destroyer` runs one close per incarnation
(a task of the Spot runtime's nursery; concurrent closes of one incarnation wait for the
one in progress, then find it gone: ``False``); this adapter is the Spot's transaction, in
the spec's order:

1. in ONE lifecycle turn of the Spot (so no Join, leave or other lifecycle work
   interleaves): a fresh read of the authority row, then the §7.1 checks — the row is gone
   → ``False``; another ObjectGeneration → InvalidOperation; the owner generation or
   StoreVersion the caller expected changed, another owner, or a relocation in flight →
   Unavailable; a current Actor membership → ``False`` with admission and authority kept
   (members are never moved or destroyed behind the caller's back) — then the Closing CAS
   on exactly that version, and the admission seal (new messages end "closing");
2. the application messages and work accepted before the seal run (a boundary item at
   the end of the application queue);
3. cleanup, once, in a lifecycle turn: the type's CLOSE callback, then the hooks
   registered with ``HostedSpot.on_cleanup`` (timers); the lane is retired;
4. the authority is released with the same owner and generation fence (the shared
   :func:`~zlink_trio.objects.destroy.release` step, from a fresh read).

A Store step that does not settle leaves a state a retry of the close resumes: Closing
(steps 2-4 again) or Closed (step 4 again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, final

import attrs
import trio

from ..errors import InvalidOperation, StoreOutcomeUnknown, Unavailable, ZLinkError
from ..ids import AuthorityOwnerGeneration, NodeGeneration, NodeRid, ObjectGeneration, SpotId
from ..objects.authority import Authority
from ..objects.destroy import KEPT, Destroyer, Kept, Release, ReleaseOutcome
from ..store.api import Applied, AuthorityRow, AuthorityState, LocationStore
from .host import SpotHost
from .hosted import SPOT_CLOSED, SPOT_CLOSING, HostedSpot, SpotClosed, SpotReady
from .lifecycle import SpotCallback

__all__ = ["CloseFence", "SpotCloseKind", "SpotCloser"]

logger = logging.getLogger("zlink_trio.spots")


@attrs.frozen
class CloseFence:
    """What the caller of a close read: the row's owner generation and StoreVersion
    (command 48 carries them; a local close passes what its own read showed)."""

    owner_generation: AuthorityOwnerGeneration
    store_version: int


@final
class _Gone:
    """Step 1 found the incarnation already gone (its row Missing)."""

    __slots__ = ()


_GONE = _Gone()


@final
class SpotCloseKind:
    """The Spot adapter of :class:`~zlink_trio.objects.destroy.Destroyer`."""

    __slots__ = ("_authority", "_host", "_me", "_store", "closed")

    def __init__(
        self,
        host: SpotHost,
        store: LocationStore,
        authority: Authority[SpotId],
        me: Callable[[], tuple[NodeRid, NodeGeneration]],
    ) -> None:
        self._host = host
        self._store = store
        self._authority = authority
        self._me = me
        """This lifecycle's (NodeRid, NodeGeneration)."""
        self.closed = 0

    def hosted(self, object_id: SpotId) -> HostedSpot | None:
        return self._host.get(object_id)

    def generation(self, hosted: HostedSpot) -> ObjectGeneration:
        return hosted.generation

    def in_own_turn(self, object_id: SpotId) -> bool:
        """The caller runs in one of the Spot's turns, or (SpotWide) in a turn of a lane
        under the Spot's gate -- a member Actor's: the close's lifecycle turn could not
        start before that turn ends, so awaiting it there would wait for ever."""
        hosted = self._host.get(object_id)
        if hosted is None:
            return False
        if hosted.lane is not None and hosted.lane.in_turn():
            return True
        return hosted.gate is not None and hosted.gate.in_turn()

    async def destroy(
        self, hosted: HostedSpot, release: Release, fence: object
    ) -> ZLinkError | Kept | None:
        assert fence is None or isinstance(fence, CloseFence)
        if isinstance(hosted.state, SpotReady):
            begun = await hosted.run_lifecycle_work(lambda _: self._begin(hosted, fence))
            if isinstance(begun, _Gone):
                return KEPT  # the incarnation is already gone: False
            if begun is not None:
                return begun
        if hosted.state is SPOT_CLOSING:
            # 2. what was accepted before the seal runs to its end
            await hosted.run_application_work(_boundary, internal=True)
            # 3. cleanup once, in a lifecycle turn; then nothing runs any more
            await hosted.run_lifecycle_work(lambda instance: self._cleanup(hosted, instance))
            hosted.state = SPOT_CLOSED
            hosted.retire_lane()
            await hosted.fail_orphans()
        if not isinstance(hosted.state, SpotClosed):
            return Unavailable(f"spot {hosted.spot_id.value!r} no longer runs here")
        # 4. the authority, released with the same owner and generation fence
        outcome = await release(fresh=False)
        if outcome is ReleaseOutcome.GONE:
            self._host.retire(hosted)
            self._authority.forget(hosted.spot_id)
            self.closed += 1
            return None
        return Unavailable(
            f"close of {hosted.spot_id.value!r} could not release its authority; admission "
            "stays closed (retry the close)"
        )

    async def _begin(
        self, hosted: HostedSpot, fence: CloseFence | None
    ) -> ZLinkError | Kept | _Gone | None:
        """Step 1 (a lifecycle turn): the checks, the Closing CAS and the seal. None when
        the close goes on."""
        spot_id = hosted.spot_id
        name = spot_id.value
        row = await self._authority.read(spot_id)
        for _ in range(2):
            refused = self._check(hosted, row, fence)
            if refused is not None:
                return refused
            assert row is not None
            if hosted.has_members:
                return KEPT  # admission and authority stay as they are
            if row.state is AuthorityState.CLOSING:
                break  # an earlier close of ours applied it (its answer was lost)
            try:
                closing = await self._store.begin_closing(row.key, row.store_version)
            except StoreOutcomeUnknown as exc:
                logger.info("closing of %r: %r; re-reading", name, exc)
                row = await self._authority.read(spot_id)
                fence = None  # the version changed if it applied: judge the fresh row
                continue
            if not isinstance(closing, Applied):
                current = closing.current
                if current is None:
                    return _GONE
                return Unavailable(f"spot {name!r} changed while its close began; retry")
            break
        else:
            return Unavailable(f"the Closing of spot {name!r} could not be settled; retry")
        hosted.state = SPOT_CLOSING  # the admission seal
        return None

    def _check(
        self, hosted: HostedSpot, row: AuthorityRow | None, fence: CloseFence | None
    ) -> ZLinkError | _Gone | None:
        name = hosted.spot_id.value
        if row is None:
            return _GONE
        if row.object_generation != hosted.generation:
            return InvalidOperation(
                f"spot {name!r} is now generation {row.object_generation.value}, "
                f"not {hosted.generation.value}"
            )
        rid, generation = self._me()
        if row.owner.node_rid != rid or row.owner.node_generation != generation:
            return Unavailable(f"spot {name!r} is owned by another node lifecycle now")
        if row.relocation is not None:
            return Unavailable(f"spot {name!r} is moving (relocation in flight)")
        if (
            fence is not None
            and row.state is AuthorityState.READY
            and (
                row.owner_generation != fence.owner_generation
                or row.store_version != fence.store_version
            )
        ):
            return Unavailable(
                f"spot {name!r} changed since the close read it (owner generation "
                f"{row.owner_generation.value}, version {row.store_version}); retry"
            )
        return None

    async def _cleanup(self, hosted: HostedSpot, instance: Any) -> None:
        fn = hosted.spot_type.callbacks.get(SpotCallback.CLOSE)
        if fn is not None:
            hosted.shared.counters.callbacks[SpotCallback.CLOSE] += 1
            try:
                await fn(instance, None)
            except Exception:
                logger.exception("the close callback of %r failed", hosted)
        await hosted.run_cleanups()


async def _boundary(_: Any) -> None:
    await trio.lowlevel.checkpoint()


@final
class SpotCloser:
    """Closes of this node's hosted Spots: by SpotRef through the manager or command 48,
    and an Instance Spot's own (``SpotContext.close``)."""

    def __init__(self, destroyer: Destroyer[SpotId, HostedSpot], nursery: trio.Nursery) -> None:
        self._destroyer = destroyer
        self._nursery = nursery

    async def close(
        self,
        spot_id: SpotId,
        generation: ObjectGeneration,
        *,
        fence: CloseFence | None = None,
        deadline: float = float("inf"),
    ) -> bool:
        """Close that incarnation if this node hosts it (the module docstring); False
        when it is gone or keeps its members. ``deadline`` bounds the start only."""
        return await self._destroyer.destroy(spot_id, generation, deadline, fence=fence)

    def request(self, hosted: HostedSpot) -> None:
        """An Instance Spot asked to close itself: run its close after the current turn
        (a task of the Spot runtime)."""
        self._nursery.start_soon(self._own, hosted, name="zlink_trio.spots.self_close")

    async def _own(self, hosted: HostedSpot) -> None:
        try:
            await self.close(hosted.spot_id, hosted.generation)
        except ZLinkError as exc:
            hosted.close_requested = False  # it may ask again
            logger.info("the self-close of %r did not finish: %r", hosted, exc)
        except Exception:
            hosted.close_requested = False
            logger.exception("the self-close of %r failed", hosted)
