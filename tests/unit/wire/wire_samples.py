"""Hand-built sample records with distinct, recognisable values (for layout tests).

Every value differs from every other of the same type, so a swapped field shows up.
"""

from __future__ import annotations

from typing import Final

import attrs

from zlink_trio.errors import ErrorKind
from zlink_trio.ids import (
    ActorId,
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
from zlink_trio.wire import (
    ActorAuthorityFence,
    ActorCreate,
    ActorDestroy,
    ActorJoin,
    ActorJournal,
    ActorJournalEnd,
    ActorSend,
    BindAction,
    BindTail,
    BoundSessionBind,
    BoundSessionClose,
    BoundSessionCloseAction,
    BoundSessionReplaced,
    BoundSessionSend,
    CloseTail,
    ColdActivation,
    CreateState,
    CreateTail,
    DestroyTail,
    GoodbyeReason,
    JoinResult,
    JoinTail,
    MessageFollowRelay,
    MessageKind,
    ObjectKind,
    PeerGoodbye,
    PeerHello,
    PeerHelloAck,
    PeerHelloConfirm,
    PeerPing,
    PeerPong,
    ReadyFence,
    RelayReadyResult,
    RelocationAbort,
    RelocationCommitted,
    RelocationCutover,
    RelocationPolicy,
    RelocationPrepare,
    RelocationRelayReady,
    RelocationRestore,
    ReplyPayloadTail,
    ReservationFence,
    RetiredSessionBinding,
    SealResult,
    SessionRelocationRoute,
    SessionRelocationSeal,
    SessionRelocationSealed,
    SessionRouteAbort,
    SessionRouteCommit,
    SessionTail,
    SpotDirectRoute,
    TerminalReply,
    UserSpotClose,
    UserSpotCreate,
    WireRecord,
)

RID_A: Final = NodeRid(bytes(range(16)))
RID_B: Final = NodeRid(bytes(range(16, 32)))
RID_C: Final = NodeRid(bytes(range(32, 48)))
SESSION_RID: Final = b"S" * 16
OP: Final = OperationId(0x0102030405060708090A0B0C0D0E0F10)
OP_RAW: Final = bytes(range(1, 17))
RELOCATION: Final = OperationId(0xAA)
RELOCATION_RAW: Final = (0xAA).to_bytes(16, "big")
ACTOR: Final = ActorId("player-42")
SPOT: Final = SpotId("room-7")
TYPE: Final = StableType("room")
MESH: Final = MeshName("world")


def gen(n: int) -> NodeGeneration:
    return NodeGeneration(n)


RESERVATION: Final = ReservationFence(
    expected_store_version=501,
    object_generation=ObjectGeneration(502),
    authority_owner_generation=AuthorityOwnerGeneration(503),
    target_rid=RID_B,
    target_generation=gen(504),
    target_owner_lease_generation=OwnerLeaseGeneration(505),
    pending_capacity_delta=1,
)
RESERVATION_RAW: Final = [501, 502, 503, RID_B.value, 504, 505, 1]

SESSION_TAIL: Final = SessionTail(
    session_owner_rid=RID_C,
    session_owner_generation=gen(601),
    session_rid=SESSION_RID,
    binding_generation=602,
    session_sequence=603,
)

ACTOR_SEND: Final = ActorSend(
    correlation=11,
    source_rid=RID_A,
    source_generation=gen(12),
    target_rid=RID_B,
    target_generation=gen(13),
    actor_id=ACTOR,
    route_object_generation=ObjectGeneration(14),
    expected_owner_generation=AuthorityOwnerGeneration(15),
    owner_lease_generation=OwnerLeaseGeneration(16),
    message_kind=MessageKind.REQUEST,
    packet_name="move",
    payload=b"payload-24",
    timeout_ms=17,
    operation_id=OP,
    follow_hops=2,
    session=SESSION_TAIL,
)

CREATE_TAIL: Final = CreateTail(
    state=CreateState.CREATED,
    object_id="room-7",
    object_generation=ObjectGeneration(701),
    mesh_name=MESH,
    node_rid=RID_B,
    reply=b"welcome",
)

TAILS: Final = (
    ReplyPayloadTail(payload=b"reply"),
    CREATE_TAIL,
    CreateTail(
        state=CreateState.EXISTING,
        object_id="room-7",
        object_generation=ObjectGeneration(702),
        mesh_name=MESH,
        node_rid=RID_A,
    ),
    CloseTail(closed=True),
    CloseTail(closed=False),
    DestroyTail(destroyed=True),
    BindTail(
        binding_generation=801,
        authority_owner_generation=AuthorityOwnerGeneration(802),
        owner_lease_generation=OwnerLeaseGeneration(803),
    ),
    JoinTail(result=JoinResult.ACCEPTED, current_spot_id=SPOT, reply=b"joined"),
    JoinTail(result=JoinResult.REJECTED),
)

READY_FENCE: Final = ReadyFence(
    spot_id=SPOT,
    object_generation=ObjectGeneration(901),
    authority_owner_generation=AuthorityOwnerGeneration(902),
    target_rid=RID_B,
    target_generation=gen(903),
    owner_lease_generation=OwnerLeaseGeneration(904),
    timeout_ms=905,
)
COLD_ACTIVATION: Final = ColdActivation(
    target_mesh=MESH,
    target_rid=RID_B,
    target_generation=gen(911),
    spot_id=SPOT,
    stable_type=StableType("cart"),
    descriptor_version=912,
    timeout_ms=913,
)


def spot_direct_route(route: ReadyFence | ColdActivation) -> SpotDirectRoute:
    return SpotDirectRoute(
        correlation=21,
        operation_id=OP,
        source_rid=RID_A,
        source_generation=gen(22),
        source_spot_id=SpotId("entry-src"),
        route=route,
        message_kind=MessageKind.REQUEST,
        packet_name="add-item",
        metadata_present=True,
        metadata=b"ZLIA-meta",
        payload=b"payload-39",
    )


SEAL: Final = SessionRelocationSeal(
    correlation=31,
    relocation_id=RELOCATION,
    actor_id=ACTOR,
    object_generation=ObjectGeneration(32),
    session_rid=SESSION_RID,
    binding_generation=33,
)
SEALED: Final = SessionRelocationSealed(
    correlation=31, relocation_id=RELOCATION, result=SealResult.SEALED
)
COMMIT: Final = SessionRouteCommit(
    relocation_id=RELOCATION,
    actor_id=ACTOR,
    object_generation=ObjectGeneration(32),
    target_mesh=MESH,
    target_rid=RID_B,
    target_node_generation=gen(41),
    authority_owner_generation=AuthorityOwnerGeneration(42),
    owner_lease_generation=OwnerLeaseGeneration(43),
    session_owner_rid=RID_C,
    session_owner_generation=gen(44),
    session_rid=SESSION_RID,
    binding_generation=33,
)
ABORT: Final = SessionRouteAbort(
    relocation_id=RELOCATION, session_rid=SESSION_RID, binding_generation=33
)

USER_SPOT_CREATE: Final = UserSpotCreate(
    correlation=51,
    operation_id=OP,
    source_rid=RID_A,
    source_generation=gen(52),
    spot_id=SPOT,
    stable_type=TYPE,
    reservation=RESERVATION,
    timeout_ms=53,
)
USER_SPOT_CLOSE: Final = UserSpotClose(
    correlation=61,
    operation_id=OP,
    source_rid=RID_A,
    source_generation=gen(62),
    spot=SpotRef(SPOT, ObjectGeneration(63), MESH, RID_B),
    target_rid=RID_B,
    target_generation=gen(64),
    expected_authority_owner_generation=AuthorityOwnerGeneration(65),
    expected_store_version=66,
    timeout_ms=67,
)
BOUND_SESSION_SEND: Final = BoundSessionSend(
    actor_id=ACTOR,
    object_generation=ObjectGeneration(71),
    source_rid=RID_B,
    source_node_generation=gen(72),
    authority_owner_generation=AuthorityOwnerGeneration(73),
    session_owner_rid=RID_C,
    session_owner_generation=gen(74),
    session_rid=SESSION_RID,
    expected_binding_generation=75,
    packet_name="push",
    payload=b"payload-36",
)
BOUND_SESSION_BIND: Final = BoundSessionBind(
    correlation=81,
    operation_id=OP,
    source_rid=RID_C,
    source_generation=gen(82),
    session_owner_id=83,
    session_owner_lease_generation=OwnerLeaseGeneration(84),
    actor_id=ACTOR,
    object_generation=ObjectGeneration(85),
    target_rid=RID_B,
    target_node_generation=gen(86),
    authority_owner_generation=AuthorityOwnerGeneration(87),
    owner_lease_generation=OwnerLeaseGeneration(88),
    session_rid=SESSION_RID,
    binding_generation=89,
    action=BindAction.BIND,
    timeout_ms=90,
)
BOUND_SESSION_REPLACED: Final = BoundSessionReplaced(
    source=ActorAuthorityFence(
        actor_id=ACTOR,
        object_generation=ObjectGeneration(91),
        authority_owner_generation=AuthorityOwnerGeneration(92),
        node_rid=RID_B,
        node_generation=gen(93),
    ),
    previous=RetiredSessionBinding(
        node_rid=RID_C,
        node_generation=gen(94),
        owner_id=95,
        owner_lease_generation=OwnerLeaseGeneration(96),
        session_rid=SESSION_RID,
        retired_binding_generation=97,
    ),
)

HELLO: Final = PeerHello(
    protocol_version=1,
    mesh_name=MESH,
    node_rid=RID_A,
    node_generation=gen(101),
    nonce=b"n" * 16,
    proof=b"p" * 32,
)
HELLO_ACK: Final = PeerHelloAck(
    protocol_version=1,
    mesh_name=MESH,
    node_rid=RID_B,
    node_generation=gen(102),
    nonce=b"m" * 16,
    proof=b"r" * 32,
)

ALL_SAMPLES: Final[tuple[WireRecord, ...]] = (
    *(TerminalReply.ok(1, tail) for tail in TAILS),
    TerminalReply.ok(2),
    TerminalReply.failed(3, ErrorKind.ALREADY_EXISTS, "exists"),
    TerminalReply.failed(
        4,
        ErrorKind.APPLICATION,
        "factory raised",
        CreateTail(
            state=CreateState.FAILED,
            object_id="player-42",
            object_generation=ObjectGeneration(5),
            mesh_name=MESH,
            node_rid=RID_B,
        ),
    ),
    ACTOR_SEND,
    ActorSend(
        correlation=0,
        source_rid=RID_A,
        source_generation=gen(1),
        target_rid=RID_B,
        target_generation=gen(2),
        actor_id=ACTOR,
        message_kind=MessageKind.SEND,
        packet_name="ping",
        payload=b"",
    ),
    BOUND_SESSION_SEND,
    BOUND_SESSION_BIND,
    attrs.evolve(BOUND_SESSION_BIND, action=BindAction.DISCONNECT),
    spot_direct_route(READY_FENCE),
    spot_direct_route(COLD_ACTIVATION),
    SEAL,
    SEALED,
    SessionRelocationSealed(
        correlation=31,
        relocation_id=RELOCATION,
        result=SealResult.REJECTED,
        failure_code=ErrorKind.UNAVAILABLE,
    ),
    SessionRelocationRoute(action=COMMIT),
    SessionRelocationRoute(action=ABORT),
    USER_SPOT_CREATE,
    USER_SPOT_CLOSE,
    BOUND_SESSION_REPLACED,
    HELLO,
    HELLO_ACK,
    PeerHelloConfirm(proof=b"q" * 32),
    PeerPing(token=7),
    PeerPong(token=7),
    PeerGoodbye(reason=GoodbyeReason.SHUTDOWN),
    ActorCreate(
        correlation=111,
        operation_id=OP,
        source_rid=RID_A,
        source_generation=gen(112),
        actor_id=ACTOR,
        stable_type=StableType("player"),
        reservation=RESERVATION,
        timeout_ms=113,
    ),
    ActorDestroy(
        correlation=121,
        operation_id=OP,
        source_rid=RID_A,
        source_generation=gen(122),
        actor_id=ACTOR,
        object_generation=ObjectGeneration(123),
        target_rid=RID_B,
        target_generation=gen(124),
        timeout_ms=125,
    ),
    ActorJoin(
        correlation=131,
        operation_id=OP,
        source_rid=RID_A,
        source_generation=gen(132),
        actor_id=ACTOR,
        object_generation=ObjectGeneration(133),
        authority_owner_generation=AuthorityOwnerGeneration(134),
        spot_id=SPOT,
        spot_object_generation=ObjectGeneration(135),
        target_rid=RID_B,
        target_generation=gen(136),
        request=b"join-request",
        timeout_ms=137,
    ),
    ActorJournal(
        correlation=138,
        operation_id=OP,
        source_rid=RID_A,
        source_generation=gen(139),
        actor_id=ACTOR,
        index=3,
        message_kind=MessageKind.REQUEST,
        packet_name="echo",
        payload=b"journal-payload",
        timeout_ms=140,
    ),
    ActorJournalEnd(
        correlation=142,
        operation_id=OP,
        source_rid=RID_A,
        source_generation=gen(141),
        actor_id=ACTOR,
        count=4,
    ),
    RelocationPrepare(
        correlation=141,
        relocation_id=RELOCATION,
        source_rid=RID_A,
        source_generation=gen(142),
        target_rid=RID_B,
        target_generation=gen(143),
        object_kind=ObjectKind.SPOT,
        object_id="room-7",
        stable_type=TYPE,
        object_generation=ObjectGeneration(144),
        authority_owner_generation=AuthorityOwnerGeneration(145),
        policy=RelocationPolicy.PRESERVE_STATE,
        members=(ACTOR, ActorId("player-43")),
        timeout_ms=146,
    ),
    RelocationRestore(
        correlation=151,
        relocation_id=RELOCATION,
        state_sha256=b"h" * 32,
        state_size=152,
        timeout_ms=153,
    ),
    RelocationRestore(correlation=154, relocation_id=RELOCATION, timeout_ms=155),
    RelocationRelayReady(
        correlation=151, relocation_id=RELOCATION, result=RelayReadyResult.ACCEPTED
    ),
    RelocationCutover(relocation_id=RELOCATION, relayed_count=3),
    RelocationAbort(relocation_id=RELOCATION, reason=ErrorKind.DEADLINE_EXCEEDED),
    RelocationCommitted(
        relocation_id=RELOCATION, authority_owner_generation=AuthorityOwnerGeneration(2)
    ),
    MessageFollowRelay(
        relocation_id=RELOCATION,
        object_kind=ObjectKind.ACTOR,
        object_id="player-42",
        object_generation=ObjectGeneration(161),
        source_authority_owner_generation=AuthorityOwnerGeneration(162),
        target_authority_owner_generation=AuthorityOwnerGeneration(163),
        target_rid=RID_B,
        target_generation=gen(164),
        hops=1,
        inner=b"\x82\x18\x18\x00",
    ),
    attrs.evolve(
        BOUND_SESSION_BIND,
        action=BindAction.UNBIND,
        authority_owner_generation=None,
        owner_lease_generation=None,
    ),
    BoundSessionClose(
        source_rid=RID_B,
        source_generation=gen(171),
        actor_id=ACTOR,
        object_generation=ObjectGeneration(172),
        authority_owner_generation=AuthorityOwnerGeneration(173),
        session_owner_rid=RID_C,
        session_owner_generation=gen(174),
        session_rid=SESSION_RID,
        binding_generation=175,
        action=BoundSessionCloseAction.BINDING_ENDED,
    ),
    attrs.evolve(  # a bind relayed by a Message Follow hop: the session owner travels on
        BOUND_SESSION_BIND,
        source_rid=RID_A,
        follow_hops=2,
        session_owner_rid=RID_C,
        session_owner_generation=gen(82),
    ),
    TerminalReply.ok(  # the terminal of a followed bind names the owner that registered it
        4,
        BindTail(
            binding_generation=804,
            authority_owner_generation=AuthorityOwnerGeneration(805),
            owner_lease_generation=OwnerLeaseGeneration(806),
            node_rid=RID_B,
            node_generation=gen(807),
        ),
    ),
)
"""At least one sample of every record class and of every union variant."""
