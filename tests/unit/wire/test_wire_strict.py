"""Strict decoding: every malformed body raises ProtocolError naming what is wrong, and
encoding refuses values that do not fit the wire."""

from __future__ import annotations

from typing import Any

import attrs
import cbor2
import pytest
import wire_samples as s

from zlink_trio.errors import ProtocolError
from zlink_trio.ids import ActorId, NodeRid
from zlink_trio.wire import (
    ActorSend,
    MessageKind,
    WireRecord,
    codec,
    decode,
    encode,
)
from zlink_trio.wire.codec import SCAN_MAX_ITEMS, SCAN_THRESHOLD, scan_structure

PLACEHOLDER = "\x01" * 10
PLACEHOLDER_BYTES = cbor2.dumps(PLACEHOLDER)


def raw(record: WireRecord) -> list[Any]:
    value = cbor2.loads(encode(record))
    assert isinstance(value, list)
    return value


def mutated(record: WireRecord, index: int, value: object) -> bytes:
    items = raw(record)
    items[index] = value
    return cbor2.dumps(items)


def spliced(record: WireRecord, index: int, item_bytes: bytes) -> bytes:
    """The body of ``record`` with the item at ``index`` replaced by raw CBOR bytes."""
    body = mutated(record, index, PLACEHOLDER)
    assert body.count(PLACEHOLDER_BYTES) == 1
    return body.replace(PLACEHOLDER_BYTES, item_bytes)


def rejects(body: bytes, match: str | None = None) -> ProtocolError:
    with pytest.raises(ProtocolError, match=match) as info:
        decode(body)
    return info.value


# --- command and shape --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (cbor2.dumps([999, 1]), "unknown command int 999"),
        (cbor2.dumps([-24]), "unknown command"),
        (cbor2.dumps(["24"]), "unknown command str"),
        (cbor2.dumps([True]), "unknown command bool"),
        (cbor2.dumps([24.0]), "unknown command float"),
        (cbor2.dumps([45]), "command 45 is reserved"),
        (cbor2.dumps([]), "a body is a CBOR array"),
        (cbor2.dumps(24), "a body is a CBOR array"),
        (cbor2.dumps(b"\x18\x18"), "a body is a CBOR array"),
        (b"", "malformed CBOR"),
        (b"\xff", "malformed CBOR"),
    ],
)
def test_unknown_commands_and_shapes(body: bytes, match: str) -> None:
    rejects(body, match)


@pytest.mark.parametrize("record", s.ALL_SAMPLES, ids=lambda r: type(r).__name__)
def test_missing_and_extra_fields(record: WireRecord) -> None:
    items = raw(record)
    label = f"command {items[0]} "
    rejects(cbor2.dumps(items[:-1]), label + r".*fields, got")
    rejects(cbor2.dumps([*items, None]), label + r".*fields, got")


def test_missing_field_in_a_nested_record() -> None:
    items = raw(s.ACTOR_SEND)
    items[16] = items[16][:-1]
    rejects(cbor2.dumps(items), "field session: SessionTail has 5 fields, got 4")


# --- types and ranges ---------------------------------------------------------------------


# Indices into the ActorSend array: 0 command, 1 correlation, 2 source_rid, 3 source_gen,
# 6 actor_id, 7 route_object_generation, 10 message_kind, 11 packet_name, 12 payload,
# 13 timeout_ms, 14 operation_id, 15 follow_hops, 16 session.
@pytest.mark.parametrize(
    ("index", "value", "match"),
    [
        (1, True, "field correlation: expected u64, got bool"),
        (1, 1.0, "field correlation: expected u64, got float"),
        (1, -1, "field correlation: expected u64, got int -1"),
        (1, "11", "field correlation"),
        (3, 0, r"field source_generation: expected u63 nonzero"),
        (3, 1 << 63, "field source_generation"),
        (3, False, "field source_generation"),
        (7, 0, "field route_object_generation"),
        (13, 1 << 32, "field timeout_ms: expected u32"),
        (15, 256, "field follow_hops: expected u8"),
        (10, 7, "field message_kind: expected enum MessageKind"),
        (10, True, "field message_kind"),
        (2, b"\x00" * 15, "field source_rid: expected rid"),
        (2, b"\x00" * 17, "field source_rid"),
        (2, "0" * 16, "field source_rid"),
        (14, b"\x00" * 16, "field operation_id: operation-id must be non-zero"),
        (14, b"\x01" * 15, "field operation_id"),
        (12, "payload", "field payload: expected payload<=1048576, got str"),
        (11, b"move", "field packet_name: expected text8, got bytes"),
        (6, b"player-42", "field actor_id"),
        (6, "", "field actor_id: .*1..255 UTF-8 bytes, got 0 chars"),
        (6, "a" * 256, "field actor_id"),
        (6, "é" * 128, "field actor_id"),  # 256 bytes, 128 chars
        (6, None, "field actor_id"),
        (6, ["player-42"], "field actor_id"),
        (16, [1, 2, 3, 4, 5], r"field session\.session_owner_rid"),
        (16, "session", "field session: expected SessionTail, got str"),
    ],
)
def test_mistyped_and_out_of_range_fields(index: int, value: object, match: str) -> None:
    error = rejects(mutated(s.ACTOR_SEND, index, value), match)
    assert str(error).startswith("command 24 (ACTOR_SEND): field ")


