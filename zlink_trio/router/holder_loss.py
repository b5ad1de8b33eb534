"""Holder loss (spec 10 §6.3 D): the sweeper resetting stale IN_FLIGHT reservations and
failing their waiting callers."""

from __future__ import annotations

import logging

import trio

from .core import RouterState
from .drain import Drain
from .events import FailureCode, InterruptedAt, InterruptReason, TurnFailed
from .ids import IdempotencyKey, SessionId, TurnId
from .relay import TurnEvent

__all__ = ["HolderLoss"]

log = logging.getLogger("zlink_trio.router")
_SWEEP_BATCH = 100


class HolderLoss(Drain):
    """The holder-loss sweeper and the orphan scan."""

    async def _sweep_holder_loss(self) -> None:
        """The holder-loss sweeper, its own task: every ``holder_loss_sweep_interval``, reset
        each IN_FLIGHT reservation untouched past the secondary TTL with compareAndReset
        (exactly one node of the cluster wins) and, on a win, fail the callers waiting on
        that key now: locally and with a TURN_RESULT(HOLDER_LOST) naming only the key (no
        surviving node knows the TurnId)."""
        interval = self._config.holder_loss_sweep_interval
        tick = trio.current_time()
        while self._state is RouterState.ACCEPTING:
            tick += interval
            await trio.sleep_until(tick)
            await self._scan_orphans()
            try:
                stale = await self._idempotency.find_stale_in_flight(_SWEEP_BATCH)
            except Exception:
                log.warning("holder-loss sweep could not read", exc_info=True)
                continue
            for entry in stale:
                if entry.holder_id is None:
                    continue
                try:
                    won = await self._idempotency.compare_and_reset(entry.key, entry.holder_id)
                except Exception:
                    continue
                if won:
                    self._metrics.emit("on_holder_lost", entry.key)
                    await self._announce_holder_lost(entry.key, entry.session_id)

    async def _scan_orphans(self) -> None:
        """Beyond the original (§14, R10-76): messages nobody waits for any more — their
        holder and the node waiting on them both died — would sit in the inbox until the
        session's next submit. Each sweep this node lists the sessions with messages waiting
        and starts a drain for each one it does not run (each its own task: a drain runs
        whole turns). Only messages older than a live waiter's recovery bound (lease +
        one poll interval) count: younger ones are their waiting node's to re-ring, and so
        is a session this node has a waiting forward for. A session held by a live node
        costs one refused acquire here per sweep (its own pass collects the messages); one
        whose lease expired is claimed by exactly one node, which runs them."""
        age = self._config.lock_lease + self._config.forward_poll_interval
        try:
            pending = await self._inbox.pending_sessions(trio.current_time() - age, _SWEEP_BATCH)
        except Exception:
            log.warning("the orphan scan could not read the inbox", exc_info=True)
            return
        waited = {f.session_id for f in self._forwards.all()}  # re-rung by their waiters
        for session_id in pending:
            if session_id not in self._passes and session_id not in waited and self._accepting():
                self._nursery.start_soon(self._recover_orphans, session_id)

    async def _recover_orphans(self, session_id: SessionId) -> None:
        """Drain the session's old messages; or, when it has no record any more (deleted:
        only delete_session removes one, and a drain never brings it back), purge them and
        free their keys, so they neither wait forever nor keep the head of every scan."""
        try:
            bound = await self._store.bound_agent(session_id)
        except Exception:
            log.warning("the orphan scan could not read %s", session_id, exc_info=True)
            return
        if bound is not None:
            await self._try_drain(session_id)
            return
        async with self._idle_gate(session_id) as gate:
            if gate is not None:
                log.warning("purging the messages left for deleted session %s", session_id)
                try:
                    await self._purge(session_id)
                except Exception:
                    log.warning("the purge of %s failed", session_id, exc_info=True)

    async def _announce_holder_lost(
        self, key: IdempotencyKey, session_id: SessionId | None
    ) -> None:
        """The winner's two steps (§6.3 D), turn-scoped: the InterruptedAt(HOLDER_LOST) frame
        on the session's stream (local subscribers and the EVENT rail), named by the key;
        then the LostTurnAnnouncer's part — the callers waiting under that key fail now,
        here and (TURN_RESULT naming only the key) everywhere. Nothing session-scoped: no
        EVICT, no stream completion, no handle, approval or status discarded — the
        successor may already run the session's next turn."""
        lost = TurnFailed(FailureCode.HOLDER_LOST, f"the node running the turn under {key} died")
        waiting = self._forwards.named(None, key)
        if session_id is None and waiting:
            session_id = waiting[0].session_id
        if session_id is not None:
            frame = TurnEvent(TurnId.unknown(), InterruptedAt(InterruptReason.HOLDER_LOST), key)
            self._hub.publish(session_id, frame)
            self._remote_events.put(session_id, frame)
        for forward in waiting:
            self._settle(forward.future, lost)
            forward.scope.cancel()
        if session_id is None:
            log.warning("reservation %s names no session: its callers elsewhere wait", key)
            return
        await self._announce(session_id, None, lost, key=key)
