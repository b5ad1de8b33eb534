"""Actor lifecycle records (110-114): remote create, destroy, join and a cross-node
Join's journal. The spec leaves them unnumbered. 110 mirrors 47; 111 is provisional;
112-114 are the membership transaction's (docs/decisions.md, "Membership").
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from ..ids import (
    ActorId,
    AuthorityOwnerGeneration,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OperationId,
    SpotId,
    StableType,
)
from .base import WireRecord, invalid
from .commands import Command
from .enums import MessageKind
from .fields import (
    ACTOR_ID,
    AUTHORITY_OWNER_GENERATION,
    CORRELATION,
    NODE_GENERATION,
    OBJECT_GENERATION,
    OPERATION_ID,
    RID,
    SPOT_ID,
    STABLE_TYPE,
    TEXT8,
    U32,
    U64,
    IntEnumField,
    nullable,
    wire,
)
from .nested import Nested
from .tails import PAYLOAD, ReservationFence

__all__ = ["ActorCreate", "ActorDestroy", "ActorJoin", "ActorJournal", "ActorJournalEnd"]


@attrs.frozen(slots=True, kw_only=True)
class ActorCreate(WireRecord):
    """110: remote Actor create, source → selected target, request; terminal 20 with a
    CreateTail. Like 47, no request bytes: the target reads the Pending creation content
    from the Store."""

    COMMAND: ClassVar[Command] = Command.ACTOR_CREATE
    correlation: int = attrs.field(metadata=wire(CORRELATION))
    operation_id: OperationId = attrs.field(metadata=wire(OPERATION_ID))
    source_rid: NodeRid = attrs.field(metadata=wire(RID))
    source_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    actor_id: ActorId = attrs.field(metadata=wire(ACTOR_ID))
    stable_type: StableType = attrs.field(metadata=wire(STABLE_TYPE))
    reservation: ReservationFence = attrs.field(metadata=wire(Nested(ReservationFence)))
    timeout_ms: int = attrs.field(metadata=wire(U32))


@attrs.frozen(slots=True, kw_only=True)
class ActorDestroy(WireRecord):
    """111: remote Actor destroy, source → current owner, request; terminal 20 with a
    DestroyTail. Provisional."""

    COMMAND: ClassVar[Command] = Command.ACTOR_DESTROY
    correlation: int = attrs.field(metadata=wire(CORRELATION))
    operation_id: OperationId = attrs.field(metadata=wire(OPERATION_ID))
    source_rid: NodeRid = attrs.field(metadata=wire(RID))
    source_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    actor_id: ActorId = attrs.field(metadata=wire(ACTOR_ID))
    object_generation: ObjectGeneration = attrs.field(metadata=wire(OBJECT_GENERATION))
    target_rid: NodeRid = attrs.field(metadata=wire(RID))
    target_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    timeout_ms: int = attrs.field(metadata=wire(U32))


@attrs.frozen(slots=True, kw_only=True)
class ActorJoin(WireRecord):
    """112: a cross-node Join, the Actor's owner → the target Spot's owner (a User Spot or
    an Entry Spot), request; terminal 20 with a JoinTail. The target reads the Actor's
    type and current membership from the Store row, checks the fences
    (``object_generation``, ``authority_owner_generation``, owner = the source lifecycle;
    ``spot_object_generation`` = the Spot it hosts), recreates the Actor with a new
    Context and moves the row in one CAS. ``request`` is the application message for the
    Spot's JOIN callback (None = empty)."""

    COMMAND: ClassVar[Command] = Command.ACTOR_JOIN
    correlation: int = attrs.field(metadata=wire(CORRELATION))
    operation_id: OperationId = attrs.field(metadata=wire(OPERATION_ID))
    source_rid: NodeRid = attrs.field(metadata=wire(RID))
    source_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    actor_id: ActorId = attrs.field(metadata=wire(ACTOR_ID))
    object_generation: ObjectGeneration = attrs.field(metadata=wire(OBJECT_GENERATION))
    authority_owner_generation: AuthorityOwnerGeneration = attrs.field(
        metadata=wire(AUTHORITY_OWNER_GENERATION)
    )
    spot_id: SpotId = attrs.field(metadata=wire(SPOT_ID))
    spot_object_generation: ObjectGeneration = attrs.field(metadata=wire(OBJECT_GENERATION))
    target_rid: NodeRid = attrs.field(metadata=wire(RID))
    target_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    request: bytes | None = attrs.field(default=None, metadata=wire(nullable(PAYLOAD)))
    timeout_ms: int = attrs.field(metadata=wire(U32))


@attrs.frozen(slots=True, kw_only=True)
class ActorJournal(WireRecord):
    """113: one payload a cross-node Join's source had accepted behind the barrier (or
    parked after it), source → the new owner, in acceptance order (``index`` 0, 1, ...),
    after the ACCEPTED terminal of 112 ``operation_id``. A request (non-zero
    correlation) gets its reply as a command 20, which the source relays to the original
    caller; a send (correlation 0) has none. ``timeout_ms``: a request's remaining
    deadline (None for a send). An index sent again (see 114) is kept once; a request's
    repeat moves its reply to the newer correlation."""

    COMMAND: ClassVar[Command] = Command.ACTOR_JOURNAL
    correlation: int = attrs.field(metadata=wire(U64))
    operation_id: OperationId = attrs.field(metadata=wire(OPERATION_ID))
    source_rid: NodeRid = attrs.field(metadata=wire(RID))
    source_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    actor_id: ActorId = attrs.field(metadata=wire(ACTOR_ID))
    index: int = attrs.field(metadata=wire(U32))
    message_kind: MessageKind = attrs.field(metadata=wire(IntEnumField(MessageKind)))
    packet_name: str = attrs.field(metadata=wire(TEXT8))
    payload: bytes = attrs.field(metadata=wire(PAYLOAD))
    timeout_ms: int | None = attrs.field(default=None, metadata=wire(nullable(U32)))

    def __attrs_post_init__(self) -> None:
        if (self.correlation == 0) is not (self.message_kind is MessageKind.SEND):
            invalid(type(self), "a send has correlation 0, a request a non-zero one")


@attrs.frozen(slots=True, kw_only=True)
class ActorJournalEnd(WireRecord):
    """114: the end of a cross-node Join's journal (``count`` commands 113, indices
    0..count-1), source → the new owner, request. The terminal 20 is OK with no tail when
    the new owner has every item (its activation then opens its lane: completion
    callback, journal, what arrived at it meanwhile), or OK with a ReplyPayloadTail
    holding the first missing index (ASCII decimal): the source sends again from there
    (items lost with a broken connection), then 114 again."""

    COMMAND: ClassVar[Command] = Command.ACTOR_JOURNAL_END
    correlation: int = attrs.field(metadata=wire(CORRELATION))
    operation_id: OperationId = attrs.field(metadata=wire(OPERATION_ID))
    source_rid: NodeRid = attrs.field(metadata=wire(RID))
    source_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    actor_id: ActorId = attrs.field(metadata=wire(ACTOR_ID))
    count: int = attrs.field(metadata=wire(U32))
