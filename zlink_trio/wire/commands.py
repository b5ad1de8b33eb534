"""The command number table: one number per wire record (DESIGN.md §6, docs/wire.md).

Numbers below 100 are the spec's and are fixed (spec 02 §5 table, spec 06 §3.3/§4.1/§7.1).
Numbers from 100 up are ours, for records the spec leaves unnumbered. Never renumber:
the number is the first element of every encoded record.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["RESERVED_COMMANDS", "Command"]


class Command(enum.IntEnum):
    """Wire command numbers. 45 is reserved and has no member: it is never encodable,
    and decoding it raises :class:`~zlink_trio.errors.ProtocolError`."""

    # --- spec numbers ------------------------------------------------------------------
    TERMINAL_REPLY = 20
    ACTOR_SEND = 24
    BOUND_SESSION_SEND = 36
    BOUND_SESSION_BIND = 38
    SPOT_DIRECT_ROUTE = 39
    SESSION_RELOCATION_SEAL = 42
    SESSION_RELOCATION_SEALED = 43
    SESSION_RELOCATION_ROUTE = 44
    USER_SPOT_CREATE = 47
    USER_SPOT_CLOSE = 48
    BOUND_SESSION_REPLACED = 51

    # --- our numbers (>= 100) ----------------------------------------------------------
    PEER_HELLO = 100
    PEER_HELLO_ACK = 101
    PEER_PING = 102
    PEER_PONG = 103
    PEER_GOODBYE = 104
    PEER_HELLO_CONFIRM = 105
    ACTOR_CREATE = 110
    ACTOR_DESTROY = 111
    ACTOR_JOIN = 112
    ACTOR_JOURNAL = 113
    ACTOR_JOURNAL_END = 114
    RELOCATION_PREPARE = 120
    RELOCATION_RESTORE = 121
    RELOCATION_RELAY_READY = 122
    RELOCATION_CUTOVER = 123
    RELOCATION_ABORT = 124
    RELOCATION_COMMITTED = 125
    MESSAGE_FOLLOW_RELAY = 130
    BOUND_SESSION_CLOSE = 140


RESERVED_COMMANDS: Final[frozenset[int]] = frozenset({45})
"""Numbers that are never sent and never accepted (spec 02 §5, §8.2: command 45)."""
