"""The inbox envelope (spec 10 §3.4, §5.6): :class:`InboundMessage` and its wire form.

The envelope carries sessionId, agentRef, userInput, priority, idempotencyKey, principal and
deliveredAt, and deliberately not the submitter's LiveSessionOptions or OpenAttributes: the
holder runs the message on the handle it already opened (§7.1 F2).
"""

from __future__ import annotations

from typing import Any

import attrs

from .ids import AgentRef, IdempotencyKey, InboundMessageId, SessionId
from .primitives import Json, JsonMap, read_float, read_int
from .values import Principal, Priority, UserInput, user_input_from_wire, user_input_to_wire

__all__ = ["InboundMessage"]


def _type(t: type) -> Any:
    return attrs.validators.instance_of(t)


@attrs.frozen(kw_only=True)
class InboundMessage:
    """One message handed from a non-holder to whichever node holds the session."""

    message_id: InboundMessageId = attrs.field(validator=_type(InboundMessageId))
    session_id: SessionId = attrs.field(validator=_type(SessionId))
    agent_ref: AgentRef = attrs.field(validator=_type(AgentRef))
    user_input: UserInput
    priority: Priority = attrs.field(validator=_type(Priority))
    delivered_at: float
    idempotency_key: IdempotencyKey | None = None
    initiator: Principal | None = None

    def to_wire(self) -> JsonMap:
        out: JsonMap = {
            "messageId": self.message_id.value,
            "sessionId": self.session_id.value,
            "agentRef": self.agent_ref.value,
            "priority": self.priority.name,
            "deliveredAt": self.delivered_at,
            "idempotencyKey": None if self.idempotency_key is None else self.idempotency_key.value,
            "principal": None if self.initiator is None else self.initiator.name,
        }
        out.update(user_input_to_wire(self.user_input))
        return out

    @classmethod
    def from_wire(cls, m: dict[str, Json]) -> InboundMessage:
        key = m.get("idempotencyKey")
        principal = m.get("principal")
        priority = m["priority"]
        return cls(
            message_id=InboundMessageId(str(m["messageId"])),
            session_id=SessionId(str(m["sessionId"])),
            agent_ref=AgentRef(str(m["agentRef"])),
            user_input=user_input_from_wire(m),
            priority=(
                Priority(read_int(priority, "priority"))
                if isinstance(priority, int | float) and not isinstance(priority, bool)
                else Priority[str(priority)]
            ),
            delivered_at=read_float(m["deliveredAt"], "deliveredAt"),
            idempotency_key=None if key is None else IdempotencyKey(str(key)),
            initiator=None if principal is None else Principal(str(principal)),
        )
