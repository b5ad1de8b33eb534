"""The array layout of every spec-numbered command, checked on the bytes with cbor2 as an
independent decoder. Field order is the wire contract: a test fails if a field moves."""

from __future__ import annotations

from typing import Any

import attrs
import cbor2
import pytest
import wire_samples as s

from zlink_trio.errors import ErrorKind, ProtocolError
from zlink_trio.ids import SpotId
from zlink_trio.wire import (
    ALL_RECORDS,
    Command,
    CreateState,
    SessionRelocationRoute,
    SessionRelocationSealed,
    TerminalReply,
    TerminalResult,
    UserSpotCreate,
    decode,
    encode,
)
from zlink_trio.wire.fields import FieldType, Nullable, Rid, Text8
from zlink_trio.wire.nested import ListOf, Nested, TaggedUnion


def raw(record: Any) -> list[Any]:
    value = cbor2.loads(encode(record))
    assert isinstance(value, list)
    return value


def test_20_order_is_correlation_result_code_tail() -> None:
    """S06-08: the 20 reply's order is correlation, terminalResult, failureCode, tail."""
    ok = raw(TerminalReply.ok(9, s.CREATE_TAIL))
    assert ok[:5] == [
        20,
        9,
        TerminalResult.OK,
        None,
        [2, CreateState.CREATED, "room-7", 701, "world", s.RID_B.value, b"welcome"],
    ]
    assert ok[5:] == [None]  # failure_message, after the spec's four fields
    failed = raw(TerminalReply.failed(9, ErrorKind.TYPE_MISMATCH, "other type"))
    assert failed == [
        20,
        9,
        TerminalResult.FAILED,
        int(ErrorKind.TYPE_MISMATCH),
        None,
        "other type",
    ]


def test_20_close_tail_is_a_single_bool() -> None:
    """S06-21: the close success tail is a single ``closed`` bool."""
    for closed in (True, False):
        tail = raw(TerminalReply.ok(5, s.TAILS[3 if closed else 4]))[4]
        assert tail == [3, closed]
        assert type(tail[1]) is bool


def test_20_existing_create_tail_has_no_reply() -> None:
    """S06-08: Existing carries no application reply."""
    with pytest.raises(ProtocolError, match="EXISTING carries no application reply"):
        attrs.evolve(s.CREATE_TAIL, state=CreateState.EXISTING)


def test_24_layout_with_bound_session_tail() -> None:
    """B02-07: 24 carries the binding generation and session sequence, no binding token."""
    assert raw(s.ACTOR_SEND) == [
        24,
        11,
        s.RID_A.value,
        12,
        s.RID_B.value,
        13,
        "player-42",
        14,
        15,
        16,
        1,
        "move",
        b"payload-24",
        17,
        s.OP_RAW,
        2,
        [s.RID_C.value, 601, s.SESSION_RID, 602, 603],
    ]
    names = {f.name for f in attrs.fields(type(s.ACTOR_SEND))}
    names |= {f.name for f in attrs.fields(type(s.SESSION_TAIL))}
    assert not any("token" in name for name in names)


def test_36_layout() -> None:
    """B02-07: 36 carries the four generations the session owner checks."""
    assert raw(s.BOUND_SESSION_SEND) == [
        36,
        "player-42",
        71,
        s.RID_B.value,
        72,
        73,
        s.RID_C.value,
        74,
        s.SESSION_RID,
        75,
        "push",
        b"payload-36",
    ]


def test_38_layout() -> None:
    assert raw(s.BOUND_SESSION_BIND) == [
        38,
        81,
        s.OP_RAW,
        s.RID_C.value,
        82,
        83,
        84,
        "player-42",
        85,
        s.RID_B.value,
        86,
        87,
        88,
        s.SESSION_RID,
        89,
        0,
        90,
        0,
        None,
        None,
    ]


def test_39_kind_1_ready_fence() -> None:
    """S06-14: route kind 1 uses the generation fence of a Ready authority. (The last
    field, ``follow_hops``, is ours, as on 24: the Message Follow hops of a Spot message,
    0 when its caller sent it.)"""
    body = raw(s.spot_direct_route(s.READY_FENCE))
    assert body == [
        39,
        21,
        s.OP_RAW,
        s.RID_A.value,
        22,
        "entry-src",
        [1, "room-7", 901, 902, s.RID_B.value, 903, 904, 905],
        1,
        "add-item",
        True,
        b"ZLIA-meta",
        b"payload-39",
        0,
    ]


def test_39_kind_2_cold_activation_carries_no_authority_generation() -> None:
    """S06-14: kind 2 carries only target mesh/RID/lifecycle, Spot id, stable type,
    descriptor version and deadline; the operation id is non-zero."""
    body = raw(s.spot_direct_route(s.COLD_ACTIVATION))
    assert body[6] == [2, "world", s.RID_B.value, 911, "room-7", "cart", 912, 913]
    assert int.from_bytes(body[2], "big") != 0
    fields = {f.name for f in attrs.fields(type(s.COLD_ACTIVATION))}
    assert not {"object_generation", "authority_owner_generation"} & fields


