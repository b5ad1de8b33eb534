"""The node's one timer service: a heap of due times driven by one task.

Every owner's timers (:class:`~.table.TimerTable`) schedule their due times here; one task
in the roles' nursery (``zlink_trio.timers``) sleeps until the earliest one (a cancel scope
whose deadline follows the heap's top, exact under a MockClock) and, at each due time,
hands a :class:`~.values.TimerTick` to its owner's lane without waiting
(``submit_tick_nowait``). An idle timer is a heap entry, not a task; a node hosting 100 k
Actors with a timer each runs this one task.

Back-pressure: a tick for a full lane never blocks the service. It waits in its owner's
backlog, and one task per owner whose lane is full (``zlink_trio.timers.pump``, in this
service's nursery, gone as soon as the backlog is admitted) waits for space like any
other submitter. At most one tick per timer is outstanding (fired and not run): a periodic
due time that passes meanwhile is coalesced into it and counted, so a slow or stuck owner
costs one tick per timer, not one per period (docs/decisions.md, "Framework timers").

Stop: :meth:`TimerService.seal` (drain step 1 of a clean stop: the node stops admitting)
fires nothing more; ticks the lanes accepted before run in the drain. When the service's
task ends (the roles are cancelled, drain step 4) every table is closed: every
registration and waiting tick is gone, once.
"""

from __future__ import annotations

import heapq
import math
from typing import Final, final

import trio

from ...engine._construct import NoPublicConstructor
from ...errors import ShuttingDown
from .table import TickTarget, Timer, TimerTable
from .values import TimerKind, TimersSnapshot, TimerStatistics, TimerTick

__all__ = ["TimerService", "serve_timers"]

_PERIODIC: Final = TimerKind.PERIODIC
_COMPACT_MIN: Final = 64
"""Stale heap entries tolerated before a compaction is considered."""
_SWEEP_CHECKPOINT: Final = 1024
"""Ticks fired in one sweep between two checkpoints (a sweep of many due timers yields)."""


