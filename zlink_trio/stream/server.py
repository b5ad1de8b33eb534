"""The session owner role of one node: the STREAM websocket listener, every connection, and
the one :class:`~.binding.SessionBindingAggregate` of this owner lifecycle.

Started by the composition root in two steps: :meth:`StreamServer.register` (before the
node serves: commands 36, 51 and 140 and the in-process session port of the Actor owner)
and :meth:`StreamServer.serve` (after the node serves: the listener, the relayed-request
timer and the owner-loss watcher).

Shutdown (spec 02 §10): :meth:`stop_admitting` refuses new sessions and new binds at once;
the accepted work — session callbacks already queued, replies in flight, binds in
progress — settles with the node's drain (:attr:`transactions`, the session lanes);
:meth:`close_sessions` then closes every connection (each one's disconnect cleanup runs).
Physical connections never move to another process.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import trio
from trio_websocket import WebSocketRequest, WebSocketServer, serve_websocket

from .._exceptions import raise_single_error
from ..actors.hosted import ActorItem, Deliver
from ..config import ServerConfig, StreamConfig
from ..engine.lane import Lane
from ..engine.lanes import ActorDeliveryLane
from ..errors import (
    CapacityExceeded,
    InvalidOperation,
    NotConfigured,
    StaleRoute,
    Unavailable,
    ZLinkError,
)
from ..ids import (
    ActorId,
    ActorRef,
    AuthorityOwnerGeneration,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OwnerLeaseGeneration,
    check_text_id,
)
from ..mesh.api import PeerAddress, PeerIdentity, PeerState
from ..objects.activity import Activity
from ..observe import FlowEvent, FlowTrace
from ..routing.reply_deadlines import ReplyDeadlines
from ..routing.route_cache import Route
from ..wire.commands import Command
from ..wire.enums import BindAction, BoundSessionCloseAction, MessageKind
from ..wire.payloads import PayloadRegistry, TypedPayload
from ..wire.records import (
    BoundSessionClose,
    BoundSessionReplaced,
    BoundSessionSend,
    SessionRelocationRoute,
    SessionRelocationSeal,
    SessionRelocationSealed,
)
from ..wire.stream import CloseReason, Push, Request, Send
from ..wire.tails import SessionTail
from .actors import (
    SessionActor,
    _handle,
    bind_tail,
    bound_frame,
    control_request,
    relay_remote,
    unbound_frame,
)
from .binding import (
    BOUND,
    Binding,
    BindingRoute,
    Ended,
    EndReason,
    Sealed,
    SessionBindingAggregate,
    SessionOwnerIdentity,
)
from .connection import Connection
from .relocation import SessionRelocations
from .session import PacketRoute, PendingRequest, Session
from .values import Authenticated, AuthRequest, AutoBind, SessionReplaced

if TYPE_CHECKING:
    from ..actors.bindings import BindingIdentity
    from ..actors.runtime import ActorRuntime
    from ..engine.engine import Engine
    from ..mesh.node import MeshNode
    from ..store.api import LocationStore

__all__ = ["StreamCallbacks", "StreamServer", "StreamStatistics"]

logger = logging.getLogger("zlink_trio.sessions")

Authenticate = Callable[[AuthRequest], Awaitable[Authenticated | None]]
OnSessionOpen = Callable[[Session], Awaitable[object]]
OnSessionReplaced = Callable[[Session, SessionReplaced], Awaitable[object]]
PacketHandler = Callable[[Any, Any], Awaitable[Any]]

_MESSAGE_QUEUE: Final = 4
_SEND: Final = MessageKind.SEND
_REQUEST: Final = MessageKind.REQUEST
_NEVER: Final = float("inf")
"""trio-websocket's per-connection message queue (our reader drains it at once)."""


@attrs.frozen
class StreamCallbacks:
    """The validated STREAM registrations of the App."""

    authenticate: Authenticate | None = None
    on_open: OnSessionOpen | None = None
    on_replaced: OnSessionReplaced | None = None
    packets: Mapping[str, PacketHandler] = attrs.field(factory=dict)


