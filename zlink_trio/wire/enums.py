"""Small closed vocabularies carried by wire records. The integers are wire values:
never renumber a member, only append."""

from __future__ import annotations

import enum

__all__ = [
    "BindAction",
    "BoundSessionCloseAction",
    "CreateState",
    "GoodbyeReason",
    "JoinResult",
    "MessageKind",
    "ObjectKind",
    "RelayReadyResult",
    "RelocationPolicy",
    "SealResult",
    "TerminalResult",
]


class TerminalResult(enum.IntEnum):
    """Command 20 ``terminalResult``."""

    OK = 0
    FAILED = 1


class MessageKind(enum.IntEnum):
    """Send (one-way, correlation 0) or request (a terminal reply is owed)."""

    SEND = 0
    REQUEST = 1


class CreateState(enum.IntEnum):
    """Outcome carried by a create terminal's tail (spec 06 §3.2, spec 04 §6.2)."""

    EXISTING = 0
    CREATED = 1
    REJECTED = 2
    FAILED = 3


class SealResult(enum.IntEnum):
    """Command 43: the seal-installation result, and nothing else (spec 02 §8.2)."""

    SEALED = 0
    REJECTED = 1


class JoinResult(enum.IntEnum):
    """Outcome of an Actor join (command 112's terminal tail)."""

    ACCEPTED = 0
    REJECTED = 1


class BindAction(enum.IntEnum):
    """What a command 38 asks of the Actor owner (spec 02 §5, §6, §7).

    BIND installs ``binding_generation`` as the current binding. UNBIND is the tombstone
    transition that removes exactly that identity. DISCONNECT delivers the disconnect
    notification for that identity (the current Spot's disconnect callback runs once),
    then tombstones it; its terminal comes after the callback's terminal.
    """

    BIND = 0
    UNBIND = 1
    DISCONNECT = 2


class BoundSessionCloseAction(enum.IntEnum):
    """What a command 140 tells the session owner about one binding."""

    CLOSE_CONNECTION = 0
    """The bound Actor asks for the physical connection to close (its session.close())."""
    BINDING_ENDED = 1
    """The binding ended at the Actor owner: the incarnation was destroyed."""


class ObjectKind(enum.IntEnum):
    ACTOR = 0
    SPOT = 1


class RelocationPolicy(enum.IntEnum):
    """The registered relocation policy of the moving object (DisableRelocation never
    relocates, so it has no wire value)."""

    RECREATE = 0
    PRESERVE_STATE = 1


class RelayReadyResult(enum.IntEnum):
    """Command 122: the relay-ready reply."""

    ACCEPTED = 0
    REJECTED = 1


class GoodbyeReason(enum.IntEnum):
    """Command 104: why a peer closes the connection."""

    SHUTDOWN = 0
    PROTOCOL_ERROR = 1
    AUTHENTICATION_FAILED = 2
    STALE_GENERATION = 3
    DUPLICATE_CONNECTION = 4
    VERSION_MISMATCH = 5
