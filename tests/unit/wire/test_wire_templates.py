"""The short paths of wire/templates.py write exactly the bytes ``encode`` writes for the
equivalent record, build records equal to normally constructed ones, and refuse what
``encode`` refuses."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from hypothesis import given, strategies as st

from zlink_trio.errors import ErrorKind, ProtocolError
from zlink_trio.ids import (
    ActorId,
    AuthorityOwnerGeneration,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OwnerLeaseGeneration,
)
from zlink_trio.wire import (
    MAX_PAYLOAD_BYTES,
    ActorSend,
    CreateState,
    CreateTail,
    MessageKind,
    ReplyPayloadTail,
    TerminalReply,
    codec,
    decode,
    encode,
)
from zlink_trio.wire.enums import TerminalResult
from zlink_trio.wire.templates import ActorSendTemplate, encode_fast, ok_reply, ok_reply_body

_OK = TerminalResult.OK

SOURCE = NodeRid(bytes(range(16)))
TARGET = NodeRid(bytes(range(16, 32)))


def _template(
    actor: str = "cart-1", fences: tuple[int | None, int | None, int | None] = (5, 6, 7)
) -> ActorSendTemplate:
    object_generation, owner_generation, lease_generation = fences
    return ActorSendTemplate(
        source_rid=SOURCE,
        source_generation=NodeGeneration(11),
        target_rid=TARGET,
        target_generation=NodeGeneration(12),
        actor_id=ActorId(actor),
        route_object_generation=None
        if object_generation is None
        else ObjectGeneration(object_generation),
        expected_owner_generation=None
        if owner_generation is None
        else AuthorityOwnerGeneration(owner_generation),
        owner_lease_generation=None
        if lease_generation is None
        else OwnerLeaseGeneration(lease_generation),
    )


@given(
    actor=st.text(min_size=1, max_size=60),
    fences=st.tuples(*[st.none() | st.integers(1, 2**63 - 1)] * 3),
    correlation=st.integers(0, 2**64 - 1),
    packet=st.text(min_size=1, max_size=63),
    payload=st.binary(max_size=300),
    timeout_ms=st.none() | st.integers(0, 2**32 - 1),
    operation_id=st.integers(1, 2**128 - 1),
)
def test_actor_send_body_is_the_records_encoding(
    actor: str,
    fences: tuple[int | None, int | None, int | None],
    correlation: int,
    packet: str,
    payload: bytes,
    timeout_ms: int | None,
    operation_id: int,
) -> None:
    template = _template(actor, fences)
    kind = MessageKind.REQUEST if correlation else MessageKind.SEND
    args = (correlation, kind, packet, payload, timeout_ms, operation_id)
    record = template.record(*args)
    assert isinstance(record, ActorSend)
    assert template.body(*args) == encode(record)
    assert decode(template.body(*args)) == record


def test_actor_send_body_refuses_what_encode_refuses() -> None:
    template = _template()
    with pytest.raises(ProtocolError, match="packet_name"):
        template.body(1, MessageKind.REQUEST, "x" * 300, b"", None, 1)
    with pytest.raises(ProtocolError, match="payload"):
        template.body(1, MessageKind.REQUEST, "p", b"x" * (MAX_PAYLOAD_BYTES + 1), None, 1)
    with pytest.raises(ProtocolError, match="timeout_ms"):
        template.body(1, MessageKind.REQUEST, "p", b"", 2**32, 1)
    with pytest.raises(ProtocolError):  # a send carries no correlation
        template.body(3, MessageKind.SEND, "p", b"", None, 1)


@given(correlation=st.integers(1, 2**64 - 1), payload=st.none() | st.binary(max_size=300))
def test_ok_reply_is_a_normal_record_and_encodes_as_one(
    correlation: int, payload: bytes | None
) -> None:
    tail = None if payload is None else ReplyPayloadTail(payload=payload)
    normal = TerminalReply.ok(correlation, tail)
    fast = ok_reply(correlation, payload)
    assert fast == normal and hash(fast) == hash(normal) and repr(fast) == repr(normal)
    assert ok_reply_body(correlation, payload) == encode(normal)
    assert encode_fast(fast) == encode(normal)


def test_encode_fast_takes_every_other_record_to_encode() -> None:
    failed = TerminalReply.failed(9, ErrorKind.NOT_FOUND, "no such actor")
    assert encode_fast(failed) == encode(failed)
    created = TerminalReply.ok(
        9,
        CreateTail(
            state=CreateState.CREATED,
            object_id="a",
            object_generation=ObjectGeneration(1),
            mesh_name=MeshName("m"),
            node_rid=TARGET,
        ),
    )
    assert encode_fast(created) == encode(created)
    with pytest.raises(ProtocolError):
        ok_reply_body(0, b"")  # a reply's correlation is never 0
    with pytest.raises(ProtocolError):
        encode_fast(ok_reply(1, b"x" * (MAX_PAYLOAD_BYTES + 1)))


def _checked_decode(body: bytes) -> object:
    """The general decoder's verdict on ``body`` (the record, or ProtocolError)."""
    import cbor2

    from zlink_trio.wire import codec

    try:
        raw = cbor2.loads(body)
        if type(raw) is not list or raw[:1] != [20] or len(body) != len(cbor2.dumps(raw)):
            raise ProtocolError("not a shortest-form 20")
        return codec._BY_NUMBER[20].nested.decode_checked(raw)
    except Exception as exc:
        return type(exc)


