"""Typed application payloads: frozen attrs classes ⇄ CBOR payload bytes.

The payload bytes of an Actor message (command 24), and later of a Spot message (39) or a
STREAM packet, are opaque to the wire records: an application may put its own bytes
there, or let a :class:`PayloadRegistry` encode a registered frozen attrs class. The
encoded form is ONE CBOR item, the two-element array ``[type_name, {field: value, ...}]``:
the type name is the receiver's check that the bytes are the type its handler declared
(a ``bytes`` handler just gets them as they are).

Field types a codec accepts (checked when it is built, so a class that could not be
encoded is refused at startup): ``int``, ``float``, ``str``, ``bytes``, ``bool``,
``None``, ``X | None`` (``Optional[X]``), ``list[X]``, ``tuple[X, ...]``, ``tuple[X, Y]``,
``dict[str | int, X]`` and nested frozen attrs classes (encoded inline as a map, without a
type name; they need no registration of their own). Annotations are resolved with
:func:`typing.get_type_hints`, so ``from __future__ import annotations`` works as long as
the names are importable from the class's module.

Decoding is strict: exactly one CBOR item, no tags, definite lengths; the type name must
be the codec's; no missing field without a default and no unknown field; every value of
its declared type (an ``int`` is accepted where a ``float`` is declared). Every failure,
encoding or decoding, is :class:`~zlink_trio.errors.InvalidOperation` naming the type and
the field path.
"""

from __future__ import annotations

import secrets
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Final, Generic, NoReturn, TypeVar, final

import attrs
import cbor2

from ..errors import InvalidOperation

__all__ = [
    "EMPTY_REGISTRY",
    "PayloadCodec",
    "PayloadRegistry",
    "TypedPayload",
    "build_registry",
    "codec_for_class",
    "reply_value",
    "value_as",
]

T = TypeVar("T")

MAX_DEPTH: Final = 32
"""CBOR nesting bound of one payload (the envelope, the map, nested values)."""

_SENTINEL: Final = secrets.token_bytes(16)
_SENTINEL_ITEM: Final = bytes([0x50]) + _SENTINEL


class _RejectEveryTag(dict[int, Any]):
    """``semantic_decoders`` claiming every tag number: no cbor2 tag decoder ever runs."""

    __slots__ = ()

    def __missing__(self, tag: int) -> Any:
        return _reject_tag


def _reject_tag(value: object, immutable: bool) -> NoReturn:
    raise ValueError("CBOR tags are not accepted in a payload")


_NO_TAGS: Final = _RejectEveryTag()


