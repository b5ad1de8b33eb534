"""Shared hypothesis strategies (import as ``from strategies import ...``; tests/ is on
sys.path through tests/conftest.py).

Ids and generations first; then the wire: a strategy for every record class, derived from
the records' own wire metadata (so a new field is generated without touching this file),
with small fix-ups for the cross-field rules records enforce at construction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from zlink_trio.errors import ErrorKind
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
    StableType,
)
from zlink_trio.wire import (
    ALL_RECORDS,
    ActorJournal,
    ActorSend,
    BindTail,
    BoundSessionBind,
    CreateState,
    CreateTail,
    MessageFollowRelay,
    MessageKind,
    RelayReadyResult,
    RelocationRelayReady,
    RelocationRestore,
    SealResult,
    SessionRelocationSealed,
    SpotDirectRoute,
    TerminalReply,
    TerminalResult,
    WireRecord,
)
from zlink_trio.wire.fields import (
    Bool,
    Bytes,
    FieldType,
    FixedBytes,
    Generation,
    IntEnumField,
    Nullable,
    OpId,
    Rid,
    ShortText,
    Text8,
    UInt,
)
from zlink_trio.wire.nested import ListOf, Nested, TaggedUnion

# --- ids -------------------------------------------------------------------------------------


def _fits(limit: int) -> Callable[[str], bool]:
    return lambda text: len(text.encode("utf-8")) <= limit


text8_strings = st.one_of(
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=24),
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=90).filter(_fits(255)),
    st.text("é", min_size=120, max_size=127),  # 240..254 bytes
    st.just("a" * 255),
    st.just("é" * 127 + "a"),  # exactly 255 bytes
)
"""Valid UTF-8 text ids of 1..255 bytes (including both boundaries' neighbourhood)."""

actor_ids = text8_strings.map(ActorId)
spot_ids = text8_strings.map(SpotId)
stable_types = text8_strings.map(StableType)
mesh_names = text8_strings.map(MeshName)
node_rids = st.binary(min_size=16, max_size=16).map(NodeRid)
u63 = st.one_of(st.integers(1, U63_MAX), st.sampled_from([1, 2, U63_MAX]))
object_generations = u63.map(ObjectGeneration)
authority_owner_generations = u63.map(AuthorityOwnerGeneration)
node_generations = u63.map(NodeGeneration)
owner_lease_generations = u63.map(OwnerLeaseGeneration)
operation_ids = st.one_of(st.integers(1, (1 << 128) - 1), st.sampled_from([1, (1 << 128) - 1])).map(
    OperationId
)

# --- wire field types ------------------------------------------------------------------------


def _uint(ftype: UInt) -> st.SearchStrategy[int]:
    edges = st.sampled_from([ftype.minimum, ftype.minimum + 1, ftype.maximum])
    return st.one_of(st.integers(ftype.minimum, ftype.maximum), edges)


def _bytes_up_to(limit: int) -> st.SearchStrategy[bytes]:
    # Small values mostly, and the exact limit (building 1 MiB randomly is pointless).
    return st.one_of(st.binary(max_size=min(limit, 48)), st.just(b"\x5a" * limit))


def _short_text(limit: int) -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(st.characters(codec="utf-8"), max_size=40),
        st.just("€" * (limit // 3) + "a" * (limit % 3)),
    )


_GENERATED: dict[int, st.SearchStrategy[Any]] = {}


def for_field_type(ftype: FieldType) -> st.SearchStrategy[Any]:
    """Values that ``ftype`` accepts (the Python side)."""
    found = _GENERATED.get(id(ftype))
    if found is None:
        found = _for_field_type(ftype)
        _GENERATED[id(ftype)] = found
    return found


def _for_field_type(ftype: FieldType) -> st.SearchStrategy[Any]:
    if isinstance(ftype, UInt):
        return _uint(ftype)
    if isinstance(ftype, Generation):
        return u63.map(ftype.cls)
    if isinstance(ftype, Text8):
        return text8_strings if ftype.cls is None else text8_strings.map(ftype.cls)
    if isinstance(ftype, Rid):
        return node_rids
    if isinstance(ftype, OpId):
        return operation_ids
    if isinstance(ftype, FixedBytes):
        return st.binary(min_size=ftype.size, max_size=ftype.size)
    if isinstance(ftype, Bytes):
        return _bytes_up_to(ftype.max_len)
    if isinstance(ftype, Bool):
        return st.booleans()
    if isinstance(ftype, IntEnumField):
        return st.sampled_from(list(ftype.cls))
    if isinstance(ftype, ShortText):
        return _short_text(ftype.max_bytes)
    if isinstance(ftype, Nullable):
        return st.none() | for_field_type(ftype.inner)
    if isinstance(ftype, Nested):
        return for_nested(ftype)
    if isinstance(ftype, TaggedUnion):
        return st.one_of([for_class(cls) for cls in ftype.variants])
    if isinstance(ftype, ListOf):
        inner = for_field_type(ftype.inner)
        return st.lists(inner, max_size=min(ftype.max_items, 4)).map(tuple)
    raise TypeError(f"no strategy for wire type {ftype!r}")


# --- cross-field fix-ups ----------------------------------------------------------------------

Fields = dict[str, Any]


def _fix_send(d: Fields) -> Fields:
    if d["message_kind"] is MessageKind.SEND:
        d["correlation"] = 0
    elif d["correlation"] == 0:
        d["correlation"] = 1
    return d


def _fix_spot_route(d: Fields) -> Fields:
    d["metadata_present"] = d["metadata"] is not None
    return _fix_send(d)


def _is_failed_create(tail: object) -> bool:
    return isinstance(tail, CreateTail) and tail.state is CreateState.FAILED


def _fix_terminal(d: Fields) -> Fields:
    if d["terminal_result"] is TerminalResult.OK:
        d["failure_code"] = d["failure_message"] = None
        if _is_failed_create(d["tail"]):
            d["tail"] = None
    else:
        d["failure_code"] = d["failure_code"] or ErrorKind.UNAVAILABLE
        if d["tail"] is not None and not _is_failed_create(d["tail"]):
            d["tail"] = None
    return d


def _fix_result_code(rejected: object) -> Callable[[Fields], Fields]:
    def fix(d: Fields) -> Fields:
        if d["result"] is rejected:
            d["failure_code"] = d["failure_code"] or ErrorKind.UNAVAILABLE
        else:
            d["failure_code"] = None
        return d

    return fix


def _fix_create_tail(d: Fields) -> Fields:
    if d["state"] in (CreateState.EXISTING, CreateState.FAILED):
        d["reply"] = None
    return d


def _fix_restore(d: Fields) -> Fields:
    if d["state_sha256"] is None:
        d["state_size"] = 0
    return d


def _fix_follow(d: Fields) -> Fields:
    d["hops"] = d["hops"] or 1
    return d


def _fix_followed_bind(d: Fields) -> Fields:
    if d["follow_hops"] == 0 or d["session_owner_rid"] is None:
        d["follow_hops"] = 0
        d["session_owner_rid"] = d["session_owner_generation"] = None
    elif d["session_owner_generation"] is None:
        d["session_owner_generation"] = d["source_generation"]
    return d


def _fix_bind_tail(d: Fields) -> Fields:
    if d["node_rid"] is None:
        d["node_generation"] = None
    elif d["node_generation"] is None:
        d["node_rid"] = None
    return d


FIXUPS: dict[type[Any], Callable[[Fields], Fields]] = {
    BoundSessionBind: _fix_followed_bind,
    BindTail: _fix_bind_tail,
    TerminalReply: _fix_terminal,
    ActorSend: _fix_send,
    ActorJournal: _fix_send,
    SpotDirectRoute: _fix_spot_route,
    SessionRelocationSealed: _fix_result_code(SealResult.REJECTED),
    RelocationRelayReady: _fix_result_code(RelayReadyResult.REJECTED),
    CreateTail: _fix_create_tail,
    RelocationRestore: _fix_restore,
    MessageFollowRelay: _fix_follow,
}
"""Per class: make a generated field dict obey the class's cross-field rules."""


# --- records ------------------------------------------------------------------------------


def for_nested(nested: Nested) -> st.SearchStrategy[Any]:
    fields = {
        alias: for_field_type(ftype)
        for alias, ftype in zip(nested.aliases, nested.types, strict=True)
    }
    fix = FIXUPS.get(nested.cls, lambda d: d)
    return st.fixed_dictionaries(fields).map(lambda d: nested.cls(**fix(dict(d))))


_BY_CLASS: dict[type[Any], st.SearchStrategy[Any]] = {}


def for_class(cls: type[Any]) -> st.SearchStrategy[Any]:
    """Valid instances of a record class or of a nested wire class."""
    found = _BY_CLASS.get(cls)
    if found is None:
        found = for_nested(Nested(cls))
        _BY_CLASS[cls] = found
    return found


records: st.SearchStrategy[WireRecord] = st.one_of([for_class(cls) for cls in ALL_RECORDS])
"""Any valid wire record."""

# --- raw CBOR values ----------------------------------------------------------------------

cbor_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 64), (1 << 64) - 1),
    st.sampled_from([0, 1, 23, 24, 255, 256, 65535, 65536, (1 << 63) - 1, 1 << 63]),
    st.floats(allow_nan=False),
    st.binary(max_size=40),
    st.sampled_from([b"\x00" * 16, b"\x01" * 32]),
    st.text(max_size=40),
)
cbor_values = st.recursive(
    cbor_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.dictionaries(st.integers(0, 9) | st.text(max_size=4), inner, max_size=3),
    ),
    max_leaves=24,
)
"""Arbitrary values cbor2 can encode (no tags)."""

wire_raw_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(1 << 64), (1 << 64) - 1),
        st.binary(max_size=40),
        st.text(max_size=40),
    ),
    lambda inner: st.lists(inner, max_size=6),
    max_leaves=24,
)
"""Values made only of what the wire uses: null, bools, ints, byte/text strings, arrays."""
