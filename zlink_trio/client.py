"""A small Trio client of the STREAM protocol (docs/stream-protocol.md).

::

    async with zlink_trio.client.open_stream_client(url, credentials=b"alice") as client:
        reply = await client.request("get", b"")          # bytes | None, or a typed error
        await client.send("move", b"...")                 # one-way
        event = await client.receive()                    # Push / Message / Bound / Unbound / ...

A request is answered exactly once: its :class:`~zlink_trio.wire.stream.Reply` payload, or
the :class:`~zlink_trio.ZLinkError` subclass its error frame names (``Unavailable``,
``NotFound``, ``DeadlineExceeded``, ...). Everything else the server sends — pushes of bound
Actors, the server application's messages, Bound/Unbound, error frames of sends — arrives
in order through :meth:`StreamClient.receive` (a bounded buffer: a client that stops
receiving stops reading its socket, and the server then closes it as a slow consumer).
The connection identity is :attr:`StreamClient.connection_id` plus the replacement sequence
each Bound frame carries.
"""

from __future__ import annotations

import urllib.parse
from collections import Counter, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final, TypeAlias, final

import attrs
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    WebSocketConnection,
    wrap_client_stream,
)

from ._exceptions import raise_single_error
from .engine.oneshot import OneShot
from .errors import DeadlineExceeded, ProtocolError, ShuttingDown, Unavailable, error_from_kind
from .ids import ActorId
from .wire.stream import (
    PROTOCOL_VERSION,
    Bound,
    Closing,
    ErrorFrame,
    Hello,
    Message,
    Ping,
    Pong,
    Push,
    Reply,
    Request,
    Send,
    Unbound,
    Welcome,
)
from .wire.stream_codec import CBOR, JSON, FrameCodec

__all__ = [
    "ClientEvent",
    "ConnectionLost",
    "SessionClosed",
    "StreamClient",
    "open_stream_client",
]

ClientEvent: TypeAlias = Push | Message | Bound | Unbound | ErrorFrame | Closing
"""What :meth:`StreamClient.receive` returns (an ErrorFrame here has correlation 0)."""

DEFAULT_EVENT_BUFFER: Final = 10_000


class ConnectionLost(Unavailable):
    """The connection closed (by the server or the network) before the answer came."""


@attrs.frozen
class SessionClosed:
    """How the connection ended: the websocket close code and reason, and the server's
    Closing frame when it sent one first."""

    code: int | None
    reason: str | None
    closing: Closing | None


