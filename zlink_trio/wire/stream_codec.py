"""The STREAM frame codecs: CBOR (binary messages) and JSON (text messages), chosen per
connection by websocket subprotocol (docs/stream-protocol.md, "Subprotocols").

Both encode the same frame as the same array ``[kind, field1, field2, ...]``
(:mod:`.stream`); JSON writes every byte-string field (payloads, credentials, the
connection id) as standard base64 text, and accepts only what CBOR accepts otherwise: one
JSON array, no objects, no floats, no ``NaN``/``Infinity``, unsigned integers in range,
text where text goes. The field checks are the CBOR decoder's own (one table of fields),
so the two codecs cannot disagree about what a valid frame is.

This layer is the only one that knows the encodings: the STREAM server and the Python
client hold a :class:`FrameCodec` and never look inside a message.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs

from ..errors import ProtocolError
from ..ids import ActorId
from .fields import Bytes, FieldType, FixedBytes, Nullable, WireValueError
from .stream import (
    _BY_CLASS,
    _CLIENT,
    _SERVER,
    ClientFrame,
    Push,
    ServerFrame,
    StreamFrame,
    _Entry,
    _where,
    decode_client_message,
    decode_server_frame,
    encode_frame,
    encode_push,
)

__all__ = [
    "CBOR",
    "JSON",
    "SUBPROTOCOL_CBOR",
    "SUBPROTOCOL_JSON",
    "FrameCodec",
    "choose_codec",
]

SUBPROTOCOL_CBOR: Final = "zlink.v1.cbor"
SUBPROTOCOL_JSON: Final = "zlink.v1.json"


@attrs.frozen
class FrameCodec:
    """One encoding of STREAM frames in websocket messages."""

    name: str
    subprotocol: str
    text: bool
    """True: frames are websocket text messages (JSON); False: binary (CBOR)."""
    encode: Callable[[StreamFrame], bytes | str]
    decode_client: Callable[[bytes | str], ClientFrame]
    """Raises ProtocolError for anything but one valid client frame (a message of the
    wrong websocket type included)."""
    decode_server: Callable[[bytes | str], ServerFrame]
    encode_push: Callable[[ActorId, int, str, bytes], bytes | str]
    """``encode(Push(actor_id=..., sequence=..., packet=..., payload=...))`` without
    building the frame (the session owner's push path; the same message)."""


def _is_bytes(ftype: FieldType) -> bool:
    inner = ftype.inner if isinstance(ftype, Nullable) else ftype
    return isinstance(inner, Bytes | FixedBytes)


_BYTES_AT: Final = {
    cls: tuple(i + 1 for i, t in enumerate(entry.nested.types) if _is_bytes(t))
    for cls, entry in _BY_CLASS.items()
}
_BYTES_BY_KIND: Final = {int(cls.KIND): positions for cls, positions in _BYTES_AT.items()}


def _refuse(what: str) -> Any:
    def hook(*_: Any) -> Any:
        raise ProtocolError(f"a JSON frame has no {what}")

    return hook


_loads: Final = json.JSONDecoder(
    object_pairs_hook=_refuse("objects"),
    parse_float=_refuse("floats"),
    parse_constant=_refuse("NaN or Infinity"),
).decode


def _encode_json(frame: StreamFrame) -> str:
    entry = _BY_CLASS.get(type(frame))
    if entry is None:
        raise ProtocolError(f"not a STREAM frame: {type(frame).__name__}")
    try:
        items = entry.nested.encode_checked(frame)
    except WireValueError as exc:
        raise ProtocolError(f"cannot encode {entry.label}: {_where(exc)}") from None
    for i in _BYTES_AT[type(frame)]:
        if items[i] is not None:
            items[i] = base64.b64encode(items[i]).decode("ascii")
    return json.dumps(items, separators=(",", ":"), ensure_ascii=False)


def _decode_json(message: bytes | str, table: dict[int, _Entry], side: str) -> Any:
    if type(message) is not str:
        raise ProtocolError("JSON frames are websocket text messages")
    try:
        raw = _loads(message)
    except ProtocolError:
        raise
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"not one JSON value: {exc}") from None
    if type(raw) is not list or not raw:
        raise ProtocolError("a frame is a JSON array [kind, ...]")
    kind = raw[0]
    entry = table.get(kind) if type(kind) is int else None
    if entry is None:
        raise ProtocolError(f"unknown {side} frame kind {kind!r}")
    for i in _BYTES_BY_KIND[kind]:
        if i < len(raw) and raw[i] is not None:
            if type(raw[i]) is not str:
                raise ProtocolError(f"{entry.label}: byte fields are base64 text")
            try:
                raw[i] = base64.b64decode(raw[i], validate=True)
            except (binascii.Error, ValueError):
                raise ProtocolError(f"{entry.label}: a byte field is not base64") from None
    try:
        return entry.nested.decode_checked(raw)
    except WireValueError as exc:
        raise ProtocolError(f"{entry.label}: {_where(exc)}") from None


def _decode_cbor(decode: Callable[[bytes], Any]) -> Callable[[bytes | str], Any]:
    def decode_message(message: bytes | str) -> Any:
        if type(message) is not bytes:
            raise ProtocolError("frames are websocket binary messages")
        return decode(message)

    return decode_message


CBOR: Final = FrameCodec(
    name="cbor",
    subprotocol=SUBPROTOCOL_CBOR,
    text=False,
    encode=encode_frame,
    decode_client=decode_client_message,
    decode_server=_decode_cbor(decode_server_frame),
    encode_push=encode_push,
)
JSON: Final = FrameCodec(
    name="json",
    subprotocol=SUBPROTOCOL_JSON,
    text=True,
    encode=_encode_json,
    decode_client=lambda message: _decode_json(message, _CLIENT, "client"),
    decode_server=lambda message: _decode_json(message, _SERVER, "server"),
    encode_push=lambda actor_id, sequence, packet, payload: _encode_json(
        Push(actor_id=actor_id, sequence=sequence, packet=packet, payload=payload)
    ),
)
_BY_SUBPROTOCOL: Final = {CBOR.subprotocol: CBOR, JSON.subprotocol: JSON}


def choose_codec(offered: Sequence[str]) -> tuple[FrameCodec, str | None]:
    """The codec of a connection whose client offered ``offered`` subprotocols (in its
    order of preference), and the subprotocol to confirm (None: the client offered none
    we speak; then CBOR, the protocol's default)."""
    for name in offered:
        codec = _BY_SUBPROTOCOL.get(name)
        if codec is not None:
            return codec, name
    return CBOR, None
