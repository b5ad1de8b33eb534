"""The SessionRouter's submission core (spec 10 §5.1, §7.1–§7.4, §8, §9).

One router per node, served by :func:`serve_session_router` (or
:func:`~zlink_trio.router.builder.open_session_router`). Its task tree::

    router nursery
    ├─ signal subscription      subscribed before the first submit (F0), dispatches signals
    ├─ metrics dispatcher       application hooks, in a worker thread (hooks.py)
    ├─ renewer per held lease   its own task: renew through the SessionStore, touch the slot
    ├─ drain pass per session   holds the node-local turn gate; runs turns one at a time
    └─ forward waiter per forwarded turn   polls the idempotency store, re-rings, deadline

Submit (F1–F2): binding pre-check → idempotency matrix → turn gate → claim. Losing the gate
or the lease hands the message to the inbox and rings the doorbell (FORWARDED); winning runs
a drain pass: always collect, merge priority-then-FIFO, run one turn, repeat (F4). A turn
ends with markDone first, then TURN_RESULT (F6). The lease is session-lifetime: a pass never
releases it; a lost renewal, a YIELD, or closing the router does.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, ClassVar, Literal, TypeAlias, final

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
from .config import SessionRouterConfig
from .disposition import DispositionKind, ExecutedLocally, Forwarded, SubmitDisposition, TurnFuture
from .errors import (
    ConflictingAgentError,
    ForwardTimeout,
    IdempotencyConflictError,
    RouterShuttingDown,
    SessionEvicted,
    SessionHeldElsewhere,
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
from .values import LiveSessionOptions, OpenAttributes, Priority, SubmitRequest

__all__ = ["RouterParts", "SessionRouter", "serve_session_router"]

_log = logging.getLogger("zlink_trio.router")
_STALE_RETRIES = 3


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


# --- the work of a drain pass -----------------------------------------------------------------


@attrs.frozen
class _Reservation:
    key: IdempotencyKey
    reserver: ReserverId


@attrs.frozen(eq=False)
class _Own:
    """The submit that opened the pass; its caller holds ``future``."""

    request: SubmitRequest
    turn_id: TurnId
    future: TurnFuture
    reservation: _Reservation | None
    delivered_at: float
    kind: ClassVar[Literal["own"]] = "own"

    @property
    def priority(self) -> Priority:
        return self.request.priority


@attrs.frozen(eq=False)
class _Collected:
    """A message taken from the inbox; its caller waits on the TURN_RESULT rail."""

    message: InboundMessage
    kind: ClassVar[Literal["collected"]] = "collected"

    @property
    def priority(self) -> Priority:
        return self.message.priority

    @property
    def delivered_at(self) -> float:
        return self.message.delivered_at


_Work: TypeAlias = _Own | _Collected


@final
class _TouchSlot:
    """The reservations a held lease keeps alive (§7.4): one cell per reservation, each a
    (key, reserver) pair, read at every renewal tick (never captured at schedule time)."""

    def __init__(self) -> None:
        self._cells: dict[IdempotencyKey, ReserverId] = {}

    def bind(self, reservation: _Reservation) -> None:
        self._cells[reservation.key] = reservation.reserver

    def unbind(self, reservation: _Reservation) -> None:
        if self._cells.get(reservation.key) == reservation.reserver:
            del self._cells[reservation.key]

    def cells(self) -> tuple[_Reservation, ...]:
        return tuple(_Reservation(k, r) for k, r in self._cells.items())


@final
class _HeldLease:
    """A lease this router holds: its renewer task, its touch slot, and one terminal latch
    (``ended``) so racing end paths (yield, loss, close) end it exactly once."""

    def __init__(self, session_id: SessionId, acquired_at: float) -> None:
        self.session_id = session_id
        self.acquired_at = acquired_at
        """The renewal schedule's phase: ticks at acquired_at + k * extend interval."""
        self.slot = _TouchSlot()
        self.scope = trio.CancelScope()
        self.ended: Literal["lost", "returned"] | None = None


