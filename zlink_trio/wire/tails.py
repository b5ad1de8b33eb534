"""Nested parts of records: the session tail of 24, reservation fences, command 20's
operation-specific tails, command 39's route kinds, command 44's actions and command 51's
identities. Each is a frozen attrs class encoded as the array of its fields; the variants of
a tagged union carry their ``TAG``.
"""

from __future__ import annotations

from typing import ClassVar, Final

import attrs

from ..errors import ErrorKind
from ..ids import (
    ActorId,
    ActorRef,
    AuthorityOwnerGeneration,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OperationId,
    OwnerLeaseGeneration,
    SpotId,
    SpotRef,
    StableType,
)
from .base import invalid
from .enums import CreateState, JoinResult
from .fields import (
    ACTOR_ID,
    AUTHORITY_OWNER_GENERATION,
    BOOL,
    MAX_PAYLOAD_BYTES,
    MESH_NAME,
    NODE_GENERATION,
    OBJECT_GENERATION,
    OPERATION_ID,
    OWNER_LEASE_GENERATION,
    RID,
    SESSION_RID,
    SPOT_ID,
    STABLE_TYPE,
    TEXT8,
    U8,
    U32,
    U64,
    Bytes,
    IntEnumField,
    nullable,
    wire,
)
from .nested import Nested, TaggedUnion

__all__ = [
    "ACTOR_REF",
    "COMMAND_20_TAIL",
    "COMMAND_39_ROUTE",
    "COMMAND_44_ACTION",
    "ERROR_KIND",
    "PAYLOAD",
    "SPOT_REF",
    "ActorAuthorityFence",
    "BindTail",
    "CloseTail",
    "ColdActivation",
    "CreateTail",
    "DestroyTail",
    "JoinTail",
    "ReadyFence",
    "ReplyPayloadTail",
    "ReservationFence",
    "RetiredSessionBinding",
    "Route",
    "SessionRouteAbort",
    "SessionRouteAction",
    "SessionRouteCommit",
    "SessionTail",
    "Tail",
]

PAYLOAD: Final = Bytes(MAX_PAYLOAD_BYTES, "payload")
ERROR_KIND: Final = IntEnumField(ErrorKind)
SPOT_REF: Final = Nested(SpotRef, (SPOT_ID, OBJECT_GENERATION, MESH_NAME, RID))
ACTOR_REF: Final = Nested(ActorRef, (ACTOR_ID, OBJECT_GENERATION, MESH_NAME, RID))


# --- 24: bound-session tail ---------------------------------------------------------------


@attrs.frozen(slots=True, kw_only=True)
class SessionTail:
    """Command 24's bound-session tail (spec 02 §5). The binding token is a session-owner
    local handle and is never on the wire."""

    session_owner_rid: NodeRid = attrs.field(metadata=wire(RID))
    session_owner_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    session_rid: bytes = attrs.field(metadata=wire(SESSION_RID))
    binding_generation: int = attrs.field(metadata=wire(U64))
    session_sequence: int = attrs.field(metadata=wire(U64))


# --- 47 / 110: reservation fence ----------------------------------------------------------


@attrs.frozen(slots=True, kw_only=True)
class ReservationFence:
    """The provider-issued reservation fence of a remote create (spec 06 §3.3)."""

    expected_store_version: int = attrs.field(metadata=wire(U64))
    object_generation: ObjectGeneration = attrs.field(metadata=wire(OBJECT_GENERATION))
    authority_owner_generation: AuthorityOwnerGeneration = attrs.field(
        metadata=wire(AUTHORITY_OWNER_GENERATION)
    )
    target_rid: NodeRid = attrs.field(metadata=wire(RID))
    target_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    target_owner_lease_generation: OwnerLeaseGeneration = attrs.field(
        metadata=wire(OWNER_LEASE_GENERATION)
    )
    pending_capacity_delta: int = attrs.field(metadata=wire(U8))


# --- 20: operation-specific tails -----------------------------------------------------------


@attrs.frozen(slots=True, kw_only=True)
class ReplyPayloadTail:
    """Reply of an application request (24 or 39 with ``MessageKind.REQUEST``)."""

    TAG: ClassVar[int] = 1
    payload: bytes = attrs.field(metadata=wire(PAYLOAD))