@given(
    correlation=st.integers(0, 2**64 - 1),
    payload=st.none() | st.binary(max_size=300),
    cut=st.integers(0, 40),
    extra=st.binary(max_size=3),
)
def test_ok_reply_decodes_as_the_general_decoder_decodes_it(
    correlation: int, payload: bytes | None, cut: int, extra: bytes
) -> None:
    # decode() reads an OK 20 without cbor2 (codec._decode_ok): the same record as the
    # general decoder, and every damaged body (cut short, bytes after it, correlation 0)
    # left to the general decoder (ProtocolError).
    tail = None if payload is None else ReplyPayloadTail(payload=payload)
    record = TerminalReply(correlation=max(correlation, 1), terminal_result=_OK, tail=tail)
    body = encode(record)
    assert decode(body) == record == _checked_decode(body)
    for damaged in (body[: len(body) - 1 - cut % len(body)], body + (extra or b"\x00")):
        with pytest.raises(ProtocolError):
            decode(damaged)
    if correlation == 0:
        with pytest.raises(ProtocolError):
            decode(b"\x86\x14\x00" + body[3 + _head_size(body[2]) :])


def _head_size(head: int) -> int:
    return 0 if head < 24 else {0x18: 1, 0x19: 2, 0x1A: 4, 0x1B: 8}[head]


@pytest.mark.parametrize("payload", [None, b"", b"p" * 30])
@pytest.mark.parametrize("head", [b"\x18\x05", b"\x19\x00\x05", b"\x1a\x00\x00\x00\x05"])
def test_ok_reply_accepts_non_shortest_heads(head: bytes, payload: bytes | None) -> None:
    tail = b"\xf6" if payload is None else b"\x82\x01\x59" + len(payload).to_bytes(2) + payload
    body = b"\x86\x14" + head + b"\x00\xf6" + tail + b"\xf6"
    expected_tail = None if payload is None else ReplyPayloadTail(payload=payload)
    assert decode(body) == TerminalReply(correlation=5, terminal_result=_OK, tail=expected_tail)


def _verdict(decoder: Any, body: bytes) -> object:
    try:
        return decoder(body)
    except ProtocolError:
        return ProtocolError


