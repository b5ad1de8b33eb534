"""One error vocabulary for the whole runtime.

Every result the spec names has an :class:`ErrorKind`; every raised framework error is a
:class:`ZLinkError` subclass carrying its kind. Errors cross the wire as ``(kind code,
message)`` and are rebuilt with :func:`error_from_kind`, so a remote failure raises the
same class a local one would.
"""

from __future__ import annotations

import enum
from typing import ClassVar, Final

__all__ = [
    "AlreadyExists",
    "ApplicationError",
    "CapacityExceeded",
    "ConfigurationError",
    "DeadlineExceeded",
    "DescriptorConflict",
    "ErrorKind",
    "InvalidArgument",
    "InvalidOperation",
    "NotConfigured",
    "NotFound",
    "OwnerLeaseExpired",
    "ProtocolError",
    "SessionNotBound",
    "ShuttingDown",
    "StaleRoute",
    "StoreOutcomeUnknown",
    "TypeMismatch",
    "Unavailable",
    "ZLinkError",
    "error_from_kind",
]


class ErrorKind(enum.IntEnum):
    """Public error kinds, spelled as the spec spells them.

    The integer values are wire codes (``failureCode`` of command 20); never renumber.
    """

    UNAVAILABLE = 1
    INVALID_OPERATION = 2
    NOT_FOUND = 3
    NOT_CONFIGURED = 4
    ALREADY_EXISTS = 5
    TYPE_MISMATCH = 6
    CAPACITY_EXCEEDED = 7
    DEADLINE_EXCEEDED = 8
    SHUTTING_DOWN = 9
    CONFIGURATION = 10
    PROTOCOL = 11
    APPLICATION = 12


class ZLinkError(Exception):
    """Base of every framework error. ``kind`` says which spec result it is."""

    kind: ClassVar[ErrorKind]

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message: Final = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class Unavailable(ZLinkError):
    """The target cannot be reached now: no route, stale fence, sealed, owner gone."""

    kind = ErrorKind.UNAVAILABLE


class StaleRoute(Unavailable):
    """The resolved owner no longer owns the target. Never resent automatically."""


class StoreOutcomeUnknown(Unavailable):
    """A Store mutation was interrupted (connection lost, cancelled): it may or may not
    have committed. Re-read before deciding; never treat this as success or failure."""


class InvalidOperation(ZLinkError):
    """The call is not valid in this state (wrong generation, option set twice, ...)."""

    kind = ErrorKind.INVALID_OPERATION


class SessionNotBound(InvalidOperation):
    """Push or close without a current binding: bind first, then the same call succeeds."""


class NotFound(ZLinkError):
    """No Ready authority, unknown type, unknown mesh, or no handler."""

    kind = ErrorKind.NOT_FOUND


class NotConfigured(ZLinkError):
    """No candidate configured for the request (e.g. no Object-role mesh)."""

    kind = ErrorKind.NOT_CONFIGURED


class AlreadyExists(ZLinkError):
    """Exclusive create found a Ready object of the same type."""

    kind = ErrorKind.ALREADY_EXISTS


class TypeMismatch(ZLinkError):
    """The id exists with another stable type or kind."""

    kind = ErrorKind.TYPE_MISMATCH


class CapacityExceeded(ZLinkError):
    """No capacity left (node active+pending, lane bound, ...)."""

    kind = ErrorKind.CAPACITY_EXCEEDED


class DeadlineExceeded(ZLinkError, TimeoutError):
    """The operation's one deadline passed after it was admitted."""

    kind = ErrorKind.DEADLINE_EXCEEDED


class ShuttingDown(ZLinkError):
    """The node (or the admission it needs) is draining or closed."""

    kind = ErrorKind.SHUTTING_DOWN


class ConfigurationError(ZLinkError):
    """Invalid configuration or registration; raised at startup or registration time."""

    kind = ErrorKind.CONFIGURATION


class InvalidArgument(ConfigurationError, ValueError):
    """A value given to a call is outside its domain (a timeout that is not a finite number
    of seconds > 0, ...): a caller's mistake, raised before anything runs. A
    ``ValueError`` too, like :class:`~zlink_trio.InvalidId` (an invalid id given through
    the API), so plain Python callers catch it idiomatically."""


class ProtocolError(ZLinkError):
    """Malformed or unexpected wire input. Counted and traced at ingress, never delivered."""

    kind = ErrorKind.PROTOCOL


class ApplicationError(ZLinkError):
    """An application handler, factory or callback raised; the message carries its repr."""

    kind = ErrorKind.APPLICATION


_BY_KIND: Final[dict[ErrorKind, type[ZLinkError]]] = {
    ErrorKind.UNAVAILABLE: Unavailable,
    ErrorKind.INVALID_OPERATION: InvalidOperation,
    ErrorKind.NOT_FOUND: NotFound,
    ErrorKind.NOT_CONFIGURED: NotConfigured,
    ErrorKind.ALREADY_EXISTS: AlreadyExists,
    ErrorKind.TYPE_MISMATCH: TypeMismatch,
    ErrorKind.CAPACITY_EXCEEDED: CapacityExceeded,
    ErrorKind.DEADLINE_EXCEEDED: DeadlineExceeded,
    ErrorKind.SHUTTING_DOWN: ShuttingDown,
    ErrorKind.CONFIGURATION: ConfigurationError,
    ErrorKind.PROTOCOL: ProtocolError,
    ErrorKind.APPLICATION: ApplicationError,
}


def error_from_kind(kind: ErrorKind, message: str = "") -> ZLinkError:
    """Rebuild the public exception for a kind received from a peer."""
    return _BY_KIND[kind](message)


class OwnerLeaseExpired(Unavailable):
    """The owner lease named by a Store mutation is expired, superseded or unknown:
    an expired owner admits no message, timer or location update."""


class DescriptorConflict(ConfigurationError):
    """A node descriptor (MeshName, NodeRid) or its Entry Spot claim collides with an
    active claim; the Store was left unchanged."""