@attrs.frozen(slots=True, kw_only=True)
class CreateTail:
    """Terminal of a create (47, 110): the state, the attempt's ref and an optional reply.

    ``object_id`` is a SpotId for 47 and an ActorId for 110 (use :meth:`spot_ref` /
    :meth:`actor_ref`). EXISTING and FAILED carry no application reply (spec 06 §3.2).
    For REJECTED the ref names the rejected attempt, not a Ready location.
    """

    TAG: ClassVar[int] = 2
    state: CreateState = attrs.field(metadata=wire(IntEnumField(CreateState)))
    object_id: str = attrs.field(metadata=wire(TEXT8))
    object_generation: ObjectGeneration = attrs.field(metadata=wire(OBJECT_GENERATION))
    mesh_name: MeshName = attrs.field(metadata=wire(MESH_NAME))
    node_rid: NodeRid = attrs.field(metadata=wire(RID))
    reply: bytes | None = attrs.field(default=None, metadata=wire(nullable(PAYLOAD)))

    def __attrs_post_init__(self) -> None:
        if self.reply is not None and self.state in (CreateState.EXISTING, CreateState.FAILED):
            invalid(type(self), f"{self.state.name} carries no application reply")

    def spot_ref(self) -> SpotRef:
        return SpotRef(
            SpotId.parse(self.object_id), self.object_generation, self.mesh_name, self.node_rid
        )

    def actor_ref(self) -> ActorRef:
        return ActorRef(
            ActorId.parse(self.object_id), self.object_generation, self.mesh_name, self.node_rid
        )


@attrs.frozen(slots=True, kw_only=True)
class CloseTail:
    """Terminal of command 48: a single ``closed`` bool (spec 06 §7.1)."""

    TAG: ClassVar[int] = 3
    closed: bool = attrs.field(metadata=wire(BOOL))


@attrs.frozen(slots=True, kw_only=True)
class DestroyTail:
    """Terminal of command 111: ``destroyed`` is False when the incarnation was already gone."""

    TAG: ClassVar[int] = 4
    destroyed: bool = attrs.field(metadata=wire(BOOL))


@attrs.frozen(slots=True, kw_only=True)
class BindTail:
    """Terminal of command 38: the binding the Actor owner registered, with the authority
    values the session owner stores in its binding route."""

    TAG: ClassVar[int] = 5
    binding_generation: int = attrs.field(metadata=wire(U64))
    authority_owner_generation: AuthorityOwnerGeneration = attrs.field(
        metadata=wire(AUTHORITY_OWNER_GENERATION)
    )
    owner_lease_generation: OwnerLeaseGeneration = attrs.field(
        metadata=wire(OWNER_LEASE_GENERATION)
    )
    node_rid: NodeRid | None = attrs.field(default=None, metadata=wire(nullable(RID)))
    """The Actor owner that registered the binding when a Message Follow hop took the
    bind there (None: the node the session owner sent it to). The session owner routes
    the binding to it."""
    node_generation: NodeGeneration | None = attrs.field(
        default=None, metadata=wire(nullable(NODE_GENERATION))
    )

    def __attrs_post_init__(self) -> None:
        if (self.node_rid is None) is not (self.node_generation is None):
            invalid(type(self), "node_rid and node_generation are set together")


@attrs.frozen(slots=True, kw_only=True)
class JoinTail:
    """Terminal of command 112: accepted or rejected by the Spot's join callback, the
    Actor's current Spot afterwards (None = none) and the callback's optional reply."""

    TAG: ClassVar[int] = 6
    result: JoinResult = attrs.field(metadata=wire(IntEnumField(JoinResult)))
    current_spot_id: SpotId | None = attrs.field(default=None, metadata=wire(nullable(SPOT_ID)))
    reply: bytes | None = attrs.field(default=None, metadata=wire(nullable(PAYLOAD)))


Tail = ReplyPayloadTail | CreateTail | CloseTail | DestroyTail | BindTail | JoinTail
COMMAND_20_TAIL: Final = TaggedUnion(
    "tail", ReplyPayloadTail, CreateTail, CloseTail, DestroyTail, BindTail, JoinTail
)


# --- 39: route kinds -----------------------------------------------------------------------


@attrs.frozen(slots=True, kw_only=True)
class ReadyFence:
    """Route kind 1: the generation fence of an authority that is already Ready
    (spec 06 §4.1). ``object_generation`` is a route snapshot, not a target-match rule."""

    TAG: ClassVar[int] = 1
    spot_id: SpotId = attrs.field(metadata=wire(SPOT_ID))
    object_generation: ObjectGeneration = attrs.field(metadata=wire(OBJECT_GENERATION))
    authority_owner_generation: AuthorityOwnerGeneration = attrs.field(
        metadata=wire(AUTHORITY_OWNER_GENERATION)
    )
    target_rid: NodeRid = attrs.field(metadata=wire(RID))
    target_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    owner_lease_generation: OwnerLeaseGeneration = attrs.field(
        metadata=wire(OWNER_LEASE_GENERATION)
    )
    timeout_ms: int | None = attrs.field(default=None, metadata=wire(nullable(U32)))
    """Remaining request deadline (None for a send)."""