def test_text_id_boundaries() -> None:
    assert decode(mutated(s.ACTOR_SEND, 6, "é" * 127 + "a")) is not None  # 255 bytes
    assert decode(mutated(s.ACTOR_SEND, 6, "a" * 255)) is not None
    rejects(mutated(s.ACTOR_SEND, 6, "é" * 127 + "ab"), "field actor_id")  # 256 bytes


@pytest.mark.parametrize(
    "item",
    [
        b"\x62\xff\xfe",  # invalid UTF-8
        b"\x63\xed\xa0\x80",  # an encoded surrogate
        b"\x62\xc3\x28",  # invalid continuation byte
    ],
)
def test_invalid_utf8_ids(item: bytes) -> None:
    rejects(spliced(s.ACTOR_SEND, 6, item), "malformed CBOR")


def test_oversize_byte_fields() -> None:
    rejects(mutated(s.ACTOR_SEND, 12, b"x" * (1024 * 1024 + 1)), "field payload")
    assert decode(mutated(s.ACTOR_SEND, 12, b"x" * (1024 * 1024))) is not None
    route = s.spot_direct_route(s.READY_FENCE)
    rejects(mutated(route, 10, b"m" * (64 * 1024 + 1)), "field metadata")
    failed = raw(s.ALL_SAMPLES[10])  # TerminalReply.failed(3, ...)
    assert failed[0] == 20 and failed[5] == "exists"
    failed[5] = "€" * 342  # 1026 bytes
    rejects(cbor2.dumps(failed), "field failure_message")


def test_union_tags_and_variant_shapes() -> None:
    reply = raw(s.ALL_SAMPLES[1])  # TerminalReply.ok with a CreateTail
    assert reply[4][0] == 2
    rejects(cbor2.dumps([*reply[:4], [9, 1], None]), "field tail: unknown tail tag int 9")
    rejects(cbor2.dumps([*reply[:4], [True, 1], None]), "unknown tail tag bool")
    rejects(cbor2.dumps([*reply[:4], [], None]), "field tail: expected tail as")
    rejects(cbor2.dumps([*reply[:4], reply[4][:-1], None]), "CreateTail has 6 fields, got 5")
    bad_state = [*reply[4]]
    bad_state[1] = 99
    rejects(cbor2.dumps([*reply[:4], bad_state, None]), r"field tail\.CreateTail\.state")


def test_cross_field_rules_on_decode() -> None:
    rejects(mutated(s.ACTOR_SEND, 10, int(MessageKind.SEND)), "a send has correlation 0")
    sealed = raw(s.SEALED)
    sealed[3] = 1  # REJECTED without a failure code
    rejects(cbor2.dumps(sealed), "command 43 .*REJECTED result carries a failure code")


