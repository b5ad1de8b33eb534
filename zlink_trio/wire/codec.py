"""Record ⇄ CBOR body. With :mod:`.payloads` (application payload classes), the only module
of zlink_trio that imports cbor2.

A body is the CBOR array ``[command, field1, field2, ...]`` in the record's declaration
order (nested records and union variants are arrays too). Decoding is strict and raises
only :class:`~zlink_trio.errors.ProtocolError`, whatever the input bytes:

* exactly one CBOR item, nothing after it (see :func:`decode` for how this is checked);
  definite lengths only; no tags (every tag number, cbor2's built-in ones included, is
  claimed by a rejecting decoder, so no semantic decoder ever runs); no maps; no floats;
  no simple values but false/true/null (the field types accept only exact ``int``,
  ``bytes``, ``str``, ``bool``, ``None`` and ``list``);
* bodies larger than ``SCAN_THRESHOLD`` are first walked by :func:`scan_structure`, which
  bounds how many items they hold before cbor2 builds any of them;
* unknown command numbers, reserved 45, missing or extra fields, wrong types, values out of
  range, invalid ids and oversized byte strings name the command and the field.

Non-shortest integer and length encodings are accepted (RFC 8949 well-formedness, not
deterministic encoding); :func:`encode` always writes the shortest form.

Encoding checks every field the same way and raises ProtocolError on an invalid value;
record constructors check only cross-field rules (also with ProtocolError).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any, Final, NoReturn, TypeVar, cast

import attrs
import cbor2

from ..errors import ProtocolError
from ..ids import OperationId
from .base import WireRecord
from .commands import RESERVED_COMMANDS, Command
from .enums import MessageKind, TerminalResult
from .fields import _OPERATION_ID_SLOTS, MAX_PAYLOAD_BYTES, WireValueError, describe
from .nested import Nested, trusted_setters
from .records import ALL_RECORDS, ActorSend, Record, TerminalReply
from .tails import ReplyPayloadTail

__all__ = [
    "SCAN_MAX_ITEMS",
    "SCAN_THRESHOLD",
    "decode",
    "encode",
    "evolve",
    "ok_reply",
    "scan_structure",
]

_R = TypeVar("_R", bound=WireRecord)

SCAN_THRESHOLD: Final = 64 * 1024
"""Bodies larger than this are walked by :func:`scan_structure` before cbor2 sees them."""
SCAN_MAX_ITEMS: Final = 8192
"""Most CBOR items (headers) one body may hold: bounds what a hostile frame can make
cbor2 allocate (a 16 MiB frame of empty arrays would otherwise build 16 M lists)."""
MAX_DEPTH: Final = 8
"""CBOR nesting bound handed to cbor2 (records nest at most 3 deep, plus the sentinel
wrapper of :func:`decode`)."""


class _Entry:
    __slots__ = ("command", "fast_decode", "fast_encode", "label", "nested")

    def __init__(self, command: Command, nested: Nested) -> None:
        self.command = command
        self.nested = nested
        self.label = f"command {int(command)} ({command.name})"
        # The generated functions themselves (one call less per record); on any exception
        # the nested's checked path runs and names the offending field.
        self.fast_encode: Callable[[Any], list[Any]] = nested._fast_encode
        self.fast_decode: Callable[[list[Any]], Record] = nested._fast_decode


def _build_registry() -> tuple[dict[int, _Entry], dict[type[Any], _Entry]]:
    by_number: dict[int, _Entry] = {}
    by_class: dict[type[Any], _Entry] = {}
    for cls in ALL_RECORDS:
        entry = _Entry(cls.COMMAND, Nested(cls, prefix=int(cls.COMMAND)))
        if int(cls.COMMAND) in by_number or int(cls.COMMAND) in RESERVED_COMMANDS:
            raise TypeError(f"command {int(cls.COMMAND)} claimed twice or reserved")
        by_number[int(cls.COMMAND)] = entry
        by_class[cls] = entry
    missing = set(Command) - {e.command for e in by_number.values()}
    if missing:
        raise TypeError(f"no record class for {sorted(missing)}")
    return by_number, by_class


_BY_NUMBER, _BY_CLASS = _build_registry()


class _RejectEveryTag(dict[int, Any]):
    """cbor2 ``semantic_decoders`` that claims every tag number, so none of cbor2's
    built-in tag decoders (datetime, bignum, regex, ...) ever runs: an empty dict whose
    every lookup misses into ``__missing__``.

    A ``dict`` subclass, not a ``Mapping``: cbor2 accepts a dict with a cheap type check,
    while a ``Mapping`` costs an ABC ``isinstance`` on every ``loads`` (about 0.25 µs).
    ``tests/unit/wire/test_wire_strict.py`` checks every built-in tag number lands here."""

    __slots__ = ()

    def __missing__(self, tag: int) -> Any:
        return _reject_tag


def _reject_tag(value: object, immutable: bool) -> NoReturn:
    raise ValueError("CBOR tags are not accepted")


def _reject_map(value: object, immutable: bool) -> NoReturn:
    raise ValueError("CBOR maps are not accepted")


_NO_TAGS: Final = _RejectEveryTag()
_SENTINEL: Final = secrets.token_bytes(16)
_SENTINEL_ITEM: Final = bytes([0x50]) + _SENTINEL  # CBOR byte string of 16 bytes
_dumps = cbor2.dumps
_loads = cbor2.loads


def encode(record: WireRecord) -> bytes:
    """The CBOR body of ``record``.

    Raises:
        ProtocolError: ``record`` is not a wire record, or a field value does not fit its
            wire type (the message names the command and the field).
    """
    entry = _BY_CLASS.get(type(record))
    if entry is None:
        raise ProtocolError(f"not a wire record: {type(record).__name__}")
    try:
        items = entry.fast_encode(record)
    except Exception:
        try:
            items = entry.nested.encode_checked(record)
        except WireValueError as exc:
            raise ProtocolError(f"cannot encode {entry.label}: {_where(exc)}") from None
    return _dumps(items)


def evolve(record: _R, /, **changes: Any) -> _R:
    """``attrs.evolve(record, **changes)`` for wire records, about 3x faster: a copy with
    ``changes`` applied whose cross-field rules ran again (``InvalidRecord``); the values
    themselves are checked by :func:`encode`, as for any constructed record. For hot
    paths such as stamping a request's correlation."""
    entry = _BY_CLASS.get(type(record))
    fast = None if entry is None else entry.nested._fast_evolve
    if fast is None:
        return attrs.evolve(cast("Any", record), **changes)  # type: ignore[no-any-return]
    return fast(record, **changes)  # type: ignore[no-any-return]


