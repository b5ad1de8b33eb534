"""Relocation and Message Follow records (120-125, 130).

PROVISIONAL until the relocation issue fixes the protocol: the spec leaves these records
unnumbered and gives only their order (spec 02 §8.1 diagram): the source prepares the
target (temporary queue, 120), hands over the captured state (121, answered by the
relay-ready reply 122), relays held ingress (130), then sends the one-way cutover (123);
the coordinator aborts one-way with 124 before relay-ready is accepted. Field lists may
change; numbers will not.
"""

from __future__ import annotations

from typing import ClassVar, Final

import attrs

from ..errors import ErrorKind
from ..ids import (
    ActorId,
    AuthorityOwnerGeneration,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OperationId,
    StableType,
)
from .base import WireRecord, invalid
from .commands import Command
from .enums import ObjectKind, RelayReadyResult, RelocationPolicy
from .fields import (
    ACTOR_ID,
    AUTHORITY_OWNER_GENERATION,
    CORRELATION,
    MAX_FOLLOW_INNER_BYTES,
    NODE_GENERATION,
    OBJECT_GENERATION,
    OPERATION_ID,
    RID,
    STABLE_TYPE,
    TEXT8,
    U8,
    U32,
    U64,
    Bytes,
    FixedBytes,
    IntEnumField,
    nullable,
    wire,
)
from .nested import ListOf
from .tails import ERROR_KIND

__all__ = [
    "MAX_RELOCATION_MEMBERS",
    "MessageFollowRelay",
    "RelocationAbort",
    "RelocationCommitted",
    "RelocationCutover",
    "RelocationPrepare",
    "RelocationRelayReady",
    "RelocationRestore",
]

MAX_RELOCATION_MEMBERS: Final = 4096
"""Member Actors listed in one SpotWide relocation prepare."""
SHA256: Final = FixedBytes(32, "sha256")


@attrs.frozen(slots=True, kw_only=True)
class RelocationPrepare(WireRecord):
    """120: source runtime → target runtime, request (terminal 20): reserve and install
    the temporary queue for one relocation unit, no dispatch yet. ``members`` lists the
    member Actors that move with a SpotWide User Spot (empty otherwise)."""

    COMMAND: ClassVar[Command] = Command.RELOCATION_PREPARE
    correlation: int = attrs.field(metadata=wire(CORRELATION))
    relocation_id: OperationId = attrs.field(metadata=wire(OPERATION_ID))
    source_rid: NodeRid = attrs.field(metadata=wire(RID))
    source_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    target_rid: NodeRid = attrs.field(metadata=wire(RID))
    target_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    object_kind: ObjectKind = attrs.field(metadata=wire(IntEnumField(ObjectKind)))
    object_id: str = attrs.field(metadata=wire(TEXT8))
    stable_type: StableType = attrs.field(metadata=wire(STABLE_TYPE))
    object_generation: ObjectGeneration = attrs.field(metadata=wire(OBJECT_GENERATION))
    authority_owner_generation: AuthorityOwnerGeneration = attrs.field(
        metadata=wire(AUTHORITY_OWNER_GENERATION)
    )
    policy: RelocationPolicy = attrs.field(metadata=wire(IntEnumField(RelocationPolicy)))
    members: tuple[ActorId, ...] = attrs.field(
        default=(), metadata=wire(ListOf(ACTOR_ID, MAX_RELOCATION_MEMBERS))
    )
    timeout_ms: int = attrs.field(metadata=wire(U32))


@attrs.frozen(slots=True, kw_only=True)
class RelocationRestore(WireRecord):
    """121: source → target, request answered by a 122: restore from the captured state
    stored in the Relocation Store (content-addressed by SHA-256). ``state_sha256`` is
    None (and ``state_size`` 0) for RecreateOnRelocation."""

    COMMAND: ClassVar[Command] = Command.RELOCATION_RESTORE
    correlation: int = attrs.field(metadata=wire(CORRELATION))
    relocation_id: OperationId = attrs.field(metadata=wire(OPERATION_ID))
    state_sha256: bytes | None = attrs.field(default=None, metadata=wire(nullable(SHA256)))
    state_size: int = attrs.field(default=0, metadata=wire(U64))
    timeout_ms: int = attrs.field(metadata=wire(U32))

    def __attrs_post_init__(self) -> None:
        if self.state_sha256 is None and self.state_size != 0:
            invalid(type(self), "a state size needs a state digest")