@attrs.frozen
class StreamStatistics:
    """A snapshot of the session owner."""

    sessions: int
    """Open sessions (authenticated connections) now."""
    bindings: int
    """Actor bindings of those sessions now."""
    connections: int
    """Connections accepted since start (refused ones included)."""
    pending_requests: int
    """Client requests not answered yet (in handlers or relayed)."""


@final
class StreamServer:
    """This node's session owner (see the module docstring)."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        stream: StreamConfig,
        callbacks: StreamCallbacks,
        payloads: PayloadRegistry,
        node: MeshNode,
        engine: Engine,
        flow: FlowTrace,
        store: LocationStore | None,
        actors: ActorRuntime | None,
    ) -> None:
        self.config = config
        self.stream_config = stream
        self.callbacks = callbacks
        self.payloads = payloads
        self.node = node
        self.engine = engine
        self.flow = flow
        self._store = store
        self.actor_runtime = actors
        self.deadlines = ReplyDeadlines()
        me = self._me = node.identity
        """(A node's identity never changes: read once, not per relayed frame.)"""
        self.aggregate = SessionBindingAggregate(
            SessionOwnerIdentity(
                me.node_rid, me.node_generation, secrets.randbits(63) | 1, OwnerLeaseGeneration(1)
            )
        )
        self.transactions = Activity()
        """Binds, disconnect notifications and client requests in progress (the drain
        lets them finish)."""
        self._connections: dict[bytes, Connection] = {}
        self._live: set[Connection] = set()
        self._accepted = 0
        self._ws: WebSocketServer | None = None
        self._nursery: trio.Nursery | None = None
        self.bind_ended = trio.Event()
        """Set (and replaced) each time a bind of this session owner ends."""
        self._admitting = True
        self.relocations = SessionRelocations(self)
        """Commands 42 and 44 (spec 02 §8)."""

    # --- startup ------------------------------------------------------------------------------
    def register(self) -> None:
        """Inbound commands and the in-process port (before the node serves)."""
        node = self.node
        node.on(Command.BOUND_SESSION_SEND, self._on_push)
        node.on(Command.BOUND_SESSION_REPLACED, self._on_replaced)
        node.on(Command.BOUND_SESSION_CLOSE, self._on_control)
        self.relocations.register()
        node.on_lease_lost(self._lease_lost)
        if self.actor_runtime is not None:
            self.actor_runtime.bindings.local_sessions = self

    async def serve(
        self, *, task_status: trio.TaskStatus[StreamServer] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The listener and the owner's tasks, until cancelled (start it once the node
        serves: a bind needs the node's lease and peers)."""
        lease = getattr(self.node.lease, "lease_generation", None)
        if isinstance(lease, OwnerLeaseGeneration):
            self.aggregate.owner = attrs.evolve(self.aggregate.owner, lease_generation=lease)
        stream = self.stream_config
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self.deadlines.serve, name="zlink_trio.stream.deadlines")
                nursery.start_soon(self._watch_owners, name="zlink_trio.stream.owners")
                self._ws = await nursery.start(
                    partial(
                        serve_websocket,
                        self._handle,
                        stream.host,
                        stream.port,
                        None,
                        handler_nursery=nursery,
                        message_queue_size=_MESSAGE_QUEUE,
                        max_message_size=stream.max_message_bytes,
                        connect_timeout=stream.hello_timeout,
                        disconnect_timeout=stream.close_timeout,
                    ),
                    name="zlink_trio.stream.listener",
                )
                task_status.started(self)
                await trio.sleep_forever()
        except BaseExceptionGroup as group:
            # One error (the listener cannot open: its port taken, its host unknown)
            # leaves as itself, as the mesh listener's does, so a caller sees an OSError.
            raise_single_error(group)
        finally:
            self._admitting = False
            for conn in list(self._live):
                conn.close(CloseReason.SHUTTING_DOWN, "the server stopped")

    # --- public surface (server.stream) -------------------------------------------------------
    @property
    def endpoint(self) -> tuple[str, int]:
        """The (host, port) the STREAM listener is bound to."""
        ws = self._ws
        if ws is None:
            raise Unavailable("the STREAM listener is not serving")
        return self.stream_config.host, ws.port

    @property
    def port(self) -> int:
        return self.endpoint[1]

    @property
    def url(self) -> str:
        host, port = self.endpoint
        return f"ws://{host}:{port}/"

    def statistics(self) -> StreamStatistics:
        return StreamStatistics(
            sessions=len(self._connections),
            bindings=sum(len(c.entry.bindings) for c in self._connections.values()),
            connections=self._accepted,
            pending_requests=sum(len(c.pending) for c in self._connections.values()),
        )

    def sessions(self) -> tuple[Session, ...]:
        """The open sessions now (tests and operators)."""
        return tuple(c.session for c in self._connections.values() if c.session is not None)

    # --- shutdown -----------------------------------------------------------------------------
    def stop_admitting(self) -> None:
        """No new session, no new bind from now on (spec 02 §10)."""
        self._admitting = False
        self.aggregate.stop_admitting()

    async def close_sessions(self) -> None:
        """Close every connection and wait until each one's cleanup ended (the caller
        bounds it)."""
        live = list(self._live)
        for conn in live:
            conn.close(CloseReason.SHUTTING_DOWN, "the server is shutting down")
        for conn in live:
            await conn.finished.wait()
        await trio.lowlevel.checkpoint()

    def _lease_lost(self) -> None:
        # A fail-stopped node runs nothing of its own any more: every session closes.
        self.stop_admitting()
        for conn in list(self._live):
            conn.close(CloseReason.SHUTTING_DOWN, "this node was fail-stopped")

    # --- connections ----------------------------------------------------------------------------
    async def _handle(self, request: WebSocketRequest) -> None:
        self._accepted += 1
        if not self._admitting:
            await request.reject(503, body=b"shutting down")
            return
        conn = Connection(self, request)
        self._live.add(conn)
        try:
            await conn.run()
        except Exception:
            # One connection's failure never takes the session owner (or the node) down.
            logger.exception("a STREAM connection failed")
        finally:
            self._live.discard(conn)

    @property
    def nursery(self) -> trio.Nursery | None:
        """The session owner's own nursery while it serves."""
        return self._nursery

    def remember(self, conn: Connection) -> None:
        self._connections[conn.session_rid] = conn

    def forget(self, conn: Connection) -> None:
        if self._connections.get(conn.session_rid) is conn:
            del self._connections[conn.session_rid]

    def connection(self, session_rid: bytes) -> Connection | None:
        return self._connections.get(session_rid)

    async def start_session(self, conn: Connection, session: Session) -> None:
        """The automatic bind of the authenticated identity, then ``on_session_open``
        (the session's first lifecycle turn). A failure refuses the session."""
        identity = session.identity
        runtime = self.actor_runtime
        try:
            if identity.bind is not AutoBind.NONE and runtime is not None:
                manager = runtime.manager
                ref: ActorRef | None
                if identity.bind is AutoBind.FIND:
                    ref = await manager.find(identity.actor_id)
                else:
                    result = await manager.get_or_create(
                        identity.actor_id, identity.actor_type
                    ).timeout(self.stream_config.bind_timeout)
                    ref = getattr(result, "actor", None)
                    if ref is None:
                        raise InvalidOperation(
                            f"the creation of {identity.actor_id.value!r} was rejected"
                        )
                if ref is not None:
                    await session.actors.bind(ref)
            if self.callbacks.on_open is not None:
                await self.callbacks.on_open(session)
        except ZLinkError as exc:
            conn.send_error(0, exc)
            conn.close(CloseReason.AUTHENTICATION_REFUSED, f"session start failed: {exc.message}")
        except Exception as exc:
            logger.exception("the session start failed")
            conn.send_error(0, exc)
            conn.close(CloseReason.AUTHENTICATION_REFUSED, "session start failed")

    # --- bind -----------------------------------------------------------------------------------
    async def bind(self, conn: Connection, ref: ActorRef) -> SessionActor:
        if self.actor_runtime is None:
            await trio.lowlevel.checkpoint()
            raise NotConfigured("Actor dispatch is not enabled (App.enable_actor_dispatch())")
        session = conn.session
        if session is not None:
            # The binding holds the session identity's own ActorId object when it names
            # that Actor (the one route_packet relays with and the hosted Actor pushes
            # with, if hosted here): the same object needs no attrs ``__eq__`` call.
            own = session.identity.actor_id
            if ref.actor_id is not own and ref.actor_id == own:
                ref = ActorRef(own, ref.object_generation, ref.mesh_name, ref.node_rid)
        aggregate = self.aggregate
        generation = aggregate.begin_bind(conn.entry)
        try:
            binding = await self._bind(conn, ref, generation)
        except BaseException:
            for record in aggregate.end_bind(conn.entry, generation):
                self._rejected(record, "its bind did not complete")
            self._bind_ended()
            raise
        # One step with the commit: the pushes that overtook the terminal (kept by
        # accept_push) go out after the Bound frame and before any later push.
        early = aggregate.end_bind(conn.entry, generation)
        self._bind_ended()
        conn.send_app(bound_frame(binding))
        for record in early:
            self.deliver_push(record)  # checked again, against the committed binding
        return _handle(conn, binding)

    def _bind_ended(self) -> None:
        event, self.bind_ended = self.bind_ended, trio.Event()
        event.set()

    async def _bind(self, conn: Connection, ref: ActorRef, generation: int) -> Binding:
        """The 38 of a bind and its commit (the caller owns its pending state)."""
        aggregate = self.aggregate
        deadline = min(
            trio.current_time() + self.stream_config.bind_timeout,
            trio.current_effective_deadline(),
        )
        self.transactions.begin()
        terminal = False
        try:
            reply, target_generation = await control_request(
                conn, ref, action=BindAction.BIND, binding_generation=generation, deadline=deadline
            )
            terminal = True
            tail = bind_tail(reply)
        finally:
            self.transactions.end()
            if not terminal:
                # The owner may have registered the attempt (its terminal was lost): the
                # tombstone of exactly that identity, in the background.
                self._tombstone(conn, ref, generation)
        if tail.node_rid is not None and tail.node_generation is not None:
            # A Message Follow hop took the bind to the Actor's current owner: the binding
            # (route and location snapshot) names that owner, the same mesh.
            ref = ActorRef(ref.actor_id, ref.object_generation, ref.mesh_name, tail.node_rid)
            target_generation = tail.node_generation
        route = BindingRoute(
            ref.mesh_name,
            ref.node_rid,
            target_generation,
            tail.authority_owner_generation,
            tail.owner_lease_generation,
        )
        binding = aggregate.commit_bind(conn.entry, ref, tail, route)
        if binding is None:
            self._tombstone(conn, ref, tail.binding_generation)
            raise Unavailable("the session closed during the bind")
        return binding

    def _tombstone(self, conn: Connection, ref: ActorRef, generation: int) -> None:
        nursery = self._nursery
        if nursery is not None:
            nursery.start_soon(self._unbind, conn, ref, generation, name="zlink_trio.stream.unbind")

    async def _unbind(self, conn: Connection, ref: ActorRef, generation: int) -> None:
        deadline = trio.current_time() + self.stream_config.bind_timeout
        self.transactions.begin()
        try:
            await control_request(
                conn,
                ref,
                action=BindAction.UNBIND,
                binding_generation=generation,
                deadline=deadline,
            )
        except ZLinkError as exc:
            logger.info("unbind of %r (binding %d) failed: %r", ref.actor_id.value, generation, exc)
        finally:
            self.transactions.end()

    # --- disconnect -----------------------------------------------------------------------------
    async def disconnect(self, conn: Connection, binding: Binding, reason: EndReason) -> None:
        """The disconnect notification of ``binding`` (once per binding identity): a
        NotifyDisconnected (``reason`` NOTIFIED, the binding must be current) or the
        physical disconnect's cleanup of the snapshot (DISCONNECTED)."""
        notice = binding.notice
        if isinstance(notice, trio.Event):
            await notice.wait()
            return
        if reason is EndReason.NOTIFIED and not binding.current:
            await trio.lowlevel.checkpoint()
            return
        event = trio.Event()
        binding.notice = event
        if isinstance(binding.state, Sealed):
            # Closed during a move: the notification goes where the 44 says (spec 02 §9:
            # a physical disconnect is no evidence of the relocation's outcome).
            try:
                notify = await self.relocations.wait_parked(binding)
            except BaseException:
                event.set()
                raise
            if not notify:
                event.set()
                return
        deadline = trio.current_time() + self.stream_config.disconnect_timeout
        self.transactions.begin()
        try:
            with trio.move_on_at(deadline):
                await control_request(
                    conn,
                    binding.ref,
                    action=BindAction.DISCONNECT,
                    binding_generation=binding.generation,
                    deadline=deadline,
                    route=binding.route,
                )
        except ZLinkError as exc:
            logger.info("disconnect notification of %r failed: %r", binding.actor_id.value, exc)
        finally:
            self.transactions.end()
            if reason is EndReason.NOTIFIED:
                self.end_binding(conn, binding, EndReason.NOTIFIED)
            event.set()

    async def cleanup_bindings(self, conn: Connection, snapshot: list[Binding]) -> None:
        """All-settled disconnect notifications of a closed connection's snapshot."""
        if not snapshot:
            return
        bound = self.stream_config.disconnect_timeout * 2
        if any(isinstance(b.state, Sealed) for b in snapshot):
            bound += self.config.session_relocation_seal_timeout  # waits for its 44
        with trio.move_on_after(bound):
            async with trio.open_nursery() as nursery:
                for binding in snapshot:
                    nursery.start_soon(self._quietly, conn, binding)

    async def _quietly(self, conn: Connection, binding: Binding) -> None:
        try:
            await self.disconnect(conn, binding, EndReason.DISCONNECTED)
        except Exception:
            logger.exception("the disconnect cleanup of %r failed", binding.actor_id.value)

    def end_binding(self, conn: Connection | None, binding: Binding, reason: EndReason) -> None:
        if self.aggregate.end(binding, reason) and conn is not None:
            frame = unbound_frame(binding, reason)
            if frame is not None:
                conn.send_app(frame)

    # --- relay ---------------------------------------------------------------------------------
    async def submit_relay(
        self,
        conn: Connection,
        binding: Binding,
        kind: MessageKind,
        name: str,
        value: bytes | TypedPayload,
        pending: PendingRequest | None,
        tail: SessionTail,
        deadline: float,
    ) -> None:
        runtime = self.actor_runtime
        assert runtime is not None  # a binding exists only with Actor dispatch
        route = binding.route
        me = self.node.identity
        if route.node_rid == me.node_rid and route.node_generation == me.node_generation:
            refused = runtime.bindings.check_relay(binding.actor_id, tail)
            if refused is not None:
                await trio.lowlevel.checkpoint()
                raise refused
            item = Deliver(kind, name, value, pending, deadline)
            lane = runtime.host.ready_lane(binding.actor_id)
            if lane is not None:
                try:
                    lane.submit_nowait(item)  # the fast path: no wait, no cancel scope
                except CapacityExceeded:
                    pass
                else:
                    return
            # Full, staging or not hosted: the general path (waits for room; a request
            # only until its deadline).
            with trio.move_on_at(deadline) as scope:
                try:
                    await runtime.host.admit(binding.actor_id, item)
                except StaleRoute as exc:
                    raise Unavailable(exc.message) from None
            if scope.cancelled_caught:
                raise Unavailable(f"actor {binding.actor_id.value!r}: its queue stayed full")
            return
        data = value if type(value) is bytes else self._encoded(value)
        await relay_remote(conn, binding, kind, name, data, pending, tail, deadline)

    def route_target(
        self,
        conn: Connection,
        route: PacketRoute,
        frame: Send | Request,
        pending: PendingRequest | None,
    ) -> tuple[Lane[ActorDeliveryLane, ActorItem], Deliver] | None:
        """The reader's fast path of an ``App.route_packet`` packet while the session lane
        is idle, first half: the lane of the identity's bound Actor hosted HERE and the
        item to relay to it without a session turn (its sequence counted), or None to
        leave the packet to the lane (not bound, sealed, remote — the turn then relays it,
        or answers the error). The reader then runs the turn in its own task
        (``Lane.run_here``, the reader its host: .reader) or, if the lane cannot run it
        now, :meth:`route_queued`. Never waits. (Two plain methods, not one coroutine: no
        coroutine frame of its own per frame.)"""
        runtime = self.actor_runtime
        session = conn.session
        if runtime is None or session is None:
            return None
        actor_id = session.identity.actor_id
        binding = conn.entry.bindings.get(actor_id)
        if binding is None or binding.state is not BOUND:
            return None
        route_to = binding.route
        me = self._me
        rid, node_generation = route_to.node_rid, route_to.node_generation
        # (``is`` first: the same value object, no attrs ``__eq__``/``__ne__`` call.)
        if (rid is not me.node_rid and rid != me.node_rid) or (
            node_generation is not me.node_generation and node_generation != me.node_generation
        ):
            return None
        lane = runtime.host.ready_lane(actor_id)
        if lane is None:
            return None
        owner = self.aggregate.owner
        # (check_relay of the tail a relay would carry, without building it per frame)
        if not runtime.bindings.relay_current(
            actor_id, owner.node_rid, owner.node_generation, conn.session_rid, binding.generation
        ):
            return None
        kind = _SEND if pending is None else _REQUEST
        deadline = _NEVER if pending is None else pending.deadline
        item = Deliver(kind, route.target or frame.packet, frame.payload, pending, deadline)
        conn.entry.sequence += 1
        return lane, item

    @staticmethod
    def route_queued(
        conn: Connection, lane: Lane[ActorDeliveryLane, ActorItem], item: Deliver
    ) -> bool:
        """The second half of :meth:`route_target` when the lane did not run the item
        here: queue it on the Actor's lane (True), or leave the packet to the session
        lane (False: full or closed)."""
        try:
            lane.submit_nowait(item)
        except ZLinkError:
            conn.entry.sequence -= 1  # (nothing ran between: run_here did nothing)
            return False
        return True

    def _encoded(self, value: bytes | TypedPayload) -> bytes:
        assert type(value) is TypedPayload
        data = value.encode()
        if len(data) > self.config.max_request_bytes:
            raise InvalidOperation(
                f"payload {value.codec.name!r} encodes to {len(data)} bytes, over "
                f"{self.config.max_request_bytes}"
            )
        return data

    # --- helpers -------------------------------------------------------------------------------
    def payload_value(self, payload: object) -> bytes | TypedPayload:
        """A relay payload: bytes (bounded) or a registered payload object."""
        if type(payload) is bytes:
            data = payload
        elif isinstance(payload, bytearray | memoryview):
            data = bytes(payload)
        elif type(payload) is TypedPayload:
            return payload
        else:
            codec = self.payloads.of(payload)
            if codec is None:
                raise InvalidOperation(
                    "payload must be bytes or an instance of a registered payload class, "
                    f"got {type(payload).__name__}"
                )
            codec.check(payload)
            return TypedPayload(codec, payload)
        if len(data) > self.config.max_request_bytes:
            raise InvalidOperation(
                f"payload of {len(data)} bytes exceeds {self.config.max_request_bytes}"
            )
        return data

    def payload_bytes(self, payload: object) -> bytes:
        value = self.payload_value(payload)
        return value if type(value) is bytes else self._encoded(value)

    def packet_name(self, packet: object) -> str:
        return check_text_id(packet, "packet name")

    def cached_route(self, ref: ActorRef) -> Route | None:
        """The positive route cache's entry for ``ref`` when it names the same node and
        incarnation (a local read, never the Store): its owner generation and lease copy
        go into the bind's envelope."""
        runtime = self.actor_runtime
        store = self._store
        if runtime is None or store is None:
            return None
        route = runtime.messenger.cache.get(ref.actor_id, store.recovery_epoch)
        if (
            route is None
            or route.node_rid != ref.node_rid
            or route.object_generation != ref.object_generation
        ):
            return None
        return route

    def next_message_id(self) -> int:
        runtime = self.actor_runtime
        assert runtime is not None
        return runtime.messenger.next_message_id()

    # --- Actor → session (SessionPort, and commands 36 / 51 / 140) --------------------------
    def deliver_push(self, record: BoundSessionSend) -> None:
        result = self.aggregate.accept_push(record)
        if result is None:
            return  # kept until the sealed binding's 44 (a move's target pushed first)
        if isinstance(result, str):
            self._rejected(record, result)
            return
        conn = self._connections.get(record.session_rid)
        if conn is None:
            self._rejected(record, "no connection")
            return
        frame = Push(
            actor_id=record.actor_id,
            sequence=result.generation,
            packet=record.packet_name,
            payload=record.payload,
        )
        if not conn.send_app(frame):
            self._rejected(record, "the connection's outbound queue is full (slow consumer)")

    def push_local(
        self,
        identity: BindingIdentity,
        actor_id: ActorId,
        object_generation: ObjectGeneration,
        source_rid: NodeRid,
        source_generation: NodeGeneration,
        owner_generation: AuthorityOwnerGeneration,
        packet: str,
        payload: bytes,
    ) -> None:
        """:meth:`deliver_push` of the record a push of an Actor owned HERE would carry
        (the fields, ``identity`` its binding's), without building the record or the
        Push frame when the push is accepted and queued. Anything else builds the
        record: a full queue is reported as :meth:`deliver_push` reports it; the rest
        (kept, refused, no connection) goes through :meth:`deliver_push`, which decides
        from the same state (``push_binding`` changed nothing)."""
        binding = self.aggregate.push_binding(
            identity, actor_id, object_generation, source_rid, source_generation, owner_generation
        )
        conn: Connection | None = None
        if binding is not None:
            conn = self._connections.get(identity.session_rid)
            if conn is not None and conn.send_push(actor_id, binding.generation, packet, payload):
                return
        record = self._push_record(
            identity, actor_id, object_generation, source_rid, source_generation,
            owner_generation, packet, payload,
        )  # fmt: skip
        if conn is not None:  # (accepted, but its queue is full: closed as a slow consumer)
            self._rejected(record, "the connection's outbound queue is full (slow consumer)")
            return
        self.deliver_push(record)

    @staticmethod
    def _push_record(
        identity: BindingIdentity,
        actor_id: ActorId,
        object_generation: ObjectGeneration,
        source_rid: NodeRid,
        source_generation: NodeGeneration,
        owner_generation: AuthorityOwnerGeneration,
        packet: str,
        payload: bytes,
    ) -> BoundSessionSend:
        return BoundSessionSend(
            actor_id=actor_id,
            object_generation=object_generation,
            source_rid=source_rid,
            source_node_generation=source_generation,
            authority_owner_generation=owner_generation,
            session_owner_rid=identity.owner_rid,
            session_owner_generation=identity.owner_generation,
            session_rid=identity.session_rid,
            expected_binding_generation=identity.binding_generation,
            packet_name=packet,
            payload=payload,
        )

    def rejected_push(self, record: BoundSessionSend, reason: str) -> None:
        self._rejected(record, reason)

    def _rejected(self, record: BoundSessionSend, reason: str) -> None:
        self.flow.emit(
            FlowEvent.SESSION_PUSH_REJECTED,
            "push %r of actor %r (binding %d): %s",
            record.packet_name,
            record.actor_id.value,
            record.expected_binding_generation,
            reason,
        )

    def replaced(self, record: BoundSessionReplaced) -> None:
        result = self.aggregate.replaced(record)
        if result is None:
            return  # kept until the sealed binding's 44 (the move's target replaced it)
        if isinstance(result, str):
            self.flow.emit(
                FlowEvent.SESSION_STALE_CONTROL,
                "boundSessionReplaced for %r (binding %d): %s",
                record.source.actor_id.value,
                record.previous.retired_binding_generation,
                result,
            )
            return
        conn = self._connections.get(result.entry.session_rid)
        if conn is None:
            return
        frame = unbound_frame(result, EndReason.REPLACED)
        if frame is not None:
            conn.send_app(frame)
        self._replacement(conn, result)

    def _replacement(self, conn: Connection, retired: Binding) -> None:
        """The old session is closing: run the duplicate-connection callback in one
        lifecycle turn, then close 100 ms after its terminal by a timer (forced when the
        callback is not terminal within SessionReplacementCallbackTimeout)."""
        callback = self.callbacks.on_replaced
        session = conn.session
        delay = self.config.replacement_close_delay
        if callback is None or session is None:
            self._close_after(conn, retired, trio.current_time() + delay)
            return

        async def run() -> None:
            with trio.move_on_after(self.config.session_replacement_callback_timeout) as scope:
                try:
                    await callback(session, SessionReplaced(retired.ref))
                except Exception:
                    logger.exception("the duplicate-connection callback failed")
            if scope.cancelled_caught:
                conn.close(CloseReason.REPLACED, "the replacement callback did not finish")
                return
            self._close_after(conn, retired, trio.current_time() + delay)

        if not conn.submit_lifecycle(run):
            conn.close(CloseReason.REPLACED, "replaced")

    def _close_after(self, conn: Connection, retired: Binding, at: float) -> None:
        if conn.closed:
            return
        conn.nursery.start_soon(
            self._close_timer, conn, retired, at, name="zlink_trio.stream.close"
        )

    async def _close_timer(self, conn: Connection, retired: Binding, at: float) -> None:
        await trio.sleep_until(at)
        # Re-check the retired identity it was scheduled for (spec 02 §6).
        if (
            retired.state == Ended(EndReason.REPLACED)
            and conn.entry is retired.entry
            and not conn.closed
        ):
            conn.close(CloseReason.REPLACED, "the Actor was bound by another connection")

    def redeliver(
        self, record: BoundSessionSend | BoundSessionClose | BoundSessionReplaced
    ) -> None:
        """A kept early record of a sealed binding, once its 44 committed the route."""
        if isinstance(record, BoundSessionSend):
            self.deliver_push(record)
        elif isinstance(record, BoundSessionClose):
            self.control(record)
        else:
            self.replaced(record)

    def control(self, record: BoundSessionClose) -> None:
        result = self.aggregate.accept_control(record)
        if result is None:
            return  # kept until the sealed binding's 44 (the move's target sent it)
        if isinstance(result, str):
            self.flow.emit(
                FlowEvent.SESSION_STALE_CONTROL,
                "boundSessionClose for %r (binding %d): %s",
                record.actor_id.value,
                record.binding_generation,
                result,
            )
            return
        conn = self._connections.get(record.session_rid)
        if record.action is BoundSessionCloseAction.CLOSE_CONNECTION:
            if conn is not None:
                conn.close(CloseReason.CLOSE_REQUESTED, "closed by a bound Actor")
            return
        self.end_binding(conn, result, EndReason.DESTROYED)

    def seal(self, record: SessionRelocationSeal) -> SessionRelocationSealed:
        """Command 42 from a relocation source on this node, in-process: its 43."""
        me = self.node.identity
        return self.relocations.seal(record, (me.node_rid, me.node_generation))

    def route(self, record: SessionRelocationRoute) -> None:
        """Command 44 from a relocation target or coordinator on this node, in-process."""
        me = self.node.identity
        self.relocations.route(record, (me.node_rid, me.node_generation))

    async def _on_push(self, peer: PeerIdentity, record: BoundSessionSend) -> None:
        self.deliver_push(record)

    async def _on_replaced(self, peer: PeerIdentity, record: BoundSessionReplaced) -> None:
        self.replaced(record)

    async def _on_control(self, peer: PeerIdentity, record: BoundSessionClose) -> None:
        self.control(record)

    # --- owner loss -----------------------------------------------------------------------------
    async def _watch_owners(self) -> None:
        """A binding whose Actor owner's lifecycle ended (its intent removed and no
        admitted peer left: the MeshNode's own transition) ends OWNER_LOST, and its client
        is told, instead of relaying into the void."""
        node = self.node
        aggregate = self.aggregate
        while True:
            await node.wait_peers_change()
            me = node.identity.node_rid
            for rid in aggregate.routed_nodes():
                if rid == me:
                    continue
                for binding in aggregate.on_node(rid):
                    peer = PeerAddress(binding.route.mesh_name, rid)
                    if node.peer_state(peer) is PeerState.GONE:
                        conn = self._connections.get(binding.entry.session_rid)
                        self.end_binding(conn, binding, EndReason.OWNER_LOST)
