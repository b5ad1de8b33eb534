"""The public objects of one STREAM session: :class:`Session` (what callbacks and packet
handlers get), :class:`Packet` (the dispatch context of one client packet) and the
request correlation a client request is completed through exactly once."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import trio

from ..errors import ErrorKind, InvalidOperation, NotConfigured, ZLinkError
from ..ids import check_text_id
from ..observe import FlowEvent
from ..wire.enums import MessageKind
from ..wire.payloads import TypedPayload
from ..wire.stream import ErrorFrame, Message, Reply
from .values import Authenticated

if TYPE_CHECKING:
    from ..actors.manager import ActorManager
    from .actors import SessionActors
    from .connection import Connection

__all__ = ["Packet", "PacketRoute", "PendingRequest", "Session"]


@final
class PendingRequest:
    """The correlation of one client Request: completed exactly once (a Reply or an
    ErrorFrame with the client's correlation), by the packet handler's return, by the
    Actor a relay reached (this object is that Actor turn's reply sink), by its
    deadline, or dropped when the connection closed. A second completion is a logged
    no-op (``session_reply_dropped``), never a second answer."""

    __slots__ = ("_conn", "correlation", "deadline", "done", "ticket")

    def __init__(self, conn: Connection, correlation: int, deadline: float) -> None:
        self._conn = conn
        self.correlation = correlation
        self.deadline = deadline
        self.done = False
        self.ticket = 0
        conn.pending.add(self)
        server = conn.server
        server.transactions.begin()  # accepted work: the drain lets it finish
        self.ticket = server.deadlines.watch(self, deadline)  # type: ignore[arg-type]

    def _end(self) -> None:
        self.done = True
        conn = self._conn
        conn.pending.discard(self)
        server = conn.server
        server.deadlines.settled(self.ticket)
        server.transactions.end()

    def _finish(self) -> bool:
        if self.done:
            self._conn.server.flow.emit(
                FlowEvent.SESSION_REPLY_DROPPED, "request %d: already completed", self.correlation
            )
            return False
        self._end()
        return True

    def reply_now(self, payload: bytes | None) -> bool:
        if not self._finish():
            return False
        self._conn.send_app(Reply(correlation=self.correlation, payload=payload))
        return True

    def fail_now(self, error: ZLinkError) -> bool:
        if not self._finish():
            return False
        self._conn.send_error(self.correlation, error)
        return True

    def drop(self) -> None:
        """The connection closed: nothing will be answered any more."""
        if not self.done:
            self._end()

    # --- the timer (zlink_trio.routing.reply_deadlines.ReplyDeadlines) ---------------------------
    def expire(self, error: BaseException) -> None:
        if isinstance(error, ZLinkError):
            self.fail_now(error)

    # --- an Actor turn's reply sink (zlink_trio.objects.sinks.ReplySink) --------------------
    async def reply(self, payload: bytes | None, *, flush: bool = True) -> None:
        self.reply_now(payload)

    async def fail(self, error: ZLinkError) -> None:
        self.fail_now(error)


@final
class Packet:
    """The dispatch context of one client packet: handed to its packet handler as the
    first argument and passed on to :meth:`SessionActor.relay` (spec 02 §5: the original
    request correlation and the session sequence travel with the relay).

    A request packet is answered by its handler's return value, unless the handler relayed
    it: then the Actor's reply completes the client's request (its return value is then
    ignored)."""

    __slots__ = ("_pending", "_relayed", "kind", "name", "session")

    def __init__(
        self, session: Session, name: str, kind: MessageKind, pending: PendingRequest | None
    ) -> None:
        self.session = session
        self.name = name
        """The packet name (the handler's key)."""
        self.kind = kind
        """``MessageKind.SEND`` (a one-way Send frame) or ``MessageKind.REQUEST``."""
        self._pending = pending
        self._relayed = False

    @property
    def correlation(self) -> int:
        """The client's correlation of a request (0 for a send)."""
        return 0 if self._pending is None else self._pending.correlation

    @property
    def deadline(self) -> float:
        """The request's deadline in Trio time (``inf`` for a send)."""
        return float("inf") if self._pending is None else self._pending.deadline

    @property
    def relayed(self) -> bool:
        return self._relayed

    def __repr__(self) -> str:
        return f"<Packet {self.name!r} {self.kind.name.lower()} #{self.correlation}>"


@final
class Session:
    """One authenticated STREAM connection (made by the framework only).

    ``identity`` is what the authentication decided; ``actors`` its Actor bindings
    (bind / bind_or_get / find / bound); ``directory`` the server's Actor manager (find,
    create, get_or_create: step 2 of spec 02 §1); :meth:`send` a one-way message from the
    server application itself (e.g. the duplicate-connection notice)."""

    __slots__ = ("_actors", "_conn", "identity")

    def __init__(self, conn: Connection, identity: Authenticated, actors: SessionActors) -> None:
        self._conn = conn
        self.identity = identity
        self._actors = actors

    @property
    def connection_id(self) -> bytes:
        """The 16-byte connection id (the SessionRid; never reused)."""
        return self._conn.session_rid

    @property
    def actors(self) -> SessionActors:
        return self._actors

    @property
    def directory(self) -> ActorManager:
        """The Actor manager of this server (NotConfigured without Actor dispatch)."""
        actors = self._conn.server.actor_runtime
        if actors is None:
            raise NotConfigured("Actor dispatch is not enabled (App.enable_actor_dispatch())")
        return actors.manager

    @property
    def closing(self) -> bool:
        """The session takes no new inbound packet (replaced or closing)."""
        return self._conn.closing

    async def send(self, packet: str, payload: object = b"") -> None:
        """One-way ``packet`` to the client (a Message frame): bytes or a registered
        payload object. Allowed while closing (the replacement callback's notice)."""
        name = check_text_id(packet, "packet name")
        data = self._conn.server.payload_bytes(payload)
        await trio.lowlevel.checkpoint()
        self._conn.send_app(Message(packet=name, payload=data))

    async def close(self) -> None:
        """Close the connection (the normal disconnect path cleans every binding)."""
        from ..wire.stream import CloseReason

        self._conn.close(CloseReason.CLOSE_REQUESTED, "closed by the server application")
        await trio.lowlevel.checkpoint()

    def __repr__(self) -> str:
        return f"<Session {self.connection_id.hex()[:12]} {self.identity.actor_id.value!r}>"


def error_frame(correlation: int, error: BaseException) -> ErrorFrame:
    """The error frame telling a client ``error`` (its kind; anything not a framework
    error is an ApplicationError without internals)."""
    if isinstance(error, ZLinkError):
        return ErrorFrame.of(correlation, error.kind, error.message)
    return ErrorFrame.of(correlation, ErrorKind.APPLICATION, type(error).__name__)


def reply_bytes(result: object, limit: int) -> bytes | None:
    """A handler's return value as the reply payload (bytes, None or a typed payload).

    Raises:
        InvalidOperation: another type, or more than ``limit`` bytes.
    """
    if result is None:
        return None
    if type(result) is TypedPayload:
        data = result.encode()
    elif isinstance(result, bytes | bytearray | memoryview):
        data = bytes(result)
    else:
        raise InvalidOperation(f"a packet handler returned {type(result).__name__}, not bytes")
    if len(data) > limit:
        raise InvalidOperation(f"reply of {len(data)} bytes exceeds {limit}")
    return data


@final
class PacketRoute:
    """The packet handler ``App.route_packet`` registers: relay the packet (its payload
    bytes as they are) to the Actor bound under the session's identity, as its
    ``packet`` handler (default: the same name) — what ``session.actors.find(
    session.identity.actor_id).relay(packet, payload)`` does, without application code,
    so the framework may run it straight from the connection's reader when the session
    lane is idle (nothing of this session is queued or running: the order stays)."""

    __slots__ = ("target",)

    def __init__(self, target: str | None) -> None:
        self.target = target

    async def __call__(self, packet: Packet, payload: bytes) -> None:
        session = packet.session
        bound = session.actors.find(session.identity.actor_id)
        if bound is None:
            from ..errors import SessionNotBound

            raise SessionNotBound(
                f"the session's Actor {session.identity.actor_id.value!r} is not bound"
            )
        await bound.relay(packet, payload, packet=self.target)

    def __repr__(self) -> str:
        return f"PacketRoute({self.target!r})"
