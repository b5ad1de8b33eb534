"""Every record and every union variant survives encode → decode unchanged."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import wire_samples as s
from hypothesis import given, strategies as st
from strategies import for_class

from zlink_trio.errors import ErrorKind, ProtocolError
from zlink_trio.ids import ActorId, ActorRef, ObjectGeneration, SpotId, SpotRef
from zlink_trio.mesh.frames import SequencedDecoder, pack_frame
from zlink_trio.wire import (
    ALL_RECORDS,
    ColdActivation,
    ReadyFence,
    SessionRelocationRoute,
    SpotDirectRoute,
    TerminalReply,
    WireRecord,
    decode,
    encode,
)
from zlink_trio.wire.fields import INTERN_MAX, RID, _Interner
from zlink_trio.wire.nested import Nested, TaggedUnion
from zlink_trio.wire.tails import COMMAND_20_TAIL, COMMAND_39_ROUTE, COMMAND_44_ACTION


@pytest.mark.parametrize("record", s.ALL_SAMPLES, ids=lambda r: type(r).__name__)
def test_sample_round_trips(record: WireRecord) -> None:
    body = encode(record)
    back = decode(body)
    assert back == record
    assert type(back) is type(record)
    assert encode(back) == body
    assert SequencedDecoder(1 << 20).feed(pack_frame(1, body)) == [body]


def _variants(union: TaggedUnion) -> set[type[Any]]:
    return set(union.variants)


def test_samples_cover_every_class_and_variant() -> None:
    assert {type(r) for r in s.ALL_SAMPLES} == set(ALL_RECORDS)
    tails = {type(r.tail) for r in s.ALL_SAMPLES if isinstance(r, TerminalReply) and r.tail}
    assert tails == _variants(COMMAND_20_TAIL)
    routes = {type(r.route) for r in s.ALL_SAMPLES if isinstance(r, SpotDirectRoute)}
    assert routes == _variants(COMMAND_39_ROUTE) == {ReadyFence, ColdActivation}
    actions = {type(r.action) for r in s.ALL_SAMPLES if isinstance(r, SessionRelocationRoute)}
    assert actions == _variants(COMMAND_44_ACTION)


@pytest.mark.parametrize("cls", ALL_RECORDS, ids=lambda c: c.__name__)
@given(data=st.data())
def test_generated_records_round_trip(cls: type[WireRecord], data: st.DataObject) -> None:
    record = data.draw(for_class(cls))
    assert decode(encode(record)) == record


@pytest.fixture
def no_slow_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: Nested, value: object) -> None:
        raise AssertionError(f"slow path taken for valid {self.cls.__name__}")

    monkeypatch.setattr(Nested, "encode_checked", refuse)
    monkeypatch.setattr(Nested, "decode_checked", refuse)


@pytest.mark.usefixtures("no_slow_path")
@pytest.mark.parametrize("record", s.ALL_SAMPLES, ids=lambda r: type(r).__name__)
def test_valid_records_take_the_generated_fast_path(record: WireRecord) -> None:
    assert decode(encode(record)) == record


@pytest.mark.usefixtures("no_slow_path")
@given(data=st.data())
def test_generated_records_take_the_fast_path(data: st.DataObject) -> None:
    for cls in ALL_RECORDS:
        record = data.draw(for_class(cls))
        assert decode(encode(record)) == record


def test_failure_message_is_cut_at_a_utf8_boundary() -> None:
    reply = TerminalReply.failed(1, ErrorKind.APPLICATION, "€" * 400)
    assert reply.failure_message is not None
    assert len(reply.failure_message.encode()) == 1023  # 341 whole euro signs
    assert decode(encode(reply)) == reply
    assert TerminalReply.failed(1, ErrorKind.APPLICATION).failure_message is None


_ANY_CHAR = st.one_of(st.characters(), st.integers(0xD800, 0xDFFF).map(chr))  # surrogates too


@given(st.lists(_ANY_CHAR, max_size=1100).map("".join))
def test_failure_message_of_any_text_is_encodable(message: str) -> None:
    # Exception text may hold lone surrogates (e.g. an OSError on a surrogateescape
    # file name): the one terminal reply of a request must still encode, short or long.
    reply = TerminalReply.failed(1, ErrorKind.APPLICATION, f"OSError: {message}")
    assert decode(encode(reply)) == reply


def test_failure_message_with_a_lone_surrogate_is_encodable() -> None:
    reply = TerminalReply.failed(1, ErrorKind.APPLICATION, "No such file: '\udcff.txt'")
    assert decode(encode(reply)) == reply


def test_terminal_rules() -> None:
    with pytest.raises(ProtocolError, match="FAILED needs a failure code"):
        TerminalReply(correlation=1, terminal_result=TerminalReply.ok(1).terminal_result.FAILED)
    with pytest.raises(ProtocolError, match="OK carries no failure"):
        attrs.evolve(TerminalReply.ok(1), failure_code=ErrorKind.NOT_FOUND)
    with pytest.raises(ProtocolError, match="FAILED carries no tail"):
        TerminalReply.failed(1, ErrorKind.NOT_FOUND, tail=s.CREATE_TAIL)


def test_create_tail_refs() -> None:
    tail = s.CREATE_TAIL
    assert tail.spot_ref() == SpotRef(SpotId("room-7"), ObjectGeneration(701), s.MESH, s.RID_B)
    assert tail.actor_ref() == ActorRef(ActorId("room-7"), ObjectGeneration(701), s.MESH, s.RID_B)


def test_decoded_ids_are_interned_and_the_cache_is_bounded() -> None:
    first = decode(encode(s.ACTOR_SEND))
    second = decode(encode(s.ACTOR_SEND))
    assert isinstance(first, type(s.ACTOR_SEND)) and isinstance(second, type(s.ACTOR_SEND))
    assert first.source_rid is second.source_rid
    cache: _Interner[int, int] = _Interner(lambda raw: raw)
    for i in range(3 * INTERN_MAX):
        assert cache.get(i) == i
        assert len(cache.cache) <= INTERN_MAX
    assert RID.decode(s.RID_A.value) == s.RID_A