@attrs.frozen(slots=True, kw_only=True)
class RelocationRelayReady(WireRecord):
    """122: target → source, the relay-ready reply to a 121. REJECTED carries a failure
    code; once ACCEPTED is received the source never reopens its route."""

    COMMAND: ClassVar[Command] = Command.RELOCATION_RELAY_READY
    correlation: int = attrs.field(metadata=wire(CORRELATION))
    relocation_id: OperationId = attrs.field(metadata=wire(OPERATION_ID))
    result: RelayReadyResult = attrs.field(metadata=wire(IntEnumField(RelayReadyResult)))
    failure_code: ErrorKind | None = attrs.field(default=None, metadata=wire(nullable(ERROR_KIND)))

    def __attrs_post_init__(self) -> None:
        if (self.result is RelayReadyResult.REJECTED) is not (self.failure_code is not None):
            invalid(type(self), "exactly a REJECTED result carries a failure code")


@attrs.frozen(slots=True, kw_only=True)
class RelocationCutover(WireRecord):
    """123: source → target, one-way: every relay before the boundary has been sent
    (``relayed_count`` of them)."""

    COMMAND: ClassVar[Command] = Command.RELOCATION_CUTOVER
    relocation_id: OperationId = attrs.field(metadata=wire(OPERATION_ID))
    relayed_count: int = attrs.field(metadata=wire(U64))


@attrs.frozen(slots=True, kw_only=True)
class RelocationAbort(WireRecord):
    """124: relocation coordinator → target, one-way: drop the temporary queue of a
    relocation aborted before relay-ready was accepted."""

    COMMAND: ClassVar[Command] = Command.RELOCATION_ABORT
    relocation_id: OperationId = attrs.field(metadata=wire(OPERATION_ID))
    reason: ErrorKind = attrs.field(metadata=wire(ERROR_KIND))


@attrs.frozen(slots=True, kw_only=True)
class RelocationCommitted(WireRecord):
    """125: target → source, one-way, after the target's commit (owner CAS, queue merge,
    route switch): ``server.relocate`` on the source returns once it arrives (a lost one
    changes nothing: the commit is the Store's). Ours; not in the spec."""

    COMMAND: ClassVar[Command] = Command.RELOCATION_COMMITTED
    relocation_id: OperationId = attrs.field(metadata=wire(OPERATION_ID))
    authority_owner_generation: AuthorityOwnerGeneration = attrs.field(
        metadata=wire(AUTHORITY_OWNER_GENERATION)
    )


@attrs.frozen(slots=True, kw_only=True)
class MessageFollowRelay(WireRecord):
    """130: previous owner → current owner, one-way: an ingress record that arrived on the
    old route, forwarded over the committed follow route (spec 06 §6). ``inner`` is the
    original record's encoded body, unchanged (operation id, generation, payload and reply
    route are preserved); ``hops`` counts relays (1..255; the runtime caps it at 8).
    The route fence: object id and generation, source and target AuthorityOwnerGeneration,
    target node."""

    COMMAND: ClassVar[Command] = Command.MESSAGE_FOLLOW_RELAY
    relocation_id: OperationId = attrs.field(metadata=wire(OPERATION_ID))
    object_kind: ObjectKind = attrs.field(metadata=wire(IntEnumField(ObjectKind)))
    object_id: str = attrs.field(metadata=wire(TEXT8))
    object_generation: ObjectGeneration = attrs.field(metadata=wire(OBJECT_GENERATION))
    source_authority_owner_generation: AuthorityOwnerGeneration = attrs.field(
        metadata=wire(AUTHORITY_OWNER_GENERATION)
    )
    target_authority_owner_generation: AuthorityOwnerGeneration = attrs.field(
        metadata=wire(AUTHORITY_OWNER_GENERATION)
    )
    target_rid: NodeRid = attrs.field(metadata=wire(RID))
    target_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    hops: int = attrs.field(metadata=wire(U8))
    inner: bytes = attrs.field(metadata=wire(Bytes(MAX_FOLLOW_INNER_BYTES, "inner")))

    def __attrs_post_init__(self) -> None:
        if self.hops == 0:
            invalid(type(self), "hops starts at 1")
