"""The one serial-execution engine of the runtime (spec 02 §11): lanes, ready set, runners.

A lane with work it may run is *ready*; the engine keeps ready lanes in one FIFO (the
ready set) and runs them on *runner* tasks that live in the engine's nursery. A runner takes
a ready lane, acquires its gate, drains at most ``batch_size`` items (one ``await
handler(item)`` per item = one turn), releases the gate, puts the lane back at the tail of
the ready set if it still has work (fairness: a hot lane cannot monopolize the engine),
checkpoints, and takes the next lane. When nothing is ready a runner parks, up to
``idle_runners`` of them (kept warm: spawning a task costs ~14 µs here, more than a whole
local ask), and the rest exit. No task, channel or queue belongs to an idle lane.

Hand-off: a lane that becomes ready goes straight to a parked runner
(``trio.lowlevel.reschedule``) or to the ready FIFO. Invariant: while the FIFO is not
empty, at least one runner is *free* (spawned, or between batches, and bound to look at the
FIFO before parking). A runner that takes a lane and leaves others in the FIFO with no free
runner spawns one more before it runs its batch, so a ready lane always has a runner
coming even when every other runner is blocked inside a handler (a handler may await
another lane's reply without deadlocking the engine), while a burst of N ready lanes with
fast handlers grows the runner pool by one per scheduler tick instead of by N.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar, cast, final

import attrs
import trio

from .._exceptions import raise_single_error
from ..errors import ConfigurationError, InvalidOperation, ShuttingDown
from ._construct import NoPublicConstructor
from .core import _OPEN, NOTHING, LaneCore, LaneLimits
from .gate import Gate
from .inline import TurnHost, resume_turn
from .lane import IDLE, READY, RUNNING, Lane
from .lanes import LanePolicy

__all__ = ["Engine", "EngineStatistics", "open_engine"]

logger = logging.getLogger("zlink_trio.engine")

P = TypeVar("P", bound=LanePolicy)
T = TypeVar("T")


DEFAULT_LANE_CAPACITY: Final = 10_000
"""The engine's own default lane bound (``ServerConfig.lane_capacity`` has the same
default; a server passes its configured value)."""
DEFAULT_LIFECYCLE_BURST: Final = 8
"""The engine's own default yield debt (``ServerConfig.lifecycle_burst`` likewise)."""
DEFAULT_BATCH_SIZE: Final = 64
DEFAULT_IDLE_RUNNERS: Final = 16


@attrs.frozen
class EngineStatistics:
    """A snapshot of the engine."""

    ready_lanes: int
    """Lanes with work waiting for a runner or for their shared gate."""
    running_lanes: int
    """Lanes a runner is draining now."""
    runners: int
    """Runner tasks alive (running, about to look for work, or parked)."""
    idle_runners: int
    """Parked runners."""
    turns: int
    """Handler invocations so far."""
    handler_failures: int
    """Handler invocations that raised (logged, never fatal)."""


@final
class _Parked:
    __slots__ = ("lane", "task")

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.lane: Lane[Any, Any] | None = None