def test_39_metadata_flag_must_match_frame() -> None:
    """S06-14: the metadata flag agrees with whether the metadata frame is present."""
    record = s.spot_direct_route(s.READY_FENCE)
    with pytest.raises(ProtocolError, match="metadata_present"):
        attrs.evolve(record, metadata=None)
    with pytest.raises(ProtocolError, match="metadata_present"):
        attrs.evolve(record, metadata_present=False)
    assert raw(attrs.evolve(record, metadata_present=False, metadata=None))[9:11] == [False, None]


def test_42_layout() -> None:
    assert raw(s.SEAL) == [42, 31, s.RELOCATION_RAW, "player-42", 32, s.SESSION_RID, 33]


def test_43_holds_only_the_seal_result() -> None:
    """B02-26: 43 carries the seal-installation result and no sequence or high-water."""
    assert raw(s.SEALED) == [43, 31, s.RELOCATION_RAW, 0, None]
    names = [f.name for f in attrs.fields(SessionRelocationSealed)]
    assert names == ["correlation", "relocation_id", "result", "failure_code"]
    assert not any("sequence" in n or "high" in n or "water" in n for n in names)


def test_44_commit_and_abort() -> None:
    """B02-26: 44 is one-way; its abort carries only the matching seal identity."""
    commit = raw(SessionRelocationRoute(action=s.COMMIT))
    assert commit == [
        44,
        [
            1,
            s.RELOCATION_RAW,
            "player-42",
            32,
            "world",
            s.RID_B.value,
            41,
            42,
            43,
            s.RID_C.value,
            44,
            s.SESSION_RID,
            33,
        ],
    ]
    assert raw(SessionRelocationRoute(action=s.ABORT)) == [
        44,
        [2, s.RELOCATION_RAW, s.SESSION_RID, 33],
    ]
    names = [f.name for f in attrs.fields(SessionRelocationRoute)]
    assert "correlation" not in names  # nothing to correlate a reply with


def test_45_is_never_encodable_and_never_accepted() -> None:
    """B02-26: 45 is reserved: never sent, never accepted."""
    assert 45 not in {int(c) for c in Command}
    for body in ([45], [45, 1], [45, 31, s.RELOCATION_RAW]):
        with pytest.raises(ProtocolError, match="45 is reserved"):
            decode(cbor2.dumps(body))


def test_47_carries_no_request_bytes() -> None:
    """S06-08: 47 carries correlation, operation id, source, Spot id, type, the
    reservation fence and one deadline, and no creation request bytes."""
    assert raw(s.USER_SPOT_CREATE) == [
        47,
        51,
        s.OP_RAW,
        s.RID_A.value,
        52,
        "room-7",
        "room",
        s.RESERVATION_RAW,
        53,
    ]
    names = {f.name for f in attrs.fields(UserSpotCreate)}
    assert not any("request" in n or "payload" in n for n in names)


def test_48_layout() -> None:
    """S06-21: 48 fixes the SpotRef, owner generation, StoreVersion and target lifecycle."""
    assert raw(s.USER_SPOT_CLOSE) == [
        48,
        61,
        s.OP_RAW,
        s.RID_A.value,
        62,
        ["room-7", 63, "world", s.RID_B.value],
        s.RID_B.value,
        64,
        65,
        66,
        67,
    ]


def test_51_layout() -> None:
    """B02-11: 51 carries the Actor authority source fence and the old session owner's
    RID, lifecycle generation, owner id, owner lease generation, session RID and retired
    binding generation."""
    assert raw(s.BOUND_SESSION_REPLACED) == [
        51,
        ["player-42", 91, 92, s.RID_B.value, 93],
        [s.RID_C.value, 94, 95, 96, s.SESSION_RID, 97],
    ]


def _all_fields() -> list[tuple[str, str, FieldType]]:
    """(owner, field name, wire type) of every record and every nested part."""
    found: list[tuple[str, str, FieldType]] = []
    pending: list[Nested] = [Nested(cls) for cls in ALL_RECORDS]
    seen: set[type[Any]] = set()
    while pending:
        nested = pending.pop()
        if nested.cls in seen:
            continue
        seen.add(nested.cls)
        for name, ftype in zip(nested.names, nested.types, strict=True):
            found.append((nested.cls.__name__, name, ftype))
            inner = ftype.inner if isinstance(ftype, Nullable | ListOf) else ftype
            if isinstance(inner, Nested):
                pending.append(inner)
            elif isinstance(inner, TaggedUnion):
                pending += [Nested(cls) for cls in inner.variants]
    return found


def test_spot_ids_are_text8_and_only_node_rids_are_rid() -> None:
    """S06-01: on the service wire Spot ids are text8 / optional-text8; only Node RID
    fields use rid / optional-rid."""
    fields = _all_fields()
    for owner, name, ftype in fields:
        inner = ftype.inner if isinstance(ftype, Nullable | ListOf) else ftype
        if "spot_id" in name:
            assert isinstance(inner, Text8) and inner.cls is SpotId, (owner, name)
        if isinstance(inner, Rid):
            assert name.endswith("rid") and name != "session_rid", (owner, name)
        if name == "session_rid":
            assert not isinstance(inner, Rid), (owner, name)
    assert any(name == "source_spot_id" for _, name, _ in fields)