def decode(body: bytes | bytearray | memoryview) -> Record:
    """Decode one body (without its length prefix).

    Trailing bytes: cbor2 stops after one item, so a small body is decoded as the second
    half of ``[body-item, sentinel]``, where the sentinel is a 16-byte string drawn at
    random per process. The body consumed exactly its own bytes iff the element after it
    is that sentinel (trailing bytes would have to spell the unknown sentinel). Large
    bodies get the exact end from :func:`scan_structure`.

    Raises:
        ProtocolError: for every input that is not exactly one valid record.
    """
    if type(body) is not bytes:
        body = bytes(body)
    if body[:2] == _OK_PREFIX:  # the commonest record: an OK 20 (see _decode_ok)
        reply = _decode_ok(body)
        if reply is not None:
            return reply
    elif body[:3] == _ACTOR_SEND_PREFIX:  # the request it answers (see _decode_actor_send)
        return _decode_actor_send(body)
    return _decode_general(body)


def _decode_general(body: bytes) -> Record:
    """:func:`decode` through cbor2 and the generated field decoders (every record)."""
    if len(body) <= SCAN_THRESHOLD:
        try:
            # Always a list of 2 (the 0x82 header) when cbor2 returns.
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
            raise ProtocolError("bytes after the record, or the record is truncated")
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
        raise ProtocolError(f"a body is a CBOR array [command, ...], got {describe(raw)}")
    number = raw[0]
    entry = _BY_NUMBER.get(number) if type(number) is int else None
    if entry is None:
        if type(number) is int and number in RESERVED_COMMANDS:
            raise ProtocolError(f"command {number} is reserved: never sent, never accepted")
        raise ProtocolError(f"unknown command {describe(number)}")
    try:
        return entry.fast_decode(raw)
    except Exception:
        pass  # the checked path decides, and names the field
    try:
        return entry.nested.decode_checked(raw)  # type: ignore[no-any-return]
    except WireValueError as exc:
        raise ProtocolError(f"{entry.label}: {_where(exc)}") from None