class _Bad(Exception):
    """A value that does not fit its declared type (internal; becomes InvalidOperation)."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"{path}: {why}" if path else why)


def _kind(value: object) -> str:
    return type(value).__name__


def _check_depth(path: str) -> None:
    """A container at ``path`` must fit the decoder's nesting bound: the decoder's
    one-item wrapper, the ``[name, body]`` envelope and the class map take three levels,
    every ``.field`` / ``[item]`` step one more (so a caller is refused exactly what a
    remote owner would refuse, and deep values never recurse far)."""
    steps = path.count(".") + path.count("[") + (1 if path else 0)
    if steps + 3 > MAX_DEPTH:  # (+ the decoder's own one-item wrapper, see _loads)
        raise _Bad(path, f"nested deeper than the payload bound of {MAX_DEPTH} levels")


# --- field specs ---------------------------------------------------------------------------


class _Spec:
    """One declared type: ``dump`` (check + to CBOR-able value) and ``load`` (check +
    from a decoded CBOR value)."""

    __slots__ = ()

    def dump(self, value: Any, path: str) -> Any:
        raise NotImplementedError

    def load(self, raw: Any, path: str) -> Any:
        raise NotImplementedError


@final
class _Exact(_Spec):
    __slots__ = ("cls",)

    def __init__(self, cls: type) -> None:
        self.cls = cls

    def dump(self, value: Any, path: str) -> Any:
        if type(value) is not self.cls:
            raise _Bad(path, f"expected {self.cls.__name__}, got {_kind(value)}")
        return value

    def load(self, raw: Any, path: str) -> Any:
        return self.dump(raw, path)


@final
class _Text(_Spec):
    """A ``str``: only text CBOR can carry (UTF-8: no lone surrogates)."""

    __slots__ = ()

    def dump(self, value: Any, path: str) -> Any:
        if type(value) is not str:
            raise _Bad(path, f"expected str, got {_kind(value)}")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _Bad(path, f"str is not valid Unicode text ({exc.reason})") from None
        return value

    def load(self, raw: Any, path: str) -> Any:
        if type(raw) is not str:  # (decoded CBOR text is always valid UTF-8)
            raise _Bad(path, f"expected str, got {_kind(raw)}")
        return raw


@final
class _Int(_Spec):
    """An ``int`` CBOR carries without a bignum tag (tags are refused on decode)."""

    __slots__ = ()

    def dump(self, value: Any, path: str) -> Any:
        if type(value) is not int:
            raise _Bad(path, f"expected int, got {_kind(value)}")
        if not _INT_MIN <= value <= _INT_MAX:
            raise _Bad(path, "int out of the CBOR integer range (-2**64 .. 2**64-1)")
        return value

    def load(self, raw: Any, path: str) -> Any:
        return self.dump(raw, path)


_INT_MIN: Final = -(2**64)
_INT_MAX: Final = 2**64 - 1


@final
class _Float(_Spec):
    __slots__ = ()

    def dump(self, value: Any, path: str) -> Any:
        # An int is a float (PEP 484's numeric tower) and travels as the int it is, so a
        # remote handler gets what a local one gets: the caller's very value.
        if type(value) is float:
            return value
        if type(value) is int:
            if not _INT_MIN <= value <= _INT_MAX:
                raise _Bad(path, "int out of the CBOR integer range (-2**64 .. 2**64-1)")
            return value
        raise _Bad(path, f"expected float, got {_kind(value)}")

    def load(self, raw: Any, path: str) -> Any:
        return self.dump(raw, path)


@final
class _NoneSpec(_Spec):
    __slots__ = ()

    def dump(self, value: Any, path: str) -> Any:
        if value is not None:
            raise _Bad(path, f"expected None, got {_kind(value)}")
        return None

    def load(self, raw: Any, path: str) -> Any:
        return self.dump(raw, path)


@final
class _Optional(_Spec):
    __slots__ = ("inner",)

    def __init__(self, inner: _Spec) -> None:
        self.inner = inner

    def dump(self, value: Any, path: str) -> Any:
        return None if value is None else self.inner.dump(value, path)

    def load(self, raw: Any, path: str) -> Any:
        return None if raw is None else self.inner.load(raw, path)


@final
class _Sequence(_Spec):
    """``list[X]`` or ``tuple[X, ...]`` (a CBOR array)."""

    __slots__ = ("cls", "item")

    def __init__(self, cls: type, item: _Spec) -> None:
        self.cls = cls
        self.item = item

    def dump(self, value: Any, path: str) -> Any:
        if type(value) is not self.cls:
            raise _Bad(path, f"expected {self.cls.__name__}, got {_kind(value)}")
        _check_depth(path)
        item = self.item
        values: Any = value
        return [item.dump(v, f"{path}[{i}]") for i, v in enumerate(values)]

    def load(self, raw: Any, path: str) -> Any:
        if type(raw) is not list:
            raise _Bad(path, f"expected an array, got {_kind(raw)}")
        item = self.item
        return self.cls(item.load(v, f"{path}[{i}]") for i, v in enumerate(raw))


@final
class _FixedTuple(_Spec):
    """``tuple[X, Y, ...]`` of a fixed length."""

    __slots__ = ("items",)

    def __init__(self, items: tuple[_Spec, ...]) -> None:
        self.items = items

    def _check_len(self, value: Any, path: str) -> None:
        if len(value) != len(self.items):
            raise _Bad(path, f"expected {len(self.items)} items, got {len(value)}")

    def dump(self, value: Any, path: str) -> Any:
        if type(value) is not tuple:
            raise _Bad(path, f"expected tuple, got {_kind(value)}")
        _check_depth(path)
        self._check_len(value, path)
        return [
            s.dump(v, f"{path}[{i}]")
            for i, (s, v) in enumerate(zip(self.items, value, strict=True))
        ]

    def load(self, raw: Any, path: str) -> Any:
        if type(raw) is not list:
            raise _Bad(path, f"expected an array, got {_kind(raw)}")
        self._check_len(raw, path)
        return tuple(
            s.load(v, f"{path}[{i}]") for i, (s, v) in enumerate(zip(self.items, raw, strict=True))
        )


@final
class _Dict(_Spec):
    __slots__ = ("key", "value")

    def __init__(self, key: _Spec, value: _Spec) -> None:
        self.key = key
        self.value = value

    def dump(self, value: Any, path: str) -> Any:
        if type(value) is not dict:
            raise _Bad(path, f"expected dict, got {_kind(value)}")
        _check_depth(path)
        k, v = self.key, self.value
        return {k.dump(a, f"{path}.key"): v.dump(b, f"{path}[{a!r}]") for a, b in value.items()}

    def load(self, raw: Any, path: str) -> Any:
        if type(raw) is not dict:
            raise _Bad(path, f"expected a map, got {_kind(raw)}")
        k, v = self.key, self.value
        return {k.load(a, f"{path}.key"): v.load(b, f"{path}[{a!r}]") for a, b in raw.items()}


@final
class _Class(_Spec):
    """A frozen attrs class, as a CBOR map of its fields by name."""

    __slots__ = ("cls", "fields", "required")

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.fields: dict[str, _Spec] = {}
        self.required: frozenset[str] = frozenset()

    def dump(self, value: Any, path: str) -> Any:
        if type(value) is not self.cls:
            raise _Bad(path, f"expected {self.cls.__name__}, got {_kind(value)}")
        _check_depth(path)
        return {
            name: spec.dump(getattr(value, name), f"{path}.{name}" if path else name)
            for name, spec in self.fields.items()
        }

    def load(self, raw: Any, path: str) -> Any:
        if type(raw) is not dict:
            raise _Bad(path, f"expected a map of {self.cls.__name__}, got {_kind(raw)}")
        fields = self.fields
        unknown = [k for k in raw if k not in fields]
        if unknown:
            raise _Bad(path, f"unknown field(s) {unknown!r} for {self.cls.__name__}")
        missing = sorted(self.required - raw.keys())
        if missing:
            raise _Bad(path, f"missing field(s) {missing!r} of {self.cls.__name__}")
        values = {
            name: fields[name].load(v, f"{path}.{name}" if path else name)
            for name, v in raw.items()
        }
        try:
            return self.cls(**values)
        except Exception as exc:  # the class's own validators refused the values
            raise _Bad(path, f"{self.cls.__name__}(...) raised {exc!r}") from None


_PRIMITIVES: Final[dict[object, _Spec]] = {
    int: _Int(),
    str: _Text(),
    bytes: _Exact(bytes),
    bool: _Exact(bool),
    float: _Float(),
    type(None): _NoneSpec(),
}


def _is_frozen_attrs(cls: object) -> bool:
    return isinstance(cls, type) and attrs.has(cls) and attrs.inspect(cls).is_frozen


class _Compiler:
    """Builds the spec tree of one class; nested classes are built once (cycles allowed)."""

    def __init__(self) -> None:
        self._classes: dict[type, _Class] = {}

    def spec(self, tp: object, where: str) -> _Spec:
        primitive = _PRIMITIVES.get(tp)
        if primitive is not None:
            return primitive
        if tp is None:
            return _PRIMITIVES[type(None)]
        if isinstance(tp, type) and attrs.has(tp):
            return self.attrs_class(tp, where)
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin in (typing.Union, types.UnionType):
            rest = [a for a in args if a is not type(None)]
            if len(rest) == 1 and len(args) == 2:
                return _Optional(self.spec(rest[0], where))
            raise TypeError(f"{where}: only X | None unions are supported, got {tp!r}")
        if origin is list and len(args) == 1:
            return _Sequence(list, self.spec(args[0], f"{where}[]"))
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return _Sequence(tuple, self.spec(args[0], f"{where}[]"))
        if origin is tuple and args and Ellipsis not in args:
            return _FixedTuple(tuple(self.spec(a, f"{where}[{i}]") for i, a in enumerate(args)))
        if origin is dict and len(args) == 2:
            if args[0] not in (str, int):
                raise TypeError(f"{where}: dict keys must be str or int, got {args[0]!r}")
            return _Dict(self.spec(args[0], f"{where}.key"), self.spec(args[1], f"{where}[]"))
        raise TypeError(f"{where}: unsupported payload field type {tp!r}")

    def attrs_class(self, cls: type, where: str) -> _Class:
        known = self._classes.get(cls)
        if known is not None:
            return known
        if not _is_frozen_attrs(cls):
            raise TypeError(f"{where}: {cls.__qualname__} must be a frozen attrs class")
        node = self._classes[cls] = _Class(cls)
        try:
            hints = typing.get_type_hints(cls)
        except Exception as exc:
            raise TypeError(f"{where}: cannot resolve the annotations of {cls!r}: {exc}") from None
        fields: dict[str, _Spec] = {}
        required: set[str] = set()
        for field in attrs.fields(cls):
            if not field.init:
                raise TypeError(f"{cls.__qualname__}.{field.name}: init=False fields cannot decode")
            if field.alias != field.name:
                raise TypeError(f"{cls.__qualname__}.{field.name}: aliased fields not supported")
            tp = hints.get(field.name, field.type)
            if tp is None:
                raise TypeError(f"{cls.__qualname__}.{field.name}: no type annotation")
            fields[field.name] = self.spec(tp, f"{cls.__qualname__}.{field.name}")
            if field.default is attrs.NOTHING:
                required.add(field.name)
        node.fields = fields
        node.required = frozenset(required)
        return node


# --- codecs and the registry ----------------------------------------------------------------


@final
class PayloadCodec(Generic[T]):
    """The codec of one registered class: ``check``/``encode`` at the sender, ``decode``
    (which also checks the type name) at the receiver."""

    __slots__ = ("_spec", "cls", "name")

    def __init__(self, cls: type[T], name: str, spec: _Class) -> None:
        self.cls = cls
        self.name = name
        self._spec = spec

    def check(self, value: object) -> None:
        """Raise InvalidOperation unless ``value`` is a ``cls`` that can be encoded."""
        try:
            self._spec.dump(value, "")
        except _Bad as exc:
            raise InvalidOperation(f"payload {self.name!r} cannot be encoded: {exc}") from None

    def encode(self, value: object) -> bytes:
        try:
            body = self._spec.dump(value, "")
        except _Bad as exc:
            raise InvalidOperation(f"payload {self.name!r} cannot be encoded: {exc}") from None
        return cbor2.dumps([self.name, body])

    def decode(self, data: bytes) -> T:
        """The ``cls`` encoded in ``data``; InvalidOperation for anything else."""
        raw = _loads(data, self.name)
        if type(raw) is not list or len(raw) != 2 or type(raw[0]) is not str:
            raise InvalidOperation(f"payload is not a typed payload of {self.name!r}")
        if raw[0] != self.name:
            raise InvalidOperation(f"payload is a {raw[0]!r}, not a {self.name!r}")
        try:
            value: T = self._spec.load(raw[1], "")
        except _Bad as exc:
            raise InvalidOperation(f"payload {self.name!r} does not decode: {exc}") from None
        return value

    def __repr__(self) -> str:
        return f"PayloadCodec({self.cls.__qualname__}, name={self.name!r})"


def _loads(data: bytes, name: str) -> Any:
    try:
        raw, after = cbor2.loads(
            b"\x82" + data + _SENTINEL_ITEM,
            semantic_decoders=_NO_TAGS,
            allow_indefinite=False,
            max_depth=MAX_DEPTH,
        )
    except Exception:
        raise InvalidOperation(f"payload is not valid CBOR for {name!r}") from None
    if type(after) is not bytes or after != _SENTINEL:
        raise InvalidOperation(f"payload for {name!r} is not exactly one CBOR item")
    return raw


def codec_for_class(cls: type[T], name: str | None = None) -> PayloadCodec[T]:
    """Build the codec of the frozen attrs class ``cls`` (type name: ``name`` or its
    ``__qualname__``). Raises TypeError naming the field a codec cannot carry."""
    if not _is_frozen_attrs(cls):
        raise TypeError(f"{cls!r} is not a frozen attrs class")
    type_name = cls.__qualname__ if name is None else name
    if not isinstance(type_name, str) or not type_name:
        raise TypeError(f"{cls.__qualname__}: the type name must be a non-empty string")
    return PayloadCodec(cls, type_name, _Compiler().attrs_class(cls, cls.__qualname__))


@final
class PayloadRegistry:
    """Every payload codec of one application, by class and by type name. Immutable once
    built (:func:`build_registry`); shared by the Actor runtime, and later by Spots and
    STREAM packets."""

    __slots__ = ("_by_class", "_by_name")

    def __init__(self, codecs: Iterable[PayloadCodec[Any]] = ()) -> None:
        self._by_class: dict[type, PayloadCodec[Any]] = {}
        self._by_name: dict[str, PayloadCodec[Any]] = {}
        for codec in codecs:
            if codec.cls in self._by_class or codec.name in self._by_name:
                raise ValueError(f"{codec!r} registered twice")
            self._by_class[codec.cls] = codec
            self._by_name[codec.name] = codec

    def get(self, cls: type[T]) -> PayloadCodec[T] | None:
        return self._by_class.get(cls)

    def of(self, value: object) -> PayloadCodec[Any] | None:
        """The codec of ``value``'s exact class, or None."""
        return self._by_class.get(type(value))

    def __len__(self) -> int:
        return len(self._by_class)

    def __contains__(self, cls: object) -> bool:
        return cls in self._by_class

    @property
    def codecs(self) -> Mapping[type, PayloadCodec[Any]]:
        return types.MappingProxyType(self._by_class)