@attrs.frozen(slots=True, kw_only=True)
class ColdActivation:
    """Route kind 2: Missing cold activation. Only the target mesh/RID/lifecycle, the Spot
    id, stable type, descriptor version and deadline; no authority generation exists yet
    (spec 06 §4.1). ``timeout_ms`` is the remaining deadline; the target derives the
    ``instance-activation-recovery-v1`` deadline from it."""

    TAG: ClassVar[int] = 2
    target_mesh: MeshName = attrs.field(metadata=wire(MESH_NAME))
    target_rid: NodeRid = attrs.field(metadata=wire(RID))
    target_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    spot_id: SpotId = attrs.field(metadata=wire(SPOT_ID))
    stable_type: StableType = attrs.field(metadata=wire(STABLE_TYPE))
    descriptor_version: int = attrs.field(metadata=wire(U64))
    timeout_ms: int = attrs.field(metadata=wire(U32))


Route = ReadyFence | ColdActivation
COMMAND_39_ROUTE: Final = TaggedUnion("route", ReadyFence, ColdActivation)


# --- 44: actions ---------------------------------------------------------------------------


@attrs.frozen(slots=True, kw_only=True)
class SessionRouteCommit:
    """Command 44 commit (spec 02 §8.2): relocation identity, ActorId, ObjectGeneration,
    target MeshName/NodeRid, session identity, SessionRid and binding generation. Added:
    the target's node generation, AuthorityOwnerGeneration and OwnerLeaseGeneration, so
    the session owner's new route carries the full owner fence for later 24s."""

    TAG: ClassVar[int] = 1
    relocation_id: OperationId = attrs.field(metadata=wire(OPERATION_ID))
    actor_id: ActorId = attrs.field(metadata=wire(ACTOR_ID))
    object_generation: ObjectGeneration = attrs.field(metadata=wire(OBJECT_GENERATION))
    target_mesh: MeshName = attrs.field(metadata=wire(MESH_NAME))
    target_rid: NodeRid = attrs.field(metadata=wire(RID))
    target_node_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    authority_owner_generation: AuthorityOwnerGeneration = attrs.field(
        metadata=wire(AUTHORITY_OWNER_GENERATION)
    )
    owner_lease_generation: OwnerLeaseGeneration = attrs.field(
        metadata=wire(OWNER_LEASE_GENERATION)
    )
    session_owner_rid: NodeRid = attrs.field(metadata=wire(RID))
    session_owner_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    session_rid: bytes = attrs.field(metadata=wire(SESSION_RID))
    binding_generation: int = attrs.field(metadata=wire(U64))


@attrs.frozen(slots=True, kw_only=True)
class SessionRouteAbort:
    """Command 44 abort: only the matching seal identity (spec 02 §8.2)."""

    TAG: ClassVar[int] = 2
    relocation_id: OperationId = attrs.field(metadata=wire(OPERATION_ID))
    session_rid: bytes = attrs.field(metadata=wire(SESSION_RID))
    binding_generation: int = attrs.field(metadata=wire(U64))


SessionRouteAction = SessionRouteCommit | SessionRouteAbort
COMMAND_44_ACTION: Final = TaggedUnion("action", SessionRouteCommit, SessionRouteAbort)


# --- 51: identities ------------------------------------------------------------------------


@attrs.frozen(slots=True, kw_only=True)
class ActorAuthorityFence:
    """The Actor authority source fence of command 51: the sender must be this authority."""

    actor_id: ActorId = attrs.field(metadata=wire(ACTOR_ID))
    object_generation: ObjectGeneration = attrs.field(metadata=wire(OBJECT_GENERATION))
    authority_owner_generation: AuthorityOwnerGeneration = attrs.field(
        metadata=wire(AUTHORITY_OWNER_GENERATION)
    )
    node_rid: NodeRid = attrs.field(metadata=wire(RID))
    node_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))


@attrs.frozen(slots=True, kw_only=True)
class RetiredSessionBinding:
    """The previous session owner's identity of command 51; the receiver runs the
    replacement callback only when every value matches its current replacement target."""

    node_rid: NodeRid = attrs.field(metadata=wire(RID))
    node_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    owner_id: int = attrs.field(metadata=wire(U64))
    owner_lease_generation: OwnerLeaseGeneration = attrs.field(
        metadata=wire(OWNER_LEASE_GENERATION)
    )
    session_rid: bytes = attrs.field(metadata=wire(SESSION_RID))
    retired_binding_generation: int = attrs.field(metadata=wire(U64))
