"""Cluster observation (spec 10 §5.1, §5.4): :class:`ClusterSessionStatus` snapshots and the
:class:`StatusProjection` that folds remote STATUS signals.

Best effort only: a status can change between reading it and acting on it, so no router
decision reads it. Whether a turn can start is answered by ``submit``.
"""

from __future__ import annotations

import enum
from typing import final

import attrs

from .ids import NodeId, SessionId, TurnId
from .primitives import Json, JsonMap, read_float, read_int

__all__ = ["ClusterSessionStatus", "SessionActivity", "StatusProjection"]


class SessionActivity(enum.Enum):
    IDLE = "IDLE"
    RUNNING = "RUNNING"


@attrs.frozen(kw_only=True)
class ClusterSessionStatus:
    """One node's snapshot of a session. ``origin`` published it; ``seq`` orders snapshots of
    the same origin only (a new holder's seq is independent of the old one's)."""

    session_id: SessionId
    origin: NodeId
    seq: int
    activity: SessionActivity
    active_turn_id: TurnId | None = None
    observed_at: float = 0.0

    def to_wire(self) -> JsonMap:
        """``StatusSnapshotPayload``: flat primitives (session options are not carried)."""
        return {
            "sessionId": self.session_id.value,
            "origin": self.origin.value,
            "seq": self.seq,
            "activity": self.activity.value,
            "activeTurnId": None if self.active_turn_id is None else self.active_turn_id.value,
            "observedAt": self.observed_at,
        }

    @classmethod
    def from_wire(cls, payload: dict[str, Json]) -> ClusterSessionStatus:
        turn = payload.get("activeTurnId")
        return cls(
            session_id=SessionId(str(payload["sessionId"])),
            origin=NodeId(str(payload["origin"])),
            seq=read_int(payload["seq"], "seq"),
            activity=SessionActivity(payload["activity"]),
            active_turn_id=None if turn is None else TurnId(str(turn)),
            observed_at=read_float(payload.get("observedAt", 0.0), "observedAt"),
        )


@final
class StatusProjection:
    """The newest snapshot per session (§5.4). From a different origin a snapshot is always
    accepted (a holder change must win); from the same origin only with a greater seq."""

    def __init__(self) -> None:
        self._by_session: dict[SessionId, ClusterSessionStatus] = {}

    def offer(self, status: ClusterSessionStatus) -> bool:
        current = self._by_session.get(status.session_id)
        if current is not None and current.origin == status.origin and status.seq <= current.seq:
            return False
        self._by_session[status.session_id] = status
        return True

    def get(self, session_id: SessionId) -> ClusterSessionStatus | None:
        return self._by_session.get(session_id)

    def remove(self, session_id: SessionId) -> None:
        self._by_session.pop(session_id, None)
