"""The router's shared state and the small steps every path uses (spec 10 §5.1, §7.3):
the gate and acceptance checks, bounded clean-up scopes, signal publishing, settling a
caller, ringing the doorbell, TURN_RESULT announcements and the node's STATUS snapshot.

Internal to the router: :class:`~zlink_trio.router.router.SessionRouter` is assembled from
this base and the mixins built on it (one concept per module).
"""

from __future__ import annotations

import contextvars
import enum
import logging
import time
from collections.abc import Callable

import attrs
import trio

from .application import LiveSessionOpener, SessionMetrics
from .approvals import SessionApprovals
from .cache import HandleCache
from .config import SessionRouterConfig
from .disposition import TurnFuture
from .errors import RouterShuttingDown, failure_error
from .events import InterruptReason, TurnResult, TurnSucceeded, turn_result_to_wire
from .forwards import Forwards
from .hooks import MetricsDispatcher
from .ids import IdempotencyKey, InboundMessageId, NodeId, SessionId, TurnId
from .lease import HeldLease
from .primitives import JsonMap
from .relay import RemoteEventQueue, SessionEventHub
from .session_store import SessionStore
from .signals import SessionSignal, SignalKind
from .spi import IdempotencyStore, SessionInbox, SessionSignalBus
from .status import ClusterSessionStatus, SessionActivity, StatusProjection
from .values import Priority
from .work import Pass

__all__ = ["IN_TURN", "RouterCore", "RouterParts", "RouterState", "RouterStatistics"]


log = logging.getLogger("zlink_trio.router")

IN_TURN: contextvars.ContextVar[SessionId | None] = contextvars.ContextVar(
    "zlink_trio_router_in_turn", default=None
)
"""The session whose turn the current task (or a task it spawned) runs inside (§7.3)."""


def _wall_seq() -> int:
    """A STATUS seq floor: wall-clock microseconds. The projection orders one origin's
    snapshots by seq (§5.4), and a node restarted under the same NodeId must not start
    below its previous incarnation (a peer would keep the dead one's view as newer)."""
    return time.time_ns() // 1_000


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
    dropped_events: int = 0
    """Frames dropped by the relays of this node's turns so far (reported at each relay's
    close, §5.5.1)."""


class RouterState(enum.Enum):
    ACCEPTING = "accepting"
    DRAINING = "draining"
    CLOSED = "closed"


class RouterCore:
    """The router's state, shared by every mixin of SessionRouter."""

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
        self._state = RouterState.ACCEPTING
        self._crashed = False
        """Set by :meth:`_crash` (``zlink_trio.testing.crash_session_router``): the node
        vanished; nothing it does from now on reaches the cluster."""
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
        self._status_seq = _wall_seq()
        self._hub = SessionEventHub()
        self._remote_events = RemoteEventQueue()
        self._dropped_events = 0
        self._rings_after_close: dict[SessionId, Priority] = {}
        """Sessions a closing pass handed messages back to while this node still held their
        lease (the most urgent priority handed back): rung once the close has given the
        leases back, so the peer that hears the doorbell can claim (§6.3 C)."""

    def _accepting(self) -> bool:
        """Read afresh after every await: a close may have run meanwhile."""
        return self._state is RouterState.ACCEPTING

    def _check_accepting(self) -> None:
        if not self._accepting():
            raise RouterShuttingDown(f"router {self.node_id} is not accepting submits")

    def approvals(self, session_id: SessionId) -> SessionApprovals:
        """The session's node-local approvals (also on ``TurnInput.approvals``); discarded
        when the session's EVICT is heard, and by release and delete."""
        return SessionApprovals(self._approvals, session_id)

    def _cleanup(self) -> trio.CancelScope:
        """A shielded scope for one clean-up I/O step, bounded (``release_interrupt_timeout``)
        so no clean-up can hold the router's exit. (A composite clean-up is shielded without
        a deadline of its own: each of its steps is bounded.) On a crashed router the scope
        is cancelled already: a dead node's clean-up never happens."""
        if self._crashed:
            scope = trio.CancelScope()
            scope.cancel()
            return scope
        return trio.CancelScope(
            shield=True, deadline=trio.current_time() + self._config.release_interrupt_timeout
        )

    def _end_gate(self, session_id: SessionId, gate: Pass) -> None:
        if self._passes.get(session_id) is gate:
            del self._passes[session_id]
        gate.done.set()

    async def _publish(self, signal: SessionSignal) -> None:
        try:
            await self._bus.publish(signal)
        except Exception:
            log.warning("publishing %s failed", signal.kind, exc_info=True)

    def _settle(self, future: TurnFuture, result: TurnResult) -> None:
        self._local_futures.discard(future)
        self._started.discard(future)
        if isinstance(result, TurnSucceeded):
            future.set_result(result.result)
        else:
            future.set_exception(failure_error(result))

    async def _pending(self, session_id: SessionId) -> bool:
        try:
            return await self._inbox.has_pending(session_id)
        except Exception:
            return True  # not seeing the queue is no proof it is empty

    async def _ring(self, session_id: SessionId, priority: Priority) -> None:
        await self._publish(
            SessionSignal(
                kind=SignalKind.MESSAGE_ENQUEUED,
                session_id=session_id,
                origin=self.node_id,
                payload={"priority": priority.name},
            )
        )

    def _evict_signal(self, session_id: SessionId) -> SessionSignal:
        return SessionSignal(kind=SignalKind.EVICT, session_id=session_id, origin=self.node_id)

    def _interrupt_local(
        self, session_id: SessionId, reason: InterruptReason, turn_id: TurnId | None
    ) -> None:
        gate = self._passes.get(session_id)
        running = None if gate is None else gate.running
        if gate is not None and turn_id is not None and gate.upcoming == turn_id:
            # the named turn was returned by submit but has not started (its pass opens the
            # session first): it starts interrupted
            if gate.upcoming_interrupt is None:
                gate.upcoming_interrupt = reason
            return
        if running is None or (turn_id is not None and running.turn_id != turn_id):
            return
        running.interrupt(reason)

    def _next_status_seq(self) -> int:
        """Strictly increasing, and never below the wall clock (see :func:`_wall_seq`)."""
        self._status_seq = max(self._status_seq + 1, _wall_seq())
        return self._status_seq

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
