"""Actor lifecycle records (110-112): remote create, destroy and join. The spec leaves
them unnumbered. 110 mirrors 47; 111 and 112 are provisional until the membership work
fixes their fields (docs/wire.md).
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
from .base import WireRecord
from .commands import Command
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
    U32,
    nullable,
    wire,
)
from .nested import Nested
from .tails import PAYLOAD, ReservationFence

__all__ = ["ActorCreate", "ActorDestroy", "ActorJoin"]


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
    """112: move an Actor into a User Spot (or back to its Entry Spot), source → the
    target Spot's owner, request; terminal 20 with a JoinTail. ``request`` is the optional
    application message for the Spot's join callback. Provisional."""

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