@final
class StreamClient:
    """One STREAM session of this client (made by :func:`open_stream_client` only)."""

    def __init__(
        self, ws: WebSocketConnection, welcome: Welcome, buffer: int, codec: FrameCodec = CBOR
    ) -> None:
        self._ws = ws
        self.codec = codec
        """The frame encoding of this connection (``codec.name``: ``"cbor"`` or ``"json"``)."""
        self.connection_id: bytes = welcome.connection_id
        """The server's 16-byte id of this connection (never reused)."""
        self._next = 0
        self._pending: dict[int, OneShot[bytes | None]] = {}
        self._pings: dict[int, OneShot[None]] = {}
        self._events: deque[ClientEvent] = deque()
        self._buffer = buffer
        self._waiter: trio.Event | None = None
        self._space: trio.Event | None = None
        self._closing: Closing | None = None
        self._closed: SessionClosed | None = None
        self._closed_event = trio.Event()
        self.bound: dict[ActorId, Bound] = {}
        """The bindings the server reported (Bound frames minus Unbound ones)."""
        self.received: Counter[str] = Counter()
        """How many frames of each kind (its class name) arrived, answers included."""

    # --- calls -----------------------------------------------------------------------------
    async def request(
        self, packet: str, payload: bytes = b"", *, timeout_ms: int | None = None
    ) -> bytes | None:
        """Send a Request and wait for its one answer.

        ``timeout_ms`` travels to the server as the request's deadline (None: the server's
        default request timeout); the server answers DeadlineExceeded at it. The caller's
        own cancel scope bounds the wait here.

        Raises:
            ZLinkError: the error the server answered (its kind's class).
            ConnectionLost: the connection closed first.
        """
        self._next += 1
        correlation = self._next
        slot: OneShot[bytes | None] = OneShot()
        self._pending[correlation] = slot
        try:
            await self._send(
                Request(
                    correlation=correlation, packet=packet, payload=payload, timeout_ms=timeout_ms
                )
            )
            return await slot.wait()
        finally:
            self._pending.pop(correlation, None)

    async def send(self, packet: str, payload: bytes = b"") -> None:
        """A one-way Send (an error about it arrives through :meth:`receive`)."""
        await self._send(Send(packet=packet, payload=payload))

    async def ping(self) -> None:
        """Keep-alive round trip: returns on the Pong."""
        self._next += 1
        nonce = self._next
        slot: OneShot[None] = OneShot()
        self._pings[nonce] = slot
        try:
            await self._send(Ping(nonce=nonce))
            await slot.wait()
        finally:
            self._pings.pop(nonce, None)

    async def send_raw(self, message: bytes | str) -> None:
        """Send one websocket message as it is (for tests of bad input)."""
        try:
            await self._ws.send_message(message)
        except ConnectionClosed:
            raise ConnectionLost("the connection is closed") from None

    async def receive(self) -> ClientEvent:
        """The next server event, in arrival order.

        Raises:
            ConnectionLost: the connection closed and every event before it was received.
        """
        while not self._events:
            if self._closed is not None:
                await trio.lowlevel.checkpoint()
                raise ConnectionLost(f"the connection closed: {self._closed}")
            self._waiter = waiter = trio.Event()
            await waiter.wait()
        event = self._events.popleft()
        space, self._space = self._space, None
        if space is not None:
            space.set()
        await trio.lowlevel.checkpoint()
        return event

    @property
    def closed(self) -> SessionClosed | None:
        """How the connection ended, once it did."""
        return self._closed

    async def wait_closed(self) -> SessionClosed:
        await self._closed_event.wait()
        assert self._closed is not None
        return self._closed

    async def aclose(self) -> None:
        """Close the connection (the server runs its disconnect cleanup)."""
        await self._ws.aclose()

    # --- internals ---------------------------------------------------------------------------
    async def _send(self, frame: Hello | Send | Request | Ping) -> None:
        if self._closed is not None:
            await trio.lowlevel.checkpoint()
            raise ConnectionLost(f"the connection closed: {self._closed}")
        try:
            await self._ws.send_message(self.codec.encode(frame))
        except ConnectionClosed:
            raise ConnectionLost("the connection is closed") from None

    async def _read(self) -> None:
        ws = self._ws
        try:
            while True:
                message = await ws.get_message()
                frame = self.codec.decode_server(message)
                self.received[type(frame).__name__] += 1
                if isinstance(frame, Reply):
                    slot = self._pending.get(frame.correlation)
                    if slot is not None:
                        slot.set(frame.payload)
                    continue
                if isinstance(frame, ErrorFrame) and frame.correlation != 0:
                    slot = self._pending.get(frame.correlation)
                    if slot is not None:
                        slot.fail(error_from_kind(frame.kind, frame.message))
                    continue
                if isinstance(frame, Pong):
                    ping = self._pings.get(frame.nonce)
                    if ping is not None:
                        ping.set(None)
                    continue
                if isinstance(frame, Welcome):
                    raise ProtocolError("a second Welcome")
                if isinstance(frame, Closing):
                    self._closing = frame
                elif isinstance(frame, Bound):
                    self.bound[frame.actor_id] = frame
                elif isinstance(frame, Unbound):
                    current = self.bound.get(frame.actor_id)
                    if current is not None and current.sequence == frame.sequence:
                        del self.bound[frame.actor_id]
                while len(self._events) >= self._buffer:
                    self._space = space = trio.Event()
                    await space.wait()
                self._events.append(frame)
                waiter, self._waiter = self._waiter, None
                if waiter is not None:
                    waiter.set()
        except ConnectionClosed:
            pass
        finally:
            reason = ws.closed
            self._closed = SessionClosed(
                code=None if reason is None else reason.code,
                reason=None if reason is None else reason.reason,
                closing=self._closing,
            )
            lost = ConnectionLost(f"the connection closed: {self._closed}")
            for slot in list(self._pending.values()):
                slot.fail(lost)
            for ping in list(self._pings.values()):
                ping.fail(lost)
            waiter, self._waiter = self._waiter, None
            if waiter is not None:
                waiter.set()
            self._closed_event.set()


