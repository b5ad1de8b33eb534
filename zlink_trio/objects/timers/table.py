"""The timers of one owner (an Actor, a User Spot, an Instance Spot incarnation).

A :class:`TimerTable` is made by :meth:`TimerService.open_table
<zlink_trio.objects.timers.service.TimerService.open_table>` for one owner and lives as long
as the owner does. Everything in it is mutated by the owner's own turns (registrations,
:meth:`TimerTable.accept`) or by the node's one timer task (firing): one trio thread, no
lock. An owner with no registration costs the service nothing (the table is not even
tracked); the table itself is a few slots.

States: ACTIVE (ticks go to the owner's lane), SUSPENDED (due ticks wait in the backlog,
one per timer: the owner is being destroyed or closed, or moves), CLOSED (the cleanup
ran: nothing is registered, nothing fires, every tick still in the lane is stale).
"""

from __future__ import annotations

import enum
import math
from collections import deque
from typing import TYPE_CHECKING, Final, Protocol, final

import trio

from ...errors import CapacityExceeded, InvalidOperation, ShuttingDown, ZLinkError
from .values import (
    TimerKind,
    TimerRegistration,
    TimersSnapshot,
    TimerState,
    TimerTick,
    check_delay,
    check_name,
    check_payload,
    check_period,
    check_room,
)

if TYPE_CHECKING:
    from .service import TimerService

__all__ = ["TickTarget", "TimerTable"]

_ONE_SHOT: Final = TimerKind.ONE_SHOT
_PERIODIC: Final = TimerKind.PERIODIC


class TickTarget(Protocol):
    """Where a table's ticks go: the owner's lane, application queue (so ticks and the
    owner's messages run in one acceptance order). The owner kind implements it."""

    def submit_tick_nowait(self, tick: TimerTick) -> object:
        """Admit ``tick`` without waiting.

        Raises:
            CapacityExceeded: the queue is full (the service retries, waiting for space,
                without blocking other owners).
            ZLinkError: any other rejection (lane closed or retired, engine stopping): the
                tick is dropped and counted.
        """
        ...

    async def submit_tick(self, tick: TimerTick) -> object:
        """Admit ``tick``, waiting for space while the queue is full (same errors)."""
        ...


class _State(enum.Enum):
    ACTIVE = "active"
    SUSPENDED = "suspended"
    CLOSED = "closed"


_ACTIVE: Final = _State.ACTIVE
_SUSPENDED: Final = _State.SUSPENDED
_CLOSED: Final = _State.CLOSED


@final
class Timer:
    """The live schedule of one registration (internal to the service and its table)."""

    __slots__ = ("index", "origin", "pending", "registration", "seq", "table")

    def __init__(self, table: TimerTable, registration: TimerRegistration, origin: float) -> None:
        self.table = table
        self.registration = registration
        self.origin = origin
        """The first due time; due time k is ``origin + k * period`` (no drift)."""
        self.index = 0
        """k of the next due time."""
        self.seq = 0
        """Key of its live heap entry (0: not in the heap)."""
        self.pending = False
        """A tick of it fired and has not run (or been dropped) yet."""

    @property
    def due(self) -> float:
        """The next due time (inf: a one-shot that fired)."""
        reg = self.registration
        if reg.kind is _ONE_SHOT:
            return math.inf if self.index else self.origin
        assert reg.period is not None
        return self.origin + self.index * reg.period