@final
class TimerService(metaclass=NoPublicConstructor):
    """The timers of every owner on this node. Made by :func:`serve_timers`."""

    __slots__ = (
        "_closed",
        "_coalesced",
        "_dropped",
        "_fired",
        "_heap",
        "_nursery",
        "_sealed",
        "_seq",
        "_stale",
        "_stale_entries",
        "_tables",
        "_timer",
        "_wake",
    )

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._heap: list[tuple[float, int, Timer]] = []
        self._seq = 0
        self._stale_entries = 0
        self._tables: set[TimerTable] = set()
        """Tables holding a registration or a waiting tick (an empty one costs nothing)."""
        self._timer: trio.CancelScope | None = None
        self._wake: trio.Event | None = None
        self._sealed = False
        self._closed = False
        self._fired = 0
        self._coalesced = 0
        self._stale = 0
        self._dropped = 0

    # --- public ---------------------------------------------------------------------------

    @property
    def sealed(self) -> bool:
        """No tick fires any more (the node stops admitting, or the service stopped)."""
        return self._sealed

    @property
    def closed(self) -> bool:
        """The service's task ended: every table was closed."""
        return self._closed

    def open_table(self, target: TickTarget, *, suspended: bool = False) -> TimerTable:
        """The (empty) timers of one owner whose ticks go to ``target``. ``suspended``:
        admit no tick before :meth:`TimerTable.resume` (an owner not admitting yet).

        Raises:
            ShuttingDown: the service stopped.
        """
        if self._closed:
            raise ShuttingDown("the node's timer service stopped")
        return TimerTable(self, target, suspended=suspended)

    def restore(
        self, target: TickTarget, snapshot: TimersSnapshot, *, suspended: bool = True
    ) -> TimerTable:
        """The timers a relocation moved here (:meth:`TimerTable.capture` at the source):
        each registration's next due time is ``now + remaining`` (periodic due times go on
        from there, one period apart), its serial and pending flag are kept, and the
        backlog is admitted first when the table is resumed. Suspended by default: the
        owner resumes it once it admits. Ticks that were in the source lane are resubmitted
        by the relocation with the lane's other pending items; they run (their serials
        match).

        Raises:
            ShuttingDown: the service stopped.
        """
        if self._closed:
            raise ShuttingDown("the node's timer service stopped")
        table = TimerTable(self, target, suspended=True, serial=snapshot.next_serial - 1)
        table._restore(snapshot)
        if not suspended:
            table.resume()
        return table

    def seal(self) -> None:
        """Fire no tick any more (drain step 1: the node stops admitting). Registrations
        are kept until the service's task ends. Idempotent."""
        self._sealed = True
        timer = self._timer
        if timer is not None:
            timer.cancel(reason="zlink_trio timers sealed")
        elif self._wake is not None:
            self._wake.set()

    def statistics(self) -> TimerStatistics:
        tables = self._tables
        return TimerStatistics(
            owners=len(tables),
            registered=sum(len(table) for table in tables),
            backlog=sum(table.backlog for table in tables),
            fired=self._fired,
            coalesced=self._coalesced,
            stale=self._stale,
            dropped=self._dropped,
            sealed=self._sealed,
        )

    # --- the heap (tables call these) -----------------------------------------------------

    def _track(self, table: TimerTable) -> None:
        self._tables.add(table)

    def _untrack(self, table: TimerTable) -> None:
        if not len(table) and not table.backlog:
            self._tables.discard(table)

    def _schedule(self, timer: Timer) -> None:
        """Put ``timer``'s next due time on the heap (replacing its entry, if any)."""
        if timer.seq:
            self._stale_entries += 1
        self._seq += 1
        seq = timer.seq = self._seq
        due = timer.due
        heap = self._heap
        earliest = not heap or due < heap[0][0]
        heapq.heappush(heap, (due, seq, timer))
        if earliest and not self._sealed:
            scope = self._timer
            if scope is not None:
                scope.deadline = due
            elif self._wake is not None:
                self._wake.set()

    def _unschedule(self, timer: Timer) -> None:
        if not timer.seq:
            return
        timer.seq = 0
        self._stale_entries += 1
        heap = self._heap
        if self._stale_entries >= _COMPACT_MIN and 2 * self._stale_entries > len(heap):
            self._heap = [entry for entry in heap if entry[2].seq == entry[1]]
            heapq.heapify(self._heap)
            self._stale_entries = 0

    def _start_pump(self, table: TimerTable, scope: trio.CancelScope) -> None:
        self._nursery.start_soon(table._run_pump, scope, name="zlink_trio.timers.pump")

    # --- the task -------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._sealed:
            heap = self._heap
            if not heap:
                self._wake = wake = trio.Event()
                await wake.wait()
                self._wake = None
                continue
            with trio.CancelScope(deadline=heap[0][0]) as scope:
                self._timer = scope
                await trio.sleep_forever()
            self._timer = None
            await self._sweep()
        await trio.sleep_forever()  # sealed: the registrations stay until the task ends

    async def _sweep(self) -> None:
        """Fire every due entry (the heap may be replaced by a compaction meanwhile)."""
        now = trio.current_time()
        fired = 0
        while not self._sealed:
            heap = self._heap
            if not heap or heap[0][0] > now:
                return
            _due, seq, timer = heapq.heappop(heap)
            if timer.seq != seq:
                self._stale_entries -= 1
                continue
            timer.seq = 0
            self._fire(timer, now)
            fired += 1
            if fired % _SWEEP_CHECKPOINT == 0:
                await trio.lowlevel.checkpoint()

    def _fire(self, timer: Timer, now: float) -> None:
        registration = timer.registration
        if registration.kind is _PERIODIC:
            period = registration.period
            assert period is not None
            # The next due time is origin + k * period, the first one after now: a
            # service that fell behind by whole periods skips them (counted), no burst.
            index = timer.index + 1
            if timer.origin + index * period <= now:
                behind = math.floor((now - timer.origin) / period) + 1
                if timer.origin + behind * period <= now:
                    behind += 1
                self._coalesced += behind - index
                index = behind
            timer.index = index
            self._schedule(timer)
        else:
            timer.index = 1
        if timer.pending:
            self._coalesced += 1  # the previous tick has not run yet: this one is folded in
            return
        timer.pending = True
        timer.table._deliver(TimerTick(registration.name, registration.serial))

    def _close(self) -> None:
        self._sealed = True
        self._closed = True
        self._timer = None
        for table in list(self._tables):
            table.close()
        self._tables.clear()
        self._heap.clear()
        self._stale_entries = 0


async def serve_timers(
    *, task_status: trio.TaskStatus[TimerService] = trio.TASK_STATUS_IGNORED
) -> None:
    """The node's timer service: run until cancelled; on the way out every table is
    closed (the cleanup of every registration still held)."""
    async with trio.open_nursery() as nursery:
        service = TimerService._create(nursery)
        try:
            task_status.started(service)
            await service._run()
        finally:
            service._close()
            nursery.cancel_scope.cancel(reason="zlink_trio timers stopped")