@asynccontextmanager
async def open_stream_client(
    url: str,
    credentials: bytes = b"",
    *,
    hello_timeout: float = 10.0,
    close_timeout: float = 5.0,
    event_buffer: int = DEFAULT_EVENT_BUFFER,
    max_message_bytes: int = 2 * 1024 * 1024,
    codec: str = "cbor",
) -> AsyncIterator[StreamClient]:
    """Connect to a STREAM endpoint (``ws://host:port/path``), upgrade to a websocket (at
    most ``hello_timeout``), send the Hello and wait for the Welcome (at most
    ``hello_timeout`` again); the connection closes when the block exits
    (the close handshake waits at most ``close_timeout``; the socket is closed either
    way). ``codec="json"`` asks for the JSON subprotocol (text frames; ``"cbor"``, the
    default, offers no subprotocol: binary CBOR frames).

    Raises:
        ZLinkError: the server refused the session (its error frame's kind, e.g.
            InvalidOperation for a refused authentication).
        ConnectionLost: the connection closed during the handshake.
        DeadlineExceeded: no websocket upgrade answer, or no Welcome, within
            ``hello_timeout``.
        ShuttingDown: the server no longer accepts sessions (it is stopping).
        OSError: the endpoint cannot be reached.
    """
    frame_codec = {"cbor": CBOR, "json": JSON}.get(codec)
    if frame_codec is None:
        raise ValueError(f"codec must be 'cbor' or 'json', got {codec!r}")
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme != "ws" or parsed.hostname is None:
        raise ValueError(f"a STREAM url is ws://host:port/path, got {url!r}")
    host, port = parsed.hostname, parsed.port or 80
    resource = (parsed.path or "/") + (f"?{parsed.query}" if parsed.query else "")
    try:
        async with trio.open_nursery() as nursery:
            # We own the TCP stream: trio-websocket's client leaves its socket open after
            # a close the SERVER started (docs/decisions.md), so it is closed here.
            stream = await trio.open_tcp_stream(host, port)
            try:
                with trio.move_on_after(hello_timeout) as upgrading:
                    ws = await wrap_client_stream(
                        nursery,
                        stream,
                        host,
                        resource,
                        max_message_size=max_message_bytes,
                        subprotocols=[JSON.subprotocol] if frame_codec is JSON else None,
                    )
                if upgrading.cancelled_caught:  # e.g. a port that is not a STREAM endpoint
                    raise DeadlineExceeded(
                        f"{host}:{port} did not answer the websocket upgrade within "
                        f"{hello_timeout:g} s (is it a STREAM endpoint?)"
                    )
                if frame_codec is JSON and ws.subprotocol != JSON.subprotocol:
                    raise ProtocolError("the server did not accept the JSON subprotocol")
                welcome = await _handshake(ws, credentials, hello_timeout, frame_codec)
                client = StreamClient(ws, welcome, event_buffer, frame_codec)
                nursery.start_soon(client._read, name="zlink_trio.client.reader")
                try:
                    yield client
                except BaseException:
                    raise  # cancelled or failed: no close handshake, the socket just closes
                else:
                    with trio.CancelScope(shield=True), trio.move_on_after(close_timeout):
                        await ws.aclose()
            finally:
                with trio.CancelScope(shield=True):
                    await stream.aclose()
                nursery.cancel_scope.cancel(reason="the stream client closed")
    except BaseExceptionGroup as group:
        rejected, _ = group.split(ConnectionRejected)
        if rejected is not None:  # raised by trio-websocket's reader task
            status = _first(rejected).status_code  # type: ignore[attr-defined]
            if status == 503:
                raise ShuttingDown("the server is shutting down (HTTP 503)") from None
            raise Unavailable(f"the server refused the websocket (HTTP {status})") from None
        raise_single_error(group)


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first(first) if isinstance(first, BaseExceptionGroup) else first


async def _handshake(
    ws: WebSocketConnection, credentials: bytes, limit: float, codec: FrameCodec = CBOR
) -> Welcome:
    try:
        await ws.send_message(
            codec.encode(Hello(version=PROTOCOL_VERSION, credentials=credentials))
        )
        with trio.move_on_after(limit):
            while True:
                message = await ws.get_message()
                frame = codec.decode_server(message)
                if isinstance(frame, Welcome):
                    return frame
                if isinstance(frame, ErrorFrame):
                    raise error_from_kind(frame.kind, frame.message)
                if isinstance(frame, Closing):
                    continue
                raise ProtocolError(f"expected a Welcome, got {type(frame).__name__}")
        raise DeadlineExceeded("no Welcome before the hello timeout")
    except ConnectionClosed as exc:
        raise ConnectionLost(f"the connection closed during the handshake: {exc}") from None
