"""The wire field-type vocabulary: scalar types, ``Nullable`` and the size limits.

Every record field names its wire type in attrs metadata::

    correlation: int = attrs.field(metadata=wire(U64))

The codec reads those types once per class (``nested.Nested``) and calls their ``encode``
and ``decode`` methods, which check the value strictly and raise :class:`WireValueError`
(the codec turns it into a :class:`~zlink_trio.errors.ProtocolError` naming the command and
the field). ``encode`` takes the Python value and returns the CBOR-ready value; ``decode``
takes what cbor2 produced and returns the Python value. Neither ever accepts ``bool`` where
an int is meant, nor ``bytearray``/``memoryview`` where ``bytes`` is meant.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from types import MemberDescriptorType
from typing import Any, Final, Generic, TypeVar

from ..config import MAX_PAYLOAD_BYTES as _PAYLOAD_LIMIT, MIB
from ..ids import (
    MAX_ID_BYTES,
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
    check_text_id,
)

__all__ = [
    "ACTOR_ID",
    "AUTHORITY_OWNER_GENERATION",
    "BOOL",
    "CORRELATION",
    "MAX_FOLLOW_INNER_BYTES",
    "MAX_METADATA_BYTES",
    "MAX_PAYLOAD_BYTES",
    "MAX_SHORT_TEXT_BYTES",
    "MESH_NAME",
    "NODE_GENERATION",
    "OBJECT_GENERATION",
    "OPERATION_ID",
    "OWNER_LEASE_GENERATION",
    "RID",
    "SESSION_RID",
    "SHORT_TEXT",
    "SPOT_ID",
    "STABLE_TYPE",
    "TEXT8",
    "U8",
    "U16",
    "U32",
    "U64",
    "WIRE_KEY",
    "Bool",
    "Bytes",
    "FieldType",
    "FixedBytes",
    "Generation",
    "IntEnumField",
    "Nullable",
    "OpId",
    "Rid",
    "ShortText",
    "Text8",
    "UInt",
    "WireValueError",
    "nullable",
    "wire",
]

WIRE_KEY: Final = "zlink_trio.wire"
"""attrs metadata key holding a field's :class:`FieldType`."""

MAX_PAYLOAD_BYTES: Final = _PAYLOAD_LIMIT
"""Application payloads (request, reply, push, creation reply): 1 MiB (spec 04 §6.4, 06 §3.1),
``config.MAX_PAYLOAD_BYTES``, which also caps ``max_request_bytes``/``max_reply_bytes``."""
MAX_METADATA_BYTES: Final = 64 * 1024
"""Command 39's optional metadata frame."""
MAX_SHORT_TEXT_BYTES: Final = 1024
"""Failure messages (UTF-8 bytes)."""
MAX_FOLLOW_INNER_BYTES: Final = 2 * MIB
"""Encoded inner record carried by a Message Follow relay (payload + metadata + envelope)."""
INTERN_MAX: Final = 4096
"""Entries per intern cache before it is cleared (bounded memory, see ``_Interner``)."""