EMPTY_REGISTRY: Final = PayloadRegistry()


def build_registry(
    entries: Iterable[tuple[object, str | None]],
) -> tuple[PayloadRegistry, list[str]]:
    """The registry of ``(class, name)`` registrations, and every problem found (a class
    registered twice, two classes with one type name, a class a codec cannot carry)."""
    problems: list[str] = []
    codecs: list[PayloadCodec[Any]] = []
    classes: set[object] = set()
    names: dict[str, object] = {}
    for cls, name in entries:
        label = getattr(cls, "__qualname__", repr(cls))
        if cls in classes:
            problems.append(f"payload codec for {label} registered twice")
            continue
        classes.add(cls)
        if not isinstance(cls, type):
            problems.append(f"payload codec: {cls!r} is not a class")
            continue
        try:
            codec: PayloadCodec[Any] = codec_for_class(cls, name)
        except TypeError as exc:
            problems.append(f"payload codec for {label}: {exc}")
            continue
        other = names.get(codec.name)
        if other is not None:
            problems.append(
                f"payload type name {codec.name!r} used by both "
                f"{getattr(other, '__qualname__', other)} and {label}"
            )
            continue
        names[codec.name] = cls
        codecs.append(codec)
    return PayloadRegistry(codecs), problems


@final
class TypedPayload:
    """A registered object on its way to a handler (or back to a caller), with its codec.

    In-process it is handed over as it is (nothing is encoded: the receiver gets the
    caller's very object, which is why payload classes must be frozen); it is encoded
    only where bytes are needed: on the wire, or for a handler (or caller) that takes
    ``bytes``."""

    __slots__ = ("codec", "value")

    def __init__(self, codec: PayloadCodec[Any], value: object) -> None:
        self.codec = codec
        self.value = value

    def encode(self) -> bytes:
        return self.codec.encode(self.value)


def value_as(payload: bytes | TypedPayload, codec: PayloadCodec[T]) -> T:
    """``payload`` as the ``codec``'s class: a local object of that class as it is,
    bytes decoded; InvalidOperation for anything else (the same message either way)."""
    if type(payload) is TypedPayload:
        other = payload.codec
        if other.cls is not codec.cls:
            raise InvalidOperation(f"payload is a {other.name!r}, not a {codec.name!r}")
        value: T = payload.value  # type: ignore[assignment]
        return value
    assert type(payload) is bytes
    return codec.decode(payload)


def reply_value(result: bytes | TypedPayload | None, codec: PayloadCodec[Any] | None) -> object:
    """What a caller gets for a handler's reply ``result``: without a stated reply type,
    bytes (a local typed reply is encoded, so local and remote callers get the same
    bytes) or None; with one, an object of its class (checked: InvalidOperation)."""
    if codec is None:
        if type(result) is TypedPayload:
            return result.encode()
        return result
    if result is None:
        raise InvalidOperation(f"the handler sent no reply; expected a {codec.name!r}")
    return value_as(result, codec)
