"""Holder loss (spec 10 §6.3 D): the sweeper resetting stale IN_FLIGHT reservations and
failing their waiting callers."""

from __future__ import annotations

import logging

import trio

from .core import RouterCore, RouterState
from .events import FailureCode, TurnFailed
from .ids import IdempotencyKey, SessionId

__all__ = ["HolderLoss"]

log = logging.getLogger("zlink_trio.router")
_SWEEP_BATCH = 100


class HolderLoss(RouterCore):
    """The holder-loss sweeper."""

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

    async def _announce_holder_lost(
        self, key: IdempotencyKey, session_id: SessionId | None
    ) -> None:
        lost = TurnFailed(FailureCode.HOLDER_LOST, f"the node running the turn under {key} died")
        waiting = self._forwards.named(None, key)
        for forward in waiting:
            self._settle(forward.future, lost)
            forward.scope.cancel()
        if session_id is None and waiting:
            session_id = waiting[0].session_id
        if session_id is None:
            log.warning("reservation %s names no session: its callers elsewhere wait", key)
            return
        await self._announce(session_id, None, lost, key=key)