@final
class _RunningTurn:
    def __init__(self, turn_id: TurnId, handle: LiveSession) -> None:
        self.turn_id = turn_id
        self.handle = handle
        self.scope = trio.CancelScope()
        self.reason: InterruptReason | None = None
        self.injected: list[InboundMessage] = []
        """NOW messages injected into this turn: they share its result (§9.3)."""

    def interrupt(self, reason: InterruptReason) -> None:
        if self.reason is None:
            self.reason = reason
        self.scope.cancel()


@final
class _Pass:
    """The node-local turn gate's holder for one session: a drain pass."""

    def __init__(self) -> None:
        self.running: _RunningTurn | None = None
        self.stop: InterruptReason | None = None
        self.end_by: _PassEnd = _PassEnd.HAND_OFF
        self.injected: list[InboundMessage] = []
        self.done = trio.Event()


@final
class _Forward:
    """A caller waiting for a turn another node (or a later pass) runs."""

    def __init__(
        self,
        session_id: SessionId,
        message_id: InboundMessageId | None,
        key: IdempotencyKey | None,
        future: TurnFuture,
    ) -> None:
        self.session_id = session_id
        self.message_id = message_id
        self.key = key
        self.future = future
        self.scope = trio.CancelScope()


class _RouterState(enum.Enum):
    ACCEPTING = "accepting"
    DRAINING = "draining"
    CLOSED = "closed"


class _PassEnd(enum.Enum):
    """Who finishes a stopped pass's session: the pass itself (a YIELD hand-off) or the
    ``release_session``/``delete_session`` call that stopped it."""

    HAND_OFF = "hand_off"
    CALLER = "caller"


