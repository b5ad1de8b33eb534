"""The drain pass (spec 10 F3–F4): holding the node-local turn gate, always collect,
merge priority-then-FIFO, run one turn, repeat; and how a pass ends."""

from __future__ import annotations

import logging

import trio

from .core import RouterState
from .errors import RouterShuttingDown, SessionEvicted
from .events import FailureCode, InterruptReason, TurnFailed
from .forwarding import Forwarding
from .idempotency import HolderAcquired
from .ids import InboundMessageId, ReserverId, SessionId, TurnId
from .inbox import InboundMessage
from .lease import HeldLease
from .renewal import Renewal
from .session_store import Claimed
from .turns import Turns
from .values import Priority
from .work import Collected, Own, Pass, PassEnd, Work

__all__ = ["Drain"]

log = logging.getLogger("zlink_trio.router")


class Drain(Turns, Forwarding, Renewal):
    """The drain pass and its end."""

    async def _try_drain(self, session_id: SessionId) -> None:
        """F3: a doorbell on a node not already running the session: take the gate, claim
        with the recorded agent (an election loser stops here), then drain. Drain-path
        acquisitions report no lock-acquire metric (§12)."""
        if session_id in self._passes or self._state != RouterState.ACCEPTING:
            return
        gate = Pass()
        self._passes[session_id] = gate
        ready = False
        try:
            if session_id in self._leases:
                ready = True
            elif await self._pending(session_id):
                bound = await self._store.bound_agent(session_id)
                if bound is not None:
                    claimed = await self._store.claim(session_id, bound)
                    if isinstance(claimed, Claimed) and not self._accepting():
                        if session_id not in self._leases:  # closed during the claim
                            with self._cleanup():
                                await self._store.release(session_id)
                    elif isinstance(claimed, Claimed):
                        if session_id not in self._leases:
                            self._start_renewer(session_id)
                        ready = True
        except Exception:
            log.warning("drain of %s could not start", session_id, exc_info=True)
        finally:
            if not ready:
                self._end_gate(session_id, gate)
        if ready:
            await self._drain_pass(session_id, gate, None)

    async def _drain_pass(self, session_id: SessionId, gate: Pass, first: Own | None) -> None:
        queue = gate.queue  # on the gate: a close that abandons this pass hands it back
        if first is not None:
            queue.append(first)
        held = self._leases[session_id]
        gate.draining = True
        try:
            while not gate.stopped(held):
                gate.rung = False
                gate.joinable = True  # no turn runs during the collect: a submit may join
                try:  # always collect before a turn, every tier (F4)
                    collected = await self._inbox.collect(session_id, Priority.LATER)
                except Exception:
                    log.warning("collect of %s failed", session_id, exc_info=True)
                    collected = ()
                finally:
                    gate.joinable = False
                queue.extend(Collected(m) for m in collected)
                queue.extend(gate.joined)
                gate.joined.clear()
                if gate.stopped(held):  # a yield, loss or eviction meanwhile
                    break
                if not queue:
                    if gate.rung:  # rung during the collect: it may have read too early
                        continue
                    break
                queue.sort(key=lambda w: (w.priority, w.delivered_at))
                work = queue.pop(0)
                await self._keep_behind_in_inbox(queue)
                if isinstance(work, Own):
                    await self._run_own(session_id, gate, held, work)
                else:
                    await self._run_collected(session_id, gate, held, work.message)
        finally:
            gate.joinable = False
            queue.extend(gate.joined)
            gate.joined.clear()
            if not self._crashed:  # a crashed node hands nothing over and closes nothing
                await self._hand_queue_back(gate)  # stopped early: to the next holder
                with trio.CancelScope(shield=True):  # each step is bounded
                    await self._end_pass_session(session_id, gate, held)
            self._end_gate(session_id, gate)

    async def _keep_behind_in_inbox(self, queue: list[Work]) -> None:
        """Beyond the original (R10-72, docs/router.md): before a turn starts, the collected
        messages queued behind it go back to the inbox, their envelopes unchanged (each
        deliveredAt keeps its place in priority-then-FIFO order), without a doorbell — this
        pass collects them again after the turn. So a holder that dies mid-turn leaves them
        in the inbox for the next holder (their waiting nodes' poll ticks ring for them,
        the orphan scan finds those nobody waits for) instead of taking them along, which
        would leave their callers waiting until the forward deadline. One that cannot go
        back stays queued here (taken off the queue first, so a close that abandons this
        pass never hands it back twice)."""
        behind = [w for w in queue if isinstance(w, Collected)]
        for work in behind:
            queue.remove(work)
            try:
                await self._inbox.deliver(work.message)
            except Exception:
                log.warning("could not put message %s back", work.message.message_id)
                queue.append(work)

    async def _end_pass_session(self, session_id: SessionId, gate: Pass, held: HeldLease) -> None:
        """Inside the pass's gate (so no turn starts meanwhile): close an LRU-evicted handle
        now that its turn ended; end the session here after a hand-off, an eviction or a lost
        lease — close the handle first, then return the lease (a turn never writes history
        its node no longer holds), then ring for the next holder."""
        if gate.evicted is not None:
            await self._close(session_id, gate.evicted)
        if gate.end_by is PassEnd.CALLER or gate.stop is InterruptReason.SYSTEM_SHUTDOWN:
            return
        if held.ended == "lost":
            await self._close_handle(session_id)
            return
        if gate.stop is InterruptReason.SESSION_RELEASED or gate.evicted is not None:
            await self._close_handle(session_id)
            await self._return_lease(session_id)
            with self._cleanup():
                if await self._pending(session_id):
                    await self._ring(session_id, Priority.LATER)

    async def _hand_queue_back(self, gate: Pass) -> None:
        """Hand what a stopped pass still queues to the next holder, one item at a time
        (taken off the queue first, so the pass and a close that abandoned it never hand
        the same item back twice)."""
        gate.queue.extend(gate.joined)
        gate.joined.clear()
        gate.queue.sort(key=lambda w: (w.priority, w.delivered_at))
        while gate.queue:
            work = gate.queue.pop(0)
            with self._cleanup():
                await self._requeue(work)

    async def _requeue(self, work: Work) -> None:
        if isinstance(work, Own) and self._state is not RouterState.ACCEPTING:
            await self._drop_own(work)
            return
        if isinstance(work, Collected):
            await self._hand_back(work.message)
            return
        try:
            await self._forward_own(work)
        except Exception:
            log.warning("could not hand a queued turn over", exc_info=True)

    async def _hand_back(self, message: InboundMessage) -> None:
        """A message this pass took from the inbox and will not run goes back, its envelope
        unchanged (its deliveredAt keeps its place in priority-then-FIFO order), then the
        doorbell rings. On a closing router that still holds the session's lease the ring
        waits until the close has given the leases back (a peer hearing it earlier would find
        the session held and stand down). A hand-back that fails is answered (§6.3 C)."""
        sid = message.session_id
        try:
            await self._inbox.deliver(message)
        except Exception as exc:
            log.warning("could not hand message %s back", message.message_id, exc_info=True)
            await self._answer_unhanded(message, exc)
            return
        if self._state is RouterState.DRAINING and sid in self._leases:
            known = self._rings_after_close.get(sid, message.priority)
            self._rings_after_close[sid] = min(message.priority, known)
            return
        await self._ring(sid, message.priority)

    async def _answer_unhanded(self, message: InboundMessage, exc: Exception) -> None:
        """A collected message that could neither run here nor go back to the inbox: it
        will not run, so its callers hear it now — SessionEvicted, "did not run, retry" (as
        for an own submit whose hand-over failed) — and its reservation is taken over and
        reset, so a retry under its key runs instead of attaching to a holderless entry
        until the forward TTL. A takeover the store rejects (the key is someone else's)
        leaves the key alone; the answer then goes to this message's own caller only."""
        turn_id = TurnId.for_message(message.message_id)
        outcome = TurnFailed(
            FailureCode.SESSION_EVICTED,
            f"{message.session_id} was given up before message {message.message_id.value} "
            f"ran and handing it back failed ({exc!r}); it did not run, retry",
        )
        finished: bool | None = False
        key = message.idempotency_key
        if key is not None:
            reserver = ReserverId.new(self.node_id)
            with self._cleanup():
                try:
                    taken = await self._idempotency.acquire_holder(key, reserver)
                    if isinstance(taken, HolderAcquired):
                        finished = await self._idempotency.compare_and_reset(key, reserver)
                except Exception:
                    log.warning("could not free key %s of an unhanded message", key)
                    finished = None
        with self._cleanup():
            await self._announce(
                message.session_id,
                turn_id,
                outcome,
                message_id=message.message_id,
                key=self._announced_key(message, finished),
            )

    async def _drop_own(self, own: Own) -> None:
        """A closing router's own submit whose turn never started is not handed to another
        node: its caller (on this node) could not hear the answer, and any error it got
        would read as "not run" while the turn ran elsewhere. So it does not run: its key is
        freed (a retry runs) and its caller gets RouterShuttingDown, which here is true."""
        if own.reservation is not None:
            self._local_keyed.pop(own.reservation.key, None)
            held = self._leases.get(own.request.session_id)
            if held is not None:
                held.slot.unbind(own.reservation)
            await self._reset(own.reservation)
        self._local_futures.discard(own.future)
        own.future.set_exception(
            RouterShuttingDown(f"router {self.node_id} closed before the turn started")
        )

    async def _forward_own(self, own: Own) -> None:
        request = own.request
        message = InboundMessage(
            message_id=InboundMessageId.new(),
            session_id=request.session_id,
            agent_ref=request.agent_ref,
            user_input=request.user_input,
            priority=request.priority,
            delivered_at=own.delivered_at,
            idempotency_key=request.idempotency_key,
            initiator=request.initiator,
        )
        if own.reservation is not None:
            self._local_keyed.pop(own.reservation.key, None)
            held = self._leases.get(request.session_id)
            if held is not None:
                held.slot.unbind(own.reservation)
        self._local_futures.discard(own.future)
        try:
            await self._hand_to_inbox(message, own.reservation, own.future)
        except BaseException as exc:
            # handed to nobody (its key, if any, is freed): it will not run; its caller,
            # whom no waiter serves now, must hear so rather than wait forever
            own.future.set_exception(
                SessionEvicted(
                    f"{request.session_id} was given up before this turn ran and handing it "
                    f"to the next holder failed ({exc!r}); it did not run, retry"
                )
            )
            raise