def test_followed_bind_fields_go_together() -> None:
    """B02-03: a followed 38 names its session owner exactly when it took a hop, and a
    BindTail names the owner node with its lifecycle or not at all."""
    bind = raw(s.BOUND_SESSION_BIND)
    hops_only = [*bind[:17], 1, None, None]
    rejects(cbor2.dumps(hops_only), "command 38 .*follow_hops")
    owner_only = [*bind[:17], 0, s.RID_C.value, 82]
    rejects(cbor2.dumps(owner_only), "command 38 .*follow_hops")
    half = [*bind[:17], 1, s.RID_C.value, None]
    rejects(cbor2.dumps(half), "command 38 .*follow_hops")
    assert decode(cbor2.dumps([*bind[:17], 1, s.RID_C.value, 82])) == attrs.evolve(
        s.BOUND_SESSION_BIND,
        follow_hops=1,
        session_owner_rid=s.RID_C,
        session_owner_generation=s.gen(82),
    )
    reply = raw(s.ALL_SAMPLES[-1])
    assert reply[4][0] == 5
    reply[4] = [*reply[4][:4], s.RID_B.value, None]
    rejects(cbor2.dumps(reply), "together")


# --- CBOR features that are never accepted ------------------------------------------------


@pytest.mark.parametrize(
    "item",
    [
        cbor2.dumps(cbor2.CBORTag(0, "2024-01-01T00:00:00Z")),
        cbor2.dumps(cbor2.CBORTag(1, 1)),
        bytes([0xC2, 0x41, 0x05]),  # bignum 5
        bytes([0xC2, 0x5A, 0x00, 0x01, 0x00, 0x00]) + b"\xff" * 65536,  # 64 KiB bignum
        cbor2.dumps(cbor2.CBORTag(35, "(a+)+$")),  # regex: never compiled
        cbor2.dumps(cbor2.CBORTag(258, [1, 2])),  # set
        cbor2.dumps(cbor2.CBORTag(28, [1])),  # shareable
        cbor2.dumps(cbor2.CBORTag(29, 0)),  # shared reference
        cbor2.dumps(cbor2.CBORTag(256, [])),  # string reference namespace
        cbor2.dumps(cbor2.CBORTag(55799, 11)),  # self-describe
        cbor2.dumps(cbor2.CBORTag(40000, 11)),  # unknown tag
        cbor2.dumps({1: 2}),  # map
        b"\x9f\x01\xff",  # indefinite array
        b"\x5f\x41\x01\xff",  # indefinite byte string
        b"\xf9\x3c\x00",  # half float 1.0
        b"\xfa\x3f\x80\x00\x00",  # single float 1.0
        b"\xf7",  # undefined
        b"\xf0",  # simple value 16
        b"\xf8\xff",  # simple value 255
        b"\x1c",  # reserved additional information
    ],
)
def test_cbor_features_are_rejected(item: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode(spliced(s.ACTOR_SEND, 1, item))
    with pytest.raises(ProtocolError):
        decode(item)


CBOR2_BUILTIN_TAGS = [0, 1, 2, 3, 4, 5, 25, 28, 29, 30, 35, 36, 37, 52, 54, 100, 256, 258]
CBOR2_BUILTIN_TAGS += [260, 261, 1004, 43000, 55799]


@pytest.mark.parametrize("tag", [*CBOR2_BUILTIN_TAGS, 6, 24, 40000, (1 << 64) - 1])
def test_every_tag_reaches_the_rejecting_decoder(tag: int) -> None:
    """The tag table is a dict whose every lookup misses into the rejecting decoder: no
    built-in cbor2 decoder (datetime, bignum, regex, set, shared refs, ...) ever runs."""
    item = cbor2.dumps(cbor2.CBORTag(tag, [1]))
    with pytest.raises(cbor2.CBORDecodeError) as info:
        cbor2.loads(item, semantic_decoders=codec._NO_TAGS)
    cause = info.value.__cause__ or info.value.__context__
    assert isinstance(cause, ValueError)
    assert str(cause) == "CBOR tags are not accepted"
    assert len(codec._NO_TAGS) == 0  # lookups never insert
    rejects(spliced(s.ACTOR_SEND, 1, item), "malformed CBOR body")


def test_tag_around_the_whole_body() -> None:
    rejects(cbor2.dumps(cbor2.CBORTag(24, encode(s.ACTOR_SEND))), "malformed CBOR")


def test_non_shortest_integers_are_accepted() -> None:
    """Decision (docs/decisions.md): well-formed, not deterministic, CBOR is accepted."""
    body = spliced(s.ACTOR_SEND, 1, b"\x1b" + (11).to_bytes(8, "big"))
    assert decode(body) == s.ACTOR_SEND


# --- trailing and truncated bodies --------------------------------------------------------


@pytest.mark.parametrize("tail", [b"\x00", b"\xf6", b"\x80", b"\x50" + b"\x00" * 16, b"\xff"])
def test_trailing_bytes(tail: bytes) -> None:
    rejects(encode(s.ACTOR_SEND) + tail)
    large = mutated(s.ACTOR_SEND, 12, b"x" * (SCAN_THRESHOLD + 1))
    assert decode(large) is not None
    rejects(large + tail, "bytes after the record")


def test_truncated_bodies() -> None:
    body = encode(s.ACTOR_SEND)
    for cut in range(len(body)):
        with pytest.raises(ProtocolError):
            decode(body[:cut])
    large = mutated(s.ACTOR_SEND, 12, b"x" * (SCAN_THRESHOLD + 1))
    rejects(large[:-1], "truncated")


def test_decode_accepts_buffers() -> None:
    body = encode(s.ACTOR_SEND)
    assert decode(bytearray(body)) == s.ACTOR_SEND
    assert decode(memoryview(body)) == s.ACTOR_SEND


# --- large bodies are walked before cbor2 builds anything ----------------------------------


def test_scan_bounds_items_of_large_bodies() -> None:
    many = cbor2.dumps([24, [[]] * (SCAN_MAX_ITEMS + 1), b"x" * SCAN_THRESHOLD])
    rejects(many, f"more than {SCAN_MAX_ITEMS} items")
    # A 16 MiB-declared array with nothing behind it fails fast, without allocating.
    rejects(b"\x9a\x01\x00\x00\x00" + b"\x00" * SCAN_THRESHOLD, "more than|truncated")


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (cbor2.dumps([1, {1: 2}]), "maps"),
        (cbor2.dumps([1, cbor2.CBORTag(2, b"\x01")]), "tags"),
        (cbor2.dumps([1, 1.5]), "floats"),
        (b"\x82\x01\x9f\xff", "indefinite"),
        (b"\x82\x01\x42\x00", "truncated"),
        (b"\x81\x01\x01", "bytes after"),
        (b"", "truncated"),
    ],
)
def test_scan_structure_rejects(body: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        scan_structure(body)


def test_scan_structure_accepts_wire_values() -> None:
    scan_structure(encode(s.ACTOR_SEND))
    scan_structure(cbor2.dumps([True, False, None, -5, "é", b"", [[], [1]]]))


# --- encoding -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"payload": b"x" * (1024 * 1024 + 1)}, "field payload"),
        ({"payload": bytearray(b"x")}, "field payload: expected payload<=1048576, got bytearray"),
        ({"actor_id": "player-42"}, r"field actor_id: expected text8 \(ActorId\), got str"),
        ({"packet_name": ""}, "field packet_name"),
        ({"packet_name": "\ud800"}, "field packet_name"),
        ({"packet_name": "é" * 128}, "field packet_name"),
        ({"follow_hops": -1}, "field follow_hops"),
        ({"follow_hops": True}, "field follow_hops"),
        ({"timeout_ms": 1 << 32}, "field timeout_ms"),
        ({"source_rid": s.RID_A.value}, "field source_rid"),
        ({"message_kind": 1}, "field message_kind"),
        ({"operation_id": 5}, "field operation_id"),
        (
            {"session": attrs.evolve(s.SESSION_TAIL, session_rid=b"short")},
            r"field session\.session_rid",
        ),
    ],
)
def test_encode_rejects_invalid_values(changes: dict[str, Any], match: str) -> None:
    record = attrs.evolve(s.ACTOR_SEND, **changes)  # no per-field checks at construction
    with pytest.raises(ProtocolError, match="cannot encode command 24 .ACTOR_SEND.: " + match):
        encode(record)


def test_encode_rejects_non_records() -> None:
    with pytest.raises(ProtocolError, match="not a wire record: ActorId"):
        encode(ActorId("x"))  # type: ignore[arg-type]
    with pytest.raises(ProtocolError, match="not a wire record: NodeRid"):
        encode(NodeRid.new())  # type: ignore[arg-type]


def test_encoding_is_shortest_form() -> None:
    record = attrs.evolve(s.ACTOR_SEND, correlation=23, follow_hops=24, timeout_ms=255)
    items = raw(record)
    assert cbor2.dumps(items) == encode(record)
    assert isinstance(decode(encode(record)), ActorSend)