def _stopped(gate: _Pass, held: _HeldLease) -> bool:
    return gate.stop is not None or held.ended is not None


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
        self._passes: dict[SessionId, _Pass] = {}
        self._handles: dict[SessionId, LiveSession] = {}
        self._leases: dict[SessionId, _HeldLease] = {}
        self._forwards_by_message: dict[InboundMessageId, _Forward] = {}
        self._forwards_by_key: dict[IdempotencyKey, list[_Forward]] = {}
        self._local_keyed: dict[IdempotencyKey, TurnFuture] = {}
        self._clock: Callable[[], float] = trio.current_time
        self._projection = StatusProjection()
        self._status_seq = 0
        self._hub = SessionEventHub()
        self._remote_events = RemoteEventQueue()

    # --- public surface ------------------------------------------------------------------------

    async def submit(self, request: SubmitRequest) -> SubmitDisposition:
        """Run or hand over one turn (F1–F2). Raises ConflictingAgentError (409),
        IdempotencyConflictError (409), SessionClaimFailed (503), RouterShuttingDown."""
        if self._state != _RouterState.ACCEPTING:
            raise RouterShuttingDown(f"router {self.node_id} is not accepting submits")
        sid = request.session_id
        # F1: binding pre-check; touches neither idempotency nor the lease
        bound = await self._store.bound_agent(sid)
        if bound is not None and bound != request.agent_ref:
            raise ConflictingAgentError(f"{sid} is bound to {bound}, not {request.agent_ref}")
        # F2: the idempotency matrix
        reservation: _Reservation | None = None
        if request.idempotency_key is not None:
            answered = await self._reserve(request)
            if not isinstance(answered, _Reservation):
                self._metrics.emit("on_submit", sid, answered.kind)
                return answered
            reservation = answered
        turn_id = TurnId.new()
        future = TurnFuture()
        # the node-local turn gate first, the lease second
        if sid in self._passes:
            return await self._forward(request, reservation)
        gate = _Pass()
        self._passes[sid] = gate
        try:
            started = trio.current_time()
            claimed = await self._store.claim(sid, request.agent_ref)
        except BaseException:
            self._end_gate(sid, gate)
            if reservation is not None:
                await self._reset(reservation)
            raise
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
        own = _Own(request, turn_id, future, reservation, trio.current_time())
        if reservation is not None:
            self._local_keyed[reservation.key] = future
            self._leases[sid].slot.bind(reservation)
        self._nursery.start_soon(self._drain_pass, sid, gate, own)
        self._metrics.emit("on_submit", sid, DispositionKind.EXECUTED_LOCALLY)
        return ExecutedLocally(turn_id, future)

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

    def status(self, session_id: SessionId) -> ClusterSessionStatus | None:
        """Best-effort observation (§5.1), never a control gate: this node's own view when it
        holds the session, else the newest STATUS snapshot heard from a peer."""
        if session_id in self._leases:
            return self._snapshot(session_id)
        return self._projection.get(session_id)

    async def release_session(self, session_id: SessionId) -> None:
        """Give the handle back; the history stays (§6.3 A): interrupt the turn
        (SESSION_RELEASED), wait up to ``release_interrupt_timeout`` for it, close the handle,
        drop it, purge the inbox, return the lease, then broadcast EVICT."""
        async with self._exclusive(session_id):
            await self._close_handle(session_id)
            await self._inbox.purge(session_id)
            await self._return_lease(session_id)
            await self._publish(self._evict_signal(session_id))
            self._hub.complete(session_id)

    async def delete_session(self, session_id: SessionId) -> bool:
        """Delete the history too; only the holder can (§7.7). Takes the lease first; while
        another node holds it, asks it to yield (YIELD + the legacy INTERRUPT shim) and
        retries until ``release_interrupt_timeout``, then raises
        :class:`SessionHeldElsewhere` (retry later). Answers whether a record was deleted."""
        bound = await self._store.bound_agent(session_id)
        if bound is None:
            await self._inbox.purge(session_id)
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
            await self._inbox.purge(session_id)
            deleted = await self._store.records.delete(session_id)
            await self._close_handle(session_id)
            if session_id in self._leases:
                await self._return_lease(session_id)
            else:
                await self._store.release(session_id)
            self._projection.remove(session_id)
            await self._publish(self._evict_signal(session_id))
            self._hub.complete(session_id)
        return deleted

    @asynccontextmanager
    async def _exclusive(self, session_id: SessionId) -> AsyncIterator[None]:
        """Hold the session's turn gate (stopping a running pass first), so no turn or
        drain starts here while a release or delete runs."""
        while (running := self._passes.get(session_id)) is not None:
            await self._stop_pass(session_id)
            if self._passes.get(session_id) is running:
                self._end_gate(session_id, running)  # its turn ignored the interrupt
        gate = _Pass()
        self._passes[session_id] = gate
        try:
            yield
        finally:
            self._end_gate(session_id, gate)

    async def close_gracefully(self, timeout: float) -> None:  # noqa: ASYNC109 (spec API)
        """Stop accepting, wait up to ``timeout`` for passes, interrupt the rest with
        SYSTEM_SHUTDOWN, close handles, give the leases back (failures swallowed)."""
        if self._state == _RouterState.CLOSED:
            return
        self._state = _RouterState.DRAINING
        with trio.move_on_after(timeout):
            for gate in list(self._passes.values()):
                await gate.done.wait()
        for gate in list(self._passes.values()):
            gate.stop = InterruptReason.SYSTEM_SHUTDOWN
            if gate.running is not None:
                gate.running.interrupt(InterruptReason.SYSTEM_SHUTDOWN)
        for gate in list(self._passes.values()):
            await gate.done.wait()
        for sid in list(self._handles):
            await self._close_handle(sid)
        for sid in list(self._leases):
            await self._return_lease(sid)
        for forward in self._all_forwards():
            forward.future.set_exception(RouterShuttingDown("the router closed"))
            forward.scope.cancel()
        self._hub.complete_all()
        self._state = _RouterState.CLOSED
        self._metrics.close()

    async def aclose(self) -> None:
        await self.close_gracefully(0)

    def statistics(self) -> RouterStatistics:
        return RouterStatistics(
            active_passes=len(self._passes),
            held_leases=len(self._leases),
            open_handles=len(self._handles),
            waiting_forwards=len(self._all_forwards()),
        )

    # --- F2: idempotency ----------------------------------------------------------------------

    async def _reserve(self, request: SubmitRequest) -> _Reservation | SubmitDisposition:
        key = request.idempotency_key
        assert key is not None
        digest = request.input_hash()
        for _ in range(_STALE_RETRIES):
            reserver = ReserverId.new(self.node_id)
            outcome = await self._idempotency.put_if_absent(key, digest, reserver)
            if isinstance(outcome, Reserved):
                return _Reservation(key, reserver)
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
                forward = _Forward(request.session_id, None, key, TurnFuture())
                self._forwards_by_key.setdefault(key, []).append(forward)
                self._nursery.start_soon(self._wait_forward, forward)
                return Forwarded(TurnId.new(), forward.future)
            assert isinstance(outcome, StaleInFlight)
            holder = outcome.entry.holder_id
            assert holder is not None
            await self._idempotency.compare_and_reset(key, holder)
        raise IdempotencyConflictError(f"key {key} keeps changing; retry")

    async def _reset(self, reservation: _Reservation) -> None:
        with trio.CancelScope(shield=True):
            try:
                await self._idempotency.compare_and_reset(reservation.key, reservation.reserver)
            except Exception:
                _log.warning("could not release idempotency key %s", reservation.key)

    # --- forwarding -------------------------------------------------------------------------------

    async def _forward(
        self, request: SubmitRequest, reservation: _Reservation | None
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
        self, message: InboundMessage, reservation: _Reservation | None, future: TurnFuture
    ) -> TurnFuture:
        forward = _Forward(message.session_id, message.message_id, message.idempotency_key, future)
        # registered before any I/O of the hand-over, so a TURN_RESULT cannot be missed
        self._forwards_by_message[message.message_id] = forward
        try:
            if reservation is not None:
                await self._idempotency.release_holder(reservation.key, reservation.reserver)
            await self._inbox.deliver(message)
        except BaseException:
            self._forwards_by_message.pop(message.message_id, None)
            raise
        await self._ring(message.session_id, message.priority)
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

    async def _wait_forward(self, forward: _Forward) -> None:
        """F7's fallback and the forward deadline: poll the idempotency store every
        ``forward_poll_interval``, re-ring the doorbell while the inbox holds messages."""
        interval = self._config.forward_poll_interval
        with forward.scope:
            with trio.move_on_after(self._config.idempotency_forward_ttl):
                while not forward.future.done():
                    await trio.sleep(interval)
                    if forward.future.done():
                        break
                    if forward.key is not None:
                        try:
                            entry = await self._idempotency.find(forward.key)
                        except Exception:
                            entry = None
                        if (
                            entry is not None
                            and entry.state is IdempotencyState.DONE
                            and entry.result is not None
                        ):
                            _, result = turn_result_from_wire(entry.result)
                            self._settle(forward.future, result)
                            break
                    await self._rering(forward.session_id)
            if not forward.future.done():
                forward.future.set_exception(
                    ForwardTimeout(f"no answer within {self._config.idempotency_forward_ttl} s")
                )
        self._drop_forward(forward)

    async def _rering(self, session_id: SessionId) -> None:
        if await self._pending(session_id):
            self._metrics.emit("on_forward_doorbell_rerung", session_id)
            await self._ring(session_id, Priority.LATER)

    def _drop_forward(self, forward: _Forward) -> None:
        if forward.message_id is not None:
            self._forwards_by_message.pop(forward.message_id, None)
        if forward.key is not None:
            waiting = self._forwards_by_key.get(forward.key, [])
            if forward in waiting:
                waiting.remove(forward)
            if not waiting:
                self._forwards_by_key.pop(forward.key, None)

    def _all_forwards(self) -> list[_Forward]:
        out = list(self._forwards_by_message.values())
        out.extend(f for fs in self._forwards_by_key.values() for f in fs)
        return out

    # --- the drain pass (F4–F6) ----------------------------------------------------------------

    def _end_gate(self, session_id: SessionId, gate: _Pass) -> None:
        if self._passes.get(session_id) is gate:
            del self._passes[session_id]
        gate.done.set()

    async def _try_drain(self, session_id: SessionId) -> None:
        """F3: a doorbell on a node not already running the session: take the gate, claim
        with the recorded agent (an election loser stops here), then drain. Drain-path
        acquisitions report no lock-acquire metric (§12)."""
        if session_id in self._passes or self._state != _RouterState.ACCEPTING:
            return
        gate = _Pass()
        self._passes[session_id] = gate
        ready = False
        try:
            if session_id in self._leases:
                ready = True
            elif await self._pending(session_id):
                bound = await self._store.bound_agent(session_id)
                if bound is not None:
                    claimed = await self._store.claim(session_id, bound)
                    if isinstance(claimed, Claimed):
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

    async def _drain_pass(self, session_id: SessionId, gate: _Pass, first: _Own | None) -> None:
        queue: list[_Work] = [first] if first is not None else []
        held = self._leases[session_id]
        try:
            while not _stopped(gate, held):
                try:  # always collect before a turn, every tier (F4)
                    collected = await self._inbox.collect(session_id, Priority.LATER)
                except Exception:
                    _log.warning("collect of %s failed", session_id, exc_info=True)
                    collected = ()
                queue.extend(_Collected(m) for m in collected)
                if not queue:
                    break
                if _stopped(gate, held):  # a yield or a loss while collecting
                    break
                queue.sort(key=lambda w: (w.priority, w.delivered_at))
                await self._run_work(session_id, gate, held, queue.pop(0))
        finally:
            with trio.CancelScope(shield=True):
                for work in queue:  # stopped early: hand what is left to the next holder
                    await self._requeue(work)
            self._end_gate(session_id, gate)
            if (
                gate.stop is InterruptReason.SESSION_RELEASED
                and gate.end_by is _PassEnd.HAND_OFF
                and held.ended is None
            ):
                with trio.CancelScope(shield=True):
                    await self._give_up(session_id)

    async def _requeue(self, work: _Work) -> None:
        try:
            if isinstance(work, _Collected):
                await self._inbox.deliver(work.message)
                await self._ring(work.message.session_id, work.message.priority)
            else:
                await self._forward_own(work)
        except Exception:
            _log.warning("could not hand a queued turn over", exc_info=True)

    async def _forward_own(self, own: _Own) -> None:
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
        await self._hand_to_inbox(message, own.reservation, own.future)

    async def _run_work(
        self, session_id: SessionId, gate: _Pass, held: _HeldLease, work: _Work
    ) -> None:
        if isinstance(work, _Own):
            reservation = work.reservation
            result = await self._run_turn(
                session_id,
                gate,
                work.turn_id,
                work.request,
                work.request.options,
                work.request.open_attributes,
            )
            if reservation is not None:
                await self._finish_reservation(reservation, work.turn_id, result)
                held.slot.unbind(reservation)
                self._local_keyed.pop(reservation.key, None)
            self._settle(work.future, result)
            await self._announce_injected(gate, work.turn_id, result)
            return
        message = work.message
        turn_id = TurnId.for_message(message.message_id)
        bound = await self._store.bound_agent(session_id)
        taken: _Reservation | None = None
        write_result = True
        if message.idempotency_key is not None:
            reserver = ReserverId.new(self.node_id)
            taken = _Reservation(message.idempotency_key, reserver)
            try:
                outcome = await self._idempotency.acquire_holder(message.idempotency_key, reserver)
            except Exception:
                outcome = None  # unknown: behave like a win for writing and cleanup
            if isinstance(outcome, HolderAcquired) or outcome is None:
                held.slot.bind(taken)
            else:
                self._metrics.emit("on_takeover_rejected", message.idempotency_key)
                write_result = False
        outcome_of_turn: TurnResult
        if bound is not None and bound != message.agent_ref:
            self._relay(session_id, turn_id)(RejectedAt(RejectionReason.CONFLICTING_AGENT))
            outcome_of_turn = TurnFailed(
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
            outcome_of_turn = await self._run_turn(
                session_id, gate, turn_id, request, LiveSessionOptions(), OpenAttributes()
            )
        if taken is not None and write_result:
            await self._finish_reservation(taken, turn_id, outcome_of_turn)
        if taken is not None:
            held.slot.unbind(taken)
        await self._announce(message, turn_id, outcome_of_turn)  # F6: after markDone
        await self._announce_injected(gate, turn_id, outcome_of_turn)

    async def _announce_injected(self, gate: _Pass, turn_id: TurnId, result: TurnResult) -> None:
        injected, gate.injected = gate.injected, []
        for message in injected:
            await self._announce(message, turn_id, result)

    async def _announce(self, message: InboundMessage, turn_id: TurnId, result: TurnResult) -> None:
        """TURN_RESULT of one forwarded message, for whichever node waits on it."""
        payload: JsonMap = {"messageId": message.message_id.value}
        if message.idempotency_key is not None:
            payload["idempotencyKey"] = message.idempotency_key.value
        payload.update(turn_result_to_wire(turn_id, result))
        await self._publish(
            SessionSignal(
                kind=SignalKind.TURN_RESULT,
                session_id=message.session_id,
                origin=self.node_id,
                payload=payload,
            )
        )

    async def _finish_reservation(
        self, reservation: _Reservation, turn_id: TurnId, result: TurnResult
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

    async def _run_turn(
        self,
        session_id: SessionId,
        gate: _Pass,
        turn_id: TurnId,
        request: SubmitRequest,
        options: LiveSessionOptions,
        attributes: OpenAttributes,
    ) -> TurnResult:
        try:
            handle = await self._ensure_open(session_id, request, options, attributes)
        except Exception as exc:
            return TurnFailed(FailureCode.FAILED, f"opening the session failed: {exc!r}")
        running = _RunningTurn(turn_id, handle)
        gate.running = running
        turn = TurnInput(
            turn_id=turn_id,
            user_input=request.user_input,
            history=SessionHistory(self._store.records, session_id),
            submit_options=request.submit_options,
            initiator=request.initiator,
            idempotency_key=request.idempotency_key,
        )
        relay = self._relay(session_id, turn_id)
        result: TurnResult
        try:
            with running.scope:
                if gate.stop is not None:
                    running.interrupt(gate.stop)
                answer: AgentExecutionResult = await handle.run_turn(turn, relay)
                relay(ExecutionCompleted(answer))
                return TurnSucceeded(answer)
            reason = running.reason or InterruptReason.USER
            relay(InterruptedAt(reason))
            result = TurnFailed(FailureCode.INTERRUPTED, reason.value)
        except Exception as exc:
            relay(ExecutionError(repr(exc)))
            result = TurnFailed(FailureCode.FAILED, repr(exc))
        finally:
            gate.running = None
            gate.injected.extend(running.injected)
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

    async def _ensure_open(
        self,
        session_id: SessionId,
        request: SubmitRequest,
        options: LiveSessionOptions,
        attributes: OpenAttributes,
    ) -> LiveSession:
        handle = self._handles.get(session_id)
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
        self._handles[session_id] = handle
        return handle

    async def _close_handle(self, session_id: SessionId) -> None:
        handle = self._handles.pop(session_id, None)
        if handle is not None:
            try:
                await handle.aclose()
            except Exception:
                _log.warning("closing the handle of %s failed", session_id, exc_info=True)

    def _settle(self, future: TurnFuture, result: TurnResult) -> None:
        if isinstance(result, TurnSucceeded):
            future.set_result(result.result)
        else:
            future.set_exception(failure_error(result))

    # --- the lease (§7.4) ------------------------------------------------------------------------

    def _start_renewer(self, session_id: SessionId) -> None:
        held = _HeldLease(session_id, trio.current_time())
        self._leases[session_id] = held
        self._nursery.start_soon(self._renew, held)

    async def _renew(self, held: _HeldLease) -> None:
        sid = held.session_id
        interval = self._config.lock_extend_interval
        tick = held.acquired_at
        with held.scope:
            while True:
                tick += interval
                await trio.sleep_until(tick)
                try:
                    lease = await self._store.renew(sid)
                except Exception:
                    _log.warning("renewal of %s failed; retrying next tick", sid, exc_info=True)
                    if self._store.held(sid) is None:
                        lease = None
                    else:
                        continue
                if lease is None:
                    self._lease_lost(held)
                    return
                for cell in held.slot.cells():  # read now, at this tick
                    try:
                        await self._idempotency.touch(cell.key, cell.reserver)
                    except Exception:
                        _log.warning("touch of %s failed", cell.key, exc_info=True)

    def _lease_lost(self, held: _HeldLease) -> None:
        """The renewer's loss path: must not block. Everything else runs on other tasks."""
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
        self._nursery.start_soon(self._close_handle_after, sid, gate)

    async def _close_handle_after(self, session_id: SessionId, gate: _Pass | None) -> None:
        if gate is not None:
            await gate.done.wait()
        if session_id not in self._leases:
            await self._close_handle(session_id)

    async def _return_lease(self, session_id: SessionId) -> None:
        held = self._leases.pop(session_id, None)
        if held is None or held.ended is not None:
            return
        held.ended = "returned"
        held.scope.cancel()
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
        await self._give_up(session_id)

    async def _give_up(self, session_id: SessionId) -> None:
        """The hand-off's end: close the handle, then return the lease (in that order:
        a turn never writes history it no longer holds), then ring for the next holder."""
        await self._close_handle(session_id)
        await self._return_lease(session_id)
        if await self._pending(session_id):
            await self._ring(session_id, Priority.LATER)

    async def _stop_pass(self, session_id: SessionId) -> None:
        gate = self._passes.get(session_id)
        if gate is None:
            return
        gate.stop = InterruptReason.SESSION_RELEASED
        gate.end_by = _PassEnd.CALLER
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
        while True:
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
            if signal.origin != self.node_id:
                self._hub.complete(sid)
                if sid not in self._passes:
                    self._nursery.start_soon(self._close_handle, sid)
            for forward in self._all_forwards():
                if forward.session_id == sid:
                    forward.future.set_exception(SessionEvicted(f"{sid} was evicted"))
                    forward.scope.cancel()

    async def _inject_now(self, session_id: SessionId, gate: _Pass) -> None:
        """§9.3: a NOW message for a running turn is injected into it, not run apart."""
        running = gate.running
        if running is None:
            return
        try:
            messages = await self._inbox.collect(session_id, Priority.NOW)
        except Exception:
            return
        for m in messages:
            if gate.running is running:
                try:
                    running.handle.inject(
                        QueuedInput(
                            user_input=m.user_input, priority=m.priority, initiator=m.initiator
                        )
                    )
                except Exception:
                    # The application's inject failed: the message is not lost, it runs
                    # as a turn of its own in the next pass (an application hook that
                    # raises never reaches the router).
                    _log.warning("LiveSession.inject raised; %s queued instead", m.message_id)
                    await self._inbox.deliver(m)
                    continue
                running.injected.append(m)
            else:
                await self._inbox.deliver(m)

    def _on_turn_result(self, payload: dict[str, Any]) -> None:
        try:
            _, result = turn_result_from_wire(payload)
        except (KeyError, ValueError, TypeError):
            return
        message = payload.get("messageId")
        targets: list[_Forward] = []
        if isinstance(message, str):
            forward = self._forwards_by_message.get(InboundMessageId(message))
            if forward is not None:
                targets.append(forward)
        key = payload.get("idempotencyKey")
        if isinstance(key, str):
            targets.extend(self._forwards_by_key.get(IdempotencyKey(key), []))
        for forward in targets:
            self._settle(forward.future, result)
            forward.scope.cancel()


@attrs.frozen
class RouterStatistics:
    active_passes: int
    held_leases: int
    open_handles: int
    waiting_forwards: int


@asynccontextmanager
async def serve_session_router(parts: RouterParts) -> AsyncIterator[SessionRouter]:
    async with trio.open_nursery() as nursery:
        router = SessionRouter(parts, nursery)
        subscribed = parts.bus.subscribe()
        receive = await subscribed.__aenter__()  # F0: subscribed before the first submit
        try:
            nursery.start_soon(router._listen, receive)
            nursery.start_soon(router._metrics.serve)
            nursery.start_soon(router._heartbeat)
            nursery.start_soon(router._dispatch_events)
            try:
                yield router
            finally:
                with trio.CancelScope(shield=True):
                    await router.close_gracefully(parts.config.release_interrupt_timeout)
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await subscribed.__aexit__(None, None, None)
