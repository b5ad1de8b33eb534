"""Wire records with spec command numbers (20, 24, 36, 38, 39, 42, 43, 44, 47, 48, 51),
plus re-exports of our own records (>= 100), ``ALL_RECORDS`` and the ``Record`` union.

Each record is a frozen attrs class (slots, keyword-only) whose field order IS the wire
order: ``[COMMAND, field1, field2, ...]``. Field types are in the metadata; see
``fields.py``. Fields beyond the spec's list are marked "Added:" and listed in
docs/decisions.md ("## Wire").
"""

from __future__ import annotations

from typing import ClassVar, Final, Self

import attrs

from ..errors import ErrorKind
from ..ids import (
    ActorId,
    AuthorityOwnerGeneration,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OperationId,
    OwnerLeaseGeneration,
    SpotId,
    SpotRef,
    StableType,
)
from .base import WireRecord, invalid
from .commands import Command
from .enums import (
    BindAction,
    BoundSessionCloseAction,
    CreateState,
    MessageKind,
    SealResult,
    TerminalResult,
)
from .fields import (
    ACTOR_ID,
    AUTHORITY_OWNER_GENERATION,
    BOOL,
    CORRELATION,
    MAX_METADATA_BYTES,
    MAX_SHORT_TEXT_BYTES,
    NODE_GENERATION,
    OBJECT_GENERATION,
    OPERATION_ID,
    OWNER_LEASE_GENERATION,
    RID,
    SESSION_RID,
    SHORT_TEXT,
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
from .lifecycle import ActorCreate, ActorDestroy, ActorJoin, ActorJournal, ActorJournalEnd
from .nested import Nested
from .peer import PeerGoodbye, PeerHello, PeerHelloAck, PeerHelloConfirm, PeerPing, PeerPong
from .relocation import (
    MessageFollowRelay,
    RelocationAbort,
    RelocationCommitted,
    RelocationCutover,
    RelocationPrepare,
    RelocationRelayReady,
    RelocationRestore,
)
from .tails import (
    COMMAND_20_TAIL,
    COMMAND_39_ROUTE,
    COMMAND_44_ACTION,
    ERROR_KIND,
    PAYLOAD,
    SPOT_REF,
    ActorAuthorityFence,
    CreateTail,
    ReservationFence,
    RetiredSessionBinding,
    Route,
    SessionRouteAction,
    SessionTail,
    Tail,
)

__all__ = [
    "ALL_RECORDS",
    "ActorCreate",
    "ActorDestroy",
    "ActorJoin",
    "ActorJournal",
    "ActorJournalEnd",
    "ActorSend",
    "BoundSessionBind",
    "BoundSessionClose",
    "BoundSessionReplaced",
    "BoundSessionSend",
    "MessageFollowRelay",
    "PeerGoodbye",
    "PeerHello",
    "PeerHelloAck",
    "PeerHelloConfirm",
    "PeerPing",
    "PeerPong",
    "Record",
    "RelocationAbort",
    "RelocationCommitted",
    "RelocationCutover",
    "RelocationPrepare",
    "RelocationRelayReady",
    "RelocationRestore",
    "SessionRelocationRoute",
    "SessionRelocationSeal",
    "SessionRelocationSealed",
    "SpotDirectRoute",
    "TerminalReply",
    "UserSpotClose",
    "UserSpotCreate",
]

METADATA: Final = Bytes(MAX_METADATA_BYTES, "metadata")

# Enum members as module constants: ``MessageKind.SEND`` is an attribute lookup through the
# enum metaclass (~80 ns), a module global ~10 ns; the cross-field rules below run on every
# construction and every decode.
_SEND: Final = MessageKind.SEND
_REQUEST: Final = MessageKind.REQUEST
_OK: Final = TerminalResult.OK
_FAILED: Final = TerminalResult.FAILED
_CREATE_FAILED: Final = CreateState.FAILED
_SEAL_REJECTED: Final = SealResult.REJECTED


def _truncate_utf8(text: str, max_bytes: int) -> str:
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates (exception text, file names): "?"
        raw = text.encode("utf-8", "replace")
        text = raw.decode("utf-8")
    return text if len(raw) <= max_bytes else raw[:max_bytes].decode("utf-8", "ignore")


def _check_send_correlation(owner: type[object], kind: object, correlation: object) -> None:
    if kind is _SEND and correlation != 0:
        invalid(owner, "a send has correlation 0")
    if kind is _REQUEST and correlation == 0:
        invalid(owner, "a request needs a non-zero correlation")


# --- 20 -------------------------------------------------------------------------------------


@attrs.frozen(slots=True, kw_only=True)
class TerminalReply(WireRecord):
    """20 terminal reply: the one terminal of a request, back to its source.

    Wire order is the spec's (06 §3.3): correlation, terminalResult, failureCode, tail.
    Added after them: ``failure_message`` (diagnostic text, <= 1024 UTF-8 bytes).
    OK has no failure code; FAILED has one, and its tail is absent or a FAILED CreateTail.
    """

    COMMAND: ClassVar[Command] = Command.TERMINAL_REPLY
    correlation: int = attrs.field(metadata=wire(CORRELATION))
    terminal_result: TerminalResult = attrs.field(metadata=wire(IntEnumField(TerminalResult)))
    failure_code: ErrorKind | None = attrs.field(default=None, metadata=wire(nullable(ERROR_KIND)))
    tail: Tail | None = attrs.field(default=None, metadata=wire(nullable(COMMAND_20_TAIL)))
    failure_message: str | None = attrs.field(default=None, metadata=wire(nullable(SHORT_TEXT)))

    def __attrs_post_init__(self) -> None:
        tail = self.tail
        failed_create = isinstance(tail, CreateTail) and tail.state is _CREATE_FAILED
        result = self.terminal_result
        if result is _OK:
            if self.failure_code is not None or self.failure_message is not None:
                invalid(type(self), "OK carries no failure code or message")
            if failed_create:
                invalid(type(self), "a FAILED create tail needs terminal result FAILED")
        elif result is _FAILED:
            if self.failure_code is None:
                invalid(type(self), "FAILED needs a failure code")
            if tail is not None and not failed_create:
                invalid(type(self), "FAILED carries no tail but a FAILED create tail")

    @classmethod
    def ok(cls, correlation: int, tail: Tail | None = None) -> Self:
        return cls(correlation=correlation, terminal_result=TerminalResult.OK, tail=tail)

    @classmethod
    def failed(
        cls, correlation: int, code: ErrorKind, message: str = "", tail: CreateTail | None = None
    ) -> Self:
        """A FAILED terminal; ``message`` is cut to 1024 UTF-8 bytes (empty → none; a lone
        surrogate becomes ``?``, so any ``str`` encodes)."""
        return cls(
            correlation=correlation,
            terminal_result=TerminalResult.FAILED,
            failure_code=code,
            tail=tail,
            failure_message=_truncate_utf8(message, MAX_SHORT_TEXT_BYTES) or None,
        )


# --- 24 / 36 / 38 / 51: session–actor binding -----------------------------------------------


@attrs.frozen(slots=True, kw_only=True)
class ActorSend(WireRecord):
    """24 actorSend: an Actor message to the Actor's owner; with ``session`` it is the
    session→Actor relay carrying the binding generation and session sequence (spec 02 §5).

    ``target_rid``/``target_generation`` and ``expected_owner_generation`` are the owner
    fence (stale-route detection); ``route_object_generation`` is only the route snapshot,
    never a target-match condition (spec 04 §5.1). Added: ``owner_lease_generation`` (route
    fence copy, checked by routing only), ``timeout_ms`` (remaining deadline: node clocks
    differ), ``operation_id`` (preserved by Message Follow), ``follow_hops``.
    """

    COMMAND: ClassVar[Command] = Command.ACTOR_SEND
    correlation: int = attrs.field(metadata=wire(U64))
    source_rid: NodeRid = attrs.field(metadata=wire(RID))
    source_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    target_rid: NodeRid = attrs.field(metadata=wire(RID))
    target_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    actor_id: ActorId = attrs.field(metadata=wire(ACTOR_ID))
    route_object_generation: ObjectGeneration | None = attrs.field(
        default=None, metadata=wire(nullable(OBJECT_GENERATION))
    )
    expected_owner_generation: AuthorityOwnerGeneration | None = attrs.field(
        default=None, metadata=wire(nullable(AUTHORITY_OWNER_GENERATION))
    )
    owner_lease_generation: OwnerLeaseGeneration | None = attrs.field(
        default=None, metadata=wire(nullable(OWNER_LEASE_GENERATION))
    )
    message_kind: MessageKind = attrs.field(metadata=wire(IntEnumField(MessageKind)))
    packet_name: str = attrs.field(metadata=wire(TEXT8))
    payload: bytes = attrs.field(metadata=wire(PAYLOAD))
    timeout_ms: int | None = attrs.field(default=None, metadata=wire(nullable(U32)))
    operation_id: OperationId | None = attrs.field(
        default=None, metadata=wire(nullable(OPERATION_ID))
    )
    follow_hops: int = attrs.field(default=0, metadata=wire(U8))
    session: SessionTail | None = attrs.field(
        default=None, metadata=wire(nullable(Nested(SessionTail)))
    )

    def __attrs_post_init__(self) -> None:
        # Fast accept of the two valid shapes (SEND with 0, REQUEST with non-zero); any
        # other combination gets the full check and its message.
        if (self.correlation == 0) is not (self.message_kind is _SEND):
            _check_send_correlation(type(self), self.message_kind, self.correlation)


@attrs.frozen(slots=True, kw_only=True)
class BoundSessionSend(WireRecord):
    """36 boundSessionSend: Actor→session push, a send (spec 02 §5). The session owner
    submits it only if source ObjectGeneration, source NodeGeneration, AuthorityOwner-
    Generation and expected binding generation are all current. Added:
    ``session_owner_generation`` (binding identity is owner RID + lifecycle + generation,
    spec 02 §4)."""

    COMMAND: ClassVar[Command] = Command.BOUND_SESSION_SEND
    actor_id: ActorId = attrs.field(metadata=wire(ACTOR_ID))
    object_generation: ObjectGeneration = attrs.field(metadata=wire(OBJECT_GENERATION))
    source_rid: NodeRid = attrs.field(metadata=wire(RID))
    source_node_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    authority_owner_generation: AuthorityOwnerGeneration = attrs.field(
        metadata=wire(AUTHORITY_OWNER_GENERATION)
    )
    session_owner_rid: NodeRid = attrs.field(metadata=wire(RID))
    session_owner_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    session_rid: bytes = attrs.field(metadata=wire(SESSION_RID))
    expected_binding_generation: int = attrs.field(metadata=wire(U64))
    packet_name: str = attrs.field(metadata=wire(TEXT8))
    payload: bytes = attrs.field(metadata=wire(PAYLOAD))


@attrs.frozen(slots=True, kw_only=True)
class BoundSessionBind(WireRecord):
    """38 boundSessionBind: session owner → Actor owner, request with one terminal 20
    (``BindTail`` on success). The Actor owner admits it on ObjectGeneration, target
    NodeGeneration and AuthorityOwnerGeneration only; ``owner_lease_generation`` is carried
    in the envelope but is not an admission input (spec 02 §5).

    Added: ``session_owner_id`` and ``session_owner_lease_generation`` (the Actor owner
    needs the full previous-owner identity to send command 51), ``action`` (BIND, or the
    UNBIND / DISCONNECT tombstone transitions of spec 02 §6-§7).
    """

    COMMAND: ClassVar[Command] = Command.BOUND_SESSION_BIND
    correlation: int = attrs.field(metadata=wire(CORRELATION))
    operation_id: OperationId = attrs.field(metadata=wire(OPERATION_ID))
    source_rid: NodeRid = attrs.field(metadata=wire(RID))
    source_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    session_owner_id: int = attrs.field(metadata=wire(U64))
    session_owner_lease_generation: OwnerLeaseGeneration = attrs.field(
        metadata=wire(OWNER_LEASE_GENERATION)
    )
    actor_id: ActorId = attrs.field(metadata=wire(ACTOR_ID))
    object_generation: ObjectGeneration = attrs.field(metadata=wire(OBJECT_GENERATION))
    target_rid: NodeRid = attrs.field(metadata=wire(RID))
    target_node_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    authority_owner_generation: AuthorityOwnerGeneration | None = attrs.field(
        metadata=wire(nullable(AUTHORITY_OWNER_GENERATION))
    )
    """None when the session owner's ActorRef snapshot carries no owner generation (an
    ActorRef names id, generation and location only): the owner then admits on
    ObjectGeneration and NodeGeneration, and its BindTail tells the generation."""
    owner_lease_generation: OwnerLeaseGeneration | None = attrs.field(
        metadata=wire(nullable(OWNER_LEASE_GENERATION))
    )
    """The caller's copy of the owner's lease generation, when it has one; carried, never
    an admission input (spec 02 §5)."""
    session_rid: bytes = attrs.field(metadata=wire(SESSION_RID))
    binding_generation: int = attrs.field(metadata=wire(U64))
    action: BindAction = attrs.field(
        default=BindAction.BIND, metadata=wire(IntEnumField(BindAction))
    )
    timeout_ms: int = attrs.field(metadata=wire(U32))
    follow_hops: int = attrs.field(default=0, metadata=wire(U8))
    """Message Follow hops taken (0: sent by the session owner itself). A previous owner
    that relays the bind (docs/relocation.md "Message Follow of a bind") adds one and
    stamps itself as the source; the session owner then travels in the two fields below."""
    session_owner_rid: NodeRid | None = attrs.field(default=None, metadata=wire(nullable(RID)))
    """The session owner of a followed bind (``follow_hops`` > 0; None otherwise: the
    source is the session owner). The binding identity and its pushes name it."""
    session_owner_generation: NodeGeneration | None = attrs.field(
        default=None, metadata=wire(nullable(NODE_GENERATION))
    )

    def __attrs_post_init__(self) -> None:
        if (self.session_owner_rid is None) is not (self.follow_hops == 0) or (
            self.session_owner_rid is None
        ) is not (self.session_owner_generation is None):
            invalid(
                type(self),
                "the session owner fields are set exactly when follow_hops is not 0",
            )

    @property
    def session_owner(self) -> tuple[NodeRid, NodeGeneration]:
        """The session owner lifecycle: the source, or the one a followed bind names."""
        rid, generation = self.session_owner_rid, self.session_owner_generation
        if rid is None or generation is None:
            return self.source_rid, self.source_generation
        return rid, generation


@attrs.frozen(slots=True, kw_only=True)
class BoundSessionReplaced(WireRecord):
    """51 boundSessionReplaced: Actor owner → previous session owner, one-way, at most
    once (spec 02 §6). ``source`` is the Actor authority source fence (never used to look
    up a local Actor); ``previous`` is the retired binding's full identity."""

    COMMAND: ClassVar[Command] = Command.BOUND_SESSION_REPLACED
    source: ActorAuthorityFence = attrs.field(metadata=wire(Nested(ActorAuthorityFence)))
    previous: RetiredSessionBinding = attrs.field(metadata=wire(Nested(RetiredSessionBinding)))


@attrs.frozen(slots=True, kw_only=True)
class BoundSessionClose(WireRecord):
    """140 boundSessionClose (ours): Actor owner → session owner, one-way, about one
    binding: ``CLOSE_CONNECTION`` is the Actor's bound-session close request (spec 02 §5:
    "connection close 요청"); ``BINDING_ENDED`` tells the session owner the binding ended
    at the owner (the incarnation was destroyed). The session owner applies it only when
    every identity value matches its current binding, like a 36."""

    COMMAND: ClassVar[Command] = Command.BOUND_SESSION_CLOSE
    source_rid: NodeRid = attrs.field(metadata=wire(RID))
    source_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    actor_id: ActorId = attrs.field(metadata=wire(ACTOR_ID))
    object_generation: ObjectGeneration = attrs.field(metadata=wire(OBJECT_GENERATION))
    authority_owner_generation: AuthorityOwnerGeneration = attrs.field(
        metadata=wire(AUTHORITY_OWNER_GENERATION)
    )
    session_owner_rid: NodeRid = attrs.field(metadata=wire(RID))
    session_owner_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    session_rid: bytes = attrs.field(metadata=wire(SESSION_RID))
    binding_generation: int = attrs.field(metadata=wire(U64))
    action: BoundSessionCloseAction = attrs.field(
        metadata=wire(IntEnumField(BoundSessionCloseAction))
    )


# --- 39: Spot direct route ------------------------------------------------------------------


@attrs.frozen(slots=True, kw_only=True)
class SpotDirectRoute(WireRecord):
    """39 Spot direct route: a Spot send/request to a Ready owner (route kind 1,
    :class:`ReadyFence`) or a cold activation envelope (kind 2, :class:`ColdActivation`)
    with the first application message (spec 06 §4.1).

    ``operation_id`` is always non-zero; ``metadata_present`` must agree with
    ``metadata``. ``source_spot_id`` is the optional sending Spot.
    """

    COMMAND: ClassVar[Command] = Command.SPOT_DIRECT_ROUTE
    correlation: int = attrs.field(metadata=wire(U64))
    operation_id: OperationId = attrs.field(metadata=wire(OPERATION_ID))
    source_rid: NodeRid = attrs.field(metadata=wire(RID))
    source_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    source_spot_id: SpotId | None = attrs.field(default=None, metadata=wire(nullable(SPOT_ID)))
    route: Route = attrs.field(metadata=wire(COMMAND_39_ROUTE))
    message_kind: MessageKind = attrs.field(metadata=wire(IntEnumField(MessageKind)))
    packet_name: str = attrs.field(metadata=wire(TEXT8))
    metadata_present: bool = attrs.field(default=False, metadata=wire(BOOL))
    metadata: bytes | None = attrs.field(default=None, metadata=wire(nullable(METADATA)))
    payload: bytes = attrs.field(metadata=wire(PAYLOAD))
    follow_hops: int = attrs.field(default=0, metadata=wire(U8))
    """Added (as on 24): the Message Follow hops this record took (0: sent by its caller;
    at most 8), its operation id unchanged on every hop."""

    def __attrs_post_init__(self) -> None:
        _check_send_correlation(type(self), self.message_kind, self.correlation)
        if self.metadata_present is not (self.metadata is not None):
            invalid(type(self), "metadata_present must match whether a metadata frame is present")


# --- 42 / 43 / 44: session relocation -------------------------------------------------------


@attrs.frozen(slots=True, kw_only=True)
class SessionRelocationSeal(WireRecord):
    """42 sessionRelocationSeal: relocation coordinator → session owner, request; the
    reply is a 43 (not a 20)."""

    COMMAND: ClassVar[Command] = Command.SESSION_RELOCATION_SEAL
    correlation: int = attrs.field(metadata=wire(CORRELATION))
    relocation_id: OperationId = attrs.field(metadata=wire(OPERATION_ID))
    actor_id: ActorId = attrs.field(metadata=wire(ACTOR_ID))
    object_generation: ObjectGeneration = attrs.field(metadata=wire(OBJECT_GENERATION))
    session_rid: bytes = attrs.field(metadata=wire(SESSION_RID))
    binding_generation: int = attrs.field(metadata=wire(U64))


@attrs.frozen(slots=True, kw_only=True)
class SessionRelocationSealed(WireRecord):
    """43 sessionRelocationSealed: the seal-installation result only. There is no session
    sequence and no high-water field (spec 02 §8.2). REJECTED carries a failure code."""

    COMMAND: ClassVar[Command] = Command.SESSION_RELOCATION_SEALED
    correlation: int = attrs.field(metadata=wire(CORRELATION))
    relocation_id: OperationId = attrs.field(metadata=wire(OPERATION_ID))
    result: SealResult = attrs.field(metadata=wire(IntEnumField(SealResult)))
    failure_code: ErrorKind | None = attrs.field(default=None, metadata=wire(nullable(ERROR_KIND)))

    def __attrs_post_init__(self) -> None:
        if (self.result is _SEAL_REJECTED) is not (self.failure_code is not None):
            invalid(type(self), "exactly a REJECTED result carries a failure code")


@attrs.frozen(slots=True, kw_only=True)
class SessionRelocationRoute(WireRecord):
    """44 sessionRelocationRoute: target runtime (commit) or relocation coordinator
    (abort before relay-ready was accepted) → session owner; one-way, no response, sent
    once and never retransmitted (spec 02 §8.2)."""

    COMMAND: ClassVar[Command] = Command.SESSION_RELOCATION_ROUTE
    action: SessionRouteAction = attrs.field(metadata=wire(COMMAND_44_ACTION))


# --- 47 / 48: remote User Spot create and close --------------------------------------------


@attrs.frozen(slots=True, kw_only=True)
class UserSpotCreate(WireRecord):
    """47 userSpotCreate: source → selected target, request; terminal 20 with a
    CreateTail. It carries no creation request bytes: the target reads the Pending
    creation content from the Store (spec 06 §3.3)."""

    COMMAND: ClassVar[Command] = Command.USER_SPOT_CREATE
    correlation: int = attrs.field(metadata=wire(CORRELATION))
    operation_id: OperationId = attrs.field(metadata=wire(OPERATION_ID))
    source_rid: NodeRid = attrs.field(metadata=wire(RID))
    source_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    spot_id: SpotId = attrs.field(metadata=wire(SPOT_ID))
    stable_type: StableType = attrs.field(metadata=wire(STABLE_TYPE))
    reservation: ReservationFence = attrs.field(metadata=wire(Nested(ReservationFence)))
    timeout_ms: int = attrs.field(metadata=wire(U32))


@attrs.frozen(slots=True, kw_only=True)
class UserSpotClose(WireRecord):
    """48 userSpotClose: source → current owner, request; terminal 20 with a CloseTail
    (spec 06 §7.1)."""

    COMMAND: ClassVar[Command] = Command.USER_SPOT_CLOSE
    correlation: int = attrs.field(metadata=wire(CORRELATION))
    operation_id: OperationId = attrs.field(metadata=wire(OPERATION_ID))
    source_rid: NodeRid = attrs.field(metadata=wire(RID))
    source_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    spot: SpotRef = attrs.field(metadata=wire(SPOT_REF))
    target_rid: NodeRid = attrs.field(metadata=wire(RID))
    target_generation: NodeGeneration = attrs.field(metadata=wire(NODE_GENERATION))
    expected_authority_owner_generation: AuthorityOwnerGeneration = attrs.field(
        metadata=wire(AUTHORITY_OWNER_GENERATION)
    )
    expected_store_version: int = attrs.field(metadata=wire(U64))
    timeout_ms: int = attrs.field(metadata=wire(U32))


ALL_RECORDS: Final[tuple[type[WireRecord], ...]] = (
    TerminalReply,
    ActorSend,
    BoundSessionSend,
    BoundSessionBind,
    SpotDirectRoute,
    SessionRelocationSeal,
    SessionRelocationSealed,
    SessionRelocationRoute,
    UserSpotCreate,
    UserSpotClose,
    BoundSessionReplaced,
    PeerHello,
    PeerHelloAck,
    PeerHelloConfirm,
    PeerPing,
    PeerPong,
    PeerGoodbye,
    ActorCreate,
    ActorDestroy,
    ActorJoin,
    ActorJournal,
    ActorJournalEnd,
    RelocationPrepare,
    RelocationRestore,
    RelocationRelayReady,
    RelocationCutover,
    RelocationAbort,
    RelocationCommitted,
    MessageFollowRelay,
    BoundSessionClose,
)
"""Every record class, one per :class:`Command` member."""

Record = (
    TerminalReply
    | ActorSend
    | BoundSessionSend
    | BoundSessionBind
    | SpotDirectRoute
    | SessionRelocationSeal
    | SessionRelocationSealed
    | SessionRelocationRoute
    | UserSpotCreate
    | UserSpotClose
    | BoundSessionReplaced
    | PeerHello
    | PeerHelloAck
    | PeerHelloConfirm
    | PeerPing
    | PeerPong
    | PeerGoodbye
    | ActorCreate
    | ActorDestroy
    | ActorJoin
    | ActorJournal
    | ActorJournalEnd
    | RelocationPrepare
    | RelocationRestore
    | RelocationRelayReady
    | RelocationCutover
    | RelocationAbort
    | RelocationCommitted
    | MessageFollowRelay
    | BoundSessionClose
)
"""Any decoded record; ``match`` on it is exhaustiveness-checked by mypy."""
