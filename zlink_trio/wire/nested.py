"""Composite wire types: nested records, tagged unions and bounded lists.

A nested record is a CBOR array of its fields in declaration order, optionally after a
fixed ``prefix`` (a record's command number, a union variant's tag); a tagged union is
``[TAG, fields...]``; a list is a CBOR array of at most ``max_items`` items.

Field types are read from attrs metadata once, when the :class:`Nested` is built. It then
generates two functions, the way attrs generates ``__init__``: a fast encoder and a fast
decoder with every field's check inlined (``FieldType.encode_source``/``decode_source``).
When a fast function raises anything, the generic per-field path runs instead; it is the
authority on what is valid and produces the error naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ..errors import ProtocolError
from .base import InvalidRecord
from .fields import WIRE_KEY, FieldType, WireValueError, describe

__all__ = ["ListOf", "Nested", "TaggedUnion", "wire_types"]


def wire_types(cls: type[Any]) -> tuple[FieldType, ...]:
    """The wire types of an attrs class's fields, in declaration order."""
    found: list[FieldType] = []
    for f in attrs.fields(cls):
        ftype = f.metadata.get(WIRE_KEY)
        if not isinstance(ftype, FieldType):
            raise TypeError(f"{cls.__name__}.{f.name} has no wire type in its metadata")
        found.append(ftype)
    return tuple(found)


class _Bad(Exception):
    """Raised by generated code on a bad value; never escapes this module."""


class Nested(FieldType):
    """An attrs class encoded as ``[prefix?, field1, field2, ...]``.

    ``types`` overrides the field types for classes without wire metadata (e.g.
    :class:`~zlink_trio.ids.SpotRef`). With a ``prefix``, :meth:`decode_fields` expects the
    caller to have checked ``raw[0]`` already (it picked this Nested by it).
    """

    __slots__ = (
        "_decoders",
        "_encoders",
        "_fast_decode",
        "_fast_encode",
        "aliases",
        "arity",
        "cls",
        "names",
        "prefix",
        "types",
    )

    def __init__(
        self, cls: type[Any], types: Sequence[FieldType] | None = None, *, prefix: int | None = None
    ) -> None:
        super().__init__(cls.__name__)
        fields = attrs.fields(cls)
        self.cls = cls
        self.prefix = prefix
        self.names: tuple[str, ...] = tuple(f.name for f in fields)
        self.aliases: tuple[str, ...] = tuple(f.alias or f.name for f in fields)
        self.types: tuple[FieldType, ...] = wire_types(cls) if types is None else tuple(types)
        if len(self.types) != len(self.names):
            raise TypeError(f"{cls.__name__}: {len(self.types)} wire types for {self.names}")
        self.arity = len(self.names)
        self._encoders: tuple[Callable[[Any], Any], ...] = tuple(t.encode for t in self.types)
        self._decoders: tuple[Callable[[Any], Any], ...] = tuple(t.decode for t in self.types)
        self._fast_encode, self._fast_decode = _generate(self)

    def encode(self, value: Any) -> Any:
        if type(value) is not self.cls:
            raise self.fail(value)
        return self.encode_fields(value)

    def decode(self, raw: Any) -> Any:
        if type(raw) is not list:
            raise self.fail(raw)
        return self.decode_fields(raw)

    def encode_fields(self, value: Any) -> list[Any]:
        """``[prefix?, encoded fields...]`` of ``value`` (whose type the caller checked)."""
        try:
            return self._fast_encode(value)  # type: ignore[no-any-return]
        except Exception:
            return self.encode_checked(value)

    def decode_fields(self, raw: list[Any]) -> Any:
        """The instance encoded by ``raw`` (a list; see the class docstring on prefix)."""
        try:
            return self._fast_decode(raw)
        except Exception:
            return self.decode_checked(raw)

    def encode_checked(self, value: Any) -> list[Any]:
        """The generic encoder: one field at a time, naming the field that fails."""
        out: list[Any] = [] if self.prefix is None else [self.prefix]
        for name, enc in zip(self.names, self._encoders, strict=True):
            try:
                out.append(enc(getattr(value, name)))
            except WireValueError as exc:
                raise exc.under(name) from None
        return out

    def decode_checked(self, raw: list[Any]) -> Any:
        """The generic decoder: one field at a time, naming the field that fails."""
        start = 0 if self.prefix is None else 1
        if len(raw) - start != self.arity:
            raise WireValueError(
                f"{self.cls.__name__} has {self.arity} fields, got {len(raw) - start}"
            )
        values = []
        for name, dec, item in zip(self.names, self._decoders, raw[start:], strict=True):
            try:
                values.append(dec(item))
            except WireValueError as exc:
                raise exc.under(name) from None
        try:
            return self.cls(**dict(zip(self.aliases, values, strict=True)))
        except InvalidRecord as exc:
            raise WireValueError(exc.reason) from None
        except ProtocolError as exc:  # pragma: no cover - records raise InvalidRecord
            raise WireValueError(exc.message) from None
        except (TypeError, ValueError) as exc:
            raise WireValueError(f"{self.cls.__name__}: {exc}") from None


