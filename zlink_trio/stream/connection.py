"""One STREAM connection: handshake, reader, session lane, writer, close.

::

    connection task (the websocket handler)          Connection.run
    ├─ reader nursery (outlives the rest: a waiting inline Actor turn finishes in it)
    │  └─ "zlink_trio.stream.reader" Connection._read: decode; Ping → Pong at once;
    │                                Send/Request → the session lane's application queue
    │                                (never waits: a full lane answers CapacityExceeded), or
    │                                a route_packet frame for an idle local Actor: its turn
    │                                runs HERE (.reader); a turn that waits hands the
    │                                reading to a new reader task and keeps this one
    └─ connection nursery (cancelled once the close procedure ran)
       ├─ "zlink_trio.stream.writer" Outbound.run: control frames first, then replies/pushes
       ├─ "zlink_trio.stream.reply"  one per relayed request in flight to a remote owner
       └─ "zlink_trio.stream.close"  the replacement close timer (non-blocking, 100 ms)

The session lane (an engine lane with the Session lane policy: the connection-closed state
lives there) runs this session's callbacks one at a time: packet handlers (application
queue), the session start and the duplicate-connection callback (lifecycle queue). Actor
handlers never run there: a relay only submits to the Actor's own queue.

Close (whoever starts it: the client, a replacement, an Actor's close request, a slow
consumer, shutdown): the aggregate freezes the binding snapshot and forgets the session;
the lane is marked connection-closed (queued packets are dropped, their requests never
answered); the Closing frame and the websocket close go out (bounded by
``StreamConfig.close_timeout``); then each binding of the snapshot gets its disconnect
notification, all-settled, within ``StreamConfig.disconnect_timeout``.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, final

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, WebSocketRequest

from ..engine.lane import Lane
from ..engine.lanes import SessionLane
from ..errors import (
    ApplicationError,
    CapacityExceeded,
    DeadlineExceeded,
    InvalidOperation,
    NotFound,
    ProtocolError,
    Unavailable,
    ZLinkError,
)
from ..ids import ActorId
from ..objects.handlers import TypedHandler
from ..observe import FlowEvent
from ..wire.enums import MessageKind
from ..wire.stream import (
    CONNECTION_ID_BYTES,
    PROTOCOL_VERSION,
    CloseReason,
    Closing,
    Hello,
    Ping,
    Pong,
    Request,
    Send,
    ServerFrame,
    Welcome,
)
from ..wire.stream_codec import choose_codec
from .actors import SessionActors
from .binding import SessionEntry, SessionStatus
from .outbound import Outbound
from .reader import StreamReader
from .session import Packet, PacketRoute, PendingRequest, Session, error_frame, reply_bytes
from .values import Authenticated, AuthRequest

if TYPE_CHECKING:
    from .server import StreamServer

__all__ = ["Connection"]

logger = logging.getLogger("zlink_trio.sessions")

_SESSION_LANE: Final = SessionLane()

# Websocket close codes (RFC 6455 and the application range).
_CODES: Final = {
    CloseReason.REPLACED: 4001,
    CloseReason.CLOSE_REQUESTED: 1000,
    CloseReason.SHUTTING_DOWN: 1001,
    CloseReason.PROTOCOL_ERROR: 1002,
    CloseReason.AUTHENTICATION_REFUSED: 4003,
    CloseReason.SLOW_CONSUMER: 1013,
    CloseReason.SEAL_TIMEOUT: 4008,
}


@final
class _Inbound:
    """A client packet waiting for its handler turn."""

    __slots__ = ("frame", "pending")

    def __init__(self, frame: Send | Request, pending: PendingRequest | None) -> None:
        self.frame = frame
        self.pending = pending


@final
class _Lifecycle:
    """Session lifecycle work (start, the duplicate-connection callback)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], Awaitable[None]]) -> None:
        self.fn = fn


