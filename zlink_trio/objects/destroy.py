"""The owner side of destroy, for any object kind (spec 04 §6.8, spec 06 §7).

Destroy names one incarnation (id + ObjectGeneration) and never re-targets another: the
same incarnation already gone → ``False``; another generation of the id → InvalidOperation;
not hosted on this node lifecycle → Unavailable. What happens to the hosted object (for
an Actor: close payload admission, let the turn in progress finish behind a lifecycle
barrier, fail what was queued) is the kind's :class:`DestroyKind`; in between it calls
:func:`release`, the Location Store part every kind shares: Closing, then release, from
fresh reads.

The destroy runs as a task of the owning runtime's nursery; callers only wait for its
outcome, so a cancelled caller never leaves it half done, and a destroy that finds one in
progress waits for it (then looks again). It returns ``True`` only when the release was
applied or the row is gone; otherwise it ends with the kind's error (``Unavailable``) and
leaves a state a retry can finish.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Awaitable
from typing import Final, Generic, Protocol, TypeVar, final

import trio

from ..errors import (
    DeadlineExceeded,
    InvalidOperation,
    ShuttingDown,
    StoreOutcomeUnknown,
    Unavailable,
    ZLinkError,
)
from ..ids import ObjectGeneration
from ..store.api import Applied, AuthorityState, LocationStore, ObjectKind
from .activity import Activity
from .authority import Authority
from .kind import IdT, noun

__all__ = ["KEPT", "DestroyKind", "Destroyer", "Kept", "Release", "ReleaseOutcome", "release"]

logger = logging.getLogger("zlink_trio.objects")

MAX_CAS_ROUNDS: Final = 16

HostedT = TypeVar("HostedT")
IdT_contra = TypeVar("IdT_contra", contravariant=True)


class ReleaseOutcome(enum.Enum):
    GONE = "gone"
    """Released (or the row is gone / another generation): the incarnation is destroyed."""
    READY = "ready"
    """The row was last seen Ready and nothing was applied since: destroy did not happen."""
    UNSETTLED = "unsettled"
    """Closing, or a mutation whose outcome could not be learned in time."""


class Release(Protocol):
    """The Location Store step of one destroy (:func:`release` bound to its incarnation)."""

    def __call__(self, *, fresh: bool) -> Awaitable[ReleaseOutcome]: ...


async def release(
    store: LocationStore,
    authority: Authority[IdT],
    object_id: IdT,
    generation: ObjectGeneration,
    *,
    fresh: bool,
    bound: float,
) -> ReleaseOutcome:
    """Closing then release of ``(object_id, generation)``, from fresh reads; unknown
    outcomes (or a Store briefly unreachable) are settled by the next round's read, within
    ``bound`` seconds (shielded) and :data:`MAX_CAS_ROUNDS` rounds. ``fresh``: the object
    was Ready when this destroy began (nothing of ours has touched its row yet)."""
    key = authority.key(object_id)
    # What the row is known to be; None: not known (a mutation of ours may have applied).
    last: AuthorityState | None = AuthorityState.READY if fresh else None
    before = last
    with trio.CancelScope(shield=True), trio.move_on_after(bound):
        for _ in range(MAX_CAS_ROUNDS):
            try:
                row = await authority.read(object_id)
                if row is None or row.object_generation != generation:
                    return ReleaseOutcome.GONE
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
                    return ReleaseOutcome.GONE
            except StoreOutcomeUnknown as exc:
                # It may have applied: the next round's read settles what happened;
                # never leave the row Closing here.
                before = None
                logger.info("destroy of %r: %r; re-reading", key, exc)
            except Unavailable as exc:
                # The Store was not reached: nothing applied.
                last = before
                logger.info("destroy of %r: %r; retrying", key, exc)
    if last is AuthorityState.READY:
        return ReleaseOutcome.READY
    return ReleaseOutcome.UNSETTLED


@final
class Kept:
    """What a kind's destroy returns when it keeps the incarnation on purpose (nothing
    changed, admission and authority stay): the caller gets ``False``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "KEPT"


KEPT: Final = Kept()


class DestroyKind(Protocol[IdT_contra, HostedT]):
    """What a destroy needs to know about one kind's hosted objects."""

    def hosted(self, object_id: IdT_contra) -> HostedT | None:
        """The incarnation of ``object_id`` hosted here (any state), or None."""
        ...

    def generation(self, hosted: HostedT) -> ObjectGeneration: ...

    def in_own_turn(self, object_id: IdT_contra) -> bool:
        """True when the caller runs inside one of that object's own turns (a destroy
        waits for the turn in progress, so it would wait for ever)."""
        ...

    async def destroy(
        self, hosted: HostedT, release: Release, fence: object
    ) -> ZLinkError | Kept | None:
        """The kind's destroy transaction around the Store step ``release``: None when
        destroyed, :data:`KEPT` when the kind keeps it (the caller gets ``False``), else
        the error the caller gets (the state it leaves is retryable). ``fence``: what
        the caller of :meth:`Destroyer.destroy` expects of the row (kind-specific; None:
        nothing beyond the generation)."""
        ...


