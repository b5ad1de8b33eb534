"""What the transport knows about records at ingress: which are replies, which are
handshake-only, which requests a command 20 answers, and where a record is stamped with
its sender's identity (checked against the connection's proven peer)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, cast

import attrs

from ..ids import NodeGeneration, NodeRid
from ..wire import (
    ActorCreate,
    ActorDestroy,
    ActorJoin,
    ActorJournal,
    ActorJournalEnd,
    ActorSend,
    BoundSessionBind,
    BoundSessionReplaced,
    BoundSessionSend,
    PeerHello,
    PeerHelloAck,
    PeerHelloConfirm,
    RelocationPrepare,
    RelocationRelayReady,
    SessionRelocationSealed,
    SpotDirectRoute,
    TerminalReply,
    UserSpotClose,
    UserSpotCreate,
)
from ..wire.records import ALL_RECORDS

if TYPE_CHECKING:
    from attrs import AttrsInstance

__all__ = ["ANSWERED_BY_20", "HANDSHAKE_TYPES", "REPLY_TYPES", "SOURCE_OF"]

REPLY_TYPES: Final[frozenset[type[Any]]] = frozenset(
    {TerminalReply, SessionRelocationSealed, RelocationRelayReady}
)
"""Replies routed to request waiters by (peer rid, correlation), never to handlers."""
HANDSHAKE_TYPES: Final[frozenset[type[Any]]] = frozenset(
    {PeerHello, PeerHelloAck, PeerHelloConfirm}
)
ANSWERED_BY_20: Final[frozenset[type[Any]]] = frozenset(
    {
        ActorSend,
        BoundSessionBind,
        SpotDirectRoute,
        UserSpotCreate,
        UserSpotClose,
        ActorCreate,
        ActorDestroy,
        ActorJoin,
        ActorJournal,
        ActorJournalEnd,
        RelocationPrepare,
    }
)
"""Requests (when their correlation is non-zero) whose terminal is a command 20: a node
that does not admit answers them with a FAILED Unavailable terminal at once."""


def _source_fields() -> dict[type[Any], Callable[[Any], tuple[NodeRid, NodeGeneration]]]:
    """Records stamped with their sender's identity, and how to read it."""
    table: dict[type[Any], Callable[[Any], tuple[NodeRid, NodeGeneration]]] = {}
    for cls in ALL_RECORDS:
        names = {field.name for field in attrs.fields(cast("type[AttrsInstance]", cls))}
        if "source_rid" in names and "source_generation" in names:
            table[cls] = lambda r: (r.source_rid, r.source_generation)
    table[BoundSessionSend] = lambda r: (r.source_rid, r.source_node_generation)
    table[BoundSessionReplaced] = lambda r: (r.source.node_rid, r.source.node_generation)
    return table


SOURCE_OF: Final = _source_fields()
