"""The event taxonomy's overflow grades and terminal frames (spec 10 §5.5.1), interrupt
reasons, and SessionMetrics' no-op defaults (§12)."""

from __future__ import annotations

import inspect
import typing

from zlink_trio.router import (
    AgentExecutionEvent,
    AgentExecutionResult,
    AssistantMessageReceived,
    AssistantReasoningDelta,
    AssistantTextDelta,
    DispositionKind,
    ExecutionCompleted,
    ExecutionError,
    IdempotencyKey,
    InterruptedAt,
    InterruptReason,
    RejectedAt,
    RejectionReason,
    SessionId,
    SessionMetrics,
    ToolUseCompleted,
    ToolUseStarted,
)


def test_grades_and_terminals() -> None:
    frames: list[AgentExecutionEvent] = [
        AssistantReasoningDelta("r"),
        AssistantTextDelta("t"),
        AssistantMessageReceived("m"),
        ToolUseStarted("search"),
        ToolUseCompleted("search", 12),
        ExecutionCompleted(AgentExecutionResult("x")),
        ExecutionError("boom"),
        InterruptedAt(InterruptReason.USER),
        RejectedAt(RejectionReason.CONFLICTING_AGENT),
    ]
    assert {type(f) for f in frames} == set(typing.get_args(AgentExecutionEvent))
    assert [f.grade for f in frames] == [0, 1, 2, 2, 2, 2, 2, 2, 2]
    assert [type(f).__name__ for f in frames if f.is_terminal] == [
        "ExecutionCompleted",
        "ExecutionError",
        "InterruptedAt",
        "RejectedAt",
    ]


def test_interrupt_reasons() -> None:
    assert [r.name for r in InterruptReason] == [
        "USER",
        "SESSION_RELEASED",
        "SYSTEM_SHUTDOWN",
        "LEASE_LOST",
        "HOLDER_LOST",
    ]


def test_session_metrics_hooks_are_all_no_ops() -> None:
    """§12: every hook has a no-op default; a subclass overriding one hook is a complete
    SessionMetrics. (The router guarding hooks that raise is part of the router.)"""
    metrics = SessionMetrics()
    s, k = SessionId("s"), IdempotencyKey("k")
    args = {
        "session_id": s,
        "latency": 0.1,
        "cause": "lru",
        "kind": DispositionKind.FORWARDED,
        "key": k,
    }
    hooks = [n for n, _ in inspect.getmembers(SessionMetrics, inspect.isfunction)]
    assert len(hooks) == 10
    for name in hooks:
        method = getattr(metrics, name)
        params = inspect.signature(method).parameters
        assert method(**{p: args[p] for p in params}) is None

    class OnlyHits(SessionMetrics):
        def __init__(self) -> None:
            self.hits = 0

        def on_cache_hit(self, session_id: SessionId) -> None:
            self.hits += 1

    only = OnlyHits()
    only.on_cache_hit(s)
    only.on_cache_miss(s)
    assert only.hits == 1
