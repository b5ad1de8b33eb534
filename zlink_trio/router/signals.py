"""Cross-node signals (spec 10 §3.3, §5.4): seven kinds on two channels, plain primitives.

Channels are chosen by frequency, not meaning: EVENT and STATUS go on the events channel,
the rest on control, so a token flood cannot delay an INTERRUPT. Subscribers hear both.

Delivery is at-least-once and unordered. A signal whose kind this node does not know is
dropped whole (:func:`decode_signal` answers None), which is why YIELD, added later, is
always published together with the legacy ``INTERRUPT(SESSION_RELEASED)`` it replaces
(:func:`yield_signals`); a receiver honours either (:func:`requests_hand_off`).
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

from .events import InterruptReason
from .ids import NodeId, SessionId, TurnId
from .primitives import JsonMap, check_json_map, from_text, to_text

__all__ = [
    "Channel",
    "SessionSignal",
    "SignalKind",
    "channel_for",
    "decode_signal",
    "encode_signal",
    "interrupt_signal",
    "requests_hand_off",
    "yield_signals",
]


class SignalKind(enum.Enum):
    INTERRUPT = "INTERRUPT"
    EVICT = "EVICT"
    YIELD = "YIELD"
    MESSAGE_ENQUEUED = "MESSAGE_ENQUEUED"
    TURN_RESULT = "TURN_RESULT"
    EVENT = "EVENT"
    STATUS = "STATUS"


class Channel(enum.Enum):
    CONTROL = "control"
    EVENTS = "events"


_EVENTS_CHANNEL = frozenset({SignalKind.EVENT, SignalKind.STATUS})


def channel_for(kind: SignalKind) -> Channel:
    """EVENT and STATUS on the events channel, every other kind on control."""
    return Channel.EVENTS if kind in _EVENTS_CHANNEL else Channel.CONTROL


def _payload(value: object) -> JsonMap:
    return check_json_map(value, "signal payload")


@attrs.frozen(kw_only=True, eq=True, hash=False)
class SessionSignal:
    """One signal. ``payload`` must be plain JSON primitives (a typed object raises
    TypeError here, instead of silently doing nothing on a real bus)."""

    kind: SignalKind = attrs.field(validator=attrs.validators.instance_of(SignalKind))
    session_id: SessionId = attrs.field(validator=attrs.validators.instance_of(SessionId))
    origin: NodeId = attrs.field(validator=attrs.validators.instance_of(NodeId))
    payload: JsonMap = attrs.field(factory=dict, converter=_payload)

    @property
    def channel(self) -> Channel:
        return channel_for(self.kind)


def encode_signal(signal: SessionSignal) -> str:
    return to_text(
        {
            "kind": signal.kind.value,
            "sessionId": signal.session_id.value,
            "origin": signal.origin.value,
            "payload": signal.payload,
        }
    )


def decode_signal(text: str) -> SessionSignal | None:
    """Parse a signal; None (drop it whole) for an unknown kind or a malformed one."""
    try:
        raw: Any = from_text(text)
        return SessionSignal(
            kind=SignalKind(raw["kind"]),
            session_id=SessionId(raw["sessionId"]),
            origin=NodeId(raw["origin"]),
            payload=raw.get("payload") or {},
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def interrupt_signal(
    session_id: SessionId, origin: NodeId, reason: InterruptReason, turn_id: TurnId | None = None
) -> SessionSignal:
    payload: JsonMap = {"reason": reason.value}
    if turn_id is not None:
        payload["turnId"] = turn_id.value
    return SessionSignal(
        kind=SignalKind.INTERRUPT, session_id=session_id, origin=origin, payload=payload
    )


def yield_signals(session_id: SessionId, origin: NodeId) -> tuple[SessionSignal, SessionSignal]:
    """A hand-off request: YIELD plus the legacy ``INTERRUPT(SESSION_RELEASED)`` shim for
    nodes that predate YIELD (remove once every node knows YIELD, §14)."""
    return (
        SessionSignal(kind=SignalKind.YIELD, session_id=session_id, origin=origin),
        interrupt_signal(session_id, origin, InterruptReason.SESSION_RELEASED),  # YIELD shim
    )


def requests_hand_off(signal: SessionSignal) -> bool:
    """True for YIELD and for the legacy ``INTERRUPT(SESSION_RELEASED)`` (receiver side of
    the shim); the receiver must make two of them one hand-off."""
    if signal.kind is SignalKind.YIELD:
        return True
    return (
        signal.kind is SignalKind.INTERRUPT
        and signal.payload.get("reason") == InterruptReason.SESSION_RELEASED.value
    )
