"""The STREAM client protocol: CBOR frames in websocket binary messages (docs/stream-protocol.md).

A frame is the CBOR array ``[KIND, field1, field2, ...]`` of one frozen attrs class below,
in declaration order, exactly like a node-to-node record (:mod:`.codec`): the same field
types, the same strict decoding (one item, no tags, no maps, no floats, bounded sizes)
and :class:`~zlink_trio.errors.ProtocolError` for every input that is not exactly one
valid frame. Kinds 1..9 travel client → server, 10..19 server → client; a frame of the
other direction is a protocol error where it arrives.

This module (with :mod:`.codec` and :mod:`.payloads`) is the only place that touches
cbor2: the STREAM server and the Python client import these functions.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar, Final, TypeAlias, final

import attrs
import cbor2

from ..errors import ErrorKind, ProtocolError
from ..ids import MAX_ID_BYTES, ActorId, ObjectGeneration
from .cborhead import head
from .codec import (
    _NO_TAGS,
    _SENTINEL,
    _SENTINEL_ITEM,
    MAX_DEPTH,
    SCAN_THRESHOLD,
    _loads,
    _malformed,
    _reject_map,
    scan_structure,
)
from .fields import (
    ACTOR_ID,
    CORRELATION,
    MAX_PAYLOAD_BYTES,
    OBJECT_GENERATION,
    SHORT_TEXT,
    TEXT8,
    U8,
    U32,
    U64,
    Bytes,
    FixedBytes,
    IntEnumField,
    WireValueError,
    describe,
    nullable,
    wire,
)
from .nested import Nested

__all__ = [
    "CLIENT_KINDS",
    "CONNECTION_ID_BYTES",
    "MAX_CREDENTIALS_BYTES",
    "PROTOCOL_VERSION",
    "SERVER_KINDS",
    "Bound",
    "ClientFrame",
    "CloseReason",
    "Closing",
    "ErrorFrame",
    "FrameKind",
    "Hello",
    "Message",
    "Ping",
    "Pong",
    "Push",
    "Reply",
    "Request",
    "Send",
    "ServerFrame",
    "StreamFrame",
    "Unbound",
    "UnboundReason",
    "Welcome",
    "decode_client_frame",
    "decode_client_message",
    "decode_server_frame",
    "encode_frame",
    "encode_push",
]

PROTOCOL_VERSION: Final = 1
"""The STREAM protocol version a Hello names and a Welcome confirms."""
CONNECTION_ID_BYTES: Final = 16
"""A connection id (the session's SessionRid) is 16 random bytes."""
MAX_CREDENTIALS_BYTES: Final = 64 * 1024
"""The largest Hello credentials blob."""

_PAYLOAD: Final = Bytes(MAX_PAYLOAD_BYTES, "payload")
_CREDENTIALS: Final = Bytes(MAX_CREDENTIALS_BYTES, "credentials")
_CONNECTION_ID: Final = FixedBytes(CONNECTION_ID_BYTES, "connection-id")
_REQUEST_ID: Final = CORRELATION  # u64, never 0
_ERROR_CORRELATION: Final = U64  # 0: the error answers no request


class FrameKind(enum.IntEnum):
    """The first element of every frame. Never renumber; only append."""

    HELLO = 1
    SEND = 2
    REQUEST = 3
    PING = 4
    WELCOME = 10
    REPLY = 11
    ERROR = 12
    PUSH = 13
    PONG = 14
    BOUND = 15
    UNBOUND = 16
    CLOSING = 17
    MESSAGE = 18


class UnboundReason(enum.IntEnum):
    """Why a binding of this connection ended (an :class:`Unbound` frame)."""

    REPLACED = 1
    """Another connection bound the Actor (this connection then closes, spec 02 §6)."""
    DESTROYED = 2
    """The Actor incarnation was destroyed."""
    OWNER_LOST = 3
    """The Actor's owner node ended (it stopped or died and its Actors were released or
    reclaimed): relaying to it would go nowhere."""
    NOTIFIED = 4
    """The server application ended the binding with NotifyDisconnected."""


class CloseReason(enum.IntEnum):
    """Why the server closes this connection (a :class:`Closing` frame, sent just before
    the websocket close)."""

    REPLACED = 1
    """A binding of this connection was taken over by another connection."""
    CLOSE_REQUESTED = 2
    """A bound Actor asked for the connection to close (its ``session.close()``)."""
    SHUTTING_DOWN = 3
    """The server node is shutting down."""
    PROTOCOL_ERROR = 4
    """The client sent something that is not a valid frame."""
    AUTHENTICATION_REFUSED = 5
    """The Hello was refused (no authentication callback, or it refused)."""
    SLOW_CONSUMER = 6
    """The connection's outbound queue overflowed: the client does not read."""
    SEAL_TIMEOUT = 7
    """A relocation of a bound Actor did not complete in time (spec 02 §8.1)."""


# --- client → server -------------------------------------------------------------------


@final
@attrs.frozen(slots=True, kw_only=True)
class Hello:
    """The first frame of a connection: the protocol version and the credentials the
    server's authentication callback checks."""

    KIND: ClassVar[FrameKind] = FrameKind.HELLO
    version: int = attrs.field(metadata=wire(U8))
    credentials: bytes = attrs.field(metadata=wire(_CREDENTIALS))


@final
@attrs.frozen(slots=True, kw_only=True)
class Send:
    """A one-way packet to the server's packet handler ``packet``."""

    KIND: ClassVar[FrameKind] = FrameKind.SEND
    packet: str = attrs.field(metadata=wire(TEXT8))
    payload: bytes = attrs.field(metadata=wire(_PAYLOAD))


@final
@attrs.frozen(slots=True, kw_only=True)
class Request:
    """A packet that is answered exactly once: a :class:`Reply` or an :class:`ErrorFrame`
    with the same ``correlation`` (chosen by the client, non-zero). ``timeout_ms``: the
    client's deadline (None: the server's default request timeout)."""

    KIND: ClassVar[FrameKind] = FrameKind.REQUEST
    correlation: int = attrs.field(metadata=wire(_REQUEST_ID))
    packet: str = attrs.field(metadata=wire(TEXT8))
    payload: bytes = attrs.field(metadata=wire(_PAYLOAD))
    timeout_ms: int | None = attrs.field(default=None, metadata=wire(nullable(U32)))


@final
@attrs.frozen(slots=True, kw_only=True)
class Ping:
    """Keep-alive: answered by a :class:`Pong` with the same nonce, never queued behind
    application work."""

    KIND: ClassVar[FrameKind] = FrameKind.PING
    nonce: int = attrs.field(metadata=wire(U64))


# --- server → client -------------------------------------------------------------------


@attrs.frozen(slots=True, kw_only=True)
class Welcome:
    """The Hello was accepted: the connection id (16 bytes, never reused) and the
    protocol version."""

    KIND: ClassVar[FrameKind] = FrameKind.WELCOME
    connection_id: bytes = attrs.field(metadata=wire(_CONNECTION_ID))
    version: int = attrs.field(metadata=wire(U8))


@attrs.frozen(slots=True, kw_only=True)
class Reply:
    """The one answer of request ``correlation`` (``payload`` None: no reply body)."""

    KIND: ClassVar[FrameKind] = FrameKind.REPLY
    correlation: int = attrs.field(metadata=wire(_REQUEST_ID))
    payload: bytes | None = attrs.field(default=None, metadata=wire(nullable(_PAYLOAD)))


@attrs.frozen(slots=True, kw_only=True)
class ErrorFrame:
    """A typed error: the one answer of request ``correlation``, or (``correlation`` 0)
    about a frame that was no request (a send, a malformed frame)."""

    KIND: ClassVar[FrameKind] = FrameKind.ERROR
    correlation: int = attrs.field(metadata=wire(_ERROR_CORRELATION))
    kind: ErrorKind = attrs.field(metadata=wire(IntEnumField(ErrorKind)))
    message: str = attrs.field(default="", metadata=wire(SHORT_TEXT))

    @classmethod
    def of(cls, correlation: int, kind: ErrorKind, message: str) -> ErrorFrame:
        """An error frame whose message is cut to the wire's bound (1024 UTF-8 bytes)."""
        raw = message.encode("utf-8", "replace")
        message = raw[:1024].decode("utf-8", "ignore")
        return cls(correlation=correlation, kind=kind, message=message)


@attrs.frozen(slots=True, kw_only=True)
class Push:
    """A one-way push of the bound Actor ``actor_id`` (through binding ``sequence``)."""

    KIND: ClassVar[FrameKind] = FrameKind.PUSH
    actor_id: ActorId = attrs.field(metadata=wire(ACTOR_ID))
    sequence: int = attrs.field(metadata=wire(U64))
    packet: str = attrs.field(metadata=wire(TEXT8))
    payload: bytes = attrs.field(metadata=wire(_PAYLOAD))


@attrs.frozen(slots=True, kw_only=True)
class Pong:
    KIND: ClassVar[FrameKind] = FrameKind.PONG
    nonce: int = attrs.field(metadata=wire(U64))


@attrs.frozen(slots=True, kw_only=True)
class Bound:
    """This connection bound the Actor ``actor_id`` incarnation ``object_generation``;
    ``sequence`` is the replacement sequence of that binding (the binding generation)."""

    KIND: ClassVar[FrameKind] = FrameKind.BOUND
    actor_id: ActorId = attrs.field(metadata=wire(ACTOR_ID))
    object_generation: ObjectGeneration = attrs.field(metadata=wire(OBJECT_GENERATION))
    sequence: int = attrs.field(metadata=wire(U64))


@attrs.frozen(slots=True, kw_only=True)
class Unbound:
    """The binding ``(actor_id, sequence)`` of this connection ended."""

    KIND: ClassVar[FrameKind] = FrameKind.UNBOUND
    actor_id: ActorId = attrs.field(metadata=wire(ACTOR_ID))
    sequence: int = attrs.field(metadata=wire(U64))
    reason: UnboundReason = attrs.field(metadata=wire(IntEnumField(UnboundReason)))


@attrs.frozen(slots=True, kw_only=True)
class Closing:
    """The server is about to close this connection, and why."""

    KIND: ClassVar[FrameKind] = FrameKind.CLOSING
    reason: CloseReason = attrs.field(metadata=wire(IntEnumField(CloseReason)))
    message: str = attrs.field(default="", metadata=wire(SHORT_TEXT))


@attrs.frozen(slots=True, kw_only=True)
class Message:
    """A one-way message from the server application itself (not from a bound Actor),
    e.g. the duplicate-connection notice of a replacement callback."""

    KIND: ClassVar[FrameKind] = FrameKind.MESSAGE
    packet: str = attrs.field(metadata=wire(TEXT8))
    payload: bytes = attrs.field(metadata=wire(_PAYLOAD))


ClientFrame: TypeAlias = Hello | Send | Request | Ping
ServerFrame: TypeAlias = (
    Welcome | Reply | ErrorFrame | Push | Pong | Bound | Unbound | Closing | Message
)
StreamFrame: TypeAlias = ClientFrame | ServerFrame

CLIENT_KINDS: Final[tuple[type[Any], ...]] = (Hello, Send, Request, Ping)
SERVER_KINDS: Final[tuple[type[Any], ...]] = (
    Welcome,
    Reply,
    ErrorFrame,
    Push,
    Pong,
    Bound,
    Unbound,
    Closing,
    Message,
)


class _Entry:
    __slots__ = ("label", "nested")

    def __init__(self, cls: type[Any]) -> None:
        self.nested = Nested(cls, prefix=int(cls.KIND))
        self.label = f"frame {int(cls.KIND)} ({cls.KIND.name})"


_BY_CLASS: Final = {cls: _Entry(cls) for cls in (*CLIENT_KINDS, *SERVER_KINDS)}
_CLIENT: Final = {int(cls.KIND): _BY_CLASS[cls] for cls in CLIENT_KINDS}
_SERVER: Final = {int(cls.KIND): _BY_CLASS[cls] for cls in SERVER_KINDS}
_dumps: Final = cbor2.dumps


def encode_frame(frame: StreamFrame) -> bytes:
    """The CBOR bytes of ``frame`` (one websocket binary message).

    Raises:
        ProtocolError: not a frame, or a field value does not fit its wire type.
    """
    entry = _BY_CLASS.get(type(frame))
    if entry is None:
        raise ProtocolError(f"not a STREAM frame: {type(frame).__name__}")
    nested = entry.nested
    try:
        items = nested._fast_encode(frame)
    except Exception:
        try:
            items = nested.encode_checked(frame)
        except WireValueError as exc:
            raise ProtocolError(f"cannot encode {entry.label}: {_where(exc)}") from None
    return _dumps(items)


_PUSH_KIND: Final = int(FrameKind.PUSH)
_U64_MAX: Final = U64.maximum
_PUSH_HEAD: Final = bytes([0x85, _PUSH_KIND])
"""A Push frame's first two bytes: a CBOR array of 5 items, its kind (13 < 24: one byte)."""


_UINT_HEADS: Final = tuple(head(0x00, n) for n in range(0x100))
"""The shortest CBOR heads of the arguments below 256 (no call for them), per major type."""
_BYTES_HEADS: Final = tuple(head(0x40, n) for n in range(0x100))
_TEXT_HEADS: Final = tuple(head(0x60, n) for n in range(0x100))


def encode_push(actor_id: ActorId, sequence: int, packet: str, payload: bytes) -> bytes:
    """``encode_frame(Push(actor_id=..., sequence=..., packet=..., payload=...))`` without
    building the frame (the session owner's push path): the same bytes, the same errors.
    The common values (ASCII ids, bytes within the limit) are checked here as the
    generated encoder checks them and written as cbor2 writes them (shortest heads;
    ``tests/property/test_stream_encode_push.py``); anything else goes through the
    frame."""
    if (
        type(actor_id) is ActorId
        and type(sequence) is int
        and 0 <= sequence <= _U64_MAX
        and type(packet) is str
        and 0 < len(packet) <= MAX_ID_BYTES
        and packet.isascii()
        and type(payload) is bytes
        and len(payload) <= MAX_PAYLOAD_BYTES
        and (actor := actor_id.value).isascii()
    ):
        # (ASCII text: its UTF-8 length is its length)
        n_actor, n_packet, n_payload = len(actor), len(packet), len(payload)
        return b"".join(
            (
                _PUSH_HEAD,
                _TEXT_HEADS[n_actor] if n_actor < 0x100 else head(0x60, n_actor),
                actor.encode("ascii"),
                _UINT_HEADS[sequence] if sequence < 0x100 else head(0x00, sequence),
                _TEXT_HEADS[n_packet],  # (1..255)
                packet.encode("ascii"),
                _BYTES_HEADS[n_payload] if n_payload < 0x100 else head(0x40, n_payload),
                payload,
            )
        )
    return encode_frame(Push(actor_id=actor_id, sequence=sequence, packet=packet, payload=payload))


def decode_client_frame(data: bytes | bytearray | memoryview) -> ClientFrame:
    """Decode a frame a client sent (kinds 1..9). Raises ProtocolError otherwise."""
    return _decode(data, _CLIENT, "client")  # type: ignore[no-any-return]


_SEND_DECODE: Final = _CLIENT[int(FrameKind.SEND)].nested._fast_decode
_SEND_HEAD: Final = 0x83  # a CBOR array of 3 items: [2, packet, payload]
_SEND_KIND: Final = int(FrameKind.SEND)
_FROM_BYTES: Final = int.from_bytes


def decode_client_message(message: bytes | str) -> ClientFrame:
    """:func:`decode_client_frame` of one websocket message (the CBOR codec's decoder, one
    call per frame): a text message is a ProtocolError.

    The common frame, a Send ``[2, packet, payload]`` written in its shortest form with
    an ASCII packet name of at most 23 bytes and a payload that ends the message, is read
    here without cbor2 (the bytes that cbor2 would read as exactly that array; its fields
    then go through the generated decoder's checks); anything else, valid or not, goes
    through :func:`_decode` (``tests/property/test_stream_decode_send.py``)."""
    if type(message) is not bytes:
        raise ProtocolError("frames are websocket binary messages")
    n = len(message)
    if 4 <= n <= SCAN_THRESHOLD and message[0] == _SEND_HEAD and message[1] == _SEND_KIND:
        end = message[2] - 0x5D  # a text head 0x61..0x77: 1..23 bytes, then the payload
        if 4 <= end <= 26 and end < n:
            packet = message[3:end]
            head = message[end] - 0x40  # a byte-string head, in its shortest form
            if 0 <= head < 24:
                start, size = end + 1, head
            elif head == 24:
                start, size = end + 2, message[end + 1] if end + 1 < n else 0
                if size < 24:
                    size = -1
            elif head == 25:
                start, size = end + 3, _FROM_BYTES(message[end + 1 : end + 3])
                if size < 0x100:
                    size = -1
            elif head == 26:
                start, size = end + 5, _FROM_BYTES(message[end + 1 : end + 5])
                if size < 0x10000:
                    size = -1
            else:
                start, size = 0, -1
            if start + size == n and packet.isascii():
                return _SEND_DECODE([_SEND_KIND, packet.decode("ascii"), message[start:]])  # type: ignore[no-any-return]
    return _decode(message, _CLIENT, "client")  # type: ignore[no-any-return]


def decode_server_frame(data: bytes | bytearray | memoryview) -> ServerFrame:
    """Decode a frame a server sent (kinds 10..19). Raises ProtocolError otherwise."""
    return _decode(data, _SERVER, "server")  # type: ignore[no-any-return]


def _decode(data: bytes | bytearray | memoryview, table: dict[int, _Entry], side: str) -> Any:
    body = data if type(data) is bytes else bytes(data)
    if len(body) <= SCAN_THRESHOLD:
        try:
            raw, after = _loads(
                b"\x82" + body + _SENTINEL_ITEM,
                semantic_decoders=_NO_TAGS,
                object_hook=_reject_map,
                allow_indefinite=False,
                max_depth=MAX_DEPTH,
            )
        except BaseException as exc:
            _malformed(exc)
        if type(after) is not bytes or after != _SENTINEL:
            raise ProtocolError("bytes after the frame, or the frame is truncated")
    else:
        scan_structure(body)
        try:
            raw = _loads(
                body,
                semantic_decoders=_NO_TAGS,
                object_hook=_reject_map,
                allow_indefinite=False,
                max_depth=MAX_DEPTH,
            )
        except BaseException as exc:
            _malformed(exc)
    if type(raw) is not list or not raw:
        raise ProtocolError(f"a frame is a CBOR array [kind, ...], got {describe(raw)}")
    kind = raw[0]
    entry = table.get(kind) if type(kind) is int else None
    if entry is None:
        raise ProtocolError(f"unknown {side} frame kind {describe(kind)}")
    nested = entry.nested
    try:
        return nested._fast_decode(raw)
    except Exception:
        pass
    try:
        return nested.decode_checked(raw)
    except WireValueError as exc:
        raise ProtocolError(f"{entry.label}: {_where(exc)}") from None


def _where(exc: WireValueError) -> str:
    if not exc.path:
        return exc.message
    return f"field {'.'.join(exc.path).replace('.[', '[')}: {exc.message}"
