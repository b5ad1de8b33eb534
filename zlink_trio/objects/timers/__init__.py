"""Framework timers, for every owner kind (Actors, User Spots, Instance Spots).

Only re-exports live here; each concept has its own module:

- :mod:`.values` — the serialisable records (registration, tick, snapshot, statistics)
  and the argument checks;
- :mod:`.table` — :class:`TimerTable`, the timers of one owner, and the
  :class:`TickTarget` protocol its owner kind implements;
- :mod:`.service` — :class:`TimerService` (one per node: a heap and one task) and
  :func:`serve_timers`;
- :mod:`.handlers` — ``@on_timer`` and the startup validation of timer handlers
  (:class:`TimerHandlerRegistrations`, one per kind's registry);
- :mod:`.facade` — :class:`Timers`, what ``context.timers`` returns, over the
  :class:`TimerOwner` protocol an owner kind implements.

How an owner kind plugs in (the Actor's adapter: the ``TimerOwner`` members and the tick
branch of ``actors/hosted.py``, the suspend/resume/close calls of ``actors/host.py``; the
Spot's: ``spots/hosted.py`` and the resume at publication in ``spots/host.py``):

1. The owner implements :class:`TickTarget` (``submit_tick_nowait`` / ``submit_tick``:
   admit a :class:`TimerTick` to its lane's APPLICATION queue, raising the lane's
   errors). Ticks are lane items like its messages, so they are ordered with them by
   acceptance and never run concurrently with its handlers.
2. It implements :class:`TimerOwner` too (``timers`` slot, ``timer_service``,
   ``timer_names``, ``timer_owner_noun``, ``admitting``, ``in_own_turn``) and its
   context's ``timers`` property returns ``Timers(owner)``: the facade checks the turn and
   the handler name and opens the owner's table on its first registration
   (``service.open_table(owner)``; an owner without timers holds none). Its registry
   records ``@on_timer`` methods with a :class:`TimerHandlerRegistrations`.
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

from .facade import TimerOwner as TimerOwner, Timers as Timers
from .handlers import (
    TimerHandlerRegistrations as TimerHandlerRegistrations,
    declared_timers as declared_timers,
    on_timer as on_timer,
)
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
