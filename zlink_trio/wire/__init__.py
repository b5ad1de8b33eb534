"""Wire records and their CBOR codec (DESIGN.md §6, docs/wire.md).

The only package that imports cbor2. Records are frozen attrs classes with a command
number; :func:`encode`/:func:`decode` turn them into CBOR bodies and back, strictly. Framing
(length prefix and sequence number) is the transport's: :mod:`zlink_trio.mesh.frames`.
"""

from .base import WireRecord as WireRecord
from .codec import decode as decode, encode as encode, evolve as evolve
from .commands import RESERVED_COMMANDS as RESERVED_COMMANDS, Command as Command
from .enums import (
    BindAction as BindAction,
    BoundSessionCloseAction as BoundSessionCloseAction,
    CreateState as CreateState,
    GoodbyeReason as GoodbyeReason,
    JoinResult as JoinResult,
    MessageKind as MessageKind,
    ObjectKind as ObjectKind,
    RelayReadyResult as RelayReadyResult,
    RelocationPolicy as RelocationPolicy,
    SealResult as SealResult,
    TerminalResult as TerminalResult,
)
from .fields import (
    MAX_FOLLOW_INNER_BYTES as MAX_FOLLOW_INNER_BYTES,
    MAX_METADATA_BYTES as MAX_METADATA_BYTES,
    MAX_PAYLOAD_BYTES as MAX_PAYLOAD_BYTES,
    MAX_SHORT_TEXT_BYTES as MAX_SHORT_TEXT_BYTES,
)
from .peer import (
    HELLO_MAX_FRAME_BYTES as HELLO_MAX_FRAME_BYTES,
    NONCE_BYTES as NONCE_BYTES,
    PROOF_BYTES as PROOF_BYTES,
    PROTOCOL_VERSION as PROTOCOL_VERSION,
)
from .records import (
    ALL_RECORDS as ALL_RECORDS,
    ActorCreate as ActorCreate,
    ActorDestroy as ActorDestroy,
    ActorJoin as ActorJoin,
    ActorJournal as ActorJournal,
    ActorJournalEnd as ActorJournalEnd,
    ActorSend as ActorSend,
    BoundSessionBind as BoundSessionBind,
    BoundSessionClose as BoundSessionClose,
    BoundSessionReplaced as BoundSessionReplaced,
    BoundSessionSend as BoundSessionSend,
    MessageFollowRelay as MessageFollowRelay,
    PeerGoodbye as PeerGoodbye,
    PeerHello as PeerHello,
    PeerHelloAck as PeerHelloAck,
    PeerHelloConfirm as PeerHelloConfirm,
    PeerPing as PeerPing,
    PeerPong as PeerPong,
    Record as Record,
    RelocationAbort as RelocationAbort,
    RelocationCommitted as RelocationCommitted,
    RelocationCutover as RelocationCutover,
    RelocationPrepare as RelocationPrepare,
    RelocationRelayReady as RelocationRelayReady,
    RelocationRestore as RelocationRestore,
    SessionRelocationRoute as SessionRelocationRoute,
    SessionRelocationSeal as SessionRelocationSeal,
    SessionRelocationSealed as SessionRelocationSealed,
    SpotDirectRoute as SpotDirectRoute,
    TerminalReply as TerminalReply,
    UserSpotClose as UserSpotClose,
    UserSpotCreate as UserSpotCreate,
)
from .tails import (
    ActorAuthorityFence as ActorAuthorityFence,
    BindTail as BindTail,
    CloseTail as CloseTail,
    ColdActivation as ColdActivation,
    CreateTail as CreateTail,
    DestroyTail as DestroyTail,
    JoinTail as JoinTail,
    ReadyFence as ReadyFence,
    ReplyPayloadTail as ReplyPayloadTail,
    ReservationFence as ReservationFence,
    RetiredSessionBinding as RetiredSessionBinding,
    Route as Route,
    SessionRouteAbort as SessionRouteAbort,
    SessionRouteAction as SessionRouteAction,
    SessionRouteCommit as SessionRouteCommit,
    SessionTail as SessionTail,
    Tail as Tail,
)