def _generate(nested: Nested) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """Generate the fast encoder and decoder of ``nested`` (see the module docstring)."""
    ns: dict[str, Any] = {"_Bad": _Bad, "_cls": nested.cls}
    encode = ["def encode(obj):"]
    decode = ["def decode(raw):"]
    outputs = [] if nested.prefix is None else [repr(int(nested.prefix))]
    targets = [] if nested.prefix is None else ["_"]
    for i, (name, ftype) in enumerate(zip(nested.names, nested.types, strict=True)):
        encode.append(f"    v{i} = obj.{name}")
        encode += [f"    {line}" for line in ftype.encode_source(f"v{i}", f"e{i}", f"et{i}", ns)]
        outputs.append(f"e{i}")
        targets.append(f"x{i}")
    encode.append(f"    return [{', '.join(outputs)}]")
    decode.append(f"    {', '.join(targets)}, = raw" if targets else "    if raw: raise _Bad")
    for i, ftype in enumerate(nested.types):
        decode += [f"    {line}" for line in ftype.decode_source(f"x{i}", f"v{i}", f"dt{i}", ns)]
    arguments = ", ".join(f"{alias}=v{i}" for i, alias in enumerate(nested.aliases))
    decode.append(f"    return _cls({arguments})")
    source = "\n".join([*encode, *decode])
    exec(compile(source, f"<wire {nested.cls.__name__}>", "exec"), ns)
    return ns["encode"], ns["decode"]


class TaggedUnion(FieldType):
    """One of several attrs classes, each with an ``int`` class attribute ``TAG``, encoded
    as ``[TAG, fields...]``."""

    __slots__ = ("_by_cls", "_by_tag", "variants")

    def __init__(self, name: str, *variants: type[Any]) -> None:
        super().__init__(name)
        self.variants = variants
        self._by_tag: dict[int, Nested] = {}
        self._by_cls: dict[type[Any], Nested] = {}
        for cls in variants:
            tag = cls.TAG
            if type(tag) is not int or tag in self._by_tag:
                raise TypeError(f"{name}: bad or duplicate TAG {tag!r} on {cls.__name__}")
            nested = Nested(cls, prefix=tag)
            self._by_tag[tag] = nested
            self._by_cls[cls] = nested

    def encode(self, value: Any) -> Any:
        nested = self._by_cls.get(type(value))
        if nested is None:
            raise self.fail(value)
        try:
            return nested.encode_fields(value)
        except WireValueError as exc:
            raise exc.under(nested.name) from None

    def decode(self, raw: Any) -> Any:
        if type(raw) is not list or not raw:
            raise WireValueError(f"expected {self.name} as [tag, fields...], got {describe(raw)}")
        tag = raw[0]
        nested = self._by_tag.get(tag) if type(tag) is int else None
        if nested is None:
            raise WireValueError(f"unknown {self.name} tag {describe(tag)}")
        try:
            return nested.decode_fields(raw)
        except WireValueError as exc:
            raise exc.under(nested.name) from None


class ListOf(FieldType):
    """A tuple of at most ``max_items`` values of ``inner``, as a CBOR array."""

    __slots__ = ("_decode", "_encode", "inner", "max_items")

    def __init__(self, inner: FieldType, max_items: int) -> None:
        super().__init__(f"list<={max_items} of {inner.name}")
        self.inner = inner
        self.max_items = max_items
        self._encode = inner.encode
        self._decode = inner.decode

    def encode(self, value: Any) -> Any:
        if type(value) is not tuple or len(value) > self.max_items:
            raise self.fail(value)
        return self._each(self._encode, value)

    def decode(self, raw: Any) -> Any:
        if type(raw) is not list or len(raw) > self.max_items:
            raise self.fail(raw)
        return tuple(self._each(self._decode, raw))

    @staticmethod
    def _each(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        out = []
        for i, item in enumerate(items):
            try:
                out.append(fn(item))
            except WireValueError as exc:
                raise exc.under(f"[{i}]") from None
        return out