_OK_PREFIX: Final = b"\x86\x14"
"""An array of 6 items, then the command: 20."""
_OK_PAYLOAD: Final = b"\x00\xf6\x82\x01"  # OK (0), no failure code, tail [1 (payload), ...
_OK_EMPTY: Final = b"\x00\xf6\xf6\xf6"  # OK, no failure code, no tail, no message
_UINT_SIZES: Final = {0x18: 1, 0x19: 2, 0x1A: 4, 0x1B: 8}
_OK: Final = TerminalResult.OK
_new = object.__new__


def _setters(cls: type[Any]) -> tuple[Callable[[Any, Any], None], ...]:
    found = trusted_setters(cls)
    assert found is not None and not found[1], cls  # attrs __init__, slots, no cached hash
    return found[0]


_REPLY_SETTERS: Final = _setters(TerminalReply)
_TAIL_SETTER: Final = _setters(ReplyPayloadTail)[0]


def _decode_ok(body: bytes) -> TerminalReply | None:
    """The OK command 20 ``body`` holds, when it is ``[20, correlation, 0, null, tail,
    null]`` with a payload tail or none, read without cbor2 (the reply of every request);
    None for anything else, which the general path then decodes (and judges).

    The record is built as the trusted decoder builds it, from the same checked values:
    a u64 correlation other than 0, a byte string within the payload bound, nothing after
    the last item (an OK terminal with such a tail has no cross-field rule to break).
    Integer and length headers may be non-shortest, as cbor2 accepts them."""
    try:
        head = body[2]
        if head < 24:
            correlation, at = head, 3
        else:
            size = _UINT_SIZES.get(head)
            if size is None:
                return None
            at = 3 + size
            correlation = int.from_bytes(body[3:at])
        if body.startswith(_OK_PAYLOAD, at):
            head = body[at + 4]
            at += 5
            if 0x40 <= head < 0x58:
                length = head - 0x40
            else:
                size = _UINT_SIZES.get(head - 0x40)
                if size is None:
                    return None
                length = int.from_bytes(body[at : at + size])
                at += size
            end = at + length
            if len(body) != end + 1 or body[end] != 0xF6 or length > MAX_PAYLOAD_BYTES:
                return None
            payload: bytes | None = body[at:end]
        elif len(body) != at + 4 or not body.startswith(_OK_EMPTY, at):
            return None
        else:
            payload = None
        if not correlation:
            return None
    except IndexError:
        return None
    return ok_reply(correlation, payload)


_ACTOR_SEND_PREFIX: Final = b"\x91\x18\x18"
"""An array of 17 items, then the command: 24."""
_ACTOR_SEND_SETTERS: Final = _setters(ActorSend)
_SEND: Final = MessageKind.SEND
_KINDS: Final = (_SEND, MessageKind.REQUEST)
_FIXED: dict[bytes, tuple[Any, ...]] = {}
"""The fixed part of a command 24 (source, target, Actor id, route fences: the bytes an
``ActorSendTemplate`` encodes once per route) -> its eight decoded field values, as the
general decoder decoded them (cleared when full)."""
_FIXED_MAX: Final = 1024
assert _OPERATION_ID_SLOTS is not None  # (attrs lays OperationId out as slots)
_OPID_SLOTS: Final = _OPERATION_ID_SLOTS
_last_fixed: tuple[Any, ...] = (b"\xff",)  # (never a fixed part's first byte)


