"""Framework timers, for every owner kind (Actors, User Spots, Instance Spots).

Only re-exports live here; each concept has its own module:

- :mod:`.values` — the serialisable records (registration, tick, snapshot, statistics)
  and the argument checks;
- :mod:`.table` — :class:`TimerTable`, the timers of one owner, and the
  :class:`TickTarget` protocol its owner kind implements;
- :mod:`.service` — :class:`TimerService` (one per node: a heap and one task) and
  :func:`serve_timers`.

How an owner kind plugs in (the Actor's adapter is ``actors/timers.py`` and the tick
branch of ``actors/hosted.py``):

1. The owner implements :class:`TickTarget` (``submit_tick_nowait`` / ``submit_tick``:
   admit a :class:`TimerTick` to its lane's APPLICATION queue, raising the lane's
   errors). Ticks are lane items like its messages, so they are ordered with them by
   acceptance and never run concurrently with its handlers.
2. On its first registration it gets a table: ``service.open_table(owner)`` (keep it on
   the owner; an owner without timers needs none), and registers with
   ``table.once/every/cancel`` only from its own turns.
3. Its turn handler, given a ``TimerTick``: ``registration = table.accept(tick)``; None
   means stale (cancelled, replaced, closed): do nothing; else run the handler of
   ``registration.name`` with ``registration.payload`` (checks the owner's turn does for
   its messages — lease, fencing — apply first). A tick its lane drops without running
   (retire, fencing) is handed to ``table.discard(tick)``.
4. Lifecycle: ``table.suspend()`` when admission is sealed (destroy, close, relocation
   seal), ``table.resume()`` if it re-opens, ``table.close()`` once at the cleanup
   (destroy done, close done, fenced). The node's stop needs nothing: the service seals
   at drain step 1 and closes every table when its task ends.
5. Relocation: ``snapshot = table.capture()`` (suspends; a frozen value), and on the
   target ``service.restore(new_owner, snapshot)`` then ``resume()`` once it admits.
"""

from .service import TimerService as TimerService, serve_timers as serve_timers
from .table import TickTarget as TickTarget, TimerTable as TimerTable
from .values import (
    MAX_TIMER_PAYLOAD as MAX_TIMER_PAYLOAD,
    MAX_TIMERS_PER_OWNER as MAX_TIMERS_PER_OWNER,
    MIN_TIMER_PERIOD as MIN_TIMER_PERIOD,
    TimerKind as TimerKind,
    TimerRegistration as TimerRegistration,
    TimersSnapshot as TimersSnapshot,
    TimerState as TimerState,
    TimerStatistics as TimerStatistics,
    TimerTick as TimerTick,
)
