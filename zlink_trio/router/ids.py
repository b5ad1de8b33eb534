"""The router's identity values: sessions, agents, turns, nodes, keys, inbound messages.

Each is a frozen attrs class around one validated ``str`` (UTF-8, 1..255 bytes, compared
as-is, like every text id of zlink_trio). ``NodeId`` is the lease holder (spec 10 §7.3: the
bare node id). TurnId and InboundMessageId are minted with ``new()``.
"""

from __future__ import annotations

import uuid
from typing import Any, Self

import attrs

from ..ids import check_text_id

__all__ = [
    "AgentRef",
    "IdempotencyKey",
    "InboundMessageId",
    "NodeId",
    "ReserverId",
    "SessionId",
    "TurnId",
]


def _text(what: str) -> Any:
    def check(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
        check_text_id(value, what)

    return check


@attrs.frozen(order=True)
class SessionId:
    """One conversation; decides its agent on the first turn (spec 10 §3.6)."""

    value: str = attrs.field(validator=_text("SessionId"))

    def __str__(self) -> str:
        return self.value


@attrs.frozen(order=True)
class AgentRef:
    """Names the registered agent a session runs (looked up, never created, by the opener)."""

    value: str = attrs.field(validator=_text("AgentRef"))

    def __str__(self) -> str:
        return self.value


@attrs.frozen(order=True)
class NodeId:
    """This router's node; the lease holder id is exactly this value (§7.3)."""

    value: str = attrs.field(validator=_text("NodeId"))

    def __str__(self) -> str:
        return self.value


@attrs.frozen(order=True)
class IdempotencyKey:
    """A client-issued key: at most one execution per key (§9.2)."""

    value: str = attrs.field(validator=_text("IdempotencyKey"))

    def __str__(self) -> str:
        return self.value


@attrs.frozen(order=True)
class TurnId:
    """One turn; minted by the submitting router."""

    value: str = attrs.field(validator=_text("TurnId"))

    @classmethod
    def new(cls) -> Self:
        return cls(f"turn-{uuid.uuid4()}")

    @classmethod
    def for_message(cls, message_id: InboundMessageId) -> Self:
        """The turn that runs an inbox message: derived from the message id, so the
        submitter and the holder name it alike without another envelope field."""
        return cls(f"turn-of-{message_id.value}")

    @classmethod
    def unknown(cls) -> Self:
        """What a holder-loss frame carries (§6.3 D): no surviving node knows the id of the
        turn that died with its holder (the reservation names the holder, not the turn), so
        the frame names the turn by its idempotency key instead, and this id says so."""
        return cls("turn-unknown")

    def __str__(self) -> str:
        return self.value


@attrs.frozen(order=True)
class InboundMessageId:
    """One inbox envelope (§5.6); carried by a FORWARDED disposition when known."""

    value: str = attrs.field(validator=_text("InboundMessageId"))

    @classmethod
    def new(cls) -> Self:
        return cls(f"msg-{uuid.uuid4()}")

    def __str__(self) -> str:
        return self.value


@attrs.frozen(order=True)
class ReserverId:
    """The holder of one idempotency reservation: one per attempt, never the bare node id
    (the lease holder is the node id; the two are different strings, §7.3, §7.4)."""

    value: str = attrs.field(validator=_text("ReserverId"))

    @classmethod
    def new(cls, node: NodeId) -> Self:
        return cls(f"{node.value}/{uuid.uuid4().hex}")

    def __str__(self) -> str:
        return self.value