@final
class Connection:
    """The session owner's state of one physical connection (internal)."""

    __slots__ = (
        "_close_reason",
        "_closed",
        "_closed_now",
        "_lane",
        "_reader",
        "_readers",
        "_request",
        "_subprotocol",
        "_ws",
        "codec",
        "entry",
        "finished",
        "nursery",
        "outbound",
        "pending",
        "server",
        "session",
        "session_rid",
    )

    def __init__(self, server: StreamServer, request: WebSocketRequest) -> None:
        self.server = server
        self._request = request
        # the frame encoding of this connection (CBOR unless the client asked for JSON)
        self.codec, self._subprotocol = choose_codec(request.proposed_subprotocols)
        self._ws: WebSocketConnection | None = None
        self.session_rid = secrets.token_bytes(CONNECTION_ID_BYTES)
        self.outbound = Outbound(server.stream_config.outbound_queue)
        self._closed = trio.Event()
        self._closed_now = False
        """``_closed.is_set()`` as a plain attribute (read once per relayed frame)."""
        self._reader: StreamReader | None = None
        """The task reading the connection now (a closing connection reads nothing more
        at once: its scope is cancelled, unless it runs an inline turn)."""
        self._readers: trio.Nursery | None = None
        self._close_reason: tuple[CloseReason | None, str] = (None, "")
        """Why the connection closes (None: by the client or the transport)."""
        self.finished = trio.Event()
        self.entry: SessionEntry = SessionEntry(self.session_rid)  # replaced by open()
        self.session: Session | None = None
        self._lane: Lane[SessionLane, _Inbound | _Lifecycle] | None = None
        self.pending: set[PendingRequest] = set()
        self.nursery: trio.Nursery

    # --- state ------------------------------------------------------------------------------
    @property
    def closing(self) -> bool:
        return self.entry.status is not SessionStatus.OPEN or self._closed.is_set()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def close(self, reason: CloseReason | None, message: str = "") -> None:
        """Start closing (idempotent; the first reason wins; None: the client or the
        transport closed it). Never waits."""
        if self._closed.is_set():
            return
        self._close_reason = (reason, message)
        self._closed_now = True
        self._closed.set()
        reader = self._reader
        if reader is not None:
            reader.stop()

    # --- outbound ------------------------------------------------------------------------------
    def send_app(self, frame: ServerFrame) -> bool:
        """Queue a reply, push or notice; a full queue closes the slow consumer."""
        if not self.outbound.put(self.codec.encode(frame)):
            if not self.outbound_closed:
                self.close(CloseReason.SLOW_CONSUMER, "the client does not read its frames")
            return False
        return True

    def send_push(self, actor_id: ActorId, sequence: int, packet: str, payload: bytes) -> bool:
        """:meth:`send_app` of a Push frame with these fields, encoded without building
        the frame."""
        if not self.outbound.put(self.codec.encode_push(actor_id, sequence, packet, payload)):
            if not self.outbound_closed:
                self.close(CloseReason.SLOW_CONSUMER, "the client does not read its frames")
            return False
        return True

    def send_control(self, frame: ServerFrame) -> bool:
        if not self.outbound.put_control(self.codec.encode(frame)):
            self.close(CloseReason.SLOW_CONSUMER, "the client does not read its frames")
            return False
        return True

    def send_error(self, correlation: int, error: BaseException) -> bool:
        return self.send_control(error_frame(correlation, error))

    @property
    def outbound_closed(self) -> bool:
        return self.outbound._closed

    # --- the connection task --------------------------------------------------------------
    async def run(self) -> None:
        """The whole life of the connection (the websocket handler's task)."""
        server = self.server
        try:
            try:
                ws = await self._request.accept(subprotocol=self._subprotocol)
            except ConnectionClosed:
                return
            self._ws = ws
            async with trio.open_nursery() as readers:
                # (Waited for after the rest: an inline Actor turn that waits finishes
                # here even when the connection closed meanwhile. See .reader.)
                self._readers = readers
                async with trio.open_nursery() as nursery:
                    self.nursery = nursery
                    nursery.start_soon(self._write, ws, name="zlink_trio.stream.writer")
                    if await self._handshake(ws):
                        self._start_reader()
                        await self._closed.wait()
                    else:
                        self._closed_now = True
                        self._closed.set()
                    with trio.CancelScope(shield=True):
                        await self._teardown(ws)
                    nursery.cancel_scope.cancel(reason="zlink_trio STREAM connection closed")
                    self.outbound.abort()
        finally:
            server.forget(self)
            self.finished.set()

    async def _handshake(self, ws: WebSocketConnection) -> bool:
        """Hello → authentication → Welcome. False: the connection closes (refused)."""
        server = self.server
        config = server.stream_config
        hello: Hello | None = None
        with trio.move_on_after(config.hello_timeout):
            try:
                message = await ws.get_message()
            except ConnectionClosed:
                return False
            try:
                frame = self.codec.decode_client(message)
                if type(frame) is not Hello:
                    raise ProtocolError("the first frame must be a Hello")
                if frame.version != PROTOCOL_VERSION:
                    raise ProtocolError(f"protocol version {frame.version} is not supported")
                hello = frame
            except ProtocolError as exc:
                self._refuse(CloseReason.PROTOCOL_ERROR, exc)
                return False
            identity = await self._authenticate(ws, hello)
            if identity is None:
                return False
            try:
                self.entry = server.aggregate.open(self.session_rid)
            except ZLinkError as exc:
                self._refuse(CloseReason.SHUTTING_DOWN, exc)
                return False
            self.session = Session(self, identity, SessionActors(self))
            try:
                self._lane = server.engine.new_lane(
                    _SESSION_LANE, self._turn, on_drop=self._dropped
                )
            except ZLinkError as exc:  # the engine stopped (the node is stopping)
                server.aggregate.close(self.entry)
                self.session = None
                self._refuse(CloseReason.SHUTTING_DOWN, exc)
                return False
            server.remember(self)
            self.send_control(Welcome(connection_id=self.session_rid, version=PROTOCOL_VERSION))
            self._lane.submit_nowait(_Lifecycle(self._start), lifecycle=True)
            return True
        self._refuse(CloseReason.PROTOCOL_ERROR, DeadlineExceeded("no Hello in time"))
        return False

    async def _authenticate(self, ws: WebSocketConnection, hello: Hello) -> Authenticated | None:
        callbacks = self.server.callbacks
        if callbacks.authenticate is None:
            self._refuse(
                CloseReason.AUTHENTICATION_REFUSED,
                InvalidOperation("no authentication callback: sessions are refused"),
            )
            return None
        request = AuthRequest(
            credentials=hello.credentials,
            path=self._request.path,
            headers=tuple(self._request.headers),
            remote=str(self._request.remote),
        )
        try:
            result = await callbacks.authenticate(request)
        except ZLinkError as exc:
            self._refuse(CloseReason.AUTHENTICATION_REFUSED, exc)
            return None
        except Exception as exc:
            logger.exception("the authentication callback raised")
            self._refuse(CloseReason.AUTHENTICATION_REFUSED, ApplicationError(type(exc).__name__))
            return None
        if result is None:
            self._refuse(
                CloseReason.AUTHENTICATION_REFUSED, InvalidOperation("authentication refused")
            )
            return None
        if isinstance(result, Authenticated):
            return result
        self._refuse(  # type: ignore[unreachable]  # an untyped application callback
            CloseReason.AUTHENTICATION_REFUSED,
            ApplicationError("the authentication callback returned no Authenticated"),
        )
        return None

    def _refuse(self, reason: CloseReason, error: BaseException) -> None:
        if reason is CloseReason.PROTOCOL_ERROR:
            self.server.flow.emit(FlowEvent.SESSION_PROTOCOL_ERROR, "connection refused: %r", error)
        self.send_control(error_frame(0, error))
        self.close(reason, str(error)[:120])

    async def _start(self) -> None:
        """The session's first lifecycle turn: the identity's automatic bind, then the
        application's ``on_session_open``."""
        session = self.session
        assert session is not None
        await self.server.start_session(self, session)

    # --- reader ------------------------------------------------------------------------------
    def _start_reader(self) -> None:
        """A new reader task: it reads the connection from now on (.reader)."""
        readers, ws = self._readers, self._ws
        assert readers is not None and ws is not None
        reader = self._reader = StreamReader(self)
        readers.start_soon(self._read, ws, reader, name="zlink_trio.stream.reader")

    def reader_released(self, reader: StreamReader) -> None:
        """``reader``'s inline turn waits: another task reads on (unless closing)."""
        if self._reader is reader:
            self._reader = None
            if not self._closed.is_set():
                self._start_reader()

    async def _read(self, ws: WebSocketConnection, reader: StreamReader) -> None:
        """One reader task (.reader): read and dispatch frames until the connection
        closes, or until an inline turn ``reader`` ran waited (``reader.released``:
        another reader took over; this task ends once that turn ended).

        One coroutine frame holds the whole loop — the frame dispatch, the relay of a
        ``route_packet`` frame (``StreamServer.route_target``) and the direct write of what
        its inline turn queued — since every resume of the task (a message in, each
        schedule point of a send) passes every frame between the task and trio."""
        lane = self._lane
        assert lane is not None
        server = self.server
        outbound = self.outbound
        codec_decode = self.codec.decode_client
        default_timeout = server.config.default_request_timeout
        packets = server.callbacks.packets
        routes = any(type(h) is PacketRoute for h in packets.values())
        route_target = server.route_target
        while True:
            with reader.scope, contextlib.suppress(ConnectionClosed):  # (the client closed it)
                while True:
                    message = await ws.get_message()
                    try:
                        frame = codec_decode(message)
                    except ProtocolError as exc:
                        server.flow.emit(FlowEvent.SESSION_PROTOCOL_ERROR, "%r", exc)
                        self.send_error(0, exc)
                        self.close(CloseReason.PROTOCOL_ERROR, str(exc)[:120])
                        break
                    # (A decoded frame is exactly its class: the wire builds no subclass.)
                    if type(frame) is Ping:
                        self.send_control(Pong(nonce=frame.nonce))
                        continue
                    if type(frame) is Hello:
                        error = ProtocolError("a second Hello")
                        server.flow.emit(FlowEvent.SESSION_PROTOCOL_ERROR, "%r", error)
                        self.send_error(0, error)
                        self.close(CloseReason.PROTOCOL_ERROR, "a second Hello")
                        break
                    pending: PendingRequest | None = None
                    if type(frame) is Request:
                        timeout = frame.timeout_ms
                        seconds = default_timeout if timeout is None else timeout / 1000
                        pending = PendingRequest(
                            self, frame.correlation, trio.current_time() + seconds
                        )
                    if self.entry.status is not SessionStatus.OPEN:
                        self._reject(pending, Unavailable("the session is closing"))
                        continue
                    if (
                        routes
                        and type(route := packets.get(frame.packet)) is PacketRoute
                        and lane.idle
                    ):
                        # The relay at once (nothing of this session is queued), with the
                        # outbound queue corked: what an inline turn pushes or replies is
                        # written by this reader itself if the writer is idle (.outbound:
                        # direct write), one task wake-up fewer.
                        outbound._corked += 1  # (``outbound.cork()``, inline)
                        reader.corked = True
                        try:
                            target = route_target(self, route, frame, pending)
                            if target is None:
                                routed = False
                            else:
                                routed = await target[0].run_here(
                                    target[1], reader
                                ) or server.route_queued(self, *target)
                        except BaseException:
                            reader.uncork()
                            raise
                        if reader.corked:  # (not uncorked by a turn that waited)
                            reader.corked = False
                            # (``outbound.writable_here``, inline)
                            if (
                                outbound._corked == 1
                                and outbound._task is not None
                                and (outbound._control or outbound._app)
                            ):
                                # (StreamReader.write_here, inlined)
                                reader.writing = True
                                try:
                                    await outbound.write_here(ws, reader.release, reader.scope)
                                except ConnectionClosed:
                                    self.close(None)
                                finally:
                                    reader.writing = False  # (``reader.write_ended()``)
                                    if reader.stop_deferred:
                                        reader.write_ended()
                            else:
                                outbound.uncork()
                        if routed:
                            # Relayed, its turn perhaps run here: if that turn waited,
                            # another reader reads on.
                            if reader.released or self._closed_now:
                                break
                            continue
                    try:
                        lane.submit_nowait(_Inbound(frame, pending))
                    except CapacityExceeded:
                        self._reject(pending, CapacityExceeded("the session's queue is full"))
                    except ZLinkError as exc:  # connection closed, shutting down
                        self._reject(pending, exc)
            if reader.released:
                return  # its turn ended; the reader that took over reads on
            if reader.scope.cancelled_caught and not self._closed.is_set():
                # The engine halted an inline turn while the connection lives on: read on
                # (what arrives now is refused as the engine refuses it).
                reader.scope = trio.CancelScope()
                continue
            self.close(None)  # the client or the transport closed it (no-op if closing)
            return

    def _reject(self, pending: PendingRequest | None, error: ZLinkError) -> None:
        if pending is None:
            self.send_error(0, error)
        else:
            pending.fail_now(error)

    # --- the session lane ----------------------------------------------------------------------
    async def _turn(self, item: _Inbound | _Lifecycle) -> None:
        if type(item) is _Lifecycle:
            try:
                await item.fn()
            except Exception:
                logger.exception("a session lifecycle callback failed")
            return
        assert type(item) is _Inbound
        frame = item.frame
        pending = item.pending
        server = self.server
        session = self.session
        assert session is not None
        if pending is not None and pending.done:
            return  # answered already (its deadline passed while it waited)
        handler = server.callbacks.packets.get(frame.packet)
        if handler is None:
            error = NotFound(f"no packet handler for {frame.packet!r}")
            self._reject(pending, error)
            return
        kind = MessageKind.REQUEST if pending is not None else MessageKind.SEND
        packet = Packet(session, frame.packet, kind, pending)
        payload: Any = frame.payload
        try:
            if type(handler) is TypedHandler:
                payload = handler.accept(payload)
            result = await handler(packet, payload)
        except ZLinkError as exc:
            server.flow.emit(
                FlowEvent.HANDLER_ERROR, "packet handler %r raised %r", frame.packet, exc
            )
            if not packet._relayed:
                self._reject(pending, exc)
            return
        except Exception as exc:
            server.flow.emit(
                FlowEvent.HANDLER_CRASHED,
                "packet handler %r raised %r",
                frame.packet,
                exc,
                traceback=True,
            )
            if not packet._relayed:
                self._reject(pending, ApplicationError(f"{type(exc).__name__}: {exc}"))
            return
        if pending is None or packet._relayed:
            return
        try:
            data = reply_bytes(result, server.config.max_reply_bytes)
        except ZLinkError as exc:
            pending.fail_now(ApplicationError(exc.message))
            return
        pending.reply_now(data)

    def _dropped(self, item: _Inbound | _Lifecycle) -> None:
        if type(item) is _Inbound and item.pending is not None:
            item.pending.drop()

    def submit_lifecycle(self, fn: Callable[[], Awaitable[None]]) -> bool:
        """Queue ``fn`` as a lifecycle turn of the session lane (False: the lane is gone)."""
        lane = self._lane
        if lane is None:
            return False
        try:
            lane.submit_nowait(_Lifecycle(fn), lifecycle=True)
        except ZLinkError:
            return False
        return True

    # --- writer and close -----------------------------------------------------------------------
    async def _write(self, ws: WebSocketConnection) -> None:
        try:
            await self.outbound.run(ws)
        except ConnectionClosed:
            self.close(None)

    async def _teardown(self, ws: WebSocketConnection) -> None:
        """The close procedure (module docstring), shielded and bounded."""
        server = self.server
        config = server.stream_config
        reason, message = self._close_reason
        snapshot = server.aggregate.close(self.entry) if self.session is not None else []
        lane = self._lane
        if lane is not None:
            lane.close_connection()
        for pending in list(self.pending):
            pending.drop()
        with trio.move_on_after(config.close_timeout):
            if reason is not None and ws.closed is None:
                self.outbound.put_control(
                    self.codec.encode(Closing(reason=reason, message=message))
                )
            self.outbound.close()
            await self.outbound.wait_drained()
        with trio.move_on_after(config.close_timeout):
            code = 1000 if reason is None else _CODES.get(reason, 1000)
            await ws.aclose(code, message[:120] or None)
        await server.cleanup_bindings(self, snapshot)
        if lane is not None:
            lane.close()
