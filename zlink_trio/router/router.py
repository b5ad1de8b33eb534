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
"""

from __future__ import annotations

import contextvars
import enum
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, final

import attrs
import trio

from .application import (
    LiveSession,
    LiveSessionOpener,
    OpenRequest,
    QueuedInput,
    SessionMetrics,
    TurnInput,
)
from .approvals import SessionApprovals
from .cache import HandleCache
from .config import SessionRouterConfig
from .disposition import DispositionKind, ExecutedLocally, Forwarded, SubmitDisposition, TurnFuture
from .errors import (
    ConflictingAgentError,
    ForwardTimeout,
    IdempotencyConflictError,
    ReentrantSubmitError,
    RouterShuttingDown,
    SessionEvicted,
    SessionHeldElsewhere,
    TurnFailedError,
    TurnInterrupted,
    failure_error,
)
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
    turn_result_from_wire,
    turn_result_to_wire,
)
from .forwards import Forward, Forwards
from .hooks import MetricsDispatcher
from .idempotency import (
    AlreadyDone,
    HolderAcquired,
    IdempotencyState,
    InFlight,
    InputConflict,
    Reserved,
    StaleInFlight,
)
from .ids import IdempotencyKey, InboundMessageId, NodeId, ReserverId, SessionId, TurnId
from .inbox import InboundMessage
from .lease import HeldLease, Reservation
from .primitives import JsonMap
from .relay import (
    EventSubscription,
    RemoteEventQueue,
    SessionEventHub,
    TurnEvent,
    event_from_wire,
    event_to_wire,
)
from .session_store import AgentConflict, Claimed, HeldElsewhere, SessionHistory, SessionStore
from .signals import (
    SessionSignal,
    SignalKind,
    interrupt_signal,
    requests_hand_off,
    yield_signals,
)
from .spi import IdempotencyStore, SessionInbox, SessionSignalBus
from .status import ClusterSessionStatus, SessionActivity, StatusProjection
from .threads import CallOutcome, call_in_thread
from .values import LiveSessionOptions, OpenAttributes, Priority, SubmitRequest
from .work import Collected, Injected, Own, Pass, PassEnd, RunningTurn, Work

__all__ = ["RouterParts", "RouterStatistics", "SessionRouter", "serve_session_router"]

_log = logging.getLogger("zlink_trio.router")
_STALE_RETRIES = 3
_SWEEP_BATCH = 100

_IN_TURN: contextvars.ContextVar[SessionId | None] = contextvars.ContextVar(
    "zlink_trio_router_in_turn", default=None
)
"""The session whose turn the current task (or a task it spawned) runs inside (§7.3)."""


@attrs.frozen(kw_only=True)
class RouterParts:
    """A validated assembly (``SessionRouterBuilder.build``): one SessionStore per router."""

    config: SessionRouterConfig
    node_id: NodeId
    store: SessionStore
    inbox: SessionInbox
    bus: SessionSignalBus
    idempotency: IdempotencyStore
    opener: LiveSessionOpener
    metrics: SessionMetrics


@attrs.frozen
class RouterStatistics:
    active_passes: int
    held_leases: int
    open_handles: int
    waiting_forwards: int


class _RouterState(enum.Enum):
    ACCEPTING = "accepting"
    DRAINING = "draining"
    CLOSED = "closed"


@final
class SessionRouter:
    """One node's router. Create with ``open_session_router``; never share its store."""

    def __init__(self, parts: RouterParts, nursery: trio.Nursery) -> None:
        self._config = parts.config
        self.node_id = parts.node_id
        self._store = parts.store
        self._inbox = parts.inbox
        self._bus = parts.bus
        self._idempotency = parts.idempotency
        self._opener = parts.opener
        self._metrics = MetricsDispatcher(parts.metrics)
        self._nursery = nursery
        self._state = _RouterState.ACCEPTING
        self._closed = trio.Event()
        self._passes: dict[SessionId, Pass] = {}
        self._cache = HandleCache(parts.config.max_cached_sessions)
        self._closing: set[int] = set()
        self._leases: dict[SessionId, HeldLease] = {}
        self._forwards = Forwards()
        self._local_keyed: dict[IdempotencyKey, TurnFuture] = {}
        self._local_futures: set[TurnFuture] = set()
        self._started: set[TurnFuture] = set()
        """The local futures whose turn has started (a shutdown interrupts those)."""
        self._approvals: dict[SessionId, set[str]] = {}
        self._clock: Callable[[], float] = trio.current_time
        self._projection = StatusProjection()
        self._status_seq = 0
        self._hub = SessionEventHub()
        self._remote_events = RemoteEventQueue()

    # --- public surface ------------------------------------------------------------------------

    async def submit(self, request: SubmitRequest) -> SubmitDisposition:
        """Run or hand over one turn (F1–F2). Raises ConflictingAgentError (409),
        IdempotencyConflictError (409), SessionClaimFailed (503), RouterShuttingDown, and
        ReentrantSubmitError for a submit to a session from inside its own turn (§7.3)."""
        self._check_accepting()
        sid = request.session_id
        if _IN_TURN.get() == sid:
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
            if self._state is not _RouterState.ACCEPTING:
                await self._reset(reservation)
                self._check_accepting()
        # the node-local turn gate first, the lease second
        if sid in self._passes:
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
        if self._state is not _RouterState.ACCEPTING:  # closed during the claim
            if isinstance(claimed, Claimed) and sid not in self._leases:
                with self._cleanup():
                    try:
                        await self._store.release(sid)
                    except Exception:
                        _log.warning("lease release of %s failed (its TTL frees it)", sid)
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
        self._nursery.start_soon(self._drain_pass, sid, gate, own)
        self._metrics.emit("on_submit", sid, DispositionKind.EXECUTED_LOCALLY)
        return ExecutedLocally(turn_id, future)

    def _accepting(self) -> bool:
        """Read afresh after every await: a close may have run meanwhile."""
        return self._state is _RouterState.ACCEPTING

    def _check_accepting(self) -> None:
        if not self._accepting():
            raise RouterShuttingDown(f"router {self.node_id} is not accepting submits")

    def interrupt(
        self, session_id: SessionId, reason: InterruptReason, turn_id: TurnId | None = None
    ) -> None:
        """Stop the session's active turn, wherever it runs (§8). With ``turn_id``, only if
        that is the active turn (a no-op once it moved on; a no-op on a closed router, which
        runs no turn and publishes nothing)."""
        if self._state == _RouterState.CLOSED:
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

    def approvals(self, session_id: SessionId) -> SessionApprovals:
        """The session's node-local approvals (also on ``TurnInput.approvals``); discarded
        when the session's EVICT is heard, and by release and delete."""
        return SessionApprovals(self._approvals, session_id)

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
        return the lease, broadcast EVICT, complete the subscribers."""
        async with self._exclusive(session_id):
            await self._close_handle(session_id)
            await self._purge(session_id)
            await self._return_lease(session_id)
            self._approvals.pop(session_id, None)
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
        ignores its interrupt is abandoned, its caller failed), close every handle, give the
        leases back (failures swallowed), fail the waiting forwards, complete the
        subscribers. Never touches the AgentRuntime."""
        if self._state is not _RouterState.ACCEPTING:
            await self._closed.wait()
            return
        self._state = _RouterState.DRAINING
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
        stubborn = list(self._passes.items())
        if stubborn:
            _log.warning(
                "closing %s: %d turn(s) ignored SYSTEM_SHUTDOWN for %s s; abandoned",
                self.node_id,
                len(stubborn),
                timeout,
            )
        async with trio.open_nursery() as closing:
            for sid in self._cache.sessions():
                closing.start_soon(self._close_handle, sid)
            for sid, gate in stubborn:
                if gate.evicted is not None:
                    closing.start_soon(self._close, sid, gate.evicted)
        async with trio.open_nursery() as returning:
            for sid in list(self._leases):
                returning.start_soon(self._return_lease, sid)
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
        self._state = _RouterState.CLOSED
        self._metrics.close()
        self._closed.set()

    async def aclose(self) -> None:
        """Close at once: ``close_gracefully(0)``."""
        await self.close_gracefully(0)

    def statistics(self) -> RouterStatistics:
        return RouterStatistics(
            active_passes=len(self._passes),
            held_leases=len(self._leases),
            open_handles=len(self._cache),
            waiting_forwards=len(self._forwards),
        )

    # --- gates ------------------------------------------------------------------------------------

    def _end_gate(self, session_id: SessionId, gate: Pass) -> None:
        if self._passes.get(session_id) is gate:
            del self._passes[session_id]
        gate.done.set()

    @asynccontextmanager
    async def _exclusive(self, session_id: SessionId) -> AsyncIterator[Pass]:
        """Hold the session's turn gate (stopping a running pass first), so no turn or
        drain starts here while a release or delete runs."""
        while (running := self._passes.get(session_id)) is not None:
            await self._stop_pass(session_id)
            if self._passes.get(session_id) is running:
                self._end_gate(session_id, running)  # its turn ignored the interrupt
        gate = Pass()
        gate.end_by = PassEnd.CALLER
        self._passes[session_id] = gate
        try:
            yield gate
        finally:
            if gate.evicted is not None:
                with trio.CancelScope(shield=True):  # the close is bounded itself
                    await self._close(session_id, gate.evicted)
            self._end_gate(session_id, gate)

    @asynccontextmanager
    async def _idle_gate(self, session_id: SessionId) -> AsyncIterator[Pass | None]:
        """The session's turn gate if it is free (None when a pass or a release holds it),
        for clean-up that must not run beside a turn."""
        if session_id in self._passes:
            yield None
            return
        gate = Pass()
        gate.end_by = PassEnd.CALLER
        self._passes[session_id] = gate
        try:
            yield gate
        finally:
            if gate.evicted is not None:
                with trio.CancelScope(shield=True):  # the close is bounded itself
                    await self._close(session_id, gate.evicted)
            self._end_gate(session_id, gate)

    def _cleanup(self) -> trio.CancelScope:
        """A shielded scope for one clean-up I/O step, bounded (``release_interrupt_timeout``)
        so no clean-up can hold the router's exit. (A composite clean-up is shielded without
        a deadline of its own: each of its steps is bounded.)"""
        return trio.CancelScope(
            shield=True, deadline=trio.current_time() + self._config.release_interrupt_timeout
        )

    async def _stop_pass(self, session_id: SessionId) -> None:
        gate = self._passes.get(session_id)
        if gate is None:
            return
        gate.stop = InterruptReason.SESSION_RELEASED
        gate.end_by = PassEnd.CALLER
        if gate.running is not None:
            gate.running.interrupt(InterruptReason.SESSION_RELEASED)
        with trio.move_on_after(self._config.release_interrupt_timeout) as waited:
            await gate.done.wait()
        if waited.cancelled_caught:
            _log.warning(
                "the turn of %s ignored its interrupt for %s s; closing it anyway "
                "(its remaining frames are lost)",
                session_id,
                self._config.release_interrupt_timeout,
            )

    async def _purge(self, session_id: SessionId) -> None:
        """Purge the session's inbox (§6.3 A, §7.7), and free the reservations of the keyed
        messages purged: nobody will run them, so a retry under the same key must run (not
        attach to an IN_FLIGHT entry until the forward TTL). The messages are taken with an
        atomic collect-everything (the purge that names what it took); a holderless
        reservation is taken over, then reset. Failures are logged: the forward TTL frees
        the key anyway."""
        try:
            purged = await self._inbox.collect(session_id, Priority.LATER)
        except Exception:
            _log.warning("collect of %s before its purge failed", session_id, exc_info=True)
            purged = ()
        await self._inbox.purge(session_id)
        for message in purged:
            key = message.idempotency_key
            if key is None:
                continue
            reserver = ReserverId.new(self.node_id)
            with self._cleanup():
                try:
                    taken = await self._idempotency.acquire_holder(key, reserver)
                    if isinstance(taken, HolderAcquired):
                        await self._idempotency.compare_and_reset(key, reserver)
                except Exception:
                    _log.warning("could not free key %s of a purged message", key, exc_info=True)

    # --- F2: idempotency ----------------------------------------------------------------------

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

    async def _reset(self, reservation: Reservation) -> None:
        with self._cleanup():
            try:
                await self._idempotency.compare_and_reset(reservation.key, reservation.reserver)
            except Exception:
                _log.warning("could not release idempotency key %s", reservation.key)

    async def _take_over(self, message: InboundMessage, held: HeldLease) -> Reservation | None:
        """§6.3 D: before running a collected (or injected) message, take its reservation
        over and bind it to the lease's touch slot. Win or unknown (the store threw): bound,
        and finished after the turn; reject (someone else's: DONE, held, expired): None —
        the message still runs, but writes nothing and binds nothing."""
        key = message.idempotency_key
        if key is None:
            return None
        reservation = Reservation(key, ReserverId.new(self.node_id))
        try:
            outcome = await self._idempotency.acquire_holder(key, reservation.reserver)
        except Exception:
            outcome = None  # unknown: behave like a win for writing and cleanup
        if outcome is None or isinstance(outcome, HolderAcquired):
            held.slot.bind(reservation)
            return reservation
        self._metrics.emit("on_takeover_rejected", key)
        return None

    async def _untake(self, reservation: Reservation, held: HeldLease) -> None:
        """Undo a takeover for a message handed back to the inbox: holderless again, so its
        next collector can take it."""
        held.slot.unbind(reservation)
        try:
            await self._idempotency.release_holder(reservation.key, reservation.reserver)
        except Exception:
            _log.warning("could not hand reservation %s back", reservation.key, exc_info=True)

    async def _finish_reservation(
        self, reservation: Reservation, turn_id: TurnId, result: TurnResult
    ) -> None:
        """F6 first half: markDone a success; release the key of a failure so a retry runs."""
        try:
            if isinstance(result, TurnSucceeded):
                await self._idempotency.mark_done(
                    reservation.key, reservation.reserver, turn_result_to_wire(turn_id, result)
                )
            else:
                await self._idempotency.compare_and_reset(reservation.key, reservation.reserver)
        except Exception:
            _log.warning("idempotency update of %s failed", reservation.key, exc_info=True)

    # --- forwarding -------------------------------------------------------------------------------

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
        try:
            if reservation is not None:
                await self._idempotency.release_holder(reservation.key, reservation.reserver)
            await self._inbox.deliver(message)
        except BaseException:
            self._forwards.drop(forward)
            raise
        await self._ring(message.session_id, message.priority)
        if self._state is _RouterState.CLOSED:  # closed during the hand-over: no waiter
            self._forwards.drop(forward)
            future.set_exception(
                ForwardTimeout("the router closed before the forwarded turn's answer came")
            )
            return future
        self._nursery.start_soon(self._wait_forward, forward)
        return future

    async def _ring(self, session_id: SessionId, priority: Priority) -> None:
        await self._publish(
            SessionSignal(
                kind=SignalKind.MESSAGE_ENQUEUED,
                session_id=session_id,
                origin=self.node_id,
                payload={"priority": priority.name},
            )
        )

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

    # --- the drain pass (F3–F6) ----------------------------------------------------------------

    async def _try_drain(self, session_id: SessionId) -> None:
        """F3: a doorbell on a node not already running the session: take the gate, claim
        with the recorded agent (an election loser stops here), then drain. Drain-path
        acquisitions report no lock-acquire metric (§12)."""
        if session_id in self._passes or self._state != _RouterState.ACCEPTING:
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
            _log.warning("drain of %s could not start", session_id, exc_info=True)
        finally:
            if not ready:
                self._end_gate(session_id, gate)
        if ready:
            await self._drain_pass(session_id, gate, None)

    async def _pending(self, session_id: SessionId) -> bool:
        try:
            return await self._inbox.has_pending(session_id)
        except Exception:
            return True  # not seeing the queue is no proof it is empty

    async def _drain_pass(self, session_id: SessionId, gate: Pass, first: Own | None) -> None:
        queue: list[Work] = [first] if first is not None else []
        held = self._leases[session_id]
        try:
            while not gate.stopped(held):
                try:  # always collect before a turn, every tier (F4)
                    collected = await self._inbox.collect(session_id, Priority.LATER)
                except Exception:
                    _log.warning("collect of %s failed", session_id, exc_info=True)
                    collected = ()
                queue.extend(Collected(m) for m in collected)
                if not queue or gate.stopped(held):  # a yield, loss or eviction meanwhile
                    break
                queue.sort(key=lambda w: (w.priority, w.delivered_at))
                work = queue.pop(0)
                if isinstance(work, Own):
                    await self._run_own(session_id, gate, held, work)
                else:
                    await self._run_collected(session_id, gate, held, work.message)
        finally:
            for work in queue:  # stopped early: hand what is left to the next holder
                with self._cleanup():
                    await self._requeue(work)
            with trio.CancelScope(shield=True):  # each step is bounded
                await self._end_pass_session(session_id, gate, held)
            self._end_gate(session_id, gate)

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

    async def _requeue(self, work: Work) -> None:
        if isinstance(work, Own) and self._state is not _RouterState.ACCEPTING:
            await self._drop_own(work)
            return
        try:
            if isinstance(work, Collected):
                await self._inbox.deliver(work.message)
                await self._ring(work.message.session_id, work.message.priority)
            else:
                await self._forward_own(work)
        except Exception:
            _log.warning("could not hand a queued turn over", exc_info=True)

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
        await self._hand_to_inbox(message, own.reservation, own.future)

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
        if reservation is not None:
            await self._finish_reservation(reservation, own.turn_id, result)
            held.slot.unbind(reservation)
            self._local_keyed.pop(reservation.key, None)
        self._settle(own.future, result)
        if reservation is not None:  # F6 for callers attached by key on other nodes
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
                self._relay(session_id, turn_id)(RejectedAt(RejectionReason.CONFLICTING_AGENT))
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
            _log.warning("message %s could not run", message.message_id, exc_info=True)
            outcome = TurnFailed(FailureCode.FAILED, f"the router could not run it: {exc!r}")
        if taken is not None:
            await self._finish_reservation(taken, turn_id, outcome)
            held.slot.unbind(taken)
        await self._announce(  # F6: after markDone
            session_id,
            turn_id,
            outcome,
            message_id=message.message_id,
            key=message.idempotency_key,
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
            if item.taken is not None:
                await self._finish_reservation(item.taken, turn_id, result)
                held.slot.unbind(item.taken)
            await self._announce(
                session_id,
                turn_id,
                result,
                message_id=item.message.message_id,
                key=item.message.idempotency_key,
            )

    async def _announce(
        self,
        session_id: SessionId,
        turn_id: TurnId | None,
        result: TurnResult,
        *,
        message_id: InboundMessageId | None = None,
        key: IdempotencyKey | None = None,
    ) -> None:
        """TURN_RESULT for whichever node waits on the message or on the key."""
        payload: JsonMap = {}
        if message_id is not None:
            payload["messageId"] = message_id.value
        if key is not None:
            payload["idempotencyKey"] = key.value
        payload.update(turn_result_to_wire(turn_id, result))
        await self._publish(
            SessionSignal(
                kind=SignalKind.TURN_RESULT,
                session_id=session_id,
                origin=self.node_id,
                payload=payload,
            )
        )

    async def _run_turn(
        self,
        session_id: SessionId,
        gate: Pass,
        turn_id: TurnId,
        request: SubmitRequest,
        options: LiveSessionOptions,
        attributes: OpenAttributes,
    ) -> TurnResult:
        try:
            handle = await self._ensure_open(session_id, gate, request, options, attributes)
        except Exception as exc:
            return TurnFailed(FailureCode.FAILED, f"opening the session failed: {exc!r}")
        if handle is None:  # the pass was stopped (or abandoned) during the open
            reason = gate.stop or InterruptReason.SESSION_RELEASED
            self._relay(session_id, turn_id)(InterruptedAt(reason))
            return TurnFailed(FailureCode.INTERRUPTED, reason.value)
        running = RunningTurn(turn_id, handle)
        gate.running = running
        turn = TurnInput(
            turn_id=turn_id,
            user_input=request.user_input,
            history=SessionHistory(self._store.records, session_id),
            approvals=self.approvals(session_id),
            submit_options=request.submit_options,
            initiator=request.initiator,
            idempotency_key=request.idempotency_key,
        )
        relay = self._relay(session_id, turn_id)
        result: TurnResult
        in_turn = _IN_TURN.set(session_id)
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
            _IN_TURN.reset(in_turn)
            gate.running = None
            with trio.CancelScope(shield=True):  # an injection in flight is bounded itself
                async with gate.inject_lock:  # it lands in running.injected first
                    pass
            gate.injected.extend(running.injected)
            self._cache.touch(session_id)  # activity: idle time counts from the turn's end
        return result

    def _relay(
        self, session_id: SessionId, turn_id: TurnId
    ) -> Callable[[AgentExecutionEvent], None]:
        """One relay per turn, stamping its TurnId on every frame (§5.5): local subscribers
        and the bounded remote queue, never blocking the turn."""

        def relay(event: AgentExecutionEvent) -> None:
            frame = TurnEvent(turn_id, event)
            self._hub.publish(session_id, frame)
            self._remote_events.put(session_id, frame)

        return relay

    async def _dispatch_events(self) -> None:
        """The EVENT rail's dispatcher: a slow publish delays frames, never a turn."""
        while True:
            session_id, frame = await self._remote_events.get()
            await self._publish(
                SessionSignal(
                    kind=SignalKind.EVENT,
                    session_id=session_id,
                    origin=self.node_id,
                    payload=event_to_wire(frame.turn_id, frame.event),
                )
            )

    def _settle(self, future: TurnFuture, result: TurnResult) -> None:
        self._local_futures.discard(future)
        self._started.discard(future)
        if isinstance(result, TurnSucceeded):
            future.set_result(result.result)
        else:
            future.set_exception(failure_error(result))

    # --- handles (§5.2, §6.3 B) ------------------------------------------------------------------

    async def _ensure_open(
        self,
        session_id: SessionId,
        gate: Pass,
        request: SubmitRequest,
        options: LiveSessionOptions,
        attributes: OpenAttributes,
    ) -> LiveSession | None:
        """The session's handle, opened on a miss. None when the pass was stopped while the
        opener ran, or gave the gate up (a release that stopped waiting for it): the late
        handle is closed here, never cached for a session this pass no longer runs."""
        handle = self._cache.get(session_id)
        if handle is not None:
            self._metrics.emit("on_cache_hit", session_id)
            return handle
        self._metrics.emit("on_cache_miss", session_id)
        handle = await self._opener.open(
            OpenRequest(
                session_id=session_id,
                agent_ref=request.agent_ref,
                context_discriminator=request.context_discriminator,
                options=options,
                open_attributes=attributes,
            )
        )
        held = self._leases.get(session_id)
        if (
            self._passes.get(session_id) is not gate
            or gate.stop is not None
            or held is None
            or held.ended is not None
            or session_id in self._cache
        ):
            with trio.CancelScope(shield=True):  # the close is bounded itself
                await self._close(session_id, handle)
            current = self._cache.get(session_id)
            if current is not None and self._passes.get(session_id) is gate and not gate.stop:
                return current  # (defensive: the gate makes this unreachable)
            return None
        for evicted_id, evicted in self._cache.put(session_id, handle):
            self._evict_lru(evicted_id, evicted)
        return handle

    def _evict_lru(self, session_id: SessionId, handle: LiveSession) -> None:
        """The LRU bound pushed a handle out (it has left the map already: the bound is the
        heap limit). A session whose gate is held — a turn runs on that handle (pinned), or
        a pass or release is between steps — closes it when the gate is given up, and the
        pass ends after its turn; an idle one closes now. Either way the session ends here:
        the lease is returned after the close, inside the gate."""
        self._metrics.emit("on_evicted", session_id, "lru")
        gate = self._passes.get(session_id)
        if gate is not None and gate.evicted is None:
            gate.evicted = handle
        elif gate is not None:
            self._nursery.start_soon(self._close, session_id, handle)
        else:
            self._nursery.start_soon(self._end_evicted, session_id, handle)

    async def _end_evicted(self, session_id: SessionId, handle: LiveSession) -> None:
        await self._close(session_id, handle)
        async with self._idle_gate(session_id) as gate:
            if gate is not None and session_id not in self._cache:
                await self._return_lease(session_id)

    async def _sweep_idle(self) -> None:
        """The cache sweeper (§4.1, §6.3 B), its own task: every ``cache_sweep_interval``,
        close each handle idle past ``idle_ttl`` (strictly) whose session runs no turn here
        (the pin prevents idle eviction), then return its lease. No signal: other nodes
        decide by their own measure."""
        interval = self._config.cache_sweep_interval
        tick = trio.current_time()
        while self._state is _RouterState.ACCEPTING:
            tick += interval
            await trio.sleep_until(tick)
            expired = [s for s in self._cache.idle(self._config.idle_ttl) if s not in self._passes]
            if expired:
                async with trio.open_nursery() as sweep:
                    for session_id in expired:
                        sweep.start_soon(self._evict_idle, session_id)

    async def _evict_idle(self, session_id: SessionId) -> None:
        async with self._idle_gate(session_id) as gate:
            if gate is None or session_id not in self._cache.idle(self._config.idle_ttl):
                return
            self._metrics.emit("on_evicted", session_id, "idle")
            await self._close_handle(session_id)
            await self._return_lease(session_id)

    async def _close_handle(self, session_id: SessionId) -> None:
        """Close the session's cached handle, then drop it from the cache (§6.3 A order)."""
        handle = self._cache.peek(session_id)
        if handle is None:
            return
        await self._close(session_id, handle)
        self._cache.drop(session_id, handle)

    async def _close(self, session_id: SessionId, handle: LiveSession) -> None:
        """``handle.aclose()``, at most ``handle_close_timeout``: an application close that
        never returns is abandoned with a warning (it cannot hold a release or the exit)."""
        if id(handle) in self._closing:
            return
        self._closing.add(id(handle))
        try:
            with trio.move_on_after(self._config.handle_close_timeout) as bounded:
                await handle.aclose()
            if bounded.cancelled_caught:
                _log.warning(
                    "closing the handle of %s took over %s s; abandoned",
                    session_id,
                    self._config.handle_close_timeout,
                )
        except Exception:
            _log.warning("closing the handle of %s failed", session_id, exc_info=True)
        finally:
            self._closing.discard(id(handle))

    async def _close_idle(self, session_id: SessionId) -> None:
        """Close the handle of a session this node no longer holds (lost lease, a peer's
        EVICT), unless a turn or a release holds its gate (they close it themselves)."""
        async with self._idle_gate(session_id) as gate:
            if gate is not None and session_id not in self._leases:
                await self._close_handle(session_id)

    # --- the lease (§7.4) ------------------------------------------------------------------------

    def _start_renewer(self, session_id: SessionId) -> None:
        held = HeldLease(session_id, trio.current_time())
        self._leases[session_id] = held
        self._nursery.start_soon(self._renew, held)

    async def _renew(self, held: HeldLease) -> None:
        sid = held.session_id
        interval = self._config.lock_extend_interval
        tick = held.acquired_at
        with held.scope:
            while True:
                tick += interval
                # the node watches its own lease: at the local deadline (when the granting
                # call was sent + TTL, never after the store's expiry) the lease is lost
                # here, whatever a hanging or failing backend call is doing
                deadline = self._store.deadline(sid)
                await trio.sleep_until(min(tick, deadline))
                lease = None
                if trio.current_time() < deadline:
                    with trio.move_on_at(deadline):
                        try:
                            lease = await self._store.renew(sid)
                        except Exception:
                            _log.warning(
                                "renewal of %s failed; retrying next tick", sid, exc_info=True
                            )
                            continue
                if lease is None or self._store.held(sid) is None:
                    self._lease_lost(held)
                    await self._release_lapsed(sid)
                    return
                with trio.move_on_after(interval):  # a hanging touch cannot stop renewals
                    for cell in held.slot.cells():  # read now, at this tick
                        try:
                            await self._idempotency.touch(cell.key, cell.reserver)
                        except Exception:
                            _log.warning("touch of %s failed", cell.key, exc_info=True)

    def _lease_lost(self, held: HeldLease) -> None:
        """The renewer's loss path: must not block. Everything else runs on other tasks:
        the running pass ends its turn (LEASE_LOST) and closes the handle; with no pass, a
        clean-up task closes it."""
        if held.ended is not None:
            return
        held.ended = "lost"
        sid = held.session_id
        if self._leases.get(sid) is held:
            del self._leases[sid]
        self._metrics.emit("on_lease_extend_failed", sid)
        gate = self._passes.get(sid)
        if gate is not None:
            gate.stop = InterruptReason.LEASE_LOST
            if gate.running is not None:
                gate.running.interrupt(InterruptReason.LEASE_LOST)
        else:
            self._nursery.start_soon(self._close_idle, sid)

    async def _release_lapsed(self, session_id: SessionId) -> None:
        """After a loss declared at the local deadline, give the store's copy back with the
        token it held (the store may have extended it: its answer came back late), so the
        session is free for every node now, not at the store's expiry. A stale token is
        refused by the store, so this never frees a lease granted since."""
        with self._cleanup():
            try:
                await self._store.release_lapsed(session_id)
            except Exception:
                _log.warning("release of the lapsed lease of %s failed", session_id)

    async def _return_lease(self, session_id: SessionId) -> None:
        held = self._leases.pop(session_id, None)
        if held is None or held.ended is not None:
            return
        held.ended = "returned"
        held.scope.cancel()
        with self._cleanup():
            try:
                await self._store.release(session_id)
            except Exception:
                _log.warning("lease release of %s failed (its TTL frees it)", session_id)

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

    # --- holder loss (§6.3 D) --------------------------------------------------------------------

    async def _sweep_holder_loss(self) -> None:
        """The holder-loss sweeper, its own task: every ``holder_loss_sweep_interval``, reset
        each IN_FLIGHT reservation untouched past the secondary TTL with compareAndReset
        (exactly one node of the cluster wins) and, on a win, fail the callers waiting on
        that key now: locally and with a TURN_RESULT(HOLDER_LOST) naming only the key (no
        surviving node knows the TurnId)."""
        interval = self._config.holder_loss_sweep_interval
        tick = trio.current_time()
        while self._state is _RouterState.ACCEPTING:
            tick += interval
            await trio.sleep_until(tick)
            try:
                stale = await self._idempotency.find_stale_in_flight(_SWEEP_BATCH)
            except Exception:
                _log.warning("holder-loss sweep could not read", exc_info=True)
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
            _log.warning("reservation %s names no session: its callers elsewhere wait", key)
            return
        await self._announce(session_id, None, lost, key=key)

    # --- status -----------------------------------------------------------------------------------

    def _evict_signal(self, session_id: SessionId) -> SessionSignal:
        return SessionSignal(kind=SignalKind.EVICT, session_id=session_id, origin=self.node_id)

    def _snapshot(self, session_id: SessionId) -> ClusterSessionStatus:
        gate = self._passes.get(session_id)
        running = None if gate is None else gate.running
        return ClusterSessionStatus(
            session_id=session_id,
            origin=self.node_id,
            seq=self._status_seq,
            activity=SessionActivity.IDLE if running is None else SessionActivity.RUNNING,
            active_turn_id=None if running is None else running.turn_id,
            observed_at=trio.current_time(),
        )

    async def _heartbeat(self) -> None:
        """STATUS every ``status_heartbeat_interval`` for each session this node holds."""
        interval = self._config.status_heartbeat_interval
        tick = trio.current_time()
        while self._state is _RouterState.ACCEPTING:
            tick += interval
            await trio.sleep_until(tick)
            for session_id in list(self._leases):
                self._status_seq += 1
                await self._publish(
                    SessionSignal(
                        kind=SignalKind.STATUS,
                        session_id=session_id,
                        origin=self.node_id,
                        payload=self._snapshot(session_id).to_wire(),
                    )
                )

    # --- signals ----------------------------------------------------------------------------------

    async def _publish(self, signal: SessionSignal) -> None:
        try:
            await self._bus.publish(signal)
        except Exception:
            _log.warning("publishing %s failed", signal.kind, exc_info=True)

    def _interrupt_local(
        self, session_id: SessionId, reason: InterruptReason, turn_id: TurnId | None
    ) -> None:
        gate = self._passes.get(session_id)
        running = None if gate is None else gate.running
        if running is None or (turn_id is not None and running.turn_id != turn_id):
            return
        running.interrupt(reason)

    async def _listen(self, receive: trio.MemoryReceiveChannel[SessionSignal]) -> None:
        async for signal in receive:
            try:
                self._dispatch(signal)
            except Exception:
                _log.warning("a %s signal could not be handled", signal.kind, exc_info=True)

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
            elif gate.running is not None and signal.payload.get("priority") == "NOW":
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
                _log.warning("collect(NOW) of %s failed", session_id, exc_info=True)
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
                        _log.warning(
                            "LiveSession.inject raised %r; %s queued instead",
                            called.error,
                            m.message_id,
                        )
                    else:
                        if called.outcome is CallOutcome.ABANDONED:
                            _log.warning(
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
                    _log.error("message %s lost: could not hand it back", m.message_id)
                    continue
                # LATER, not NOW: a running turn ignores it (its pass collects at the
                # boundary), so a message whose inject keeps raising cannot ring itself back
                # in a loop
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
                with trio.CancelScope(shield=True):
                    await router.close_gracefully(config.release_interrupt_timeout)
                    await router._metrics.drain(config.metrics_drain_timeout)
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(
                shield=True, deadline=trio.current_time() + config.release_interrupt_timeout
            ):
                await subscribed.__aexit__(None, None, None)
