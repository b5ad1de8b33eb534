"""What a turn produces: the event taxonomy, interrupt reasons, failure codes, results.

Events form a closed tagged union (:data:`AgentExecutionEvent`). Each has an overflow
``grade`` (spec 10 §5.5.1): 0 reasoning deltas (sacrificed first), 1 text deltas, 2
everything else (structural and terminal frames, never sacrificed while anything lower can
go). Terminal frames (``is_terminal``) end a turn for a subscriber: ExecutionCompleted,
ExecutionError, InterruptedAt, RejectedAt.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar, Literal, TypeAlias

import attrs

from .ids import TurnId
from .primitives import Json, JsonMap

__all__ = [
    "AgentExecutionEvent",
    "AgentExecutionResult",
    "Artifact",
    "AssistantMessageReceived",
    "AssistantReasoningDelta",
    "AssistantTextDelta",
    "ExecutionCompleted",
    "ExecutionError",
    "FailureCode",
    "InterruptReason",
    "InterruptedAt",
    "RejectedAt",
    "RejectionReason",
    "ToolUseCompleted",
    "ToolUseStarted",
    "TurnFailed",
    "TurnResult",
    "TurnSucceeded",
    "turn_result_from_wire",
    "turn_result_to_wire",
]


class InterruptReason(enum.Enum):
    """Why a turn was interrupted (§3.3, §6.3, §6.4, §8)."""

    USER = "USER"
    SESSION_RELEASED = "SESSION_RELEASED"
    SYSTEM_SHUTDOWN = "SYSTEM_SHUTDOWN"
    LEASE_LOST = "LEASE_LOST"
    HOLDER_LOST = "HOLDER_LOST"


class RejectionReason(enum.Enum):
    """Why a collected message was not run (§3.6)."""

    CONFLICTING_AGENT = "CONFLICTING_AGENT"


class FailureCode(enum.Enum):
    """Why a turn's result is a failure. Forward compatible (§9.4): :meth:`decode` maps an
    unknown name to FAILED, keeping the message, so a rolling deploy degrades the reason but
    never drops the caller's result."""

    FAILED = "FAILED"
    CONFLICTING_AGENT = "CONFLICTING_AGENT"
    INTERRUPTED = "INTERRUPTED"
    HOLDER_LOST = "HOLDER_LOST"
    SESSION_EVICTED = "SESSION_EVICTED"
    FORWARD_TIMEOUT = "FORWARD_TIMEOUT"

    @classmethod
    def decode(cls, name: object) -> FailureCode:
        try:
            return cls(name)
        except ValueError:
            return cls.FAILED


def _str(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{attr.name}: expected str, got {type(value).__name__}")


@attrs.frozen
class AssistantReasoningDelta:
    text: str = attrs.field(validator=_str)
    grade: ClassVar[int] = 0
    is_terminal: ClassVar[bool] = False


@attrs.frozen
class AssistantTextDelta:
    text: str = attrs.field(validator=_str)
    grade: ClassVar[int] = 1
    is_terminal: ClassVar[bool] = False


@attrs.frozen
class AssistantMessageReceived:
    """The whole assistant message of an iteration, re-summarizing its text deltas."""

    text: str = attrs.field(validator=_str)
    grade: ClassVar[int] = 2
    is_terminal: ClassVar[bool] = False


@attrs.frozen
class ToolUseStarted:
    tool_name: str = attrs.field(validator=_str)
    input_summary: tuple[tuple[str, str], ...] = ()
    grade: ClassVar[int] = 2
    is_terminal: ClassVar[bool] = False


@attrs.frozen
class ToolUseCompleted:
    tool_name: str = attrs.field(validator=_str)
    duration_ms: int = 0
    grade: ClassVar[int] = 2
    is_terminal: ClassVar[bool] = False


@attrs.frozen
class Artifact:
    """A file a turn produced. Lives on the node that made it: a forwarded result carries
    none (§9.4)."""

    name: str = attrs.field(validator=_str)
    data: bytes = attrs.field(repr=False)


@attrs.frozen
class AgentExecutionResult:
    text: str = attrs.field(validator=_str)
    artifacts: tuple[Artifact, ...] = ()


@attrs.frozen
class ExecutionCompleted:
    result: AgentExecutionResult
    grade: ClassVar[int] = 2
    is_terminal: ClassVar[bool] = True


@attrs.frozen
class ExecutionError:
    """The turn failed. ``message`` only: the cause's type and stack do not cross nodes."""

    message: str = attrs.field(validator=_str)
    grade: ClassVar[int] = 2
    is_terminal: ClassVar[bool] = True


@attrs.frozen
class InterruptedAt:
    reason: InterruptReason
    grade: ClassVar[int] = 2
    is_terminal: ClassVar[bool] = True


@attrs.frozen
class RejectedAt:
    """A collected message was dropped without running (§3.6)."""

    reason: RejectionReason
    grade: ClassVar[int] = 2
    is_terminal: ClassVar[bool] = True


AgentExecutionEvent: TypeAlias = (
    AssistantReasoningDelta
    | AssistantTextDelta
    | AssistantMessageReceived
    | ToolUseStarted
    | ToolUseCompleted
    | ExecutionCompleted
    | ExecutionError
    | InterruptedAt
    | RejectedAt
)


# --- turn results (what markDone stores and TURN_RESULT carries) ----------------------------


@attrs.frozen
class TurnSucceeded:
    result: AgentExecutionResult
    kind: ClassVar[Literal["succeeded"]] = "succeeded"


@attrs.frozen
class TurnFailed:
    code: FailureCode
    message: str = attrs.field(validator=_str)
    kind: ClassVar[Literal["failed"]] = "failed"


TurnResult: TypeAlias = TurnSucceeded | TurnFailed


def turn_result_to_wire(turn_id: TurnId | None, result: TurnResult) -> JsonMap:
    """``TurnResultPayload``: flat primitives; artifacts are dropped (§9.4). Without a TurnId
    (a holder-loss announcement) the payload has no ``turnId``."""
    head: JsonMap = {} if turn_id is None else {"turnId": turn_id.value}
    if isinstance(result, TurnSucceeded):
        return {**head, "status": "ok", "text": result.result.text}
    return {**head, "status": "failed", "code": result.code.value, "message": result.message}


def turn_result_from_wire(payload: dict[str, Json]) -> tuple[TurnId | None, TurnResult]:
    """Read a ``TurnResultPayload``; an unknown failure code becomes FAILED (§9.4). The
    TurnId is None in a holder-loss announcement, which names the turn by its idempotency
    key only (§6.3 D)."""
    raw = payload.get("turnId")
    turn_id = None if raw is None else TurnId(str(raw))
    if payload.get("status") == "ok":
        return turn_id, TurnSucceeded(AgentExecutionResult(str(payload.get("text", ""))))
    return turn_id, TurnFailed(
        FailureCode.decode(payload.get("code")), str(payload.get("message", ""))
    )
