"""The router's error surface, each a :class:`~zlink_trio.errors.ZLinkError` with the HTTP
status the web adapter maps it to (spec 10 §3.6, §9.2, §10.1)."""

from __future__ import annotations

from typing import ClassVar

from ..errors import InvalidOperation, TypeMismatch, Unavailable

__all__ = [
    "ConflictingAgentError",
    "FencingRejected",
    "IdempotencyConflictError",
    "SessionClaimFailed",
]


class ConflictingAgentError(TypeMismatch):
    """The session is bound to another agent (§3.6): 409. Nothing was reserved or leased."""

    http_status: ClassVar[int] = 409


class IdempotencyConflictError(InvalidOperation):
    """The idempotency key was used with a different input (§9.2 row 5): 409."""

    http_status: ClassVar[int] = 409


class SessionClaimFailed(Unavailable):
    """The shared store could not be claimed (§10.1 row 1): 503, retry recommended."""

    http_status: ClassVar[int] = 503


class FencingRejected(Unavailable):
    """A record write carried a fencing token older than one the record has seen, or this
    node's store no longer holds the session's lease (§5.3, §7.4, §10.3)."""

    http_status: ClassVar[int] = 503
