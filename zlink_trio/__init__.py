"""zlink_trio: a Trio runtime for distributed, stateful Spots and Actors.

Nodes join RouteMeshes and share a Location Store; an Actor is addressed by its global
ActorId wherever it lives, runs one turn at a time on its owner node, and is created,
found, destroyed, sent to and requested through ``server.actors``. Everything is
structured concurrency: ``open_server`` is an async context manager, every call is
bounded by its own timeout and by the caller's cancel scopes.

The smallest program::

    import trio
    from zlink_trio import (
        App, MeshConfig, RecreateOnRelocation, ServerConfig, on_request, open_server,
    )

    class Counter:
        def __init__(self, context):
            self.context = context
            self.count = 0

        @on_request("add")
        async def add(self, payload: bytes) -> bytes:
            self.count += int(payload)
            return str(self.count).encode()

    app = App()
    app.enable_actor_dispatch()
    app.register_actor("counter", Counter, relocation=RecreateOnRelocation())

    async def main():
        config = ServerConfig(
            meshes=[MeshConfig(name="world")],
            cluster_secret=b"a shared secret of 16+ bytes",
        )  # no location_store: an in-process memory Location Store
        async with open_server(config, app) as server:
            await server.actors.get_or_create("c-1", "counter").timeout(5)
            print(await server.actors.request("c-1", "add", b"2"))  # b'2'

    trio.run(main)

Calls and their errors (one convention for every manager call), handlers, configuration
and the test helpers of ``zlink_trio.testing`` are documented in ``docs/api.md``; the
decisions behind them in ``docs/decisions.md``. Every error a call can raise is a
:class:`ZLinkError` subclass exported here (``__all__``).

Only re-exports live here; the implementation is in the subpackages.
"""

from ._version import __version__ as __version__
from .actors.bindings import DisconnectEvent as DisconnectEvent
from .actors.context import ActorContext as ActorContext, BoundSession as BoundSession
from .actors.handlers import (
    MessageKind as MessageKind,
    on_request as on_request,
    on_send as on_send,
    on_timer as on_timer,
)
from .actors.join import JoinCall as JoinCall
from .actors.membership import (
    JoinCompletion as JoinCompletion,
    JoinEvent as JoinEvent,
    JoinOutcome as JoinOutcome,
    LeaveEvent as LeaveEvent,
    on_join_complete as on_join_complete,
)
from .actors.policy import (
    ActorRelocationAdapter as ActorRelocationAdapter,
    DisableRelocation as DisableRelocation,
    PreserveStateWith as PreserveStateWith,
    RecreateOnRelocation as RecreateOnRelocation,
    RelocationPolicy as RelocationPolicy,
)
from .actors.relocating import RelocationResult as RelocationResult
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
    ServerConfig as ServerConfig,
    StreamConfig as StreamConfig,
)
from .errors import (
    AlreadyExists as AlreadyExists,
    ApplicationError as ApplicationError,
    CapacityExceeded as CapacityExceeded,
    ConfigurationError as ConfigurationError,
    DeadlineExceeded as DeadlineExceeded,
    DescriptorConflict as DescriptorConflict,
    ErrorKind as ErrorKind,
    InvalidArgument as InvalidArgument,
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
from .objects.policy import SpotRelocationAdapter as SpotRelocationAdapter
from .objects.timers import (
    TimerKind as TimerKind,
    TimerRegistration as TimerRegistration,
    Timers as Timers,
    TimerStatistics as TimerStatistics,
)
from .observe import FlowEvent as FlowEvent
from .server import Server as Server, open_server as open_server, serve_server as serve_server
from .spots.approval import (
    ActorCreateEvent as ActorCreateEvent,
    Approve as Approve,
    CreateDecision as CreateDecision,
    Reject as Reject,
)
from .spots.context import SpotContext as SpotContext
from .spots.execution import (
    ExecutionMode as ExecutionMode,
    PerActor as PerActor,
    SpotWide as SpotWide,
)
from .spots.lifecycle import SpotCallback as SpotCallback, on_lifecycle as on_lifecycle
from .spots.manager import SpotInfo as SpotInfo, SpotPage as SpotPage
from .spots.relocation import SpotRelocationResult as SpotRelocationResult
from .spots.results import (
    SpotCreated as SpotCreated,
    SpotCreateResult as SpotCreateResult,
    SpotExisting as SpotExisting,
    SpotRejected as SpotRejected,
)
from .spots.spot_kind import SpotKind as SpotKind
from .store.memory import MemoryLocationStore as MemoryLocationStore
from .stream import (
    Authenticated as Authenticated,
    AuthRequest as AuthRequest,
    AutoBind as AutoBind,
    Packet as Packet,
    Session as Session,
    SessionActor as SessionActor,
    SessionActors as SessionActors,
    SessionReplaced as SessionReplaced,
    StreamServer as StreamServer,
    StreamStatistics as StreamStatistics,
)

__all__ = [
    "ActorContext",
    "ActorCreateEvent",
    "ActorCreateResult",
    "ActorId",
    "ActorRef",
    "ActorRelocationAdapter",
    "AlreadyExists",
    "App",
    "ApplicationError",
    "Approve",
    "AuthRequest",
    "Authenticated",
    "AuthorityOwnerGeneration",
    "AutoBind",
    "BoundSession",
    "CapacityExceeded",
    "ConfigurationError",
    "CreateDecision",
    "Created",
    "DeadlineExceeded",
    "DescriptorConflict",
    "DisableRelocation",
    "DisconnectEvent",
    "ErrorKind",
    "ExecutionMode",
    "Existing",
    "FlowEvent",
    "InvalidArgument",
    "InvalidId",
    "InvalidOperation",
    "JoinCall",
    "JoinCompletion",
    "JoinEvent",
    "JoinOutcome",
    "LeaveEvent",
    "MemoryLocationStore",
    "MemoryStoreConfig",
    "MeshConfig",
    "MeshName",
    "MessageKind",
    "NodeGeneration",
    "NodeRid",
    "NotConfigured",
    "NotFound",
    "ObjectGeneration",
    "ObjectRole",
    "OperationId",
    "OwnerLeaseExpired",
    "OwnerLeaseGeneration",
    "Packet",
    "PerActor",
    "PostgresStoreConfig",
    "PreserveStateWith",
    "ProtocolError",
    "RecreateOnRelocation",
    "Reject",
    "Rejected",
    "RelocationPolicy",
    "RelocationResult",
    "Server",
    "ServerConfig",
    "Session",
    "SessionActor",
    "SessionActors",
    "SessionNotBound",
    "SessionReplaced",
    "ShuttingDown",
    "SpotCallback",
    "SpotContext",
    "SpotCreateResult",
    "SpotCreated",
    "SpotExisting",
    "SpotId",
    "SpotInfo",
    "SpotKind",
    "SpotPage",
    "SpotRef",
    "SpotRejected",
    "SpotRelocationAdapter",
    "SpotRelocationResult",
    "SpotWide",
    "StableType",
    "StaleRoute",
    "StoreOutcomeUnknown",
    "StreamConfig",
    "StreamServer",
    "StreamStatistics",
    "TimerKind",
    "TimerRegistration",
    "TimerStatistics",
    "Timers",
    "TypeMismatch",
    "Unavailable",
    "ZLinkError",
    "on_join_complete",
    "on_lifecycle",
    "on_request",
    "on_send",
    "on_timer",
    "open_server",
    "serve_server",
]
