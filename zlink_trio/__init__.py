"""zlink_trio: a Trio runtime for distributed, stateful Spots and Actors.

Only re-exports live here; the implementation is in the subpackages.
"""

from ._version import __version__ as __version__
from .actors.context import ActorContext as ActorContext, BoundSession as BoundSession
from .actors.handlers import (
    MessageKind as MessageKind,
    on_request as on_request,
    on_send as on_send,
)
from .actors.policy import (
    ActorRelocationAdapter as ActorRelocationAdapter,
    DisableRelocation as DisableRelocation,
    PreserveStateWith as PreserveStateWith,
    RecreateOnRelocation as RecreateOnRelocation,
    RelocationPolicy as RelocationPolicy,
)
from .actors.results import (
    ActorCreateResult as ActorCreateResult,
    Created as Created,
    Existing as Existing,
    Rejected as Rejected,
)
from .app import App as App
from .config import (
    MemoryStoreConfig as MemoryStoreConfig,
    MeshConfig as MeshConfig,
    ObjectRole as ObjectRole,
    PostgresStoreConfig as PostgresStoreConfig,
    RouterConfig as RouterConfig,
    ServerConfig as ServerConfig,
)
from .errors import (
    AlreadyExists as AlreadyExists,
    ApplicationError as ApplicationError,
    CapacityExceeded as CapacityExceeded,
    ConfigurationError as ConfigurationError,
    DeadlineExceeded as DeadlineExceeded,
    DescriptorConflict as DescriptorConflict,
    ErrorKind as ErrorKind,
    InvalidOperation as InvalidOperation,
    NotConfigured as NotConfigured,
    NotFound as NotFound,
    OwnerLeaseExpired as OwnerLeaseExpired,
    ProtocolError as ProtocolError,
    SessionNotBound as SessionNotBound,
    ShuttingDown as ShuttingDown,
    StaleRoute as StaleRoute,
    StoreOutcomeUnknown as StoreOutcomeUnknown,
    TypeMismatch as TypeMismatch,
    Unavailable as Unavailable,
    ZLinkError as ZLinkError,
)
from .ids import (
    ActorId as ActorId,
    ActorRef as ActorRef,
    AuthorityOwnerGeneration as AuthorityOwnerGeneration,
    InvalidId as InvalidId,
    MeshName as MeshName,
    NodeGeneration as NodeGeneration,
    NodeRid as NodeRid,
    ObjectGeneration as ObjectGeneration,
    OperationId as OperationId,
    OwnerLeaseGeneration as OwnerLeaseGeneration,
    SpotId as SpotId,
    SpotRef as SpotRef,
    StableType as StableType,
)
from .server import Server as Server, open_server as open_server, serve_server as serve_server
from .spots.approval import (
    ActorCreateEvent as ActorCreateEvent,
    Approve as Approve,
    CreateDecision as CreateDecision,
    Reject as Reject,
)
from .store.memory import MemoryLocationStore as MemoryLocationStore
