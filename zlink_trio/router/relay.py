"""A turn's frames on their way out (spec 10 §5.5): the EVENT payload codec, the node-local
subscriber hub, and the bounded remote queue with its three overflow grades.

The producer (the turn, through its listener) never blocks: a local subscriber that does not
keep up loses its oldest frames (counted); remote frames go to a bounded queue drained by
the router's dispatcher task. On overflow the queue drops, among buffered frames whose grade
is not higher than the incoming one, the oldest of the lowest grade; if none qualifies, the
incoming frame is dropped, unless it and everything buffered are structural, in which case
the oldest structural frame goes. Every drop is counted.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import final

import attrs
import trio

from .events import (
    AgentExecutionEvent,
    AgentExecutionResult,
    AssistantMessageReceived,
    AssistantReasoningDelta,
    AssistantTextDelta,
    ExecutionCompleted,
    ExecutionError,
    InterruptedAt,
    InterruptReason,
    RejectedAt,
    RejectionReason,
    ToolUseCompleted,
    ToolUseStarted,
)
from .ids import IdempotencyKey, SessionId, TurnId
from .primitives import Json, JsonMap, read_int

__all__ = [
    "EventSubscription",
    "RemoteEventQueue",
    "SessionEventHub",
    "TurnEvent",
    "TurnRelay",
    "event_from_wire",
    "event_to_wire",
]


@attrs.frozen
class TurnEvent:
    """One frame with the turn it belongs to (the relay stamps every frame)."""

    turn_id: TurnId
    event: AgentExecutionEvent
    idempotency_key: IdempotencyKey | None = None
    """Set on a holder-loss frame (§6.3 D), which names its turn by the key: its
    ``turn_id`` is :meth:`TurnId.unknown` (no surviving node knows the dead turn's id)."""


def event_to_wire(
    turn_id: TurnId, event: AgentExecutionEvent, *, key: IdempotencyKey | None = None
) -> JsonMap:
    """``AgentExecutionEventPayload``: flat primitives stamped with the TurnId (and the
    idempotency key of a holder-loss frame). Losses: an error keeps only its message; a
    result keeps only its text (artifacts stay on the node that made them); durations are
    whole ms."""
    out: JsonMap = {"turnId": turn_id.value}
    if key is not None:
        out["idempotencyKey"] = key.value
    if isinstance(event, AssistantReasoningDelta):
        out.update(type="reasoningDelta", text=event.text)
    elif isinstance(event, AssistantTextDelta):
        out.update(type="textDelta", text=event.text)
    elif isinstance(event, AssistantMessageReceived):
        out.update(type="messageReceived", text=event.text)
    elif isinstance(event, ToolUseStarted):
        out.update(type="toolUseStarted", tool=event.tool_name, input=dict(event.input_summary))
    elif isinstance(event, ToolUseCompleted):
        out.update(type="toolUseCompleted", tool=event.tool_name, durationMs=event.duration_ms)
    elif isinstance(event, ExecutionCompleted):
        out.update(type="completed", text=event.result.text)
    elif isinstance(event, ExecutionError):
        out.update(type="error", message=event.message)
    elif isinstance(event, InterruptedAt):
        out.update(type="interrupted", reason=event.reason.value)
    else:
        out.update(type="rejected", reason=event.reason.value)
    return out


def event_from_wire(payload: dict[str, Json]) -> TurnEvent | None:
    """Decode a frame; None for an unknown type or a malformed payload (a newer node's
    frame meets an older node during a rolling deploy: ignored, never an error)."""
    try:
        turn = TurnId(str(payload["turnId"]))
        kind = payload.get("type")
        event: AgentExecutionEvent
        if kind == "reasoningDelta":
            event = AssistantReasoningDelta(str(payload["text"]))
        elif kind == "textDelta":
            event = AssistantTextDelta(str(payload["text"]))
        elif kind == "messageReceived":
            event = AssistantMessageReceived(str(payload["text"]))
        elif kind == "toolUseStarted":
            raw = payload.get("input")
            items = raw.items() if isinstance(raw, dict) else ()
            event = ToolUseStarted(  # non-primitive values are lost (§5.5.2)
                str(payload["tool"]),
                tuple((k, _scalar(v)) for k, v in items if _is_scalar(v)),
            )
        elif kind == "toolUseCompleted":
            event = ToolUseCompleted(
                str(payload["tool"]), read_int(payload["durationMs"], "durationMs")
            )
        elif kind == "completed":
            event = ExecutionCompleted(AgentExecutionResult(str(payload["text"])))
        elif kind == "error":
            event = ExecutionError(str(payload["message"]))
        elif kind == "interrupted":
            event = InterruptedAt(InterruptReason(payload["reason"]))
        elif kind == "rejected":
            event = RejectedAt(RejectionReason(payload["reason"]))
        else:
            return None
        raw_key = payload.get("idempotencyKey")
        key = None if raw_key is None else IdempotencyKey(str(raw_key))
    except (KeyError, ValueError, TypeError):
        return None
    return TurnEvent(turn, event, key)


def _is_scalar(value: Json) -> bool:
    return isinstance(value, str | int | float | bool)


def _scalar(value: Json) -> str:
    """A primitive summary value as text: whole floats read as ints (JSON may widen 3 to
    3.0), booleans in their JSON spelling."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@final
class EventSubscription:
    """One subscriber's frames of one session: ``async for frame in subscription``. A
    subscriber that does not keep up loses its oldest frames (``dropped``); the iteration
    ends when the session ends on this node (release, delete, EVICT, router close)."""

    def __init__(self, buffer: int) -> None:
        self._frames: collections.deque[TurnEvent] = collections.deque()
        self._buffer = buffer
        self._wake = trio.Event()
        self.completed = False
        self.dropped = 0

    def offer(self, frame: TurnEvent) -> bool:
        """Buffer the frame; answers whether the oldest buffered frame was dropped for it."""
        if self.completed:
            return False
        dropped = len(self._frames) >= self._buffer
        if dropped:
            self._frames.popleft()
            self.dropped += 1
        self._frames.append(frame)
        self._wake.set()
        return dropped

    def complete(self) -> None:
        self.completed = True
        self._wake.set()

    def __aiter__(self) -> EventSubscription:
        return self

    async def __anext__(self) -> TurnEvent:
        while not self._frames:
            if self.completed:
                raise StopAsyncIteration
            self._wake = trio.Event()
            await self._wake.wait()
        return self._frames.popleft()


@final
class SessionEventHub:
    """Node-local subscribers per session (the in-process publisher)."""

    def __init__(self, buffer: int = 256) -> None:
        self._buffer = buffer
        self._subscribers: dict[SessionId, list[EventSubscription]] = {}
        self._closed = False

    @asynccontextmanager
    async def subscribe(self, session_id: SessionId) -> AsyncIterator[EventSubscription]:
        """A subscription; one taken on a closed hub (the router closed) is complete at
        once: no frame will ever come."""
        subscription = EventSubscription(self._buffer)
        if self._closed:
            subscription.complete()
            yield subscription
            return
        self._subscribers.setdefault(session_id, []).append(subscription)
        try:
            yield subscription
        finally:
            subs = self._subscribers.get(session_id, [])
            if subscription in subs:
                subs.remove(subscription)
            if not subs:
                self._subscribers.pop(session_id, None)

    def publish(self, session_id: SessionId, frame: TurnEvent) -> int:
        """Offer the frame to every subscriber; answers how many dropped a frame for it."""
        return sum(s.offer(frame) for s in list(self._subscribers.get(session_id, ())))

    def complete(self, session_id: SessionId) -> None:
        for subscription in self._subscribers.pop(session_id, []):
            subscription.complete()

    def complete_all(self) -> None:
        for session_id in list(self._subscribers):
            self.complete(session_id)

    def close(self) -> None:
        """Complete every subscriber, and every later one at once (the router closed)."""
        self._closed = True
        self.complete_all()


@attrs.frozen
class _Outgoing:
    session_id: SessionId
    frame: TurnEvent


@final
class RemoteEventQueue:
    """The bounded queue between the turns and the EVENT rail's dispatcher."""

    def __init__(self, capacity: int = 1024) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be > 0")
        self._capacity = capacity
        self._items: list[_Outgoing] = []
        self._wake = trio.Event()
        self.dropped = 0

    def put(self, session_id: SessionId, frame: TurnEvent) -> int:
        """Queue the frame, never blocking; answers how many frames it cost (0 or 1: a
        buffered one, or the incoming one itself)."""
        full = len(self._items) >= self._capacity
        if full and not self._make_room(frame.event.grade):
            self.dropped += 1
            return 1
        self._items.append(_Outgoing(session_id, frame))
        self._wake.set()
        return 1 if full else 0

    def _make_room(self, grade: int) -> bool:
        for level in range(grade + 1):  # lowest grade first, never above the incoming one
            for i, item in enumerate(self._items):
                if item.frame.event.grade == level:
                    del self._items[i]
                    self.dropped += 1
                    return True
        return False

    def buffered(self) -> list[TurnEvent]:
        return [i.frame for i in self._items]

    async def get(self) -> tuple[SessionId, TurnEvent]:
        while not self._items:
            self._wake = trio.Event()
            await self._wake.wait()
        item = self._items.pop(0)
        return item.session_id, item.frame


@final
class TurnRelay:
    """One turn's relay (§5.5): the listener its ``run_turn`` gets. It stamps its TurnId on
    every frame and fans it out to the node's subscribers and to the bounded remote queue,
    never blocking the turn. It counts every frame its fan-out cost — a local subscriber's
    oldest frame (``dropped_local``, once per subscriber), a remote frame on overflow
    (``dropped_remote``: exactly the frames a remote receiver misses because of this turn)
    — and, once closed, discards what the turn still emits (``discarded``: nobody receives
    it). The router closes it when the turn ends, or when a release gives up waiting for
    the turn, and reports the total when the turn ends."""

    def __init__(
        self,
        session_id: SessionId,
        turn_id: TurnId,
        hub: SessionEventHub,
        remote: RemoteEventQueue,
    ) -> None:
        self.session_id = session_id
        self.turn_id = turn_id
        self._hub = hub
        self._remote = remote
        self.dropped_local = 0
        self.dropped_remote = 0
        self.discarded = 0
        """Frames emitted after the close (delivered nowhere)."""
        self.closed = False

    def __call__(self, event: AgentExecutionEvent, /) -> None:
        if self.closed:
            self.discarded += 1
            return
        frame = TurnEvent(self.turn_id, event)
        self.dropped_local += self._hub.publish(self.session_id, frame)
        self.dropped_remote += self._remote.put(self.session_id, frame)

    @property
    def dropped(self) -> int:
        """Every gap this turn's relay caused (``getDroppedEventCount``)."""
        return self.dropped_local + self.dropped_remote + self.discarded

    def close(self) -> None:
        """Deliver nothing more (idempotent)."""
        self.closed = True
