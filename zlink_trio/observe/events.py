"""The closed vocabulary of flow-trace events.

Every outcome that the spec (or our design) says is "logged and counted" instead of being
answered to a caller has exactly one :class:`FlowEvent`. A new outcome gets a new member
here, never a free-form log line: tests, metrics and operators read the same names.

Each member's value is its stable name (used in logs, metrics labels and statistics); its
:attr:`FlowEvent.level` is the logging level of its one log line, and
:attr:`FlowEvent.logger_name` the logger it is written to (the role's own logger, e.g.
``zlink_trio.actors``, so configuring a role's logging keeps covering its outcomes).
"""

from __future__ import annotations

import enum
import logging
from typing import Final

__all__ = ["FlowEvent"]

_DEBUG: Final = logging.DEBUG
_INFO: Final = logging.INFO
_WARNING: Final = logging.WARNING


class FlowEvent(enum.Enum):
    """A logged-and-counted runtime outcome (see the module docstring)."""

    level: int
    logger_name: str

    def __new__(cls, name: str, level: int, role: str) -> FlowEvent:
        member = object.__new__(cls)
        member._value_ = name
        member.level = level
        member.logger_name = f"zlink_trio.{role}"
        return member

    # --- message delivery (spec 04 §5, §8.1) ------------------------------------------------
    STALE_ROUTE_INGRESS = ("stale_route_ingress", _INFO, "actors")
    """An inbound command names another node lifecycle than this one: answered StaleRoute
    (a request) or dropped (a send)."""
    STALE_ROUTE_RESULT = ("stale_route_result", _INFO, "actors")
    """A call of this node learned that its cached or read route was stale (the owner
    answered StaleRoute, or the Store showed another owner): the call ends Unavailable and is
    never re-sent."""
    REPEATED_FRAME_DROPPED = ("repeated_ingress", _INFO, "actors")
    """A repeated application frame (same message id on the same id space) was dropped at
    the owner: an application message never runs twice."""
    DISPATCH_REFUSED = ("dispatch_refused", _INFO, "actors")
    """A one-way send from another node found the Actor's queue full and was refused (a
    send has no terminal to carry the refusal)."""
    SEND_NOT_ADMITTED = ("send_not_admitted", _INFO, "actors")
    """A one-way send from another node was not admitted (unknown Actor, not admitting):
    a send has no terminal, so the outcome is only logged and counted."""
    REQUEST_EXPIRED = ("request_expired", _DEBUG, "actors")
    """A request's deadline passed before its turn: its handler never ran."""
    NO_HANDLER = ("no_handler", _INFO, "actors")
    """No handler is registered for the message's (kind, packet)."""
    PAYLOAD_UNDECODABLE = ("payload_undecodable", _INFO, "actors")
    """A payload did not decode as the handler's declared type: it never reached the
    handler (a request ends InvalidOperation)."""
    HANDLER_ERROR = ("handler_error", _INFO, "actors")
    """A handler raised an expected application error (a ZLinkError): one line, no
    traceback."""
    HANDLER_CRASHED = ("handler_crashed", _WARNING, "actors")
    """A handler raised an unexpected exception: it is answered ApplicationError."""
    DROPPED_BY_DESTROY = ("dropped_by_destroy", _DEBUG, "actors")
    """Queued messages of an Actor that was destroyed before their turn."""
    FENCED = ("fenced", _INFO, "actors")
    """A message accepted by an Actor of this node was not run because this node's owner
    lease was lost (its local deadline passed): a request is answered Unavailable. No
    turn runs on a fail-stopped node (docs/decisions.md, "Owner loss: fencing")."""
    # --- owner loss and bounded reservations (docs/decisions.md, "Owner loss") ------------
    RECLAIMED = ("reclaimed", _INFO, "objects")
    """This node won the reclaim CAS of an authority row whose owner lease expired (or of
    a Creating reservation past its attempt deadline + grace): the incarnation ended, the
    id is Missing and its capacity was given back. Counted once per row, by its winner."""
    REGISTRATION_SWEPT = ("registration_swept", _INFO, "objects")
    """This node removed the registration (lease row, descriptors, Entry claims) of a node
    lifecycle whose lease expired and which owns no authority row any more."""
    RELEASED_AT_STOP = ("released_at_stop", _DEBUG, "objects")
    """A clean stop released one authority row this lifecycle owned (peers see the id
    Missing at once instead of after the lease)."""
    # --- Spot direct calls and cold activation (spec 06 §4–§5) ------------------------------
    ACTIVATION_FAILED = ("activation_failed", _INFO, "spots")
    """A one-way send with Instance intent reached its activation target but could not be
    delivered there (the activation failed, a type mismatch, its deadline): a send has no
    terminal, so the outcome is only logged and counted."""
    ACTIVATION_FORWARDED = ("activation_forwarded", _DEBUG, "spots")
    """An activation target lost the creation race: it made no Spot and forwarded the
    message once (same operation id, payload, deadline) to the Ready owner."""
    FIRST_RECORD_UNSETTLED = ("first_record_unsettled", _WARNING, "spots")
    """The completion of a cold activation's first message could not be recorded (or its
    recovery pointer removed) in the Location Store in time: an owner loss of this Spot
    would then run that message again on a fresh instance."""
    ACTIVATION_RECOVERED = ("activation_recovered", _INFO, "spots")
    """This node resumed the cold activation of an Instance Spot whose owner lifecycle
    ended before its first message completed (spec 06 §4.1.1): the first message runs here,
    first and once."""
    ACTIVATION_ABORTED = ("activation_aborted", _INFO, "spots")
    """This node ended, with the exact fence, a cold activation whose owner lifecycle ended
    and that cannot be resumed (its deadline passed, its root is gone, or no node hosts its
    type any more): its first message is dropped."""
    # --- sessions and relocation (spec 02 §8) -----------------------------------------------
    LATE_SESSION_ROUTE_UPDATE = ("late_session_route_update", _WARNING, "sessions")
    """A command 44 (or another relocation's update) arrived after its seal was resolved:
    ignored (spec 02 §8)."""
    SESSION_SEAL_TIMEOUT = ("session_seal_timeout", _WARNING, "sessions")
    """A relocation seal of a binding got no command 44 within
    SessionRelocationSealTimeout: the physical session was closed and the binding's held
    messages dropped (spec 02 §8.1)."""
    CUTOVER_TIMEOUT = ("cutover_timeout", _WARNING, "sessions")
    """The relocation cutover did not confirm within the fallback: the fallback runs
    (spec 02 §8.1)."""
    SESSION_PUSH_REJECTED = ("session_push_rejected", _INFO, "sessions")
    """A push (command 36, or its in-process equivalent) was not submitted to a STREAM
    connection: its session is unknown or closed, or its binding generation, Actor
    ObjectGeneration, source NodeGeneration or AuthorityOwnerGeneration is not the current
    binding's (spec 02 §5: a rejected push is recorded, never silently lost)."""
    SESSION_REPLACED_NOT_SENT = ("session_replaced_not_sent", _INFO, "sessions")
    """A boundSessionReplaced (51) could not be sent to the old session owner (its writer
    lane stayed full for ``peer_send_timeout``, or the peer was gone): not retried; the
    new binding stands (spec 02 §6)."""
    SESSION_STALE_CONTROL = ("session_stale_control", _INFO, "sessions")
    """A late or duplicate boundSessionReplaced (51) or boundSessionClose (140) named an
    identity that is not a current binding of this session owner: ignored (spec 02 §6)."""
    SESSION_PROTOCOL_ERROR = ("session_protocol_error", _INFO, "sessions")
    """A STREAM client sent something that is not a valid frame: answered with an error
    frame and the connection closed; no application code saw it."""
    SESSION_REPLY_DROPPED = ("session_reply_dropped", _DEBUG, "sessions")
    """A reply (or error) for a STREAM request arrived after its connection closed, or
    after the request was already completed: dropped, never given to another session."""
