"""The SessionRouter's submission core (spec 10 §5.1, §6.3, §7.1–§7.4, §8, §9).

One router per node, served by :func:`serve_session_router` (or
:func:`~zlink_trio.router.builder.open_session_router`). Its task tree::

    router nursery
    ├─ signal subscription      subscribed before the first submit (F0), dispatches signals
    ├─ metrics dispatcher       application hooks, each in a worker thread (hooks.py)
    ├─ status heartbeat         STATUS per held session every status_heartbeat_interval
    ├─ cache sweeper            closes handles idle past idle_ttl, every cache_sweep_interval
    ├─ holder-loss sweeper      resets stale reservations, every holder_loss_sweep_interval
    ├─ renewer per held lease   its own task: renew through the SessionStore, touch the slot
    ├─ drain pass per session   holds the node-local turn gate; runs turns one at a time
    └─ forward waiter per forwarded turn   polls the idempotency store, re-rings, deadline

Submit (F1–F2): binding pre-check → idempotency matrix → turn gate → claim. Losing the gate
or the lease hands the message to the inbox and rings the doorbell (FORWARDED); winning runs
a drain pass: always collect, merge priority-then-FIFO, run one turn, repeat (F4). A keyed
turn — own, collected or injected — ends with its reservation finished (markDone, or reset
on failure) first, then TURN_RESULT (F6). The lease is session-lifetime: a pass never
releases it; idle cleanup, an LRU eviction, a lost renewal, a YIELD, release, delete or
closing the router does. Every handle close happens under the session's turn gate, bounded
by ``handle_close_timeout``.

This module holds the public surface (submit F1–F2, release, delete, close) and the serve
function; the class is assembled from one mixin per concept, each on the shared state of
:mod:`.core`: :mod:`.closing` (gates, close paths), :mod:`.renewal` (the lease),
:mod:`.handles` (the handle cache), :mod:`.reservations`, :mod:`.forwarding`, :mod:`.turns`,
:mod:`.drain` (the pass), :mod:`.injection` (NOW), :mod:`.holder_loss` and :mod:`.dispatch`
(signals).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import final

import trio

from .core import IN_TURN, RouterParts, RouterState, RouterStatistics
from .dispatch import Signals
from .disposition import DispositionKind, ExecutedLocally, Forwarded, SubmitDisposition, TurnFuture
from .errors import (
    ConflictingAgentError,
    ForwardTimeout,
    IdempotencyConflictError,
    ReentrantSubmitError,
    RouterShuttingDown,
    SessionHeldElsewhere,
    TurnInterrupted,
)
from .events import InterruptReason, turn_result_from_wire
from .forwards import Forward
from .holder_loss import HolderLoss
from .idempotency import AlreadyDone, InFlight, InputConflict, Reserved, StaleInFlight
from .ids import ReserverId, SessionId, TurnId
from .lease import Reservation
from .relay import EventSubscription
from .session_store import AgentConflict, Claimed, HeldElsewhere
from .signals import interrupt_signal, yield_signals
from .status import ClusterSessionStatus
from .values import Priority, SubmitRequest
from .work import Own, Pass

__all__ = ["RouterParts", "RouterStatistics", "SessionRouter", "serve_session_router"]

log = logging.getLogger("zlink_trio.router")
_STALE_RETRIES = 3


@final
class SessionRouter(Signals, HolderLoss):
    """One node's router. Create with ``open_session_router``; never share its store."""

    # --- public surface ------------------------------------------------------------------------

    async def submit(self, request: SubmitRequest) -> SubmitDisposition:
        """Run or hand over one turn (F1–F2). Raises ConflictingAgentError (409),
        IdempotencyConflictError (409), SessionClaimFailed (503), RouterShuttingDown, and
        ReentrantSubmitError for a submit to a session from inside its own turn (§7.3)."""
        self._check_accepting()
        sid = request.session_id
        if IN_TURN.get() == sid:
            raise ReentrantSubmitError(
                f"submit to {sid} from inside one of its own turns: the router is not "
                "re-entrant (nest turns in the sub-agent layer instead)"
            )
        # F1: binding pre-check; touches neither idempotency nor the lease
        bound = await self._store.bound_agent(sid)
        self._check_accepting()  # each await may straddle a close: look again after it
        if bound is not None and bound != request.agent_ref:
            raise ConflictingAgentError(f"{sid} is bound to {bound}, not {request.agent_ref}")
        # F2: the idempotency matrix
        reservation: Reservation | None = None
        if request.idempotency_key is not None:
            answered = await self._reserve(request)
            if not isinstance(answered, Reservation):
                self._metrics.emit("on_submit", sid, answered.kind)
                return answered
            reservation = answered
            if self._state is not RouterState.ACCEPTING:
                await self._reset(reservation)
                self._check_accepting()
        # the node-local turn gate first, the lease second
        if sid in self._passes:
            joined = self._join_pass(request, reservation)
            if joined is not None:
                return joined
            return await self._forward(request, reservation)
        gate = Pass()
        self._passes[sid] = gate
        try:
            started = trio.current_time()
            claimed = await self._store.claim(sid, request.agent_ref)
        except BaseException:
            self._end_gate(sid, gate)
            if reservation is not None:
                await self._reset(reservation)
            raise
        if self._state is not RouterState.ACCEPTING:  # closed during the claim
            if isinstance(claimed, Claimed) and sid not in self._leases:
                with self._cleanup():
                    try:
                        await self._store.release(sid)
                    except Exception:
                        log.warning("lease release of %s failed (its TTL frees it)", sid)
            self._end_gate(sid, gate)
            if reservation is not None:
                await self._reset(reservation)
            self._check_accepting()
        if isinstance(claimed, HeldElsewhere):
            self._metrics.emit("on_lock_rejected", sid, trio.current_time() - started)
            self._end_gate(sid, gate)
            return await self._forward(request, reservation)
        if isinstance(claimed, AgentConflict):
            self._end_gate(sid, gate)
            if reservation is not None:
                await self._reset(reservation)
            raise ConflictingAgentError(f"{sid} is bound to {claimed.bound_agent}")
        if claimed.newly_acquired:
            self._metrics.emit("on_lock_acquired", sid, trio.current_time() - started)
        if sid not in self._leases:
            self._start_renewer(sid)
        turn_id = TurnId.new()
        future = TurnFuture()
        self._local_futures.add(future)
        own = Own(request, turn_id, future, reservation, trio.current_time())
        if reservation is not None:
            self._local_keyed[reservation.key] = future
            self._leases[sid].slot.bind(reservation)
        gate.upcoming = turn_id
        self._nursery.start_soon(self._drain_pass, sid, gate, own)
        self._metrics.emit("on_submit", sid, DispositionKind.EXECUTED_LOCALLY)
        return ExecutedLocally(turn_id, future)

    def _join_pass(
        self, request: SubmitRequest, reservation: Reservation | None
    ) -> ExecutedLocally | None:
        """A submit finding the gate held by this node's pass while that pass only reads
        the inbox between turns (no turn running, none announced, the lease held): the
        submit joins the pass as its own work, merged priority-then-FIFO with what the
        collect returns — the pass it would reach through the inbox and the doorbell,
        without the round trips. Anything else (a turn running, a release or delete
        holding the gate, a claim in flight) is None: the submit is forwarded."""
        sid = request.session_id
        gate = self._passes[sid]
        held = self._leases.get(sid)
        if (
            not gate.joinable
            or gate.running is not None
            or gate.upcoming is not None
            or held is None
            or gate.stopped(held)
            or self._store.held(sid) is None
            or not self._accepting()
        ):
            return None
        turn_id = TurnId.new()
        future = TurnFuture()
        self._local_futures.add(future)
        own = Own(request, turn_id, future, reservation, trio.current_time())
        if reservation is not None:
            self._local_keyed[reservation.key] = future
            held.slot.bind(reservation)
        gate.upcoming = turn_id
        gate.joined.append(own)
        self._metrics.emit("on_submit", sid, DispositionKind.EXECUTED_LOCALLY)
        return ExecutedLocally(turn_id, future)

    def interrupt(
        self, session_id: SessionId, reason: InterruptReason, turn_id: TurnId | None = None
    ) -> None:
        """Stop the session's active turn, wherever it runs (§8). With ``turn_id``, only if
        that is the active turn (a no-op once it moved on; a no-op on a closed router, which
        runs no turn and publishes nothing)."""
        if self._state == RouterState.CLOSED:
            return
        self._interrupt_local(session_id, reason, turn_id)
        self._nursery.start_soon(
            self._publish, interrupt_signal(session_id, self.node_id, reason, turn_id)
        )

    def events(self, session_id: SessionId) -> AbstractAsyncContextManager[EventSubscription]:
        """Subscribe to the session's frames: those of turns run here and those relayed from
        other nodes over the EVENT rail, each with its TurnId (live only: no replay). The
        subscription ends when the session ends on this node (release, delete, EVICT,
        close)."""
        return self._hub.subscribe(session_id)

    def status(self, session_id: SessionId) -> ClusterSessionStatus | None:
        """Best-effort observation (§5.1), never a control gate: this node's own view when it
        holds the session, else the newest STATUS snapshot heard from a peer."""
        if session_id in self._leases:
            return self._snapshot(session_id)
        return self._projection.get(session_id)

    async def release_session(self, session_id: SessionId) -> None:
        """Give the handle back; the history stays (§6.3 A), in this order: interrupt the
        turn (SESSION_RELEASED), wait up to ``release_interrupt_timeout`` for it, close the
        handle (at most ``handle_close_timeout``), drop it from the cache, purge the inbox,
        return the lease, broadcast EVICT, complete the subscribers. On a node that does not
        hold the session, the holder is asked to give it back (YIELD, as delete does)."""
        async with self._exclusive(session_id):
            holder_here = session_id in self._leases
            await self._close_handle(session_id)
            await self._purge(session_id)
            await self._return_lease(session_id)
            self._approvals.pop(session_id, None)
            if not holder_here:  # the node is not exposed (§5.1): the holder gives it back
                for signal in yield_signals(session_id, self.node_id):
                    await self._publish(signal)
            await self._publish(self._evict_signal(session_id))
            self._hub.complete(session_id)

    async def delete_session(self, session_id: SessionId) -> bool:
        """Delete the history too; only the holder can (§7.7). Takes the lease first; while
        another node holds it, asks it to yield (YIELD + the legacy INTERRUPT shim) and
        retries until ``release_interrupt_timeout``, then raises
        :class:`SessionHeldElsewhere` (retry later). Answers whether a record was deleted."""
        bound = await self._store.bound_agent(session_id)
        if bound is None:
            await self._purge(session_id)
            return False
        async with self._exclusive(session_id):
            retry = min(0.5, self._config.release_interrupt_timeout / 10)
            with trio.move_on_after(self._config.release_interrupt_timeout):
                while True:
                    claimed = await self._store.claim(session_id, bound)
                    if isinstance(claimed, Claimed):
                        break
                    for signal in yield_signals(session_id, self.node_id):
                        await self._publish(signal)
                    await trio.sleep(retry)
            if self._store.held(session_id) is None:
                raise SessionHeldElsewhere(
                    f"{session_id} is held by another node; it did not yield within "
                    f"{self._config.release_interrupt_timeout} s"
                )
            await self._purge(session_id)
            deleted = await self._store.records.delete(session_id)
            await self._close_handle(session_id)
            if session_id in self._leases:
                await self._return_lease(session_id)
            else:
                await self._store.release(session_id)
            self._projection.remove(session_id)
            self._approvals.pop(session_id, None)
            await self._publish(self._evict_signal(session_id))
            self._hub.complete(session_id)
        return deleted

    async def close_gracefully(self, timeout: float) -> None:  # noqa: ASYNC109 (spec API)
        """Stop accepting (§6.3 C), wait up to ``timeout`` for running passes, interrupt the
        rest with SYSTEM_SHUTDOWN and wait for them at most another ``timeout`` (a turn that
        ignores its interrupt is abandoned, its caller failed); then wait (at most
        ``release_interrupt_timeout``) for every pass still in the router's own steps — a
        collect in flight, a turn's end, handing back what it took — so what a pass took
        from the inbox is back there before its lease goes; close every handle, give the
        leases back (failures swallowed), ring for what was handed back, fail the waiting
        forwards, complete the subscribers. Never touches the AgentRuntime."""
        if self._state is not RouterState.ACCEPTING:
            await self._closed.wait()
            return
        self._state = RouterState.DRAINING
        with trio.move_on_after(timeout):
            for gate in list(self._passes.values()):
                await gate.done.wait()
        for gate in list(self._passes.values()):
            gate.stop = InterruptReason.SYSTEM_SHUTDOWN
            if gate.running is not None:
                gate.running.interrupt(InterruptReason.SYSTEM_SHUTDOWN)
        with trio.move_on_after(timeout):
            for gate in list(self._passes.values()):
                await gate.done.wait()
        await self._await_passes_between_turns()
        stubborn = list(self._passes.items())
        if stubborn:
            log.warning(
                "closing %s: %d turn(s) ignored SYSTEM_SHUTDOWN for %s s; abandoned",
                self.node_id,
                len(stubborn),
                timeout,
            )
        for _, gate in stubborn:  # what an abandoned pass still queues goes back now, while
            if gate.draining:  # the lease is held (not after the pass's turn ends)
                await self._hand_queue_back(gate)
        async with trio.open_nursery() as closing:
            for sid in self._cache.sessions():
                closing.start_soon(self._close_handle, sid)
            for sid, gate in stubborn:
                if gate.evicted is not None:
                    closing.start_soon(self._close, sid, gate.evicted)
        given_up = list(self._leases)
        async with trio.open_nursery() as returning:
            for sid in given_up:
                returning.start_soon(self._return_lease, sid)
        rings, self._rings_after_close = self._rings_after_close, {}
        for sid, priority in rings.items():  # what the passes handed back, now unheld
            with self._cleanup():
                await self._ring(sid, priority)
        for sid in given_up:  # what a pass put back before a turn (R10-72), now unheld
            if sid not in rings:
                with self._cleanup():
                    if await self._pending(sid):
                        await self._ring(sid, Priority.LATER)
        shutdown = TurnInterrupted(InterruptReason.SYSTEM_SHUTDOWN.value)
        for future in list(self._local_futures):
            if future in self._started:  # abandoned mid-turn
                future.set_exception(shutdown)
            else:  # its turn never started here, and is not handed on (_drop_own)
                future.set_exception(RouterShuttingDown("the router closed before the turn ran"))
        self._local_futures.clear()
        self._started.clear()
        for forward in self._forwards.all():
            # The message is in the inbox (or running on the holder): it may still run
            # after this router is gone, so its outcome is unknown here — a DeadlineExceeded
            # (ForwardTimeout), never RouterShuttingDown, which a keyless client would read
            # as "not run" and submit again.
            forward.future.set_exception(
                ForwardTimeout(
                    "the router closed before the forwarded turn's answer came: its outcome "
                    "is unknown (it may still run on the session's holder)"
                )
            )
            forward.scope.cancel()
        self._hub.close()
        self._state = RouterState.CLOSED
        self._metrics.close()
        self._closed.set()

    async def aclose(self) -> None:
        """Close at once: ``close_gracefully(0)``."""
        await self.close_gracefully(0)

    def _crash(self) -> None:
        """Tear the node down the way a crash does (``zlink_trio.testing``): cancel every
        task of the router without its shutdown path — no turn is interrupted, no handle
        closed, no lease returned (it expires), no key reset, nothing handed back, nothing
        published; the serve block then exits. (In-process, its own subscribers' iterations
        end and a later close returns at once: nothing waits on a dead node forever.)"""
        self._crashed = True
        self._state = RouterState.CLOSED
        self._nursery.cancel_scope.cancel()
        self._hub.close()
        self._closed.set()

    def statistics(self) -> RouterStatistics:
        return RouterStatistics(
            active_passes=len(self._passes),
            held_leases=len(self._leases),
            open_handles=len(self._cache),
            waiting_forwards=len(self._forwards),
            dropped_events=self._dropped_events,
        )

    async def _reserve(self, request: SubmitRequest) -> Reservation | SubmitDisposition:
        key = request.idempotency_key
        assert key is not None
        digest = request.input_hash()
        for _ in range(_STALE_RETRIES):
            reserver = ReserverId.new(self.node_id)
            outcome = await self._idempotency.put_if_absent(
                key, digest, reserver, session_id=request.session_id
            )
            if isinstance(outcome, Reserved):
                return Reservation(key, reserver)
            self._check_accepting()  # a waiter could not start on a closed router
            if isinstance(outcome, InputConflict):
                raise IdempotencyConflictError(f"key {key} was used with another input")
            if isinstance(outcome, AlreadyDone):
                assert outcome.entry.result is not None
                future = TurnFuture()
                _, result = turn_result_from_wire(outcome.entry.result)
                self._settle(future, result)
                return ExecutedLocally(TurnId.new(), future)
            if isinstance(outcome, InFlight):
                local = self._local_keyed.get(key)
                if local is not None:
                    return Forwarded(TurnId.new(), local)
                forward = Forward(request.session_id, None, key, TurnFuture())
                self._forwards.add(forward)
                self._nursery.start_soon(self._wait_forward, forward)
                return Forwarded(TurnId.new(), forward.future)
            assert isinstance(outcome, StaleInFlight)
            holder = outcome.entry.holder_id
            assert holder is not None
            await self._idempotency.compare_and_reset(key, holder)
        raise IdempotencyConflictError(f"key {key} keeps changing; retry")


@asynccontextmanager
async def serve_session_router(parts: RouterParts) -> AsyncIterator[SessionRouter]:
    """Serve one router for the duration of the block. Leaving it closes the router
    (``close_gracefully(release_interrupt_timeout)``), drains the metrics hooks for at most
    ``metrics_drain_timeout`` (wall clock), then cancels what is left."""
    config = parts.config
    async with trio.open_nursery() as nursery:
        router = SessionRouter(parts, nursery)
        subscribed = parts.bus.subscribe()
        receive = await subscribed.__aenter__()  # F0: subscribed before the first submit
        try:
            nursery.start_soon(router._listen, receive)
            nursery.start_soon(router._metrics.serve)
            nursery.start_soon(router._heartbeat)
            nursery.start_soon(router._dispatch_events)
            nursery.start_soon(router._sweep_idle)
            nursery.start_soon(router._sweep_holder_loss)
            try:
                yield router
            finally:
                if not router._crashed:
                    with trio.CancelScope(shield=True):
                        await router.close_gracefully(config.release_interrupt_timeout)
                        await router._metrics.drain(config.metrics_drain_timeout)
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(
                shield=True, deadline=trio.current_time() + config.release_interrupt_timeout
            ):
                await subscribed.__aexit__(None, None, None)
