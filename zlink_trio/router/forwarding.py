"""Forwarding (spec 10 §7.2, §9): hand a message to the inbox, ring the doorbell, and
wait for its answer: TURN_RESULT, polling the idempotency store, re-ringing, deadline."""

from __future__ import annotations

import logging

import trio

from .core import RouterCore, RouterState
from .disposition import DispositionKind, Forwarded, SubmitDisposition, TurnFuture
from .errors import ForwardTimeout, TurnFailedError
from .events import turn_result_from_wire
from .forwards import Forward
from .idempotency import IdempotencyState
from .ids import InboundMessageId, SessionId, TurnId
from .inbox import InboundMessage
from .lease import Reservation
from .values import Priority, SubmitRequest

__all__ = ["Forwarding"]

log = logging.getLogger("zlink_trio.router")


class Forwarding(RouterCore):
    """Handing a turn to the holder and waiting for its answer."""

    async def _forward(
        self, request: SubmitRequest, reservation: Reservation | None
    ) -> SubmitDisposition:
        message = InboundMessage(
            message_id=InboundMessageId.new(),
            session_id=request.session_id,
            agent_ref=request.agent_ref,
            user_input=request.user_input,
            priority=request.priority,
            delivered_at=trio.current_time(),
            idempotency_key=request.idempotency_key,
            initiator=request.initiator,
        )
        future = await self._hand_to_inbox(message, reservation, TurnFuture())
        self._metrics.emit("on_submit", request.session_id, DispositionKind.FORWARDED)
        return Forwarded(TurnId.for_message(message.message_id), future, message.message_id)

    async def _hand_to_inbox(
        self, message: InboundMessage, reservation: Reservation | None, future: TurnFuture
    ) -> TurnFuture:
        forward = Forward(message.session_id, message.message_id, message.idempotency_key, future)
        # registered before any I/O of the hand-over, so a TURN_RESULT cannot be missed
        self._forwards.add(forward)
        released = False
        try:
            if reservation is not None:
                released = await self._idempotency.release_holder(
                    reservation.key, reservation.reserver
                )
            await self._inbox.deliver(message)
        except BaseException:
            self._forwards.drop(forward)
            if reservation is not None:  # handed to nobody: it will not run, free its key
                await self._free_unhanded(reservation, released)
            raise
        await self._ring(message.session_id, message.priority)
        if self._state is RouterState.CLOSED:  # closed during the hand-over: no waiter
            self._forwards.drop(forward)
            future.set_exception(
                ForwardTimeout("the router closed before the forwarded turn's answer came")
            )
            return future
        self._nursery.start_soon(self._wait_forward, forward)
        return future

    async def _free_unhanded(self, reservation: Reservation, released: bool) -> None:
        """A hand-over that failed: the caller gets the error and nobody will run the turn,
        so its reservation is reset (a retry under the key runs, as after a failed claim)
        instead of waiting holderless for the forward TTL. Released already, it is taken
        back first (compare_and_reset is holder-matched)."""
        with self._cleanup():
            try:
                if released:
                    await self._idempotency.acquire_holder(reservation.key, reservation.reserver)
                await self._idempotency.compare_and_reset(reservation.key, reservation.reserver)
            except Exception:
                log.warning("could not free key %s of a failed hand-over", reservation.key)

    async def _wait_forward(self, forward: Forward) -> None:
        """F7's fallback and the forward deadline: poll the idempotency store every
        ``forward_poll_interval``, re-ring the doorbell while the inbox holds messages. A keyed
        caller — attached by key alone (§9.2 row 3) or forwarded with its message — whose
        reservation is gone (its turn failed and released the key, or it was reset) fails at
        that poll: no answer will come."""
        interval = self._config.forward_poll_interval
        with forward.scope:
            with trio.move_on_after(self._config.idempotency_forward_ttl):
                while not forward.future.done():
                    await trio.sleep(interval)
                    if forward.future.done():
                        break
                    if forward.key is not None and await self._poll(forward):
                        break
                    await self._rering(forward.session_id)
            if not forward.future.done():
                forward.future.set_exception(
                    ForwardTimeout(f"no answer within {self._config.idempotency_forward_ttl} s")
                )
        self._forwards.drop(forward)

    async def _poll(self, forward: Forward) -> bool:
        """One polling read for a keyed forward; answers whether it settled it."""
        assert forward.key is not None
        try:
            entry = await self._idempotency.find(forward.key)
        except Exception:
            return False  # not reading the store is no answer; the deadline still holds
        if entry is not None and entry.state is IdempotencyState.DONE and entry.result:
            _, result = turn_result_from_wire(entry.result)
            self._settle(forward.future, result)
            return True
        if entry is None:  # by key alone or with its message: the evidence is the same
            forward.future.set_exception(
                TurnFailedError(
                    f"the turn under key {forward.key} ended without a cached result (it "
                    "failed, or its reservation was reset); retry"
                )
            )
            return True
        return False

    async def _rering(self, session_id: SessionId) -> None:
        if await self._pending(session_id):
            self._metrics.emit("on_forward_doorbell_rerung", session_id)
            await self._ring(session_id, Priority.LATER)
