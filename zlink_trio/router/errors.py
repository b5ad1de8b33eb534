"""The router's error surface, each a :class:`~zlink_trio.errors.ZLinkError` with the HTTP
status the web adapter maps it to (spec 10 §3.6, §9.2, §10.1)."""

from __future__ import annotations

from typing import ClassVar

from ..errors import (
    ApplicationError,
    DeadlineExceeded,
    InvalidOperation,
    ShuttingDown,
    TypeMismatch,
    Unavailable,
    ZLinkError,
)
from .events import FailureCode, TurnFailed

__all__ = [
    "ConflictingAgentError",
    "FencingRejected",
    "ForwardTimeout",
    "HolderLost",
    "IdempotencyConflictError",
    "ReentrantSubmitError",
    "RouterShuttingDown",
    "SessionClaimFailed",
    "SessionEvicted",
    "SessionHeldElsewhere",
    "TurnFailedError",
    "TurnInterrupted",
    "failure_error",
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


class TurnFailedError(ApplicationError):
    """The turn raised; ``message`` is what crossed the wire (the cause's type and stack
    stay on the node that ran it)."""

    code: ClassVar[FailureCode] = FailureCode.FAILED


class TurnInterrupted(Unavailable):
    """The turn was interrupted (user, release, shutdown, lost lease, yield)."""

    code: ClassVar[FailureCode] = FailureCode.INTERRUPTED


class HolderLost(Unavailable):
    """The node running the turn died (§6.3 D)."""

    code: ClassVar[FailureCode] = FailureCode.HOLDER_LOST


class SessionEvicted(Unavailable):
    """The session was released or deleted while the result was awaited (§3.3 EVICT)."""

    code: ClassVar[FailureCode] = FailureCode.SESSION_EVICTED


class ForwardTimeout(DeadlineExceeded):
    """No answer for a forwarded turn within ``idempotency_forward_ttl`` (§9.1)."""

    code: ClassVar[FailureCode] = FailureCode.FORWARD_TIMEOUT


class SessionHeldElsewhere(Unavailable):
    """``delete_session`` could not take the lease within ``release_interrupt_timeout``: the
    holder did not yield (§7.7, IllegalStateException in the JVM). Retry later."""

    http_status: ClassVar[int] = 503


class ReentrantSubmitError(InvalidOperation):
    """``submit`` to a session from inside one of that session's own turns (§7.3: the router
    is not re-entrant; nesting is the sub-agent layer's job, §7.6). Refused at once rather
    than queued behind the very turn that would wait for it."""


class RouterShuttingDown(ShuttingDown):
    """The router stopped accepting submits (§6.3 C; IllegalStateException in the JVM)."""

    http_status: ClassVar[int] = 503


_BY_CODE: dict[FailureCode, type[ZLinkError]] = {
    FailureCode.FAILED: TurnFailedError,
    FailureCode.CONFLICTING_AGENT: ConflictingAgentError,
    FailureCode.INTERRUPTED: TurnInterrupted,
    FailureCode.HOLDER_LOST: HolderLost,
    FailureCode.SESSION_EVICTED: SessionEvicted,
    FailureCode.FORWARD_TIMEOUT: ForwardTimeout,
}


def failure_error(failed: TurnFailed) -> ZLinkError:
    """The exception a result handle raises for a failed turn."""
    return _BY_CODE[failed.code](failed.message)