@final
class Engine(metaclass=NoPublicConstructor):
    """The serial-execution engine. Made by :func:`open_engine`, which owns its nursery."""

    __slots__ = (
        "_active",
        "_batch_size",
        "_blocked",
        "_closed",
        "_failures",
        "_free",
        "_idle",
        "_idle_runners",
        "_inline",
        "_limits",
        "_nursery",
        "_parked",
        "_ready",
        "_runner_scopes",
        "_runners",
        "_running",
        "_turns",
    )

    def __init__(
        self, nursery: trio.Nursery, limits: LaneLimits, batch_size: int, idle_runners: int
    ) -> None:
        self._nursery = nursery
        self._limits = limits
        self._batch_size = batch_size
        self._idle_runners = idle_runners
        self._closed = False
        self._ready: deque[Lane[Any, Any]] = deque()
        self._parked: list[_Parked] = []
        self._free = 0  # runners that will look at _ready before parking
        self._runners = 0
        self._active = 0  # lanes READY or RUNNING
        self._running = 0
        self._turns = 0
        self._failures = 0
        self._idle: trio.Event | None = None
        self._blocked: set[Lane[Any, Any]] = set()  # lanes with tasks waiting for space
        self._runner_scopes: set[trio.CancelScope] = set()  # one per live runner (halt)
        self._inline: set[TurnHost] = set()  # hosts of inline turns in progress (halt)

    # --- public ---------------------------------------------------------------------------

    @property
    def limits(self) -> LaneLimits:
        return self._limits

    def new_lane(
        self,
        policy: P,
        handler: Callable[[T], Awaitable[None]],
        *,
        gate: Gate | None = None,
        on_drop: Callable[[T], object] | None = None,
    ) -> Lane[P, T]:
        """Make a lane. It starts idle and costs no task until it has work.

        Args:
            policy: :class:`~.lanes.SpotLane`, :class:`~.lanes.SessionLane` or
                :class:`~.lanes.ActorDeliveryLane` (its kind never changes).
            handler: runs one item per turn; an exception it raises is logged and the
                lane goes on with the next item.
            gate: a shared gate from :meth:`new_gate`; by default the lane is its own gate.
            on_drop: called (synchronously) with each accepted item the lane drops without
                running it: session connection closed, lane closed.

        Raises:
            ShuttingDown: the engine is shutting down.
            InvalidOperation: ``gate`` belongs to another engine.
        """
        if self._closed:
            raise ShuttingDown("the engine is shutting down")
        if gate is not None and gate._owner is not self:
            raise InvalidOperation("the gate belongs to another engine")
        lane = Lane._create(self, LaneCore(policy, self._limits), handler, gate, on_drop)
        return cast("Lane[P, T]", lane)

    def new_gate(self) -> Gate:
        """A gate to share between lanes that must never run turns concurrently."""
        return Gate._create(self)

    @property
    def idle(self) -> bool:
        """No lane runs a turn and none has work it may run now (always, once halted or
        closed: no turn runs any more)."""
        return self._active == 0 or self._closed

    def halt(self) -> None:
        """Run no turn any more, for good: every turn in progress is cancelled (at its next
        checkpoint), no further turn starts, and what the lanes hold stays there for their
        owners to fail; submitters waiting for space get ShuttingDown. A fail-stopped node
        (its owner lease was lost) halts its engine. Idempotent; leaving ``open_engine``
        does the same."""
        self._closed = True
        for scope in self._runner_scopes:
            scope.cancel(reason="zlink_trio engine halted")
        for host in list(self._inline):
            host.cancel_turn()
        for lane in list(self._blocked):
            lane._wake_space(everyone=True)
        idle, self._idle = self._idle, None
        if idle is not None:
            idle.set()

    async def wait_idle(self) -> None:
        """Wait until no lane runs a turn and none has work it may run now (at once on a
        halted engine)."""
        if self._active == 0 or self._closed:
            await trio.lowlevel.checkpoint()
            return
        if self._idle is None:
            self._idle = trio.Event()
        await self._idle.wait()

    def statistics(self) -> EngineStatistics:
        return EngineStatistics(
            ready_lanes=self._active - self._running,
            running_lanes=self._running,
            runners=self._runners,
            idle_runners=len(self._parked),
            turns=self._turns,
            handler_failures=self._failures,
        )

    # --- inline turns (see .inline) ----------------------------------------------------------

    async def _run_here(self, lane: Lane[Any, Any], item: Any, host: TurnHost) -> bool:
        """:meth:`Lane.run_here`: run ``item`` as ``lane``'s next turn in this task, if
        the lane is idle and open, is its own gate, and no other lane waits for a runner.

        The handler's coroutine is started here by hand: one that completes without
        yielding (the common case) costs no coroutine layer of its own; one that yields is
        driven on by :func:`~.inline.resume_turn` (which tells the host when it is
        suspended)."""
        core = lane._core
        if (
            lane._sched != IDLE
            or self._ready
            or self._closed
            or lane._gate is not None
            # (``core.empty_and_open()``, inline)
            or core._mode is not _OPEN
            or core._life is not None
            or core._app is not None
            or core._held is not None
        ):
            return False
        lane._sched = RUNNING
        lane._runner = trio.lowlevel.current_task()
        self._active += 1
        self._running += 1
        self._turns += 1
        inline = self._inline
        inline.add(host)
        host.enter_turn()
        try:
            coro = lane._handler(item).__await__()
            try:
                trap = coro.send(None)
            except StopIteration:
                pass
            else:
                await resume_turn(coro, trap, host)
        except Exception:
            self._failures += 1
            logger.exception("handler of %r failed; the lane goes on", lane)
        finally:
            host.exit_turn()
            inline.discard(host)
            lane._runner = None
            self._running -= 1
            if core.runnable() and not self._closed:
                # What arrived meanwhile runs on a runner, behind the lanes already ready.
                lane._sched = READY
                self._dispatch(lane)
            else:
                lane._sched = IDLE
                self._active -= 1
                if lane._idle is not None:
                    lane._became_idle()
                if self._active == 0 and self._idle is not None:
                    idle, self._idle = self._idle, None
                    idle.set()
        return True

    # --- scheduling -------------------------------------------------------------------------

    def _make_ready(self, lane: Lane[Any, Any]) -> None:
        # The lane was IDLE and has runnable work.
        lane._sched = READY
        self._active += 1
        parked = self._parked
        if parked:
            runner = parked.pop()
            runner.lane = lane
            trio.lowlevel.reschedule(runner.task)
        else:
            self._dispatch(lane)

    def _dispatch(self, lane: Lane[Any, Any]) -> None:
        parked = self._parked
        if parked:
            runner = parked.pop()
            runner.lane = lane
            trio.lowlevel.reschedule(runner.task)
            return
        self._ready.append(lane)
        if self._free == 0:
            self._spawn()

    def _spawn(self) -> None:
        self._free += 1
        self._runners += 1
        self._nursery.start_soon(self._run_halting, name="zlink_trio.engine.runner")

    async def _run_halting(self) -> None:
        """A runner inside its own cancel scope, which :meth:`halt` cancels (one scope per
        runner lifetime, not per turn)."""
        with trio.CancelScope() as scope:
            scopes = self._runner_scopes
            scopes.add(scope)
            try:
                await self._run()
            finally:
                scopes.discard(scope)

    async def _run(self) -> None:
        """A runner: drain ready lanes in batches; park or exit when none is ready."""
        ready = self._ready
        parked = self._parked
        batch_size = self._batch_size
        me = _Parked(trio.lowlevel.current_task())

        def abort(_: object) -> trio.lowlevel.Abort:
            parked.remove(me)
            return trio.lowlevel.Abort.SUCCEEDED

        lane: Lane[Any, Any] | None = None
        try:
            while True:
                # --- take a lane (this runner is counted in _free until it has one).
                # Invariant: while _ready is not empty, _free >= 1.
                if lane is None:
                    self._free -= 1
                    if ready:
                        lane = ready.popleft()
                        if ready and self._free == 0:
                            self._spawn()  # before this runner may block in a handler
                    elif len(parked) >= self._idle_runners:
                        return
                    else:
                        parked.append(me)
                        await trio.lowlevel.wait_task_rescheduled(abort)
                        lane, me.lane = me.lane, None
                        assert lane is not None
                gate = lane._gate
                if gate is not None:
                    holder = gate._holder
                    if holder is None:
                        gate._holder = lane
                    elif holder is not lane:  # (a lane handed the gate on release holds it)
                        gate._waiting.append(lane)  # stays READY; released holder dispatches it
                        lane = None
                        self._free += 1
                        continue
                # --- one batch of turns
                lane._sched = RUNNING
                lane._runner = me.task
                self._running += 1
                core = lane._core
                handler = lane._handler
                for _ in range(batch_size):
                    item = core.next_item()
                    if item is NOTHING:
                        more = False
                        break
                    if lane._waiters is not None:
                        lane._wake_space()
                    self._turns += 1
                    try:
                        await handler(item)
                    except Exception:
                        self._failures += 1
                        logger.exception("handler of %r failed; the lane goes on", lane)
                else:
                    more = core.runnable()
                del item, core, handler  # a parked runner keeps nothing of the lane alive
                lane._runner = None
                self._running -= 1
                # --- release, requeue or retire the lane, then look for the next one
                self._free += 1
                if gate is not None:
                    if gate._waiting:
                        # Hand the gate over with the lane, so nobody overtakes it.
                        waiter = gate._holder = gate._waiting.popleft()
                        self._dispatch(waiter)
                    else:
                        gate._holder = None
                if more:
                    lane._sched = READY
                    ready.append(lane)
                else:
                    lane._sched = IDLE
                    self._active -= 1
                    if lane._idle is not None:
                        lane._became_idle()
                    if self._active == 0 and self._idle is not None:
                        idle, self._idle = self._idle, None
                        idle.set()
                lane = None
                if ready:
                    await trio.lowlevel.checkpoint()
        finally:
            self._runners -= 1

    def _shut_down(self) -> None:
        self._closed = True
        # Cancel first: a turn blocked in submit() (inside our nursery) is cancelled like
        # any running turn, so its runner starts no further turn after the shutdown.
        self._nursery.cancel_scope.cancel(reason="zlink_trio engine shutting down")
        for host in list(self._inline):  # inline turns stop like the runners' turns
            host.cancel_turn()
        # Submitters waiting for space outside our nursery would wait for ever: no runner
        # will drain their lanes again. Woken, they see _closed and raise ShuttingDown.
        for lane in list(self._blocked):
            lane._wake_space(everyone=True)


