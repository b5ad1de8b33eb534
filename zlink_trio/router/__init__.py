"""zlink_trio.router: the sticky-less SessionRouter (spec 10), usable on its own.

Serializes each session's turns across the web nodes behind a load balancer with no
stickiness. This package imports only ``zlink_trio.ids`` and ``zlink_trio.errors`` of the
runtime. Only re-exports live here (docs/router.md describes the parts).
"""

from .application import (
    AgentRuntime as AgentRuntime,
    AgentRuntimeLookup as AgentRuntimeLookup,
    EventListener as EventListener,
    LiveSession as LiveSession,
    LiveSessionFactory as LiveSessionFactory,
    LiveSessionOpener as LiveSessionOpener,
    OpenRequest as OpenRequest,
    QueuedInput as QueuedInput,
    SessionMetrics as SessionMetrics,
    TurnInput as TurnInput,
)
from .approvals import SessionApprovals as SessionApprovals
from .builder import (
    SessionRouterBuilder as SessionRouterBuilder,
    open_session_router as open_session_router,
)
from .config import SessionRouterConfig as SessionRouterConfig
from .disposition import (
    DispositionKind as DispositionKind,
    ExecutedLocally as ExecutedLocally,
    Forwarded as Forwarded,
    SubmitDisposition as SubmitDisposition,
    TurnFuture as TurnFuture,
)
from .errors import (
    ConflictingAgentError as ConflictingAgentError,
    FencingRejected as FencingRejected,
    ForwardTimeout as ForwardTimeout,
    HolderLost as HolderLost,
    IdempotencyConflictError as IdempotencyConflictError,
    ReentrantSubmitError as ReentrantSubmitError,
    RouterShuttingDown as RouterShuttingDown,
    SessionClaimFailed as SessionClaimFailed,
    SessionEvicted as SessionEvicted,
    SessionHeldElsewhere as SessionHeldElsewhere,
    TurnFailedError as TurnFailedError,
    TurnInterrupted as TurnInterrupted,
)
from .events import (
    AgentExecutionEvent as AgentExecutionEvent,
    AgentExecutionResult as AgentExecutionResult,
    Artifact as Artifact,
    AssistantMessageReceived as AssistantMessageReceived,
    AssistantReasoningDelta as AssistantReasoningDelta,
    AssistantTextDelta as AssistantTextDelta,
    ExecutionCompleted as ExecutionCompleted,
    ExecutionError as ExecutionError,
    FailureCode as FailureCode,
    InterruptedAt as InterruptedAt,
    InterruptReason as InterruptReason,
    RejectedAt as RejectedAt,
    RejectionReason as RejectionReason,
    ToolUseCompleted as ToolUseCompleted,
    ToolUseStarted as ToolUseStarted,
    TurnFailed as TurnFailed,
    TurnResult as TurnResult,
    TurnSucceeded as TurnSucceeded,
    turn_result_from_wire as turn_result_from_wire,
    turn_result_to_wire as turn_result_to_wire,
)
from .idempotency import (
    AlreadyDone as AlreadyDone,
    HolderAcquired as HolderAcquired,
    HolderRejected as HolderRejected,
    IdempotencyEntry as IdempotencyEntry,
    IdempotencyState as IdempotencyState,
    IdempotencyTtls as IdempotencyTtls,
    InFlight as InFlight,
    InputConflict as InputConflict,
    MarkDoneOutcome as MarkDoneOutcome,
    Marked as Marked,
    MarkRejected as MarkRejected,
    PutOutcome as PutOutcome,
    Rejection as Rejection,
    Reserved as Reserved,
    StaleInFlight as StaleInFlight,
    TakeoverOutcome as TakeoverOutcome,
)
from .ids import (
    AgentRef as AgentRef,
    IdempotencyKey as IdempotencyKey,
    InboundMessageId as InboundMessageId,
    NodeId as NodeId,
    ReserverId as ReserverId,
    SessionId as SessionId,
    TurnId as TurnId,
)
from .inbox import InboundMessage as InboundMessage
from .memory import (
    MemoryIdempotencyStore as MemoryIdempotencyStore,
    MemorySessionInbox as MemorySessionInbox,
    MemorySessionLeaseStore as MemorySessionLeaseStore,
    MemorySessionRecordStore as MemorySessionRecordStore,
    MemorySessionSignalBus as MemorySessionSignalBus,
    SignalBusStatistics as SignalBusStatistics,
)
from .primitives import Json as Json, JsonMap as JsonMap
from .records import (
    LeaseGranted as LeaseGranted,
    LeaseHeld as LeaseHeld,
    LeaseOutcome as LeaseOutcome,
    SessionLease as SessionLease,
    SessionRecordView as SessionRecordView,
    TranscriptEntry as TranscriptEntry,
)
from .relay import (
    EventSubscription as EventSubscription,
    RemoteEventQueue as RemoteEventQueue,
    TurnEvent as TurnEvent,
    event_from_wire as event_from_wire,
    event_to_wire as event_to_wire,
)
from .router import (
    RouterParts as RouterParts,
    RouterStatistics as RouterStatistics,
    SessionRouter as SessionRouter,
)
from .session_store import (
    AgentConflict as AgentConflict,
    Claimed as Claimed,
    ClaimOutcome as ClaimOutcome,
    FencedRecords as FencedRecords,
    HeldElsewhere as HeldElsewhere,
    SessionHistory as SessionHistory,
    SessionStore as SessionStore,
)
from .signals import (
    Channel as Channel,
    SessionSignal as SessionSignal,
    SignalKind as SignalKind,
    channel_for as channel_for,
    decode_signal as decode_signal,
    encode_signal as encode_signal,
    interrupt_signal as interrupt_signal,
    requests_hand_off as requests_hand_off,
    yield_signals as yield_signals,
)
from .spi import (
    IdempotencyStore as IdempotencyStore,
    SessionInbox as SessionInbox,
    SessionLeaseStore as SessionLeaseStore,
    SessionRecordStore as SessionRecordStore,
    SessionSignalBus as SessionSignalBus,
)
from .status import (
    ClusterSessionStatus as ClusterSessionStatus,
    SessionActivity as SessionActivity,
    StatusProjection as StatusProjection,
)
from .values import (
    CompositeInput as CompositeInput,
    DeploymentMode as DeploymentMode,
    DocumentInput as DocumentInput,
    ImageInput as ImageInput,
    LiveSessionOptions as LiveSessionOptions,
    OpenAttributes as OpenAttributes,
    Principal as Principal,
    Priority as Priority,
    SubmitOptions as SubmitOptions,
    SubmitRequest as SubmitRequest,
    TextInput as TextInput,
    UserInput as UserInput,
    input_hash as input_hash,
    user_input_from_wire as user_input_from_wire,
    user_input_to_wire as user_input_to_wire,
)