@given(
    actor=st.text(min_size=1, max_size=60),
    fences=st.tuples(*[st.none() | st.integers(1, 2**63 - 1)] * 3),
    correlation=st.integers(0, 2**64 - 1),
    packet=st.text(min_size=1, max_size=63) | st.text(alphabet="abc-_.", min_size=1, max_size=63),
    payload=st.binary(max_size=300),
    timeout_ms=st.none() | st.integers(0, 2**32 - 1),
    operation_id=st.integers(1, 2**128 - 1),
)
def test_actor_send_decodes_as_the_general_decoder_decodes_it(
    actor: str,
    fences: tuple[int | None, int | None, int | None],
    correlation: int,
    packet: str,
    payload: bytes,
    timeout_ms: int | None,
    operation_id: int,
) -> None:
    # decode() reads a command 24 without cbor2 once its fixed part was decoded before
    # (codec._decode_actor_send): the same record as the general decoder, and the short
    # path is taken for what the hot path writes (an ASCII packet name).
    template = _template(actor, fences)
    kind = MessageKind.REQUEST if correlation else MessageKind.SEND
    args = (correlation, kind, packet, payload, timeout_ms, operation_id)
    body = template.body(*args)
    record = template.record(*args)
    assert decode(body) == record == codec._decode_general(body)  # (the first: learned)
    with mock.patch.object(codec, "_decode_general", wraps=codec._decode_general) as general:
        again = decode(body)
        assert again == record and hash(again) == hash(record) and type(again) is ActorSend
        assert general.called is not packet.isascii()


@given(
    fences=st.tuples(*[st.none() | st.integers(1, 2**63 - 1)] * 3),
    correlation=st.integers(0, 2**64 - 1),
    payload=st.binary(max_size=40),
    timeout_ms=st.none() | st.integers(0, 2**32 - 1),
    operation_id=st.integers(1, 2**128 - 1),
    damage=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
    cut=st.none() | st.integers(0, 200),
    extra=st.binary(max_size=3),
)
def test_a_damaged_actor_send_gets_the_general_decoders_verdict(
    fences: tuple[int | None, int | None, int | None],
    correlation: int,
    payload: bytes,
    timeout_ms: int | None,
    operation_id: int,
    damage: list[tuple[int, int]],
    cut: int | None,
    extra: bytes,
) -> None:
    # Whatever the bytes after the 24's head, decode() gives the general decoder's
    # verdict: the same record, or ProtocolError (the fixed part learned first).
    template = _template("cart-1", fences)
    kind = MessageKind.REQUEST if correlation else MessageKind.SEND
    body = template.body(correlation, kind, "ask", payload, timeout_ms, operation_id)
    decode(body)
    damaged = bytearray(body)
    for at, value in damage:
        damaged[3 + at % (len(body) - 3)] = value
    if cut is not None:
        del damaged[len(damaged) - 1 - cut % (len(damaged) - 3) :]
    damaged += extra
    assert _verdict(decode, bytes(damaged)) == _verdict(codec._decode_general, bytes(damaged))


@pytest.mark.parametrize(
    ("correlation", "payload_head", "timeout", "hops"),
    [
        (b"\x18\x05", b"\x43", b"\x19\x00\x07", b"\x00"),
        (b"\x1b" + (5).to_bytes(8), b"\x59\x00\x03", b"\x1a\x00\x00\x00\x07", b"\x18\x02"),
        (b"\x05", b"\x5a\x00\x00\x00\x03", b"\xf6", b"\x18\xff"),
    ],
)
def test_actor_send_accepts_non_shortest_heads(
    correlation: bytes, payload_head: bytes, timeout: bytes, hops: bytes
) -> None:
    template = _template()
    shortest = template.body(5, MessageKind.REQUEST, "ask", b"abc", 7, 9)
    decode(shortest)  # its fixed part learned
    fixed = shortest[4 : shortest.index(b"\x01\x63ask")]
    body = (
        b"\x91\x18\x18" + correlation + fixed + b"\x01\x63ask" + payload_head + b"abc"
        + timeout + b"\x50" + (9).to_bytes(16) + hops + b"\xf6"
    )  # fmt: skip
    with mock.patch.object(codec, "_decode_general", wraps=codec._decode_general) as general:
        record = decode(body)
        general.assert_not_called()
    assert record == codec._decode_general(body)