def _decode_actor_send(body: bytes) -> Record:
    """The command 24 ``body`` holds, read without cbor2 when its fixed part (bytes 3 +
    correlation up to the message kind) was decoded before by the general decoder and
    the rest is ``[kind, packet, payload, timeout, operation id, follow_hops, null]`` in
    the forms the hot path writes: a SEND or REQUEST kind, an ASCII packet name of 1 to
    63 characters, a payload within its bound, no session. Anything else, and the first
    body of each fixed part, goes through the general decoder (which judges it, and
    teaches this one that fixed part).

    The record is built as the trusted decoder builds it, from values the general
    decoder's checks accept. Integer and length headers may be non-shortest, as cbor2
    accepts them."""
    global _last_fixed
    try:
        head = body[3]
        if head < 24:
            correlation = head
            at = 4
        else:
            size = _UINT_SIZES.get(head)
            if size is None:
                return _decode_general(body)
            at = 4 + size
            correlation = int.from_bytes(body[4:at])
        fixed = _last_fixed
        if body.startswith(fixed[0], at):  # the fixed part of the previous one
            at += len(fixed[0])
        else:
            end = _fixed_end(body, at)
            if end < 0:
                return _decode_general(body)
            found = _FIXED.get(body[at:end])
            if found is None:
                return _learn(body, body[at:end])
            fixed = _last_fixed = found
            at = end
        # The varying part.
        kind = _KINDS[body[at]]
        head = body[at + 1]
        if 0x61 <= head < 0x78:
            at += 2
            end = at + head - 0x60
        elif head == 0x78 and 24 <= body[at + 2] <= 63:
            at += 3
            end = at + body[at - 1]
        else:
            return _decode_general(body)
        text = body[at:end]
        if not text.isascii():
            return _decode_general(body)
        packet = text.decode("ascii")
        head = body[end]
        at = end + 1
        if 0x40 <= head < 0x58:
            length = head - 0x40
        else:
            size = _UINT_SIZES.get(head - 0x40)
            if size is None:
                return _decode_general(body)
            length = int.from_bytes(body[at : at + size])
            at += size
        end = at + length
        if length > MAX_PAYLOAD_BYTES:
            return _decode_general(body)
        payload = body[at:end]
        head = body[end]
        at = end + 1
        if head == 0xF6:
            timeout_ms: int | None = None
        elif head < 24:
            timeout_ms = head
        else:
            size = _UINT_SIZES.get(head)
            if size is None or size == 8:
                return _decode_general(body)
            timeout_ms = int.from_bytes(body[at : at + size])
            at += size
        head = body[at]
        if head == 0xF6:
            operation_id: OperationId | None = None
            at += 1
        elif head == 0x50:
            value = int.from_bytes(body[at + 1 : at + 17])
            if not value:
                return _decode_general(body)
            # (as the generated decoder builds it: ``OperationId._trusted`` inlined)
            operation_id = _new(OperationId)
            set_value, set_hash = _OPID_SLOTS
            set_value(operation_id, value)
            set_hash(operation_id, None)
            at += 17
        else:
            return _decode_general(body)
        hops = body[at]
        if hops < 24:
            at += 1
        elif hops == 0x18:
            hops = body[at + 1]
            at += 2
        else:
            return _decode_general(body)
        if len(body) != at + 1 or body[at] != 0xF6:  # no session, nothing after it
            return _decode_general(body)
        if (correlation == 0) is not (kind is _SEND):  # ActorSend's cross-field rule
            return _decode_general(body)
    except (IndexError, KeyError):
        return _decode_general(body)
    record: ActorSend = _new(ActorSend)
    (s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15) = _ACTOR_SEND_SETTERS
    _, v1, v2, v3, v4, v5, v6, v7, v8 = fixed
    s0(record, correlation)
    s1(record, v1)
    s2(record, v2)
    s3(record, v3)
    s4(record, v4)
    s5(record, v5)
    s6(record, v6)
    s7(record, v7)
    s8(record, v8)
    s9(record, kind)
    s10(record, packet)
    s11(record, payload)
    s12(record, timeout_ms)
    s13(record, operation_id)
    s14(record, hops)
    s15(record, None)
    return record  # (its __attrs_post_init__ checks the rule checked above: not run again)


def _fixed_end(body: bytes, at: int) -> int:
    """Where the fixed part of the command 24 ``body`` that starts at ``at`` ends (rid,
    generation, rid, generation, text, 3 nullable generations); -1 for another shape
    (IndexError or KeyError for a truncated body or an unexpected header)."""
    if body[at] != 0x50:
        return -1
    head = body[at + 17]
    at += 18 if head < 24 else 18 + _UINT_SIZES[head]
    if body[at] != 0x50:
        return -1
    head = body[at + 17]
    at += 18 if head < 24 else 18 + _UINT_SIZES[head]
    head = body[at]
    if 0x60 <= head < 0x78:
        at += head - 0x5F
    elif head == 0x78:
        at += body[at + 1] + 2
    else:
        return -1
    for _ in range(3):
        head = body[at]
        at += 1 if head < 24 or head == 0xF6 else 1 + _UINT_SIZES[head]
    return at


def _learn(body: bytes, fixed: bytes) -> Record:
    """``body`` through the general decoder; its ``fixed`` part remembered (_FIXED)."""
    global _last_fixed
    record = _decode_general(body)
    if type(record) is ActorSend:  # (always: the body names command 24)
        if len(_FIXED) >= _FIXED_MAX:
            _FIXED.clear()
        _FIXED[fixed] = _last_fixed = (
            fixed,
            record.source_rid,
            record.source_generation,
            record.target_rid,
            record.target_generation,
            record.actor_id,
            record.route_object_generation,
            record.expected_owner_generation,
            record.owner_lease_generation,
        )
    return record


