"""Trusted construction on the decode path (docs/decisions.md, "Wire performance").

The generated decoders validate every field once, then build the instance without its
``__init__`` (ids via ``_trusted``, records and parts via their slot setters), running the
cross-field rules (``__attrs_post_init__``) and resetting attrs' hash cache as ``__init__``
would. These tests prove the result indistinguishable from a normally constructed
instance and the cross-field rules still enforced; ``tests/property/test_wire_fuzz.py``
does the same for generated records.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import cbor2
import pytest
import wire_samples as s
from hypothesis import given
from strategies import text8_strings

from zlink_trio.errors import ErrorKind, ProtocolError
from zlink_trio.ids import (
    U63_MAX,
    ActorId,
    AuthorityOwnerGeneration,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OperationId,
    OwnerLeaseGeneration,
    SpotId,
    SpotRef,
    StableType,
)
from zlink_trio.wire import (
    ALL_RECORDS,
    ActorSend,
    CreateState,
    CreateTail,
    MessageFollowRelay,
    MessageKind,
    RelayReadyResult,
    RelocationRelayReady,
    RelocationRestore,
    SealResult,
    TerminalReply,
    TerminalResult,
    WireRecord,
    codec,
    decode,
    encode,
    evolve,
)
from zlink_trio.wire.base import InvalidRecord
from zlink_trio.wire.fields import RID, U8, WireValueError, wire
from zlink_trio.wire.nested import ListOf, Nested, TaggedUnion, trusted_setters

MISSING = object()
HASH_SLOT = "_attrs_cached_hash"


def slot_names(cls: type[Any]) -> list[str]:
    return [
        name
        for c in cls.__mro__
        for name in c.__dict__.get("__slots__", ())
        if name != "__weakref__"
    ]


def assert_indistinguishable(built: Any, reference: Any) -> None:
    """``built`` (trusted path) cannot be told apart from ``reference`` (``__init__``):
    exact type, every slot set to an indistinguishable value (recursively), ==, hash,
    repr, ordering where defined, and frozen."""
    assert type(built) is type(reference)
    if isinstance(built, tuple):
        assert len(built) == len(reference)
        for a, b in zip(built, reference, strict=True):
            assert_indistinguishable(a, b)
        return
    if not attrs.has(type(built)):
        assert built == reference
        return
    for name in slot_names(type(built)):
        got = getattr(built, name, MISSING)
        assert got is not MISSING, f"{type(built).__name__}.{name} left unset"
        if name == HASH_SLOT:
            assert got is None or got == hash(built)
        else:
            assert_indistinguishable(got, getattr(reference, name))
    assert built == reference
    assert (built != reference) is False
    assert hash(built) == hash(reference)
    assert repr(built) == repr(reference)
    if hasattr(type(built), "__lt__") and type(built).__lt__ is not object.__lt__:
        assert not built < reference and built <= reference
    for f in attrs.fields(type(built)):
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(built, f.name, getattr(built, f.name))
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            delattr(built, f.name)


# --- ids.py: _trusted ----------------------------------------------------------------------

TEXT_IDS = (ActorId, SpotId, StableType, MeshName)
GENERATIONS = (ObjectGeneration, AuthorityOwnerGeneration, NodeGeneration, OwnerLeaseGeneration)


@pytest.mark.parametrize(
    ("cls", "value"),
    [
        *((cls, v) for cls in TEXT_IDS for v in ("a", "player-42", "é" * 127, "€" * 85)),
        *((cls, v) for cls in GENERATIONS for v in (1, 2**32, U63_MAX)),
        (NodeRid, bytes(range(16))),
        (OperationId, 1),
        (OperationId, (1 << 128) - 1),
    ],
)
def test_trusted_ids_are_indistinguishable(cls: Any, value: Any) -> None:
    built = cls._trusted(value)
    assert getattr(built, HASH_SLOT, None) is None  # like a fresh __init__
    assert_indistinguishable(built, cls(value))
    assert_indistinguishable(cls(value), built)  # hash cached on one side only


@given(text8_strings)
def test_trusted_text_ids_match_parse(value: str) -> None:
    for cls in TEXT_IDS:
        assert_indistinguishable(cls._trusted(value), cls.parse(value))


def test_trusted_skips_only_the_validator() -> None:
    """``_trusted`` is the decoder's tool: it does not validate (the decoder did); the
    public constructors still do."""
    with pytest.raises(ValueError):
        ActorId("")
    with pytest.raises(ValueError):
        NodeGeneration(0)
    assert ActorId._trusted("x").value == "x"


def test_interned_ids_come_from_the_trusted_path() -> None:
    record = decode(encode(s.ACTOR_SEND))
    assert isinstance(record, ActorSend)
    for value, reference in [
        (record.actor_id, s.ACTOR),
        (record.source_rid, s.RID_A),
        (record.source_generation, s.gen(12)),
        (record.operation_id, s.OP),
    ]:
        assert_indistinguishable(value, reference)


# --- records and parts: which classes take the trusted path --------------------------------


def all_nesteds() -> Iterator[Nested]:
    """Every Nested reachable from the codec registry (records, parts, union variants)."""
    seen: set[int] = set()
    todo: list[Any] = [entry.nested for entry in codec._BY_NUMBER.values()]
    while todo:
        ftype = todo.pop()
        if id(ftype) in seen:
            continue
        seen.add(id(ftype))
        if isinstance(ftype, Nested):
            yield ftype
            todo.extend(ftype.types)
        elif isinstance(ftype, TaggedUnion):
            todo.extend(ftype._by_tag.values())
        elif isinstance(ftype, ListOf) or hasattr(ftype, "inner"):  # lists, Nullable
            todo.append(ftype.inner)


def test_every_wire_class_is_built_by_the_trusted_path() -> None:
    classes = set()
    for nested in all_nesteds():
        assert trusted_setters(nested.cls) is not None, nested.cls
        assert "o = _new(_cls)" in nested.source
        assert "_cls(" not in nested.source
        assert nested._fast_evolve is not None
        has_rules = hasattr(nested.cls, "__attrs_post_init__")
        assert ("o.__attrs_post_init__()" in nested.source) is has_rules
        classes.add(nested.cls)
    assert set(ALL_RECORDS) <= classes
    assert {CreateTail, SpotRef} <= classes


@pytest.mark.parametrize("record", s.ALL_SAMPLES, ids=lambda r: type(r).__name__)
def test_decoded_samples_are_indistinguishable(record: WireRecord) -> None:
    assert_indistinguishable(decode(encode(record)), record)


@attrs.frozen(slots=True, kw_only=True, cache_hash=True)
class CachedHash:
    n: int = attrs.field(metadata=wire(U8))
    rid: NodeRid = attrs.field(metadata=wire(RID))

    def __attrs_post_init__(self) -> None:
        if self.n == 7:
            raise InvalidRecord("CachedHash: not 7", "not 7")


def test_a_cached_hash_class_gets_its_hash_slot_reset() -> None:
    nested = Nested(CachedHash)
    assert "_sh(o, None)" in nested.source
    built = nested.decode_fields([3, s.RID_A.value])
    assert getattr(built, HASH_SLOT) is None
    assert_indistinguishable(built, CachedHash(n=3, rid=s.RID_A))
    assert nested._fast_evolve is not None
    assert_indistinguishable(nested._fast_evolve(built, n=4), CachedHash(n=4, rid=s.RID_A))
    with pytest.raises(WireValueError, match="not 7"):
        nested.decode_fields([7, s.RID_A.value])


# --- classes that must not take it ---------------------------------------------------------


def _check_small(_inst: object, _attr: object, value: int) -> None:
    if value > 9:
        raise ValueError("too big")


@attrs.frozen(slots=True, kw_only=True)
class WithValidator:
    n: int = attrs.field(validator=_check_small, metadata=wire(U8))


@attrs.frozen(slots=True, kw_only=True)
class WithConverter:
    n: int = attrs.field(converter=int, metadata=wire(U8))


@attrs.frozen(slots=True, kw_only=True)
class WithPreInit:
    n: int = attrs.field(metadata=wire(U8))

    def __attrs_pre_init__(self) -> None:
        pass


@attrs.frozen(slots=False, kw_only=True)
class WithDict:
    n: int = attrs.field(metadata=wire(U8))


@attrs.frozen(slots=True, kw_only=True)
class WithOwnInit:
    n: int = attrs.field(metadata=wire(U8))

    def __init__(self, *, n: int) -> None:
        object.__setattr__(self, "n", n * 2)


class Plain:
    __slots__ = ("n",)


@pytest.mark.parametrize(
    "cls", [WithValidator, WithConverter, WithPreInit, WithDict, WithOwnInit, ActorId]
)
def test_classes_whose_init_does_more_are_called(cls: type[Any]) -> None:
    assert trusted_setters(cls) is None
    if cls is ActorId:
        return
    nested = Nested(cls)
    assert "_cls(n=v0)" in nested.source
    assert nested.decode_fields([3]) == cls(n=3)


def test_a_validator_still_runs_when_the_class_is_called() -> None:
    nested = Nested(WithValidator)
    with pytest.raises(WireValueError, match="too big"):
        nested.decode_fields([12])


def test_non_attrs_classes_are_refused() -> None:
    assert trusted_setters(Plain) is None


# --- cross-field rules on the fast path ----------------------------------------------------


def raw(record: WireRecord) -> list[Any]:
    value = cbor2.loads(encode(record))
    assert isinstance(value, list)
    return value


def _send_with_correlation() -> list[Any]:
    items = raw(s.ACTOR_SEND)
    items[10] = int(MessageKind.SEND)  # correlation stays 11
    return items


def _request_without_correlation() -> list[Any]:
    items = raw(s.ACTOR_SEND)
    items[1] = 0
    return items


def _route_metadata_flag() -> list[Any]:
    items = raw(s.spot_direct_route(s.READY_FENCE))
    items[9] = False  # metadata is present
    return items


def _ok_with_code() -> list[Any]:
    return [20, 1, int(TerminalResult.OK), int(ErrorKind.NOT_FOUND), None, None]


def _failed_without_code() -> list[Any]:
    return [20, 1, int(TerminalResult.FAILED), None, None, None]


def _failed_with_payload_tail() -> list[Any]:
    return [20, 1, int(TerminalResult.FAILED), int(ErrorKind.NOT_FOUND), [1, b"x"], None]


def _ok_with_failed_create_tail() -> list[Any]:
    items = raw(TerminalReply.ok(1, s.CREATE_TAIL))
    items[4][1] = int(CreateState.FAILED)
    items[4][6] = None
    return items


def _existing_create_with_reply() -> list[Any]:
    items = raw(TerminalReply.ok(1, s.CREATE_TAIL))
    items[4][1] = int(CreateState.EXISTING)  # reply b"welcome" stays
    return items


def _sealed_with_code() -> list[Any]:
    items = raw(s.SEALED)
    items[4] = int(ErrorKind.NOT_FOUND)
    return items


def _relay_rejected_without_code() -> list[Any]:
    record = RelocationRelayReady(
        correlation=1, relocation_id=s.RELOCATION, result=RelayReadyResult.ACCEPTED
    )
    items = raw(record)
    items[3] = int(RelayReadyResult.REJECTED)
    return items


def _restore_size_without_digest() -> list[Any]:
    record = RelocationRestore(
        correlation=1,
        relocation_id=s.RELOCATION,
        state_sha256=b"d" * 32,
        state_size=10,
        timeout_ms=5,
    )
    items = raw(record)
    items[3] = None
    return items


def _follow_zero_hops() -> list[Any]:
    sample = next(r for r in s.ALL_SAMPLES if isinstance(r, MessageFollowRelay))
    items = raw(sample)
    items[9] = 0
    return items


BROKEN_RULES = {
    "send with correlation": (_send_with_correlation, "a send has correlation 0"),
    "request without correlation": (_request_without_correlation, "non-zero correlation"),
    "39 metadata flag": (_route_metadata_flag, "metadata_present must match"),
    "20 OK with code": (_ok_with_code, "OK carries no failure code"),
    "20 FAILED without code": (_failed_without_code, "FAILED needs a failure code"),
    "20 FAILED with tail": (_failed_with_payload_tail, "FAILED carries no tail"),
    "20 OK with FAILED create": (_ok_with_failed_create_tail, "needs terminal result FAILED"),
    "create EXISTING with reply": (_existing_create_with_reply, "EXISTING carries no"),
    "43 SEALED with code": (_sealed_with_code, "exactly a REJECTED result"),
    "122 REJECTED without code": (_relay_rejected_without_code, "exactly a REJECTED result"),
    "121 size without digest": (_restore_size_without_digest, "needs a state digest"),
    "130 zero hops": (_follow_zero_hops, "hops starts at 1"),
}


@pytest.mark.parametrize("name", BROKEN_RULES)
def test_cross_field_rules_hold_on_the_fast_path(name: str) -> None:
    build, reason = BROKEN_RULES[name]
    items = build()
    entry = codec._BY_NUMBER[items[0]]
    with pytest.raises(InvalidRecord, match=reason):
        entry.fast_decode(items)  # the generated decoder itself refuses, never returns
    with pytest.raises(ProtocolError, match=reason):
        decode(cbor2.dumps(items))


def test_the_rule_shortcut_of_24_keeps_the_full_check() -> None:
    """ActorSend's rule accepts the two valid shapes first; every other shape still gets
    the full check (including a kind that is not a MessageKind, which it leaves alone)."""
    fields = attrs.asdict(s.ACTOR_SEND, recurse=False)
    for kind, correlation, ok in [
        (MessageKind.SEND, 0, True),
        (MessageKind.REQUEST, 7, True),
        (MessageKind.SEND, 7, False),
        (MessageKind.REQUEST, 0, False),
        (SealResult.SEALED, 0, True),
        (SealResult.SEALED, 7, True),
    ]:
        changes = {"message_kind": kind, "correlation": correlation}
        if ok:
            ActorSend(**{**fields, **changes})
        else:
            with pytest.raises(InvalidRecord):
                ActorSend(**{**fields, **changes})


# --- evolve ----------------------------------------------------------------------------------


@pytest.mark.parametrize("record", s.ALL_SAMPLES, ids=lambda r: type(r).__name__)
def test_evolve_is_attrs_evolve(record: WireRecord) -> None:
    first = attrs.fields(type(record))[0]
    changes = {first.alias: getattr(record, first.name)}
    if hasattr(record, "correlation") and record.correlation != 0:
        changes = {"correlation": 987_654}
    assert_indistinguishable(evolve(record, **changes), attrs.evolve(record, **changes))
    assert_indistinguishable(evolve(record), record)
    assert evolve(record, **changes) is not record


def test_evolve_runs_the_cross_field_rules() -> None:
    with pytest.raises(InvalidRecord, match="non-zero correlation"):
        evolve(s.ACTOR_SEND, correlation=0)
    with pytest.raises(InvalidRecord, match="metadata_present"):
        evolve(s.spot_direct_route(s.READY_FENCE), metadata=None)
    with pytest.raises(TypeError):
        evolve(s.ACTOR_SEND, no_such_field=1)


def test_evolve_does_not_check_values_encode_does() -> None:
    odd = evolve(s.ACTOR_SEND, follow_hops=1000)
    assert odd == attrs.evolve(s.ACTOR_SEND, follow_hops=1000)
    with pytest.raises(ProtocolError, match="follow_hops"):
        encode(odd)


def test_evolve_of_a_class_outside_the_registry_falls_back_to_attrs() -> None:
    @attrs.frozen(slots=True)
    class Other(WireRecord):
        n: int

    assert evolve(Other(1), n=2) == Other(2)
