"""``session.actors``: the Actor bindings of one session (spec 02 §5, §7, §13).

* :meth:`SessionActors.bind` sends ONE control request (command 38, or in-process when the
  Actor is hosted here) to the location the caller's ActorRef names — no Store read
  before, during or after — and returns once the session owner published the binding
  (linearization point 2). It is a durable operation: one OperationId, replayed after
  typed transient transport failures until its terminal or its deadline.
* :meth:`SessionActors.bind_or_get` returns this session's binding of the same ActorId and
  ObjectGeneration when there is one (no request), else binds.
* :meth:`SessionActors.find` and :attr:`SessionActors.bound` look at this session's
  bindings only (never the global directory).
* :meth:`SessionActor.relay` submits a packet to the binding's stored route (command 24
  with the bound-session tail, or the Actor's queue when it is hosted here); a request's
  reply completes the client's request. Nothing is re-sent: a stale route ends
  Unavailable, a timeout DeadlineExceeded.
* :meth:`SessionActor.notify_disconnected` is the logical disconnect of one binding: the
  Actor's current Spot gets OnDisconnectActor once, then the binding is tombstoned; the
  connection stays.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Final, final

import trio

from ..errors import (
    DeadlineExceeded,
    InvalidOperation,
    NotConfigured,
    Unavailable,
    ZLinkError,
)
from ..ids import ActorId, ActorRef, NodeGeneration, OperationId
from ..mesh.api import (
    LinkLost,
    PeerAddress,
    PeerGone,
    PeerNotAdmitted,
    PeerState,
    PendingReply,
    connect_until,
)
from ..objects.durable import remaining_ms, run_durable
from ..objects.sinks import raise_for_failure
from ..wire.enums import BindAction, MessageKind
from ..wire.records import ActorSend, BoundSessionBind, TerminalReply
from ..wire.stream import Bound, Unbound, UnboundReason
from ..wire.tails import BindTail, ReplyPayloadTail, SessionTail
from .binding import Binding, BindingRoute, EndReason, Releasing, Sealed
from .relocation import HeldRelay
from .session import Packet, PendingRequest

if TYPE_CHECKING:
    from .connection import Connection

__all__ = ["SessionActor", "SessionActors"]

logger = logging.getLogger("zlink_trio.sessions")

_SEND: Final = MessageKind.SEND
_REQUEST: Final = MessageKind.REQUEST
_NEVER: Final = math.inf


@final
class SessionActor:
    """One binding of this session (spec 02 §13 ``IZLinkSessionActor``)."""

    __slots__ = ("_binding", "_conn")

    def __init__(self, conn: Connection, binding: Binding) -> None:
        self._conn = conn
        self._binding = binding

    @property
    def ref(self) -> ActorRef:
        """The bound ActorRef: the current location snapshot (it follows a relocation;
        ActorId and ObjectGeneration never change)."""
        return self._binding.ref

    @property
    def actor_id(self) -> ActorId:
        return self._binding.actor_id

    @property
    def binding_generation(self) -> int:
        """The replacement sequence of this binding (what the client's Bound frame says)."""
        return self._binding.generation

    @property
    def current(self) -> bool:
        """Still this session's binding of the Actor (not replaced, ended or closed)."""
        return self._binding.current

    async def relay(
        self, dispatch: Packet, payload: object = b"", *, packet: str | None = None
    ) -> None:
        """Submit ``payload`` to the bound Actor's ``packet`` handler (default: the
        dispatch's packet name) through the stored route: a send for a Send packet, a
        request for a Request packet — whose reply then completes the client's request
        exactly once. Returns once the payload was admitted (the Actor's turn runs on the
        Actor's own queue, never in this session callback).

        Raises:
            SessionNotBound: the binding ended (bind again).
            InvalidOperation: the dispatch was relayed or answered already; a bad payload.
            Unavailable: the route is stale or its owner unreachable (never re-sent to
                another target); the session is closing.
            DeadlineExceeded: the request's deadline passed before it could be sent.
        """
        conn = self._conn
        binding = self._binding
        if not isinstance(dispatch, Packet) or dispatch.session is not conn.session:
            raise InvalidOperation("relay takes the Packet of this session's handler")
        pending = dispatch._pending
        if dispatch._relayed or (pending is not None and pending.done):
            raise InvalidOperation("this packet was relayed or answered already")
        name = dispatch.name if packet is None else conn.server.packet_name(packet)
        value = conn.server.payload_value(payload)
        server = conn.server
        sequence = server.aggregate.relay(binding)
        kind = dispatch.kind
        deadline = _NEVER if pending is None else pending.deadline
        owner = server.aggregate.owner
        tail = SessionTail(
            session_owner_rid=owner.node_rid,
            session_owner_generation=owner.node_generation,
            session_rid=conn.session_rid,
            binding_generation=binding.generation,
            session_sequence=sequence,
        )
        dispatch._relayed = True
        if isinstance(binding.state, Sealed | Releasing):
            # Relocation in progress (spec 02 §8.1): kept by the aggregate, in order
            # (behind the held messages still being released).
            server.aggregate.hold(binding, HeldRelay(kind, name, value, pending, tail), sequence)
            await trio.lowlevel.checkpoint()
            return
        try:
            await server.submit_relay(conn, binding, kind, name, value, pending, tail, deadline)
        except BaseException:
            dispatch._relayed = False
            raise

    async def notify_disconnected(self) -> None:
        """The logical disconnect of this binding while the connection stays (spec 02
        §7): the Actor's current Spot runs OnDisconnectActor at most once for this
        binding identity (a physical disconnect racing it shares the same notification),
        then the binding is removed. The Actor is not destroyed; its Spot membership is
        unchanged. A binding that already ended returns at once."""
        conn = self._conn
        await conn.server.disconnect(conn, self._binding, EndReason.NOTIFIED)

    def __repr__(self) -> str:
        return f"<SessionActor {self._binding!r}>"


@final
class SessionActors:
    """The Actor bindings of one session (spec 02 §13 ``IZLinkSessionActors``)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    @property
    def bound(self) -> tuple[SessionActor, ...]:
        """Every Actor bound to this session now."""
        conn = self._conn
        return tuple(_handle(conn, b) for b in conn.entry.bindings.values() if b.current)

    def find(self, actor_id: str | ActorId) -> SessionActor | None:
        """This session's binding of ``actor_id``, or None (never a directory lookup)."""
        conn = self._conn
        binding = conn.server.aggregate.find(conn.entry, ActorId.parse(actor_id))
        return None if binding is None else _handle(conn, binding)

    async def bind_or_get(self, ref: ActorRef) -> SessionActor:
        """This session's binding of ``ref``'s ActorId AND ObjectGeneration when it has
        one (no control request), else :meth:`bind`. Never another generation's binding,
        never a directory Actor."""
        if not isinstance(ref, ActorRef):
            raise InvalidOperation(f"bind_or_get takes an ActorRef, got {type(ref).__name__}")
        conn = self._conn
        binding = conn.server.aggregate.find(conn.entry, ref.actor_id)
        if binding is not None and binding.object_generation == ref.object_generation:
            await trio.lowlevel.checkpoint()
            return _handle(conn, binding)
        return await self.bind(ref)

    async def bind(self, ref: ActorRef) -> SessionActor:
        """Bind ``ref`` (ActorId + ObjectGeneration) to this session: one control request
        to the location ``ref`` names (when the Actor moved away from there, that node
        relays it once per hop over its Message Follow route, and the binding's ``ref``
        names the owner that registered it); the terminal is returned once this session
        owner stored the route. The Actor's previous session (if another one) is told by the
        Actor owner afterwards (command 51) and this bind does not wait for it.

        Raises:
            InvalidOperation: not an ActorRef; another ObjectGeneration is current.
            Unavailable: the location is stale (no Message Follow route), the owner is
                unreachable, sealed for a move, or its fence is stale; never re-tried
                against another owner. Also when the session closed meanwhile.
            DeadlineExceeded: admitted, but no terminal before the bind deadline
                (``StreamConfig.bind_timeout``, or the caller's scope when sooner).
            ShuttingDown: this session owner is shutting down.
            NotConfigured: no Actor dispatch on this server.
        """
        if not isinstance(ref, ActorRef):
            raise InvalidOperation(f"bind takes an ActorRef, got {type(ref).__name__}")
        conn = self._conn
        return await conn.server.bind(conn, ref)

    def __len__(self) -> int:
        return sum(1 for b in self._conn.entry.bindings.values() if b.current)


def _handle(conn: Connection, binding: Binding) -> SessionActor:
    handle = binding.handle
    if type(handle) is not SessionActor:
        handle = binding.handle = SessionActor(conn, binding)
    return handle


# --- the control requests (used by the server) ----------------------------------------------


def bind_record(
    conn: Connection,
    ref: ActorRef,
    *,
    operation_id: OperationId,
    binding_generation: int,
    action: BindAction,
    target_generation: NodeGeneration,
    timeout_ms: int,
    route: BindingRoute | None = None,
) -> BoundSessionBind:
    """The command 38 of one bind (or its UNBIND / DISCONNECT transition)."""
    server = conn.server
    owner = server.aggregate.owner
    aog = lease = None
    if route is not None:
        aog, lease = route.owner_generation, route.lease_generation
    else:
        cached = server.cached_route(ref)
        if cached is not None:
            aog, lease = cached.owner_generation, cached.lease_generation
    return BoundSessionBind(
        correlation=1,  # the mesh stamps its own on each attempt
        operation_id=operation_id,
        source_rid=owner.node_rid,
        source_generation=owner.node_generation,
        session_owner_id=owner.owner_id,
        session_owner_lease_generation=owner.lease_generation,
        actor_id=ref.actor_id,
        object_generation=ref.object_generation,
        target_rid=ref.node_rid,
        target_node_generation=target_generation,
        authority_owner_generation=aog,
        owner_lease_generation=lease,
        session_rid=conn.session_rid,
        binding_generation=binding_generation,
        action=action,
        timeout_ms=timeout_ms,
    )


async def control_request(
    conn: Connection,
    ref: ActorRef,
    *,
    action: BindAction,
    binding_generation: int,
    deadline: float,
    route: BindingRoute | None = None,
) -> tuple[TerminalReply, NodeGeneration]:
    """One command 38 (a durable operation: one OperationId until its terminal or
    ``deadline``), in-process when ``ref`` names this node; its terminal and the owner's
    NodeGeneration it was admitted by. UNBIND and DISCONNECT are cleanup: they go on
    while this node stops admitting new work."""
    server = conn.server
    me = server.node.identity
    operation_id = OperationId.new()
    if ref.node_rid == me.node_rid:
        runtime = server.actor_runtime
        if runtime is None:
            raise NotConfigured("Actor dispatch is not enabled")
        record = bind_record(
            conn,
            ref,
            operation_id=operation_id,
            binding_generation=binding_generation,
            action=action,
            target_generation=me.node_generation,
            timeout_ms=remaining_ms(deadline),
            route=route,
        )
        return await runtime.bindings.handle_local(record, deadline), me.node_generation
    peer = PeerAddress(ref.mesh_name, ref.node_rid)
    node = server.node
    sent: list[NodeGeneration] = []

    def make(timeout_ms: int) -> BoundSessionBind:
        identity = node.admitted_peer(peer)
        if identity is None:
            raise PeerNotAdmitted(f"no admitted connection to {peer.node_rid}")
        sent.append(identity.node_generation)
        return bind_record(
            conn,
            ref,
            operation_id=operation_id,
            binding_generation=binding_generation,
            action=action,
            target_generation=identity.node_generation,
            timeout_ms=timeout_ms,
            route=route,
        )

    reply = await run_durable(node, peer, make, deadline, cleanup=action is not BindAction.BIND)
    return reply, sent[-1]


def bind_tail(reply: TerminalReply) -> BindTail:
    raise_for_failure(reply)
    tail = reply.tail
    if not isinstance(tail, BindTail):
        raise Unavailable("the bind's terminal carries no binding")
    return tail


async def relay_remote(
    conn: Connection,
    binding: Binding,
    kind: MessageKind,
    name: str,
    data: bytes,
    pending: PendingRequest | None,
    tail: SessionTail,
    deadline: float,
) -> None:
    """Command 24 with the bound-session tail to the binding's stored route. Never
    re-sent; a request's terminal is awaited by a task of the connection."""
    server = conn.server
    node = server.node
    route = binding.route
    peer = PeerAddress(route.mesh_name, route.node_rid)
    state = node.peer_state(peer)
    if state is PeerState.GONE:
        server.end_binding(conn, binding, EndReason.OWNER_LOST)
        raise Unavailable(f"actor {binding.actor_id.value!r}: its owner's lifecycle ended")
    if state is PeerState.CONNECTING:
        until = min(deadline, trio.current_time() + server.config.connect_timeout)
        if await connect_until(node, peer, until) is not PeerState.ADMITTED:
            raise Unavailable(f"actor {binding.actor_id.value!r}: its owner cannot be reached")
    me = node.identity
    message_id = server.next_message_id()

    def build(correlation: int) -> ActorSend:
        return ActorSend(
            correlation=correlation,
            source_rid=me.node_rid,
            source_generation=me.node_generation,
            target_rid=route.node_rid,
            target_generation=route.node_generation,
            actor_id=binding.actor_id,
            route_object_generation=binding.object_generation,
            expected_owner_generation=route.owner_generation,
            owner_lease_generation=route.lease_generation,
            message_kind=kind,
            packet_name=name,
            payload=data,
            timeout_ms=None if pending is None else remaining_ms(deadline),
            operation_id=OperationId(message_id),
            session=tail,
        )

    try:
        if pending is None:
            await node.send(peer, build(0))
            return
        reply = await node.request_with(peer, build)
    except DeadlineExceeded:
        raise Unavailable(
            f"actor {binding.actor_id.value!r}: the connection to its owner stayed congested"
        ) from None
    conn.nursery.start_soon(
        _await_reply, conn, binding, pending, reply, name="zlink_trio.stream.reply"
    )


async def _await_reply(
    conn: Connection, binding: Binding, pending: PendingRequest, reply: PendingReply
) -> None:
    """The terminal of a relayed request (a task of its connection: it ends with it, and a
    reply after that is dropped by the mesh, never given to another session)."""
    with trio.move_on_at(pending.deadline):
        while True:
            try:
                terminal = await reply.wait()
            except PeerGone:
                pending.fail_now(Unavailable("the Actor's owner lifecycle ended before the reply"))
                return
            except LinkLost:
                continue
            break
        try:
            raise_for_failure(terminal)
        except ZLinkError as exc:
            pending.fail_now(exc)
            return
        tail = terminal.tail
        pending.reply_now(tail.payload if isinstance(tail, ReplyPayloadTail) else None)
        return
    reply.discard()
    pending.fail_now(DeadlineExceeded("no reply before the request's deadline"))


def unbound_frame(binding: Binding, reason: EndReason) -> Unbound | None:
    why = {
        EndReason.REPLACED: UnboundReason.REPLACED,
        EndReason.DESTROYED: UnboundReason.DESTROYED,
        EndReason.OWNER_LOST: UnboundReason.OWNER_LOST,
        EndReason.NOTIFIED: UnboundReason.NOTIFIED,
    }.get(reason)
    if why is None:
        return None
    return Unbound(actor_id=binding.actor_id, sequence=binding.generation, reason=why)


def bound_frame(binding: Binding) -> Bound:
    return Bound(
        actor_id=binding.actor_id,
        object_generation=binding.object_generation,
        sequence=binding.generation,
    )