def _check_count(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(f"{name}: must be an int >= {minimum}, got {value!r}")


@asynccontextmanager
async def open_engine(
    *,
    lane_capacity: int = DEFAULT_LANE_CAPACITY,
    lifecycle_burst: int = DEFAULT_LIFECYCLE_BURST,
    batch_size: int = DEFAULT_BATCH_SIZE,
    idle_runners: int = DEFAULT_IDLE_RUNNERS,
) -> AsyncIterator[Engine]:
    """Open the engine; its runners live in a nursery this context owns.

    Leaving the block cancels turns still running and abandons queued work: call
    :meth:`Engine.wait_idle` first (and close lanes, which reports their dropped items)
    for a graceful stop. An exception from the body propagates as itself, not wrapped in
    an exception group.

    Args:
        lane_capacity: bound of each lane queue (a server passes
            ``ServerConfig.lane_capacity``).
        lifecycle_burst: max consecutive lifecycle turns while application work waits
            (a server passes ``ServerConfig.lifecycle_burst``).
        batch_size: max turns a runner gives one lane before requeueing it.
        idle_runners: max parked runner tasks kept for reuse (0: a runner exits as soon
            as nothing is ready).

    Raises:
        ConfigurationError: a bound is not a positive int (``idle_runners`` may be 0).
    """
    limits = LaneLimits(lane_capacity, lifecycle_burst)
    _check_count("batch_size", batch_size, 1)
    _check_count("idle_runners", idle_runners, 0)
    try:
        async with trio.open_nursery() as nursery:
            engine = Engine._create(nursery, limits, batch_size, idle_runners)
            try:
                yield engine
            finally:
                engine._shut_down()
    except BaseExceptionGroup as group:
        raise_single_error(group)  # one error leaves as itself
