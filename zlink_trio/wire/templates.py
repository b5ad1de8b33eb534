"""The hottest records, built and encoded on short paths: a request's command 24 (its
constant part encoded once per route, the record never built) and the OK command 20 that
answers it (built as the trusted decoder builds records, its body written directly).

The bytes are exactly those :func:`~.codec.encode` writes for the equivalent record (a
body is the CBOR array ``[command, field1, ...]``, and a CBOR array is its items'
encodings one after another: the constant fields are encoded once, the others per call,
and the pieces joined). Every value is checked as :func:`~.codec.encode` checks it; one
that the quick checks here do not accept is encoded through the record (which raises the
ProtocolError naming the field). ``tests/unit/wire/test_wire_templates.py`` compares both.
"""

from __future__ import annotations

from typing import Final, final

import cbor2

from ..ids import (
    ActorId,
    AuthorityOwnerGeneration,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OperationId,
    OwnerLeaseGeneration,
)
from .base import WireRecord
from .cborhead import BYTE, BYTES_HEADS, head
from .codec import encode, evolve, ok_reply
from .enums import MessageKind, TerminalResult
from .fields import MAX_PAYLOAD_BYTES
from .records import ActorSend, TerminalReply
from .tails import ReplyPayloadTail

__all__ = ["ActorSendTemplate", "encode_fast", "ok_reply", "ok_reply_body"]

_TEXTS: dict[str, bytes] = {}
"""Packet names as CBOR text items (cleared when full)."""
_TEXTS_MAX: Final = 1024

_dumps = cbor2.dumps
_U32_MAX: Final = 0xFFFF_FFFF
_U64_MAX: Final = (1 << 64) - 1
_OPID_MAX: Final = (1 << 128) - 1
_SEND: Final = MessageKind.SEND
_REQUEST: Final = MessageKind.REQUEST
_ACTOR_SEND_HEAD: Final = b"\x91\x18\x18"  # array of 17 items, then the command: 24
_OK_HEAD: Final = b"\x86\x14"  # array of 6 items, then the command: 20
_OK_NO_TAIL: Final = b"\x00\xf6\xf6\xf6"  # OK, no failure code, no tail, no message
_OK_TAIL: Final = b"\x00\xf6\x82\x01"  # OK, no failure code, tail [1 (payload), ...]
_NULL: Final = b"\xf6"
_OPID_HEAD: Final = b"\x50"  # a byte string of 16
_NO_HOPS_NO_SESSION: Final = b"\x00\xf6"


