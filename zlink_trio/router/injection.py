"""NOW injection (spec 10 §9.3): NOW messages for a running turn enter that turn."""

from __future__ import annotations

import logging

from .application import QueuedInput
from .ids import SessionId
from .reservations import Reservations
from .threads import CallOutcome, call_in_thread
from .values import Priority
from .work import Injected, Pass

__all__ = ["Injection"]

log = logging.getLogger("zlink_trio.router")


class Injection(Reservations):
    """NOW injection into a running turn."""

    async def _inject_now(self, session_id: SessionId, gate: Pass) -> None:
        """§9.3: NOW messages for a running turn are injected into it, not run apart. Each
        takes its reservation over first (like a collected message, §6.3 D), so the turn's
        end finishes it; one that cannot be injected — the turn ended meanwhile, or the
        application's ``inject`` raised — goes back to the inbox, holderless again, and runs
        as a turn of its own. The application's ``inject`` is synchronous: it runs in a
        thread (bounded by ``inject_timeout``, wall clock), so one that blocks delays only
        this injection. One injector per session at a time (the gate's inject lock), so NOW
        messages enter the turn in the order they were collected; the turn's end waits for
        an injection in flight, so its result covers every message it took."""
        async with gate.inject_lock:
            running = gate.running
            held = self._leases.get(session_id)
            if running is None or held is None:
                return
            try:
                messages = await self._inbox.collect(session_id, Priority.NOW)
            except Exception:
                log.warning("collect(NOW) of %s failed", session_id, exc_info=True)
                return
            for m in messages:
                taken = await self._take_over(m, held)
                if gate.running is running and not gate.stopped(held):
                    queued = QueuedInput(
                        user_input=m.user_input, priority=m.priority, initiator=m.initiator
                    )
                    called = await call_in_thread(
                        running.handle.inject, queued, bound=self._config.inject_timeout
                    )
                    if called.outcome is CallOutcome.RAISED:
                        log.warning(
                            "LiveSession.inject raised %r; %s queued instead",
                            called.error,
                            m.message_id,
                        )
                    else:
                        if called.outcome is CallOutcome.ABANDONED:
                            log.warning(
                                "LiveSession.inject of %s still runs after %s s; counted as "
                                "injected (not run again)",
                                m.message_id,
                                self._config.inject_timeout,
                            )
                        running.injected.append(Injected(m, taken))
                        continue
                if taken is not None:
                    await self._untake(taken, held)
                try:
                    await self._inbox.deliver(m)
                except Exception:
                    log.error("message %s lost: could not hand it back", m.message_id)
                    continue
                # LATER, not NOW: a running turn ignores it (its pass collects at the
                # boundary), so a message whose inject keeps raising cannot ring itself back
                # in a loop
                await self._ring(session_id, Priority.LATER)
