"""Fuzzing the wire decoder: whatever the bytes, ``decode`` returns a valid record or
raises ProtocolError, and never anything else (DESIGN.md §9)."""

from __future__ import annotations

import io
from typing import Any

import attrs
import cbor2
import pytest
from hypothesis import assume, example, given, strategies as st
from strategies import cbor_values, records, wire_raw_values

from zlink_trio.errors import ProtocolError
from zlink_trio.wire import (
    RESERVED_COMMANDS,
    Command,
    WireRecord,
    codec as codec_module,
    decode,
    encode,
    evolve,
)
from zlink_trio.wire.codec import scan_structure
from zlink_trio.wire.nested import Nested

COMMAND_NUMBERS = sorted({int(c) for c in Command} | RESERVED_COMMANDS)


def decode_or_error(body: bytes) -> WireRecord | ProtocolError:
    """``decode``'s outcome; anything but a record or ProtocolError fails the test."""
    try:
        record = decode(body)
    except ProtocolError as exc:
        return exc
    assert decode(encode(record)) == record  # whatever is accepted is a valid record
    return record


@given(st.binary(max_size=300))
@example(b"")
@example(b"\x82\x18\x18")
@example(b"\x9b\xff\xff\xff\xff\xff\xff\xff\xff")
@example(b"\xd9\xd9\xf7\x81\x18\x14")
def test_arbitrary_bytes(body: bytes) -> None:
    decode_or_error(body)


@given(st.sampled_from(COMMAND_NUMBERS), st.lists(cbor_values, max_size=20))
def test_arbitrary_arrays_with_a_command_number(command: int, rest: list[Any]) -> None:
    decode_or_error(cbor2.dumps([command, *rest]))


def _raw(record: WireRecord) -> list[Any]:
    value = cbor2.loads(encode(record))
    assert isinstance(value, list)
    return value


@st.composite
def mutated_bodies(draw: st.DrawFn) -> bytes:
    """A valid record's array with one element (top level or nested) replaced, dropped
    or duplicated, or its bytes flipped, cut or extended."""
    record = draw(records)
    items = _raw(record)
    target = items
    nested = [i for i, v in enumerate(items) if isinstance(v, list) and v]
    if nested and draw(st.booleans()):
        target = items[draw(st.sampled_from(nested))]
    how = draw(st.sampled_from(["replace", "drop", "duplicate", "bytes"]))
    index = draw(st.integers(0, len(target) - 1))
    if how == "replace":
        target[index] = draw(cbor_values)
    elif how == "drop":
        del target[index]
    elif how == "duplicate":
        target.insert(index, target[index])
    body = bytearray(cbor2.dumps(items))
    if how == "bytes":
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, len(body) - 1))
            body[at] = draw(st.integers(0, 255))
        body += draw(st.binary(max_size=3))
        body = body[: draw(st.integers(1, len(body)))]
    return bytes(body)


@given(mutated_bodies())
def test_mutated_records(body: bytes) -> None:
    decode_or_error(body)


@given(records)
def test_records_round_trip_exactly(record: WireRecord) -> None:
    body = encode(record)
    assert decode(body) == record
    assert encode(decode(body)) == body


_MISSING = object()


def assert_indistinguishable(built: Any, reference: Any) -> None:
    """``built`` (the decoder's trusted construction: no ``__init__``) cannot be told apart
    from ``reference`` (built by ``__init__``): exact type, every slot set to an
    indistinguishable value (recursively: parts, ids, tuples), ==, hash, repr, frozen."""
    assert type(built) is type(reference)
    if isinstance(built, tuple):
        for a, b in zip(built, reference, strict=True):
            assert_indistinguishable(a, b)
        return
    if not attrs.has(type(built)):
        assert built == reference
        return
    for cls in type(built).__mro__:
        for name in cls.__dict__.get("__slots__", ()):
            if name == "__weakref__":
                continue
            got = getattr(built, name, _MISSING)
            assert got is not _MISSING, f"{type(built).__name__}.{name} left unset"
            if name == "_attrs_cached_hash":
                assert got is None or got == hash(built)
            else:
                assert_indistinguishable(got, getattr(reference, name))
    assert built == reference
    assert (built != reference) is False
    assert hash(built) == hash(reference)
    assert repr(built) == repr(reference)
    for f in attrs.fields(type(built)):
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(built, f.name, getattr(built, f.name))


@given(records)
def test_decoded_records_are_indistinguishable_from_constructed_ones(record: WireRecord) -> None:
    """decode(encode(r)) == r, and the trusted fast construction leaves nothing that tells
    it from ``r`` (built by the classes' ``__init__``): same hash, frozen, every slot."""
    decoded = decode(encode(record))
    assert decoded == record
    assert_indistinguishable(decoded, record)


@given(records, st.integers(1, (1 << 64) - 1))
def test_evolve_matches_attrs_evolve(record: WireRecord, correlation: int) -> None:
    changes: dict[str, Any] = {}
    if getattr(record, "correlation", 0) != 0:
        changes["correlation"] = correlation
    assert_indistinguishable(evolve(record, **changes), attrs.evolve(record, **changes))


@given(mutated_bodies())
def test_fast_path_never_accepts_what_the_checked_path_rejects(body: bytes) -> None:
    """The generated decoder is an optimisation: whenever it accepts a body, the generic
    per-field decoder (which builds with the classes' ``__init__``) accepts it too and
    builds an indistinguishable record."""
    try:
        items = cbor2.loads(body)
    except Exception:
        assume(False)
    assume(isinstance(items, list) and items and type(items[0]) is int)
    entry = codec_module._BY_NUMBER.get(items[0])
    assume(entry is not None)
    assert entry is not None
    nested: Nested = entry.nested
    try:
        fast = nested._fast_decode(items)
    except Exception:
        return
    assert_indistinguishable(fast, nested.decode_checked(items))


@given(st.one_of(mutated_bodies(), st.binary(max_size=200)), st.binary(max_size=3))
def test_small_and_large_body_paths_agree(body: bytes, trailing: bytes) -> None:
    """Bodies above SCAN_THRESHOLD take the structure walk; forcing every body down that
    path must not change any outcome."""
    body += trailing
    small = decode_or_error(body)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(codec_module, "SCAN_THRESHOLD", -1)
        large = decode_or_error(body)
    if isinstance(small, ProtocolError):
        assert isinstance(large, ProtocolError)
    else:
        assert large == small


@given(wire_raw_values)
def test_scan_accepts_every_wire_value(value: Any) -> None:
    scan_structure(cbor2.dumps(value))


@given(st.one_of(st.binary(max_size=60), wire_raw_values.map(cbor2.dumps)), st.binary(max_size=2))
def test_scan_accepts_exactly_one_item(body: bytes, trailing: bytes) -> None:
    """What the walk accepts, cbor2 decodes as one item ending at the last byte (or
    rejects for content the walk does not look at: invalid UTF-8 in a text string)."""
    body += trailing
    try:
        scan_structure(body)
    except ProtocolError:
        return
    decoder = cbor2.CBORDecoder(io.BytesIO(body))
    try:
        decoder.decode()
    except cbor2.CBORDecodeError as exc:
        assert "text string" in str(exc)
        return
    with pytest.raises(cbor2.CBORDecodeEOF):
        decoder.read(1)