@final
class ActorSendTemplate:
    """Command 24 from this node to one route: source, target and route fences fixed."""

    __slots__ = ("_fixed", "_sample")

    def __init__(
        self,
        *,
        source_rid: NodeRid,
        source_generation: NodeGeneration,
        target_rid: NodeRid,
        target_generation: NodeGeneration,
        actor_id: ActorId,
        route_object_generation: ObjectGeneration | None,
        expected_owner_generation: AuthorityOwnerGeneration | None,
        owner_lease_generation: OwnerLeaseGeneration | None,
    ) -> None:
        """Raises ProtocolError if a fixed value does not fit its wire type."""
        sample = self._sample = ActorSend(
            correlation=0,
            source_rid=source_rid,
            source_generation=source_generation,
            target_rid=target_rid,
            target_generation=target_generation,
            actor_id=actor_id,
            route_object_generation=route_object_generation,
            expected_owner_generation=expected_owner_generation,
            owner_lease_generation=owner_lease_generation,
            message_kind=_SEND,
            packet_name="-",
            payload=b"",
        )
        # Through the checked encoder: the fixed fields, as CBOR items, follow the
        # command and the correlation (0: one byte), before the varying ones.
        items = encode(sample)
        tail = _dumps([int(_SEND), "-", b"", None, None, 0, None])[1:]
        assert items.startswith(_ACTOR_SEND_HEAD + b"\x00") and items.endswith(tail)
        self._fixed: bytes = items[len(_ACTOR_SEND_HEAD) + 1 : len(items) - len(tail)]

    def record(
        self,
        correlation: int,
        kind: MessageKind,
        packet: str,
        payload: bytes,
        timeout_ms: int | None,
        operation_id: int,
    ) -> ActorSend:
        """The record :meth:`body` encodes (for instrumented connections and errors)."""
        return evolve(
            self._sample,
            correlation=correlation,
            message_kind=kind,
            packet_name=packet,
            payload=payload,
            timeout_ms=timeout_ms,
            operation_id=OperationId(operation_id),
        )

    def body(
        self,
        correlation: int,
        kind: MessageKind,
        packet: str,
        payload: bytes,
        timeout_ms: int | None,
        operation_id: int,
    ) -> bytes:
        """``encode(self.record(...))``, without the record.

        Raises:
            ProtocolError: a value does not fit its field (as ``encode`` raises it).
        """
        if (
            type(correlation) is int
            and 0 <= correlation <= _U64_MAX
            and (kind is _REQUEST if correlation else kind is _SEND)
            and type(packet) is str
            and 0 < len(packet) <= 255
            and packet.isascii()
            and type(payload) is bytes
            and len(payload) <= MAX_PAYLOAD_BYTES
            and (timeout_ms is None or (type(timeout_ms) is int and 0 <= timeout_ms <= _U32_MAX))
            and type(operation_id) is int
            and 0 < operation_id <= _OPID_MAX
        ):
            # Written by hand (one join; cbor2 costs more per item than these few lines):
            # kind (< 24), the packet as text, the payload, the timeout (or null), the
            # 16-byte operation id, follow_hops 0, no session.
            text = _TEXTS.get(packet)
            if text is None:
                if len(_TEXTS) >= _TEXTS_MAX:
                    _TEXTS.clear()
                text = _TEXTS[packet] = head(0x60, len(packet)) + packet.encode("ascii")
            return b"".join(
                (
                    _ACTOR_SEND_HEAD,
                    head(0, correlation),
                    self._fixed,
                    BYTE[kind._value_],
                    text,
                    BYTES_HEADS[n] if (n := len(payload)) < 0x100 else head(0x40, n),
                    payload,
                    _NULL if timeout_ms is None else head(0, timeout_ms),
                    _OPID_HEAD,
                    operation_id.to_bytes(16),
                    _NO_HOPS_NO_SESSION,
                )
            )
        return encode(self.record(correlation, kind, packet, payload, timeout_ms, operation_id))


_OK: Final = TerminalResult.OK


def encode_fast(record: WireRecord) -> bytes:
    """:func:`~.codec.encode`, with the commonest record written directly: an OK command
    20 without failure fields whose tail is a payload (or none)."""
    if (
        type(record) is TerminalReply
        and record.terminal_result is _OK
        and record.failure_code is None
        and record.failure_message is None
    ):
        tail = record.tail
        if tail is None:
            return ok_reply_body(record.correlation, None)
        if type(tail) is ReplyPayloadTail:
            return ok_reply_body(record.correlation, tail.payload)
    return encode(record)


def ok_reply_body(correlation: int, payload: bytes | None) -> bytes:
    """``encode(TerminalReply.ok(correlation, tail))`` without the records: ``tail`` is a
    :class:`~.tails.ReplyPayloadTail` of ``payload``, or none for ``None``.

    Raises:
        ProtocolError: ``correlation`` is not a non-zero u64, or ``payload`` is not
            bytes within the payload bound (as ``encode`` raises it).
    """
    if type(correlation) is int and 0 < correlation <= _U64_MAX:
        if payload is None:
            return b"".join((_OK_HEAD, head(0, correlation), _OK_NO_TAIL))
        if type(payload) is bytes and len(payload) <= MAX_PAYLOAD_BYTES:
            return b"".join(
                (
                    _OK_HEAD,
                    head(0, correlation),
                    _OK_TAIL,
                    BYTES_HEADS[n] if (n := len(payload)) < 0x100 else head(0x40, n),
                    payload,
                    _NULL,
                )
            )
    tail = None if payload is None else ReplyPayloadTail(payload=payload)
    return encode(
        TerminalReply(correlation=correlation, terminal_result=TerminalResult.OK, tail=tail)
    )