@final
class TimerTable:
    """Register, cancel and list one owner's timers; accept its ticks in its turns."""

    __slots__ = ("_backlog", "_pump", "_serial", "_service", "_state", "_target", "_timers")

    def __init__(
        self, service: TimerService, target: TickTarget, *, suspended: bool, serial: int = 0
    ) -> None:
        self._service = service
        self._target = target
        self._timers: dict[str, Timer] = {}
        self._serial = serial
        self._state = _SUSPENDED if suspended else _ACTIVE
        self._backlog: deque[TimerTick] | None = None
        self._pump: trio.CancelScope | None = None
        """The cancel scope of the one task waiting for space in the owner's lane."""

    # --- queries ------------------------------------------------------------------------

    @property
    def target(self) -> TickTarget:
        return self._target

    @property
    def closed(self) -> bool:
        return self._state is _CLOSED

    @property
    def suspended(self) -> bool:
        return self._state is _SUSPENDED

    def __len__(self) -> int:
        return len(self._timers)

    def __contains__(self, name: object) -> bool:
        return name in self._timers

    def get(self, name: str) -> TimerRegistration | None:
        timer = self._timers.get(name)
        return None if timer is None else timer.registration

    def registrations(self) -> tuple[TimerRegistration, ...]:
        """Every registration held, in registration order."""
        return tuple(timer.registration for timer in self._timers.values())

    @property
    def backlog(self) -> int:
        """Ticks fired and not yet admitted to the owner's lane."""
        return 0 if self._backlog is None else len(self._backlog)

    # --- registration (the owner's turns) -------------------------------------------------

    def once(self, name: str, delay: float, payload: bytes = b"") -> TimerRegistration:
        """One tick ``delay`` seconds from now; registering ``name`` again replaces it.

        Raises:
            InvalidId: ``name`` is not a text id.
            InvalidArgument: ``delay`` is not finite seconds >= 0, or ``payload`` is not
                bytes of at most ``MAX_TIMER_PAYLOAD``.
            CapacityExceeded: the owner holds ``MAX_TIMERS_PER_OWNER`` timers already.
            InvalidOperation: the table is closed (the owner's cleanup ran).
            ShuttingDown: the node's timer service stopped.
        """
        checked = check_name(name)
        seconds = check_delay(delay)
        data = check_payload(payload)
        return self._register(checked, _ONE_SHOT, None, data, seconds)

    def every(
        self, name: str, period: float, payload: bytes = b"", *, first: float | None = None
    ) -> TimerRegistration:
        """A tick every ``period`` seconds, the first one ``first`` seconds from now
        (default: one period). Due times are ``first + k * period`` from the registration:
        a slow handler or a busy lane never shifts them (no drift); due times that pass
        while the previous tick has not run yet are coalesced into it.

        Raises:
            InvalidArgument: ``period`` is not finite seconds >= ``MIN_TIMER_PERIOD`` (or
                ``first`` not finite seconds >= 0); the rest as :meth:`once`.
        """
        checked = check_name(name)
        seconds = check_period(period)
        delay = seconds if first is None else check_delay(first)
        data = check_payload(payload)
        return self._register(checked, _PERIODIC, seconds, data, delay)

    def cancel(self, name: str) -> bool:
        """Remove the registration ``name``: it never ticks again, and a tick of it that
        already fired (queued in the lane or waiting for it) does not run. Returns whether
        there was one."""
        timer = self._timers.get(name)
        if timer is None:
            return False
        self._drop(timer)
        self._service._untrack(self)
        return True

    def _register(
        self, name: str, kind: TimerKind, period: float | None, payload: bytes, delay: float
    ) -> TimerRegistration:
        service = self._service
        if self._state is _CLOSED:
            raise InvalidOperation("these timers were cleaned up: their owner is closed")
        if service.closed:
            raise ShuttingDown("the node's timer service stopped")
        old = self._timers.get(name)
        if old is None:
            check_room(len(self._timers))
        else:
            self._drop(old)
        self._serial += 1
        registration = TimerRegistration(name, kind, period, payload, self._serial)
        timer = Timer(self, registration, trio.current_time() + delay)
        self._timers[name] = timer
        service._track(self)
        service._schedule(timer)
        return registration

    def _drop(self, timer: Timer) -> None:
        """Forget ``timer``: its heap entry goes stale, its waiting tick leaves the backlog
        (a tick of it already in the lane is stale when its turn comes)."""
        del self._timers[timer.registration.name]
        self._service._unschedule(timer)
        backlog = self._backlog
        if backlog and timer.pending:
            serial = timer.registration.serial
            kept = [tick for tick in backlog if tick.serial != serial]
            if len(kept) != len(backlog):
                self._backlog = deque(kept) if kept else None

    # --- the owner's turn -----------------------------------------------------------------

    def accept(self, tick: TimerTick) -> TimerRegistration | None:
        """The owner's turn took ``tick`` from its lane: the registration whose handler
        runs now, or None when the tick is stale (cancelled, replaced, closed) and must
        not run. A one-shot's registration ends here (so its handler may register the same
        name again); a periodic one may fire again from now on."""
        service = self._service
        timer = None if self._state is _CLOSED else self._timers.get(tick.name)
        if timer is None or timer.registration.serial != tick.serial:
            service._stale += 1
            return None
        timer.pending = False
        if timer.registration.kind is _ONE_SHOT:
            del self._timers[tick.name]
            service._untrack(self)
        return timer.registration

    def discard(self, tick: TimerTick) -> None:
        """``tick`` will never run (the owner's lane dropped it: destroy, fencing). Its
        registration may fire again (periodic) or is over (one-shot)."""
        service = self._service
        timer = self._timers.get(tick.name)
        if timer is None or timer.registration.serial != tick.serial:
            return
        service._dropped += 1
        timer.pending = False
        if timer.registration.kind is _ONE_SHOT:
            self._drop(timer)
            service._untrack(self)

    # --- lifecycle (the owner kind's adapter) ---------------------------------------------

    def suspend(self) -> None:
        """Admit no tick to the owner's lane until :meth:`resume`: due ticks wait in the
        backlog (one per timer; periodic due times coalesce). A tick being admitted right
        now (the lane was full) may still enter. For destroy/close (between the admission
        seal and the cleanup) and relocation (between the seal and the move). A no-op
        unless ACTIVE."""
        if self._state is _ACTIVE:
            self._state = _SUSPENDED

    def resume(self) -> None:
        """Admit ticks again; the backlog goes first, in firing order. A no-op unless
        SUSPENDED."""
        if self._state is _SUSPENDED:
            self._state = _ACTIVE
            self._flush()

    def close(self) -> int:
        """The cleanup, once: every registration and waiting tick is dropped and nothing
        fires again; ticks still in the lane are stale. Idempotent (later calls return 0).
        Returns the registrations dropped."""
        if self._state is _CLOSED:
            return 0
        self._state = _CLOSED
        service = self._service
        count = len(self._timers)
        for timer in self._timers.values():
            service._unschedule(timer)
        self._timers.clear()
        self._backlog = None
        pump, self._pump = self._pump, None
        if pump is not None:
            pump.cancel(reason="zlink_trio timers closed")
        service._untrack(self)
        return count

    def capture(self) -> TimersSnapshot:
        """Suspend the table and return what a relocation moves: every registration with
        the time left to its next due time, and the waiting backlog. The target restores
        it with :meth:`TimerService.restore`; an aborted relocation calls :meth:`resume`.

        Raises:
            InvalidOperation: the table is closed.
        """
        if self._state is _CLOSED:
            raise InvalidOperation("these timers were cleaned up: nothing to capture")
        self.suspend()
        now = trio.current_time()
        states = []
        for timer in self._timers.values():
            due = timer.due
            remaining = 0.0 if due == math.inf else max(0.0, due - now)
            states.append(TimerState(timer.registration, remaining, timer.pending))
        backlog = () if self._backlog is None else tuple(self._backlog)
        return TimersSnapshot(tuple(states), backlog, self._serial + 1)

    def _restore(self, snapshot: TimersSnapshot) -> None:
        service = self._service
        now = trio.current_time()
        for state in snapshot.timers:
            registration = state.registration
            timer = Timer(self, registration, now + state.remaining)
            timer.pending = state.tick_pending
            self._timers[registration.name] = timer
            if registration.kind is _ONE_SHOT and state.tick_pending:
                timer.index = 1  # fired: waits only for its tick
            else:
                service._schedule(timer)
        if snapshot.backlog:
            self._backlog = deque(snapshot.backlog)
        service._track(self)

    # --- delivery (the service's task) ----------------------------------------------------

    def _deliver(self, tick: TimerTick) -> None:
        """A due tick: into the owner's lane now, or into the backlog."""
        if self._state is not _ACTIVE or self._backlog:
            self._wait(tick)  # behind what already waits (a pump is on it when ACTIVE)
            return
        try:
            self._target.submit_tick_nowait(tick)
        except CapacityExceeded:
            self._wait(tick)
            self._start_pump()
        except ZLinkError:
            self._lost(tick)
        else:
            self._service._fired += 1

    def _wait(self, tick: TimerTick) -> None:
        if self._backlog is None:
            self._backlog = deque((tick,))
            self._service._track(self)
        else:
            self._backlog.append(tick)

    def _lost(self, tick: TimerTick) -> None:
        """The owner's lane refused ``tick`` for good."""
        self.discard(tick)

    def _flush(self) -> None:
        service = self._service
        backlog = self._backlog
        while backlog and self._state is _ACTIVE and self._pump is None and not service.sealed:
            tick = backlog[0]
            try:
                self._target.submit_tick_nowait(tick)
            except CapacityExceeded:
                self._start_pump()
                return
            except ZLinkError:
                backlog.popleft()
                self._lost(tick)
                backlog = self._backlog
                continue
            backlog.popleft()
            service._fired += 1
        if not self._backlog:
            self._backlog = None
            service._untrack(self)

    def _start_pump(self) -> None:
        if self._pump is None:
            self._pump = trio.CancelScope()
            self._service._start_pump(self, self._pump)

    async def _run_pump(self, scope: trio.CancelScope) -> None:
        """The one task that waits for space in the owner's full lane and admits the
        backlog, in order, while the table is ACTIVE (a task only while a lane is full)."""
        service = self._service
        try:
            with scope:
                while self._state is _ACTIVE and not service.sealed:
                    backlog = self._backlog
                    if not backlog:
                        break
                    tick = backlog[0]
                    try:
                        await self._target.submit_tick(tick)
                    except ZLinkError:
                        if self._backlog and self._backlog[0] is tick:
                            self._backlog.popleft()
                        self._lost(tick)
                        continue
                    # Admitted. Popped even if the table changed meanwhile: a tick in the
                    # lane is never admitted twice (a stale one does not run).
                    if self._backlog and self._backlog[0] is tick:
                        self._backlog.popleft()
                    service._fired += 1
        finally:
            if self._pump is scope:
                self._pump = None
            if not self._backlog:
                self._backlog = None
                service._untrack(self)