def ok_reply(correlation: int, payload: bytes | None) -> TerminalReply:
    """``TerminalReply.ok(correlation, tail)`` (``tail``: a :class:`~.tails.ReplyPayloadTail`
    of ``payload``, or none for ``None``), built as the trusted decoder builds records
    (an OK terminal with such a tail has no cross-field rule to check); values are checked
    by the encoder, as for any record."""
    tail: ReplyPayloadTail | None = None
    if payload is not None:
        tail = _new(ReplyPayloadTail)
        _TAIL_SETTER(tail, payload)
    reply: TerminalReply = _new(TerminalReply)
    s_correlation, s_result, s_code, s_tail, s_message = _REPLY_SETTERS
    s_correlation(reply, correlation)
    s_result(reply, _OK)
    s_code(reply, None)
    s_tail(reply, tail)
    s_message(reply, None)
    return reply


def _malformed(exc: BaseException) -> NoReturn:
    """Re-raise what cbor2 raised on a body as ProtocolError.

    cbor2 raises many types on garbage (CBORDecodeError, ValueError, RecursionError,
    MemoryError, OverflowError, ...); all mean "malformed". A Rust panic surfaces as pyo3's
    PanicException, a BaseException: that means malformed input too. Anything else that is
    not an Exception (KeyboardInterrupt, ...) propagates.
    """
    if not isinstance(exc, Exception) and type(exc).__name__ != "PanicException":
        raise exc
    reason = str(exc)[:200]
    raise ProtocolError(f"malformed CBOR body ({type(exc).__name__}: {reason})") from None


def _where(exc: WireValueError) -> str:
    if not exc.path:
        return exc.message
    return f"field {'.'.join(exc.path).replace('.[', '[')}: {exc.message}"


def _fail(message: str) -> NoReturn:
    raise ProtocolError(f"malformed CBOR body: {message}")


def scan_structure(body: bytes, max_items: int = SCAN_MAX_ITEMS) -> None:
    """Walk the item headers of ``body`` without building any value.

    Accepts exactly one item made only of unsigned/negative ints, byte/text strings,
    definite arrays, false, true and null, ending at the last byte, with at most
    ``max_items`` items. Everything else raises ProtocolError.
    """
    end = len(body)
    pos = 0
    items = 0
    remaining = 1
    stack: list[int] = []
    while True:
        if pos >= end:
            _fail("truncated")
        initial = body[pos]
        pos += 1
        major = initial >> 5
        info = initial & 0x1F
        if info < 24:
            argument = info
        elif info < 28:
            after = pos + (1 << (info - 24))
            if after > end:
                _fail("truncated")
            argument = int.from_bytes(body[pos:after], "big")
            pos = after
        else:
            _fail("indefinite length or reserved header")
        items += 1
        if items > max_items:
            _fail(f"more than {max_items} items")
        if major == 2 or major == 3:
            pos += argument
            if pos > end:
                _fail("truncated")
        elif major == 4:
            if argument:
                stack.append(remaining)
                remaining = argument
                continue
        elif major == 5:
            _fail("maps are not accepted")
        elif major == 6:
            _fail("tags are not accepted")
        elif major == 7 and info not in (20, 21, 22):
            _fail("floats and simple values are not accepted")
        remaining -= 1
        while remaining == 0:
            if not stack:
                if pos != end:
                    _fail("bytes after the record")
                return
            remaining = stack.pop() - 1


def encode_value(value: object) -> bytes:
    """Plain CBOR of a tree of lists, bytes, str, int, float, bool and None (a relocation
    envelope kept in the Relocation Store; never a frame)."""
    try:
        return cbor2.dumps(value)
    except (cbor2.CBOREncodeError, TypeError, ValueError) as exc:
        raise ProtocolError(f"cannot encode the value: {exc}") from None


def decode_value(data: bytes) -> Any:
    """The inverse of :func:`encode_value`: no tags, definite items only, bounded nesting
    (the caller checks the shape).

    Raises:
        ProtocolError: not such a value.
    """
    try:
        return cbor2.loads(data, tag_hook=_reject_tag, max_depth=MAX_DEPTH, allow_indefinite=False)
    except (cbor2.CBORDecodeError, TypeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"malformed value: {exc}") from None
