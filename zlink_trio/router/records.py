"""Values of the session record and lease SPIs (spec 10 §3.6, §5.3, §7.4).

A :class:`SessionRecordView` is read-only by construction (frozen, tuples): the binding
(``agent_ref``) has one writer, ``SessionStore.claim``. A :class:`SessionLease` carries the
fencing token of one acquisition; the record store remembers the highest token it has seen
per session (``fence``) and rejects a write carrying a lower one.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, TypeAlias

import attrs

from .ids import AgentRef, NodeId, SessionId, TurnId

__all__ = [
    "LeaseGranted",
    "LeaseHeld",
    "LeaseOutcome",
    "SessionLease",
    "SessionRecordView",
    "TranscriptEntry",
]


def _str(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{attr.name}: expected str, got {type(value).__name__}")


@attrs.frozen
class TranscriptEntry:
    """One message of a session's history."""

    role: str = attrs.field(validator=_str)
    text: str = attrs.field(validator=_str)
    turn_id: TurnId | None = None


@attrs.frozen(kw_only=True)
class SessionRecordView:
    """The persistent session: its agent binding and its history. ``fence`` is the highest
    fencing token a write to it carried."""

    session_id: SessionId
    agent_ref: AgentRef
    transcript: tuple[TranscriptEntry, ...] = ()
    fence: int = 0


@attrs.frozen(kw_only=True)
class SessionLease:
    """One acquisition of a session's lease. ``holder_id`` is the bare node id (§7.3)."""

    session_id: SessionId
    holder_id: NodeId
    fencing_token: int
    expires_at: float


@attrs.frozen
class LeaseGranted:
    lease: SessionLease
    kind: ClassVar[Literal["granted"]] = "granted"


@attrs.frozen
class LeaseHeld:
    """Someone (maybe this very node, through another store) holds an unexpired lease."""

    holder_id: NodeId
    expires_at: float
    kind: ClassVar[Literal["held"]] = "held"


LeaseOutcome: TypeAlias = LeaseGranted | LeaseHeld