@final
class _Run:
    """One destroy in progress (its task is in the runtime's nursery)."""

    __slots__ = ("done", "error", "fence", "kept")

    def __init__(self, fence: object) -> None:
        self.done = trio.Event()
        self.error: ZLinkError | None = None
        self.kept = False
        self.fence = fence


@final
class Destroyer(Generic[IdT, HostedT]):
    def __init__(
        self,
        *,
        kind: DestroyKind[IdT, HostedT],
        object_kind: ObjectKind,
        store: LocationStore,
        authority: Authority[IdT],
        drain_timeout: float,
        nursery: trio.Nursery,
        owner: str = "runtime",
        task_name: str = "zlink_trio.objects.destroy",
        operation: str = "destroy",
        activity: Activity | None = None,
    ) -> None:
        self._kind = kind
        self._noun = noun(object_kind)
        self._store = store
        self._authority = authority
        self._drain_timeout = drain_timeout
        self._nursery = nursery
        self._owner = owner
        self._task_name = task_name
        self._operation = operation
        """How messages name the operation ("destroy"; a Spot's is "close")."""
        self._in_progress: dict[IdT, _Run] = {}
        self._activity = Activity() if activity is None else activity
        """Destroys in progress (a clean stop lets them finish)."""

    async def destroy(
        self,
        object_id: IdT,
        generation: ObjectGeneration,
        deadline: float = math.inf,
        *,
        fence: object = None,
    ) -> bool:
        """Destroy that incarnation if this node owns it. Returns False when it is gone
        (or the kind keeps it, :data:`KEPT`). ``fence`` goes to the kind's destroy.

        Raises InvalidOperation when awaited from one of the object's own turns.
        ``deadline`` (trio time; a remote caller's, from its record) bounds the START
        only: a destroy still waiting for an earlier one of the same object when it
        passes never starts (DeadlineExceeded); once started it finishes, like one whose
        caller went away."""
        kind = self._kind
        if kind.in_own_turn(object_id):
            await trio.lowlevel.checkpoint()
            raise InvalidOperation(
                f"{self._noun} {self._authority.key(object_id).object_id!r} cannot await its "
                f"own {self._operation} inside its turn"
            )
        while True:
            running = self._in_progress.get(object_id)
            if running is None:
                break
            await running.done.wait()
        if deadline <= trio.current_time():
            raise DeadlineExceeded(
                f"the {self._operation} of {self._noun} "
                f"{self._authority.key(object_id).object_id!r} expired before it began"
            )
        hosted = kind.hosted(object_id)
        if hosted is None or kind.generation(hosted) != generation:
            return await self._not_here(object_id, generation)
        run = _Run(fence)
        self._in_progress[object_id] = run
        self._activity.begin()
        try:
            self._nursery.start_soon(self._run, object_id, hosted, run, name=self._task_name)
        except BaseException:
            del self._in_progress[object_id]
            self._activity.end()
            raise
        await run.done.wait()
        if run.error is not None:
            raise type(run.error)(run.error.message)
        return not run.kept

    async def _not_here(self, object_id: IdT, generation: ObjectGeneration) -> bool:
        row = await self._authority.read(object_id)
        if row is None:
            return False
        name = f"{self._noun} {row.key.object_id!r}"
        if row.object_generation != generation:
            raise InvalidOperation(
                f"{name} is now generation {row.object_generation.value}, not {generation.value}"
            )
        if row.state is AuthorityState.CREATING:
            return False  # that incarnation never became Ready
        raise Unavailable(f"{name} is not hosted on this node lifecycle")

    async def _run(self, object_id: IdT, hosted: HostedT, run: _Run) -> None:
        generation = self._kind.generation(hosted)

        async def release_it(*, fresh: bool) -> ReleaseOutcome:
            return await release(
                self._store,
                self._authority,
                object_id,
                generation,
                fresh=fresh,
                bound=self._drain_timeout,
            )

        try:
            outcome = await self._kind.destroy(hosted, release_it, run.fence)
            if isinstance(outcome, Kept):
                run.kept = True
            else:
                run.error = outcome
        except trio.Cancelled:
            run.error = ShuttingDown(f"the {self._owner} stopped during the {self._operation}")
            raise
        except Exception as exc:
            logger.exception("%s of %r failed", self._operation, object_id)
            run.error = Unavailable(f"{self._operation} failed: {type(exc).__name__}")
        finally:
            if self._in_progress.get(object_id) is run:
                del self._in_progress[object_id]
            run.done.set()
            self._activity.end()
