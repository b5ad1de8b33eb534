"""A lane: one serially executed owner (an Actor, a Spot, a session) on the engine.

Made by :meth:`Engine.new_lane <zlink_trio.engine.Engine.new_lane>`. Submitting never runs
the handler in the caller's task: it admits the item into the lane's bounded queue and, if
the lane was idle, hands the lane to the engine's ready set. An idle lane owns no task, no
channel and no queue object: only this object and its :class:`~.core.LaneCore`. The one
exception is :meth:`Lane.run_here` (an idle lane's turn run by a connection's reader that
has nothing else to do: :mod:`.inline`).

Policy transitions are methods restricted (with annotated ``self`` types) to the lane kind
they apply to: ``seal`` exists for ``Lane[SpotLane, T]`` only, ``close_connection`` for
``Lane[SessionLane, T]`` only, and a type checker rejects the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterable
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, TypeVar, final

import attrs
import trio

from ..errors import CapacityExceeded, ShuttingDown, Unavailable
from ._construct import NoPublicConstructor
from .core import Admission, Handover, LaneCore
from .lanes import LanePolicy, SessionLane, SpotLane

if TYPE_CHECKING:
    from .engine import Engine
    from .gate import Gate
    from .inline import TurnHost

__all__ = ["Lane", "LaneStatistics"]

logger = logging.getLogger("zlink_trio.engine")

P = TypeVar("P", bound=LanePolicy)
T = TypeVar("T")

# Scheduling state of a lane, owned by the engine.
IDLE: Final = 0  # no turn running, not in the ready set (may hold paused work)
READY: Final = 1  # in the engine's ready set or waiting for its shared gate
RUNNING: Final = 2  # a runner is draining it

_SCHEDULED: Final[tuple[Literal["idle", "ready", "running"], ...]] = ("idle", "ready", "running")
_ACCEPTED: Final = Admission.ACCEPTED
_HELD: Final = Admission.HELD
_FULL: Final = Admission.FULL


@attrs.frozen
class LaneStatistics:
    """A snapshot of one lane."""

    policy: LanePolicy
    lifecycle: int
    """Lifecycle items queued."""
    application: int
    """Application items queued (not counting held ones)."""
    held: int
    """Application items held by a relocation seal."""
    scheduled: Literal["idle", "ready", "running"]
    """``idle``: no turn running and none about to (an idle lane owns no task)."""
    closed: bool


@final
class _SpaceWaiters:
    """Tasks blocked in :meth:`Lane.submit` on a full queue; allocated only while any are."""

    __slots__ = ("application", "lifecycle")

    def __init__(self) -> None:
        self.application = trio.lowlevel.ParkingLot()
        self.lifecycle = trio.lowlevel.ParkingLot()


@final
class Lane(Generic[P, T], metaclass=NoPublicConstructor):
    """One serial execution section: turns of ``handler``, one item per turn, never two at
    once, lifecycle items before application items (with a bounded burst), each queue in
    acceptance order."""

    __slots__ = (
        "_core",
        "_engine",
        "_gate",
        "_handler",
        "_idle",
        "_on_drop",
        "_runner",
        "_sched",
        "_waiters",
    )

    def __init__(
        self,
        engine: Engine,
        core: LaneCore[T],
        handler: Callable[[T], Awaitable[None]],
        gate: Gate | None,
        on_drop: Callable[[T], object] | None,
    ) -> None:
        self._engine = engine
        self._core = core
        self._handler = handler
        self._gate = gate
        self._on_drop = on_drop
        self._sched = IDLE
        self._runner: trio.lowlevel.Task | None = None
        """The runner task draining the lane (set for the length of a batch)."""
        self._waiters: _SpaceWaiters | None = None
        self._idle: trio.Event | None = None

    # --- queries ------------------------------------------------------------------------

    @property
    def policy(self) -> P:
        """The lane's current policy value."""
        return self._core.policy  # type: ignore[return-value]  # the core never changes the kind

    @property
    def gate(self) -> Gate | None:
        """The shared gate, or ``None`` when the lane is its own gate."""
        return self._gate

    @property
    def backlog(self) -> int:
        """Items queued and not held (lifecycle + application): cheap, for hot paths."""
        core = self._core  # (its queues directly: this runs once per remote reply)
        life, app = core._life, core._app
        return (0 if life is None else len(life)) + (0 if app is None else len(app))

    @property
    def idle(self) -> bool:
        """Nothing queued and no turn running (cheap, for hot paths): an item submitted
        now is the next one this lane runs."""
        core = self._core  # its queues directly: this runs once per local request
        return self._runner is None and not core._life and not core._app

    @property
    def runner(self) -> trio.lowlevel.Task | None:
        """The runner task draining this lane now (for the length of a batch), or None."""
        return self._runner

    def in_turn(self) -> bool:
        """Whether the calling task is running one of this lane's turns (its handler, or
        code the handler awaits in the same task): waiting there for something that needs
        the lane's next turn would wait for ever."""
        runner = self._runner
        return runner is not None and runner is trio.lowlevel.current_task()

    def statistics(self) -> LaneStatistics:
        core = self._core
        return LaneStatistics(
            policy=core.policy,
            lifecycle=core.lifecycle_count,
            application=core.application_count,
            held=core.held_count,
            scheduled=_SCHEDULED[self._sched],
            closed=core.closed,
        )

    def __repr__(self) -> str:
        return f"<Lane {self._core.policy!r} {_SCHEDULED[self._sched]}>"

    # --- submission -----------------------------------------------------------------------

    def submit_nowait(self, item: T, *, lifecycle: bool = False) -> Admission:
        """Admit ``item`` without waiting.

        Returns:
            :attr:`Admission.ACCEPTED` (it will run in a turn of this lane) or
            :attr:`Admission.HELD` (the Spot lane is relocation-sealed; the item is kept for
            the relocation, see :meth:`take_held`).

        Raises:
            CapacityExceeded: the queue is at its bound; the item entered no queue.
            Unavailable: the lane is closed, or it is a session lane whose connection
                closed (application items only).
            ShuttingDown: the engine is shutting down.
        """
        result = self._admit(item, lifecycle)
        if result is _FULL:
            raise self._rejection(result, lifecycle)
        return result

    async def submit(self, item: T, *, lifecycle: bool = False) -> Admission:
        """Like :meth:`submit_nowait`, but wait for space while the queue is full
        (backpressure). If cancelled while waiting, the item entered no queue; if the
        lane closes or the engine shuts down meanwhile, the rejection is raised."""
        await trio.lowlevel.checkpoint_if_cancelled()
        result = self._admit(item, lifecycle)
        if result is not _FULL:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return result
        while result is _FULL:
            waiters = self._waiters
            if waiters is None:
                waiters = self._waiters = _SpaceWaiters()
                self._engine._blocked.add(self)  # woken (ShuttingDown) if the engine stops
            try:
                await (waiters.lifecycle if lifecycle else waiters.application).park()
            except BaseException:
                if self._waiters is waiters and not waiters.lifecycle and not waiters.application:
                    self._waiters = None
                    self._engine._blocked.discard(self)
                raise
            result = self._admit(item, lifecycle)
        return result

    def run_here(self, item: T, host: TurnHost) -> Coroutine[Any, Any, bool]:
        """Run ``item`` (an application item) as this lane's next turn in the calling task,
        now, instead of queueing it for a runner — when that keeps the engine's order and
        fairness: the lane is idle (nothing queued or held, no turn running) and open, it
        is its own gate, and no other lane waits in the ready set. Returns True once the
        turn ran (its handler's exception is logged, as a runner's is); False, having done
        nothing, otherwise (the caller submits the item instead).

        ``host`` is told when the turn starts, first waits and ends, and is asked to
        cancel it if the engine halts meanwhile (:mod:`.inline`). Items admitted during
        the turn run on a runner afterwards. For a connection's reader handling a lone
        frame: an exception to the rule that submitting never runs a handler in the
        submitter's task, made where the submitter has nothing else to do.

        (A plain method returning the engine's coroutine, to be awaited: one coroutine
        frame fewer per inline turn.)"""
        return self._engine._run_here(self, item, host)

    def _admit(self, item: T, lifecycle: bool) -> Admission:
        # ACCEPTED, HELD or FULL; raises the other rejections.
        if self._engine._closed:
            raise ShuttingDown("the engine is shutting down")
        core = self._core
        result = core.admit(item, lifecycle)
        if result is _ACCEPTED:
            if self._sched == IDLE and core.runnable():
                self._engine._make_ready(self)
        elif result is not _HELD and result is not _FULL:
            raise self._rejection(result, lifecycle)
        return result

    def merge_nowait(self, items: Iterable[T]) -> None:
        """Append application items accepted elsewhere already, in order, never cut by
        the capacity (a relocation's merged queue on its target, docs/relocation.md);
        new ingress then waits for space as usual."""
        if self._engine._closed:
            raise ShuttingDown("the engine is shutting down")
        core = self._core
        core.extend_application(items)
        if self._sched == IDLE and core.runnable():
            self._engine._make_ready(self)

    def _rejection(self, result: Admission, lifecycle: bool) -> Exception:
        if result is Admission.FULL:
            which = "lifecycle" if lifecycle else "application"
            capacity = self._core.limits.capacity
            return CapacityExceeded(f"{which} queue of {self!r} is full ({capacity})")
        if result is Admission.CONNECTION_CLOSED:
            return Unavailable(f"session connection closed: {self!r}")
        return Unavailable(f"lane closed: {self!r}")

    # --- policy transitions ---------------------------------------------------------------

    def seal(self: Lane[SpotLane, T], relocation_id: Hashable) -> None:
        """Seal the Spot lane for relocation ``relocation_id``: application items stop
        running (the pending ones now belong to the relocation's capture) and new
        application ingress is held; lifecycle items keep running. A turn in progress
        finishes. Sealing again for the same relocation is a no-op.

        Raises:
            InvalidOperation: sealed for another relocation, awaiting return, or closed.
        """
        self._core.seal(relocation_id)

    def unseal(self: Lane[SpotLane, T], relocation_id: Hashable) -> None:
        """Lift the matching seal (relocation aborted): held items are queued behind the
        pending application items, in arrival order, and the lane runs again.

        Raises:
            InvalidOperation: the lane is not sealed for ``relocation_id``.
        """
        self._core.unseal(relocation_id)
        self._kick()

    def take_held(self: Lane[SpotLane, T]) -> Handover[T]:
        """Hand the sealed lane's application work to the relocation: the items accepted
        before the seal that have not run, then the held ones. The lane stays sealed.

        Raises:
            InvalidOperation: the lane is not sealed.
        """
        handover = self._core.take_held()
        # The whole application bound may have been freed at once: one waiter per slot.
        self._wake_space(application_slots=len(handover.pending) + len(handover.held))
        return handover

    def lend_turn(self: Lane[SpotLane, T]) -> None:
        """The Spot lane lends its turn out: no new turn starts on it (and, once the
        current turn ends, its gate is free for others) until :meth:`return_turn`.
        Ingress is still admitted."""
        self._core.lend_turn()

    def return_turn(self: Lane[SpotLane, T]) -> None:
        """The lent turn is back: the lane runs its queued work again."""
        self._core.return_turn()
        self._kick()

    def close_connection(self: Lane[SessionLane, T]) -> None:
        """The session's connection closed: pending application items are dropped, each
        handed to ``on_drop`` (so the owner can fail its reply), and application ingress is
        rejected from now on. Lifecycle items still run (disconnect cleanup). Idempotent."""
        dropped = self._core.close_connection()
        self._wake_space(everyone=True)
        self._report(dropped)

    def close(self) -> None:
        """Retire the lane: nothing more is admitted and everything not run (lifecycle,
        application, held) is dropped, each handed to ``on_drop``. A turn in progress
        finishes. Idempotent."""
        dropped = self._core.close()
        self._wake_space(everyone=True)
        self._report(dropped)

    def retire(self) -> tuple[T, ...]:
        """Retire the lane like :meth:`close`, but hand everything not run back to the
        caller (in queue order: lifecycle, application, held) instead of reporting it
        through ``on_drop``: for owners that close their lanes themselves and need no
        per-lane callback object. Idempotent (later calls return nothing)."""
        dropped = self._core.close()
        self._wake_space(everyone=True)
        return dropped

    async def wait_idle(self) -> None:
        """Wait until no turn of this lane runs and none is about to: its queues are
        empty, or what they hold may not run now (sealed, lent out, closed)."""
        if self._sched == IDLE:
            await trio.lowlevel.checkpoint()
            return
        if self._idle is None:
            self._idle = trio.Event()
        await self._idle.wait()

    # --- engine side ------------------------------------------------------------------------

    def _kick(self) -> None:
        if self._sched == IDLE and self._core.runnable() and not self._engine._closed:
            self._engine._make_ready(self)

    def _became_idle(self) -> None:
        idle, self._idle = self._idle, None
        if idle is not None:
            idle.set()

    def _wake_space(self, *, everyone: bool = False, application_slots: int = 1) -> None:
        waiters = self._waiters
        if waiters is None:
            return
        if everyone:
            waiters.lifecycle.unpark_all()
            waiters.application.unpark_all()
        else:
            core = self._core
            if waiters.lifecycle and core.has_space(True):
                waiters.lifecycle.unpark()
            if waiters.application and core.has_space(False):
                waiters.application.unpark(count=application_slots)
        if not waiters.lifecycle and not waiters.application:
            self._waiters = None
            self._engine._blocked.discard(self)

    def _report(self, dropped: tuple[T, ...]) -> None:
        if not dropped:
            return
        on_drop = self._on_drop
        if on_drop is None:
            logger.warning("%r dropped %d item(s) and has no on_drop callback", self, len(dropped))
            return
        for item in dropped:
            try:
                on_drop(item)
            except Exception:
                logger.exception("on_drop callback of %r failed", self)
