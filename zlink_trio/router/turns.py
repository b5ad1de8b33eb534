"""Running one turn (spec 10 F5–F6, §5.5): an own, collected or injected turn, its end
(reservation first, then TURN_RESULT), and the per-turn event relay."""

from __future__ import annotations

import logging

import trio

from .application import TurnInput
from .core import IN_TURN
from .events import (
    AgentExecutionEvent,
    AgentExecutionResult,
    ExecutionCompleted,
    ExecutionError,
    FailureCode,
    InterruptedAt,
    InterruptReason,
    RejectedAt,
    RejectionReason,
    TurnFailed,
    TurnResult,
    TurnSucceeded,
)
from .handles import Handles
from .ids import IdempotencyKey, SessionId, TurnId
from .inbox import InboundMessage
from .lease import HeldLease, Reservation
from .relay import TurnRelay, event_to_wire
from .reservations import Reservations
from .session_store import SessionHistory
from .signals import SessionSignal, SignalKind
from .values import LiveSessionOptions, OpenAttributes, SubmitRequest
from .work import Own, Pass, RunningTurn

__all__ = ["Turns"]

log = logging.getLogger("zlink_trio.router")


class Turns(Handles, Reservations):
    """Running one turn and ending it."""

    async def _run_own(self, session_id: SessionId, gate: Pass, held: HeldLease, own: Own) -> None:
        request = own.request
        self._started.add(own.future)
        result = await self._run_turn(
            session_id,
            gate,
            own.turn_id,
            request,
            request.options,
            request.open_attributes,
        )
        reservation = own.reservation
        finished: bool | None = False
        if reservation is not None:
            finished = await self._finish_reservation(reservation, own.turn_id, result)
            held.slot.unbind(reservation)
            self._local_keyed.pop(reservation.key, None)
        self._settle(own.future, result)
        if reservation is not None and finished is not False:
            # F6 for callers attached by key on other nodes — unless the store said the
            # reservation is no longer this attempt's: its key's callers wait on another
            await self._announce(session_id, own.turn_id, result, key=reservation.key)
        await self._finish_injected(session_id, gate, held, own.turn_id, result)

    async def _run_collected(
        self, session_id: SessionId, gate: Pass, held: HeldLease, message: InboundMessage
    ) -> None:
        turn_id = TurnId.for_message(message.message_id)
        taken: Reservation | None = None
        outcome: TurnResult
        try:
            bound = await self._store.bound_agent(session_id)
            taken = await self._take_over(message, held)
            if bound is not None and bound != message.agent_ref:
                self._single_frame(
                    session_id, turn_id, RejectedAt(RejectionReason.CONFLICTING_AGENT)
                )
                outcome = TurnFailed(
                    FailureCode.CONFLICTING_AGENT, f"{session_id} is bound to {bound}"
                )
            else:
                request = SubmitRequest(
                    session_id=session_id,
                    agent_ref=message.agent_ref,
                    user_input=message.user_input,
                    idempotency_key=message.idempotency_key,
                    priority=message.priority,
                    initiator=message.initiator,
                )
                outcome = await self._run_turn(
                    session_id, gate, turn_id, request, LiveSessionOptions(), OpenAttributes()
                )
        except Exception as exc:
            log.warning("message %s could not run", message.message_id, exc_info=True)
            outcome = TurnFailed(FailureCode.FAILED, f"the router could not run it: {exc!r}")
        finished: bool | None = False
        if taken is not None:
            finished = await self._finish_reservation(taken, turn_id, outcome)
            held.slot.unbind(taken)
        await self._announce(  # F6: after markDone
            session_id,
            turn_id,
            outcome,
            message_id=message.message_id,
            key=self._announced_key(message, finished),
        )
        await self._finish_injected(session_id, gate, held, turn_id, outcome)

    async def _finish_injected(
        self,
        session_id: SessionId,
        gate: Pass,
        held: HeldLease,
        turn_id: TurnId,
        result: TurnResult,
    ) -> None:
        """The NOW messages injected into the turn share its result: each one's reservation
        is finished first, then its TURN_RESULT goes out (F6)."""
        injected, gate.injected = gate.injected, []
        for item in injected:
            finished: bool | None = False
            if item.taken is not None:
                finished = await self._finish_reservation(item.taken, turn_id, result)
                held.slot.unbind(item.taken)
            await self._announce(
                session_id,
                turn_id,
                result,
                message_id=item.message.message_id,
                key=self._announced_key(item.message, finished),
            )

    @staticmethod
    def _announced_key(message: InboundMessage, finished: bool | None) -> IdempotencyKey | None:
        """The key a collected message's TURN_RESULT names (for the callers attached by key,
        §9.2 row 3): only when this attempt finished the reservation, or cannot tell (the
        store threw). After a rejected takeover, or a finish the store refused (the
        reservation was reset and taken by a retry meanwhile), the key's callers wait on
        another attempt: the answer goes to this message's own caller only."""
        return message.idempotency_key if finished is not False else None

    async def _run_turn(
        self,
        session_id: SessionId,
        gate: Pass,
        turn_id: TurnId,
        request: SubmitRequest,
        options: LiveSessionOptions,
        attributes: OpenAttributes,
    ) -> TurnResult:
        early = gate.upcoming_interrupt if gate.upcoming == turn_id else None
        if early is not None:  # interrupted by its id before it started: it does not run
            gate.upcoming = gate.upcoming_interrupt = None
            self._single_frame(session_id, turn_id, InterruptedAt(early))
            return TurnFailed(FailureCode.INTERRUPTED, early.value)
        try:
            handle = await self._ensure_open(session_id, gate, request, options, attributes)
        except Exception as exc:
            return TurnFailed(FailureCode.FAILED, f"opening the session failed: {exc!r}")
        if handle is None:  # the pass was stopped (or abandoned) during the open
            reason = gate.stop or InterruptReason.SESSION_RELEASED
            self._single_frame(session_id, turn_id, InterruptedAt(reason))
            return TurnFailed(FailureCode.INTERRUPTED, reason.value)
        relay = self._relay(session_id, turn_id)
        running = RunningTurn(turn_id, handle, relay)
        gate.running = running
        if gate.upcoming == turn_id:  # started: interrupts name the running turn from now on
            if gate.upcoming_interrupt is not None:  # heard during the open
                running.interrupt(gate.upcoming_interrupt)
            gate.upcoming = gate.upcoming_interrupt = None
        lease = self._store.held(session_id)
        turn = TurnInput(
            turn_id=turn_id,
            user_input=request.user_input,
            history=SessionHistory(  # fenced with the lease this turn starts under
                self._store.records,
                session_id,
                lease_token=lease.fencing_token if lease is not None else 0,
            ),
            approvals=self.approvals(session_id),
            submit_options=request.submit_options,
            initiator=request.initiator,
            idempotency_key=request.idempotency_key,
        )
        result: TurnResult
        in_turn = IN_TURN.set(session_id)
        try:
            with running.scope:
                if gate.stop is not None:
                    running.interrupt(gate.stop)
                answer: object = await handle.run_turn(turn, relay)
                if not isinstance(answer, AgentExecutionResult):
                    # an application bug (a forgotten return): this turn fails, typed; the
                    # router never encodes a value it did not validate
                    raise TypeError(
                        f"LiveSession.run_turn returned {type(answer).__name__}, "
                        "not an AgentExecutionResult"
                    )
                relay(ExecutionCompleted(answer))
                return TurnSucceeded(answer)
            reason = running.reason or InterruptReason.USER
            relay(InterruptedAt(reason))
            result = TurnFailed(FailureCode.INTERRUPTED, reason.value)
        except Exception as exc:
            relay(ExecutionError(repr(exc)))
            result = TurnFailed(FailureCode.FAILED, repr(exc))
        finally:
            IN_TURN.reset(in_turn)
            gate.running = None
            with trio.CancelScope(shield=True):  # an injection in flight is bounded itself
                async with gate.inject_lock:  # it lands in running.injected first
                    pass
            gate.injected.extend(running.injected)
            self._cache.touch(session_id)  # activity: idle time counts from the turn's end
            self._close_relay(relay)
        return result

    def _relay(self, session_id: SessionId, turn_id: TurnId) -> TurnRelay:
        """One relay per turn, stamping its TurnId on every frame (§5.5): local subscribers
        and the bounded remote queue, never blocking the turn."""
        return TurnRelay(session_id, turn_id, self._hub, self._remote_events)

    def _single_frame(
        self, session_id: SessionId, turn_id: TurnId, event: AgentExecutionEvent
    ) -> None:
        """A turn that never ran: its one (terminal) frame through a relay of its own."""
        relay = self._relay(session_id, turn_id)
        relay(event)
        self._close_relay(relay)

    def _close_relay(self, relay: TurnRelay) -> None:
        """Close the turn's relay and report its drops (§5.5.1: a gap is never silent): a
        warning naming the counts, and the node's ``statistics().dropped_events`` total."""
        relay.close()
        if relay.dropped:
            log.warning(
                "turn %s of %s: %d frame(s) dropped (%d local, %d remote, %d after its close)",
                relay.turn_id,
                relay.session_id,
                relay.dropped,
                relay.dropped_local,
                relay.dropped_remote,
                relay.discarded,
            )
            self._dropped_events += relay.dropped

    async def _dispatch_events(self) -> None:
        """The EVENT rail's dispatcher: a slow publish delays frames, never a turn."""
        while True:
            session_id, frame = await self._remote_events.get()
            await self._publish(
                SessionSignal(
                    kind=SignalKind.EVENT,
                    session_id=session_id,
                    origin=self.node_id,
                    payload=event_to_wire(frame.turn_id, frame.event, key=frame.idempotency_key),
                )
            )
