"""The router's signal handling (spec 10 §8, §9): the subscription's dispatcher, YIELD
hand-off, TURN_RESULT for forwards, and the STATUS heartbeat."""

from __future__ import annotations

import logging
from typing import Any

import trio

from .core import RouterState
from .drain import Drain
from .errors import SessionEvicted
from .events import InterruptReason, turn_result_from_wire
from .ids import IdempotencyKey, InboundMessageId, SessionId, TurnId
from .injection import Injection
from .relay import event_from_wire
from .signals import SessionSignal, SignalKind, requests_hand_off
from .status import ClusterSessionStatus
from .values import Priority

__all__ = ["Signals"]

log = logging.getLogger("zlink_trio.router")
_RESUBSCRIBE_FIRST = 0.5
_RESUBSCRIBE_MAX = 5.0


class Signals(Drain, Injection):
    """Signal dispatch, YIELD hand-off and the STATUS heartbeat."""

    async def _listen(self, receive: trio.MemoryReceiveChannel[SessionSignal]) -> None:
        """Dispatch the subscription's signals (taken before the first submit, F0). When the
        bus ends it (a lost connection), subscribe again, backing off from 0.5 s to 5 s while
        the bus refuses; signals published meanwhile are lost (§10.1 row 3) — a missed
        TURN_RESULT is recovered by the forward's polling (F7)."""
        await self._hear(receive)
        delay = _RESUBSCRIBE_FIRST
        while self._state is not RouterState.CLOSED:
            await trio.sleep(delay)
            try:
                async with self._bus.subscribe() as again:
                    delay = _RESUBSCRIBE_FIRST
                    log.info("%s subscribed to the signal bus again", self.node_id)
                    await self._hear(again)
            except Exception:
                log.warning("subscribing to the signal bus failed; retrying", exc_info=True)
                delay = min(delay * 2, _RESUBSCRIBE_MAX)

    async def _hear(self, receive: trio.MemoryReceiveChannel[SessionSignal]) -> None:
        try:
            async for signal in receive:
                try:
                    self._dispatch(signal)
                except Exception:
                    log.warning("a %s signal could not be handled", signal.kind, exc_info=True)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        log.warning("%s lost its signal bus subscription", self.node_id)

    def _dispatch(self, signal: SessionSignal) -> None:
        """Must not block: anything doing I/O goes to its own task."""
        sid, kind = signal.session_id, signal.kind
        if requests_hand_off(signal):  # YIELD, and the legacy shim (both honoured)
            if kind is SignalKind.INTERRUPT:
                self._interrupt_local(sid, InterruptReason.SESSION_RELEASED, None)
            self._nursery.start_soon(self._hand_off, sid)
        elif kind is SignalKind.INTERRUPT:
            if signal.origin != self.node_id:
                reason = InterruptReason(signal.payload.get("reason"))
                turn = signal.payload.get("turnId")
                self._interrupt_local(sid, reason, None if turn is None else TurnId(str(turn)))
        elif kind is SignalKind.MESSAGE_ENQUEUED:
            gate = self._passes.get(sid)
            if gate is None:
                self._nursery.start_soon(self._try_drain, sid)
                return
            gate.rung = True
            if gate.running is not None and signal.payload.get("priority") == "NOW":
                self._nursery.start_soon(self._inject_now, sid, gate)
        elif kind is SignalKind.TURN_RESULT:
            self._on_turn_result(signal.payload)
        elif kind is SignalKind.EVENT:
            if signal.origin != self.node_id:
                frame = event_from_wire(signal.payload)
                if frame is not None:
                    self._hub.publish(sid, frame)
        elif kind is SignalKind.STATUS:
            if signal.origin != self.node_id:
                self._projection.offer(ClusterSessionStatus.from_wire(signal.payload))
        elif kind is SignalKind.EVICT:
            self._projection.remove(sid)
            self._approvals.pop(sid, None)
            if signal.origin != self.node_id:
                self._hub.complete(sid)
                self._nursery.start_soon(self._close_idle, sid)
            for forward in self._forwards.of_session(sid):
                forward.future.set_exception(SessionEvicted(f"{sid} was evicted"))
                forward.scope.cancel()

    async def _hand_off(self, session_id: SessionId) -> None:
        """YIELD (or the legacy INTERRUPT(SESSION_RELEASED)): stop the turn, drop the handle,
        return the lease. A pinned session closes at the end of its turn (best effort)."""
        if session_id not in self._leases:
            return  # not the holder, or the other half of the shim already handed off
        gate = self._passes.get(session_id)
        if gate is not None:
            gate.stop = InterruptReason.SESSION_RELEASED
            if gate.running is not None:
                gate.running.interrupt(InterruptReason.SESSION_RELEASED)
            return  # the pass closes the handle and returns the lease when it ends
        async with self._idle_gate(session_id) as idle:
            if idle is None:  # a pass started meanwhile: it hands off when it ends
                await self._hand_off(session_id)
                return
            await self._close_handle(session_id)
            await self._return_lease(session_id)
            if await self._pending(session_id):
                await self._ring(session_id, Priority.LATER)

    def _on_turn_result(self, payload: dict[str, Any]) -> None:
        try:
            _, result = turn_result_from_wire(payload)
            message = payload.get("messageId")
            key = payload.get("idempotencyKey")
            message_id = InboundMessageId(message) if isinstance(message, str) else None
            idem = IdempotencyKey(key) if isinstance(key, str) else None
        except (KeyError, ValueError, TypeError):
            return
        for forward in self._forwards.named(message_id, idem):
            self._settle(forward.future, result)
            forward.scope.cancel()

    async def _heartbeat(self) -> None:
        """STATUS every ``status_heartbeat_interval`` for each session this node holds."""
        interval = self._config.status_heartbeat_interval
        tick = trio.current_time()
        while self._state is RouterState.ACCEPTING:
            tick += interval
            await trio.sleep_until(tick)
            for session_id in list(self._leases):
                self._next_status_seq()
                await self._publish(
                    SessionSignal(
                        kind=SignalKind.STATUS,
                        session_id=session_id,
                        origin=self.node_id,
                        payload=self._snapshot(session_id).to_wire(),
                    )
                )