class WireValueError(Exception):
    """A value does not fit its wire type. Internal to the wire package: ``encode`` and
    ``decode`` re-raise it as ProtocolError with the command number and ``path``."""

    def __init__(self, message: str, path: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.path = path

    def under(self, name: str) -> WireValueError:
        """The same error one level further out (``name`` prefixed to the path)."""
        return WireValueError(self.message, (name, *self.path))


def describe(value: object) -> str:
    """Short, bounded description of an offending value for error messages."""
    if isinstance(value, bytes | bytearray | memoryview):
        return f"{type(value).__name__} of {len(value)} bytes"
    if isinstance(value, list | tuple | dict):
        return f"{type(value).__name__} of {len(value)} items"
    if isinstance(value, str):
        value = value[:61]
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


Source = list[str]
"""Lines of generated Python (see ``FieldType.decode_source``)."""


class FieldType:
    """One wire type: ``encode`` (Python value → CBOR value) and ``decode`` (CBOR value →
    Python value), both raising :class:`WireValueError`. Instances are immutable.

    ``encode_source``/``decode_source`` return the same check as inline Python lines for
    the generated fast path of ``nested.Nested``; the lines may raise any exception on a
    bad value (the caller then re-runs the methods above for the precise error). The
    default lines just call the method.
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def encode(self, value: Any, /) -> Any:
        raise NotImplementedError

    def decode(self, raw: Any, /) -> Any:
        raise NotImplementedError

    def encode_source(self, value: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        """Lines that set ``out`` to the encoding of the variable ``value``."""
        ns[key] = self.encode
        return [f"{out} = {key}({value})"]

    def decode_source(self, raw: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        """Lines that set ``out`` to the decoding of the variable ``raw``."""
        ns[key] = self.decode
        return [f"{out} = {key}({raw})"]

    def fail(self, value: object) -> WireValueError:
        return WireValueError(f"expected {self.name}, got {describe(value)}")

    def __repr__(self) -> str:
        return f"<wire {self.name}>"


def wire(ftype: FieldType) -> dict[str, FieldType]:
    """attrs metadata for a field of wire type ``ftype``."""
    return {WIRE_KEY: ftype}


_K = TypeVar("_K")
_V = TypeVar("_V")


class _Interner(Generic[_K, _V]):
    """Bounded cache of immutable values built from raw wire values. Peers, meshes, types
    and hot ids repeat on every frame; a dict hit is much cheaper than an attrs
    ``__init__`` with its validator. Cleared when full, so memory stays bounded.

    ``factory`` is called only with raw values the caller has validated, so it is the id
    class's trusted constructor (``_trusted``: no second validation)."""

    __slots__ = ("_factory", "cache")

    def __init__(self, factory: Callable[[_K], _V]) -> None:
        self.cache: Final[dict[_K, _V]] = {}  # never rebound: generated code holds it
        self._factory = factory

    def get(self, raw: _K) -> _V:
        value = self.cache.get(raw)
        if value is None:
            value = self._factory(raw)
            if len(self.cache) >= INTERN_MAX:
                self.cache.clear()
            self.cache[raw] = value
        return value


def _value_of_class(cls: type[Any], value: str, out: str, key: str, ns: dict[str, Any]) -> Source:
    """Encode source for a value class with a validated ``.value`` (ids, generations)."""
    ns[key] = cls
    return [f"if type({value}) is not {key}: raise _Bad", f"{out} = {value}.value"]


def _interned(
    intern: _Interner[Any, Any],
    decode: Callable[[Any], Any],
    raw_type: str,
    raw: str,
    out: str,
    key: str,
    ns: dict[str, Any],
) -> Source:
    """Decode source: an intern-cache hit (only validated raw values are ever cached;
    the exact-type test keeps True/1.0 from matching 1), else the checking ``decode``."""
    ns[key] = intern.cache
    ns[key + "_d"] = decode
    return [
        f"{out} = {key}.get({raw}) if type({raw}) is {raw_type} else None",
        f"if {out} is None: {out} = {key}_d({raw})",
    ]


class UInt(FieldType):
    """Unsigned integer of ``bits`` bits (``int`` only, never ``bool``)."""

    __slots__ = ("maximum", "minimum")

    def __init__(self, bits: int, *, nonzero: bool = False) -> None:
        super().__init__(f"u{bits}{' nonzero' if nonzero else ''}")
        self.minimum = 1 if nonzero else 0
        self.maximum = (1 << bits) - 1

    def encode(self, value: Any) -> Any:
        if type(value) is int and self.minimum <= value <= self.maximum:
            return value
        raise self.fail(value)

    decode = encode

    def encode_source(self, value: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        check = f"type({value}) is not int or not {self.minimum} <= {value} <= {self.maximum}"
        return [f"if {check}: raise _Bad", f"{out} = {value}"]

    def decode_source(self, raw: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        return self.encode_source(raw, out, key, ns)


class Generation(FieldType):
    """Non-zero u63 mapped to an ids.py generation class."""

    __slots__ = ("_intern", "cls")

    def __init__(
        self,
        cls: type[ObjectGeneration]
        | type[AuthorityOwnerGeneration]
        | type[NodeGeneration]
        | type[OwnerLeaseGeneration],
    ) -> None:
        super().__init__(f"u63 nonzero ({cls.__name__})")
        self.cls: type[Any] = cls
        self._intern: _Interner[int, Any] = _Interner(cls._trusted)

    def encode(self, value: Any) -> Any:
        if type(value) is self.cls:
            return value.value
        raise self.fail(value)

    def decode(self, raw: Any) -> Any:
        if type(raw) is int and 1 <= raw <= U63_MAX:
            return self._intern.get(raw)
        raise self.fail(raw)

    def encode_source(self, value: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        return _value_of_class(self.cls, value, out, key, ns)

    def decode_source(self, raw: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        return _interned(self._intern, self.decode, "int", raw, out, key, ns)


class Text8(FieldType):
    """UTF-8 text of 1..255 bytes; mapped to an ids.py text-id class, or a plain ``str``
    when ``cls`` is None (packet names, object ids of either kind)."""

    __slots__ = ("_intern", "cls")

    def __init__(
        self,
        cls: type[ActorId] | type[SpotId] | type[StableType] | type[MeshName] | None = None,
    ) -> None:
        super().__init__(f"text8 ({cls.__name__})" if cls is not None else "text8")
        self.cls: type[Any] | None = cls
        self._intern: _Interner[str, Any] | None = (
            _Interner(cls._trusted) if cls is not None else None
        )

    def encode(self, value: Any) -> Any:
        cls = self.cls
        if cls is None:
            if type(value) is str:
                try:
                    return check_text_id(value, "text8")
                except ValueError as exc:
                    raise WireValueError(str(exc)) from None
        elif type(value) is cls:
            return value.value
        raise self.fail(value)

    def decode(self, raw: Any) -> Any:
        # cbor2 decodes text strictly (invalid UTF-8 and surrogates never reach here), so
        # only the byte length is left; <= 63 code points can never exceed 255 bytes.
        if type(raw) is not str:
            raise self.fail(raw)
        n = len(raw)
        if n == 0 or n > MAX_ID_BYTES or (n > 63 and len(raw.encode("utf-8")) > MAX_ID_BYTES):
            raise WireValueError(f"expected {self.name} of 1..255 UTF-8 bytes, got {n} chars")
        intern = self._intern
        return raw if intern is None else intern.get(raw)

    def encode_source(self, value: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        if self.cls is not None:
            return _value_of_class(self.cls, value, out, key, ns)
        # ASCII (so no surrogate) and at most 255 chars: valid; anything else is checked.
        ns[key] = self.encode
        quick = f"type({value}) is str and 0 < len({value}) <= 255 and {value}.isascii()"
        return [f"{out} = {value} if {quick} else {key}({value})"]

    def decode_source(self, raw: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        if self._intern is not None:
            return _interned(self._intern, self.decode, "str", raw, out, key, ns)
        ns[key] = self.decode
        quick = f"type({raw}) is str and 0 < len({raw}) <= 63"
        return [f"{out} = {raw} if {quick} else {key}({raw})"]


class Rid(FieldType):
    """16-byte node routing id mapped to :class:`~zlink_trio.ids.NodeRid`."""

    __slots__ = ("_intern",)

    def __init__(self) -> None:
        super().__init__("rid")
        self._intern: _Interner[bytes, NodeRid] = _Interner(NodeRid._trusted)

    def encode(self, value: Any) -> Any:
        if type(value) is NodeRid:
            return value.value
        raise self.fail(value)

    def decode(self, raw: Any) -> Any:
        if type(raw) is bytes and len(raw) == 16:
            return self._intern.get(raw)
        raise self.fail(raw)

    def encode_source(self, value: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        return _value_of_class(NodeRid, value, out, key, ns)

    def decode_source(self, raw: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        return _interned(self._intern, self.decode, "bytes", raw, out, key, ns)


class FixedBytes(FieldType):
    """Exactly ``size`` bytes, as ``bytes`` (nonces, proofs, session RIDs, digests)."""

    __slots__ = ("size",)

    def __init__(self, size: int, name: str = "") -> None:
        super().__init__(name or f"bytes[{size}]")
        self.size = size

    def encode(self, value: Any) -> Any:
        if type(value) is bytes and len(value) == self.size:
            return value
        raise self.fail(value)

    decode = encode

    def encode_source(self, value: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        check = f"type({value}) is not bytes or len({value}) != {self.size}"
        return [f"if {check}: raise _Bad", f"{out} = {value}"]

    def decode_source(self, raw: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        return self.encode_source(raw, out, key, ns)


class OpId(FieldType):
    """Non-zero 128-bit operation id as 16 big-endian bytes ↔ :class:`OperationId`."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("operation-id")

    def encode(self, value: Any) -> Any:
        if type(value) is OperationId:
            return value.value.to_bytes(16, "big")
        raise self.fail(value)

    def encode_source(self, value: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        ns[key] = OperationId
        return [
            f"if type({value}) is not {key}: raise _Bad",
            f"{out} = {value}.value.to_bytes(16, 'big')",
        ]

    def decode(self, raw: Any) -> Any:
        if type(raw) is bytes and len(raw) == 16:
            number = int.from_bytes(raw, "big")
            if number:  # 16 bytes: at most 2**128 - 1
                return OperationId._trusted(number)
            raise WireValueError("operation-id must be non-zero")
        raise self.fail(raw)

    def decode_source(self, raw: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        ns[key] = OperationId._trusted
        ns[key + "_i"] = int.from_bytes
        head = [
            f"if type({raw}) is not bytes or len({raw}) != 16: raise _Bad",
            f"{out} = {key}_i({raw}, 'big')",
            f"if not {out}: raise _Bad",
        ]
        slots = _OPERATION_ID_SLOTS
        if slots is None:  # pragma: no cover - attrs lays the class out as slots
            return [*head, f"{out} = {key}({out})"]
        # ``OperationId._trusted`` inlined: the same two slots set, one call each.
        ns[key + "_n"], ns[key + "_c"] = object.__new__, OperationId
        ns[key + "_s"], ns[key + "_h"] = slots
        return [
            *head,
            f"{out}, {out}_v = {key}_n({key}_c), {out}",
            f"{key}_s({out}, {out}_v)",
            f"{key}_h({out}, None)",
        ]


def _slot_setters(cls: type[Any], *names: str) -> tuple[Callable[[Any, Any], None], ...] | None:
    """The member descriptors' setters of ``names`` on ``cls`` (None if one is not a slot)."""
    found = []
    for name in names:
        descriptor = cls.__dict__.get(name)
        if type(descriptor) is not MemberDescriptorType:
            return None
        found.append(descriptor.__set__)
    return tuple(found)


_OPERATION_ID_SLOTS: Final = _slot_setters(OperationId, "value", "_attrs_cached_hash")
"""What ``OperationId._trusted`` sets (``ids._trusted_value``), for generated decoders."""


class Bytes(FieldType):
    """``bytes`` of at most ``max_len`` bytes."""

    __slots__ = ("max_len",)

    def __init__(self, max_len: int, name: str = "bytes") -> None:
        super().__init__(f"{name}<={max_len}")
        self.max_len = max_len

    def encode(self, value: Any) -> Any:
        if type(value) is bytes and len(value) <= self.max_len:
            return value
        raise self.fail(value)

    decode = encode

    def encode_source(self, value: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        check = f"type({value}) is not bytes or len({value}) > {self.max_len}"
        return [f"if {check}: raise _Bad", f"{out} = {value}"]

    def decode_source(self, raw: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        return self.encode_source(raw, out, key, ns)


class Bool(FieldType):
    """CBOR true/false (never an int)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("bool")

    def encode(self, value: Any) -> Any:
        if type(value) is bool:
            return value
        raise self.fail(value)

    decode = encode

    def encode_source(self, value: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        return [f"if type({value}) is not bool: raise _Bad", f"{out} = {value}"]

    def decode_source(self, raw: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        return self.encode_source(raw, out, key, ns)


_E = TypeVar("_E", bound=enum.IntEnum)


class IntEnumField(FieldType, Generic[_E]):
    """A member of one IntEnum, sent as its int. Unknown numbers are rejected."""

    __slots__ = ("_by_int", "cls")

    def __init__(self, cls: type[_E]) -> None:
        super().__init__(f"enum {cls.__name__}")
        self.cls = cls
        self._by_int: dict[int, _E] = {int(m): m for m in cls}

    def encode(self, value: Any) -> Any:
        if type(value) is self.cls:
            return int(value)
        raise self.fail(value)

    def decode(self, raw: Any) -> Any:
        if type(raw) is int:
            member = self._by_int.get(raw)
            if member is not None:
                return member
        raise self.fail(raw)

    def encode_source(self, value: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        ns[key] = self.cls
        return [f"if type({value}) is not {key}: raise _Bad", f"{out} = {value}._value_"]

    def decode_source(self, raw: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        ns[key] = self._by_int
        return [
            f"{out} = {key}.get({raw}) if type({raw}) is int else None",
            f"if {out} is None: raise _Bad",
        ]


class ShortText(FieldType):
    """UTF-8 text of 0..``max_bytes`` bytes (failure messages)."""

    __slots__ = ("max_bytes",)

    def __init__(self, max_bytes: int) -> None:
        super().__init__(f"text<={max_bytes}")
        self.max_bytes = max_bytes

    def encode(self, value: Any) -> Any:
        if type(value) is str:
            try:
                size = len(value.encode("utf-8"))
            except UnicodeEncodeError:
                raise WireValueError(f"{self.name}: not valid UTF-8") from None
            if size <= self.max_bytes:
                return value
        raise self.fail(value)

    def decode(self, raw: Any) -> Any:
        limit = self.max_bytes
        if type(raw) is str and (len(raw) * 4 <= limit or len(raw.encode()) <= limit):
            return raw
        raise self.fail(raw)

    def encode_source(self, value: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        # ASCII (so no lone surrogate) and at most max_bytes chars: valid; else checked.
        ns[key] = self.encode
        quick = f"type({value}) is str and len({value}) <= {self.max_bytes} and {value}.isascii()"
        return [f"{out} = {value} if {quick} else {key}({value})"]

    def decode_source(self, raw: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        # cbor2 decodes text strictly (no surrogates); <= max_bytes / 4 chars always fit.
        ns[key] = self.decode
        quick = f"type({raw}) is str and len({raw}) <= {self.max_bytes // 4}"
        return [f"{out} = {raw} if {quick} else {key}({raw})"]


class Nullable(FieldType):
    """``None`` (CBOR null) or a value of ``inner``."""

    __slots__ = ("_decode", "_encode", "inner")

    def __init__(self, inner: FieldType) -> None:
        super().__init__(f"optional-{inner.name}")
        self.inner = inner
        self._encode = inner.encode
        self._decode = inner.decode

    def encode(self, value: Any) -> Any:
        return None if value is None else self._encode(value)

    def decode(self, raw: Any) -> Any:
        return None if raw is None else self._decode(raw)

    def encode_source(self, value: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        inner = self.inner.encode_source(value, out, key, ns)
        return [f"if {value} is None: {out} = None", "else:", *(f"    {x}" for x in inner)]

    def decode_source(self, raw: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        inner = self.inner.decode_source(raw, out, key, ns)
        return [f"if {raw} is None: {out} = None", "else:", *(f"    {x}" for x in inner)]


def nullable(inner: FieldType) -> Nullable:
    return Nullable(inner)


U8: Final = UInt(8)
U16: Final = UInt(16)
U32: Final = UInt(32)
U64: Final = UInt(64)
CORRELATION: Final = UInt(64, nonzero=True)
"""Correlation of a request or its reply: never 0 (0 marks a one-way send in 24 and 39)."""
BOOL: Final = Bool()
OBJECT_GENERATION: Final = Generation(ObjectGeneration)
AUTHORITY_OWNER_GENERATION: Final = Generation(AuthorityOwnerGeneration)
NODE_GENERATION: Final = Generation(NodeGeneration)
OWNER_LEASE_GENERATION: Final = Generation(OwnerLeaseGeneration)
ACTOR_ID: Final = Text8(ActorId)
SPOT_ID: Final = Text8(SpotId)
STABLE_TYPE: Final = Text8(StableType)
MESH_NAME: Final = Text8(MeshName)
TEXT8: Final = Text8()
RID: Final = Rid()
SESSION_RID: Final = FixedBytes(16, "session-rid")
OPERATION_ID: Final = OpId()
SHORT_TEXT: Final = ShortText(MAX_SHORT_TEXT_BYTES)
