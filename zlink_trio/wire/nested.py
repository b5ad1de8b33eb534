"""Composite wire types: nested records, tagged unions and bounded lists.

A nested record is a CBOR array of its fields in declaration order, optionally after a
fixed ``prefix`` (a record's command number, a union variant's tag); a tagged union is
``[TAG, fields...]``; a list is a CBOR array of at most ``max_items`` items.

Field types are read from attrs metadata once, when the :class:`Nested` is built. It then
generates two functions, the way attrs generates ``__init__``: a fast encoder and a fast
decoder with every field's check inlined (``FieldType.encode_source``/``decode_source``),
nested records and tagged unions included (their own generated functions are called
directly). When a fast function raises anything, the generic per-field path runs instead;
it is the authority on what is valid and produces the error naming the field.

Trusted construction: the fast decoder has validated every field, so it builds the
instance without the class's ``__init__`` (``object.__new__`` + the slots' own setters),
then runs ``__attrs_post_init__`` (the cross-field rules) and resets attrs' hash cache
exactly as the generated ``__init__`` would. Only classes whose ``__init__`` does nothing
more qualify (:func:`trusted_setters`: attrs-generated ``__init__``, slots only, no
validators, converters or ``__attrs_pre_init__``; defaults do not matter, every field is
passed); any other class is built by calling it. The generic path always calls the
class, so the tests comparing both paths (tests/property/test_wire_fuzz.py,
tests/unit/wire/test_wire_trusted.py) prove trusted instances indistinguishable from
normally constructed ones. The same construction gives :func:`codec.evolve`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import MemberDescriptorType
from typing import Any, Final

import attrs

from ..errors import ProtocolError
from .base import InvalidRecord
from .fields import WIRE_KEY, FieldType, Source, WireValueError, describe

__all__ = ["ListOf", "Nested", "TaggedUnion", "trusted_setters", "wire_types"]


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
        "_fast_evolve",
        "aliases",
        "arity",
        "cls",
        "names",
        "prefix",
        "source",
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
        self.source = ""  # the generated code, set by _generate (for tests and debugging)
        self._encoders: tuple[Callable[[Any], Any], ...] = tuple(t.encode for t in self.types)
        self._decoders: tuple[Callable[[Any], Any], ...] = tuple(t.decode for t in self.types)
        self._fast_encode, self._fast_decode = _generate(self)
        self._fast_evolve: Callable[..., Any] | None = _generate_evolve(self)

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

    def encode_source(self, value: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        ns[key] = self.cls
        ns[key + "_f"] = self._fast_encode
        return [f"if type({value}) is not {key}: raise _Bad", f"{out} = {key}_f({value})"]

    def decode_source(self, raw: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        if self.prefix is not None:  # pragma: no cover - prefixed Nesteds are union variants
            return super().decode_source(raw, out, key, ns)
        ns[key] = self._fast_decode
        return [f"if type({raw}) is not list: raise _Bad", f"{out} = {key}({raw})"]

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


_HASH_CACHE_SLOT: Final = "_attrs_cached_hash"
"""Where attrs' ``cache_hash=True`` keeps the hash; its ``__init__`` resets it to None."""


def _all_slots(cls: type[Any]) -> set[str]:
    return {name for c in cls.__mro__ for name in c.__dict__.get("__slots__", ())}


def trusted_setters(cls: type[Any]) -> tuple[tuple[Callable[[Any, Any], None], ...], bool] | None:
    """The slot setters of ``cls``'s fields (declaration order) and whether it caches its
    hash, when building an instance with them is exactly what its attrs-generated
    ``__init__`` does (apart from ``__attrs_post_init__``, which the caller runs); else None.
    """
    init = cls.__dict__.get("__init__")
    code = getattr(init, "__code__", None)
    if code is None or not code.co_filename.startswith("<attrs generated"):
        return None
    if hasattr(cls, "__attrs_pre_init__") or _has_dict(cls):
        return None
    fields = attrs.fields(cls)
    setters = []
    for f in fields:
        if not f.init or f.validator is not None or f.converter is not None:
            return None
        descriptor = getattr(cls, f.name, None)
        if type(descriptor) is not MemberDescriptorType:
            return None
        setters.append(descriptor.__set__)
    extra = _all_slots(cls) - {f.name for f in fields} - {"__weakref__"}
    if not extra <= {_HASH_CACHE_SLOT}:
        return None
    return tuple(setters), bool(extra)


def _has_dict(cls: type[Any]) -> bool:
    """True when instances of ``cls`` carry a ``__dict__`` (no slots all the way down)."""
    return any("__slots__" not in c.__dict__ for c in cls.__mro__ if c is not object)


def _builder(nested: Nested, ns: dict[str, Any]) -> Source:
    """Lines returning the instance built from the validated ``v0``, ``v1``, ..."""
    trusted = trusted_setters(nested.cls)
    if trusted is None:
        arguments = ", ".join(f"{alias}=v{i}" for i, alias in enumerate(nested.aliases))
        return [f"return _cls({arguments})"]
    setters, cached_hash = trusted
    ns["_new"] = object.__new__
    lines = ["o = _new(_cls)"]
    for i, setter in enumerate(setters):
        ns[f"_s{i}"] = setter
        lines.append(f"_s{i}(o, v{i})")
    if hasattr(nested.cls, "__attrs_post_init__"):
        lines.append("o.__attrs_post_init__()")
    if cached_hash:
        ns["_sh"] = getattr(nested.cls, _HASH_CACHE_SLOT).__set__
        lines.append("_sh(o, None)")
    lines.append("return o")
    return lines


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
    decode += [f"    {line}" for line in _builder(nested, ns)]
    source = "\n".join([*encode, *decode])
    nested.source = source
    exec(compile(source, f"<wire {nested.cls.__name__}>", "exec"), ns)
    return ns["encode"], ns["decode"]


_UNCHANGED: Final = object()


def _generate_evolve(nested: Nested) -> Callable[..., Any] | None:
    """``evolve(obj, /, **changes)`` with ``attrs.evolve``'s meaning (a copy with some
    fields replaced, the cross-field rules run again; field values are not checked: that
    is ``encode``'s job) but building the copy like the trusted decoder. None when the
    class does not qualify (see :func:`trusted_setters`)."""
    trusted = trusted_setters(nested.cls)
    if trusted is None or any(alias.startswith("_") for alias in nested.aliases):
        return None  # parameters named like the generated code's own names
    setters, cached_hash = trusted
    ns: dict[str, Any] = {"_cls": nested.cls, "_new": object.__new__, "_U": _UNCHANGED}
    parameters = ", ".join(f"{alias}=_U" for alias in nested.aliases)
    lines = [f"def evolve(_obj, /, *, {parameters}):", "    _o = _new(_cls)"]
    for i, (name, alias, setter) in enumerate(
        zip(nested.names, nested.aliases, setters, strict=True)
    ):
        ns[f"_s{i}"] = setter
        lines.append(f"    _s{i}(_o, _obj.{name} if {alias} is _U else {alias})")
    if hasattr(nested.cls, "__attrs_post_init__"):
        lines.append("    _o.__attrs_post_init__()")
    if cached_hash:
        ns["_sh"] = getattr(nested.cls, _HASH_CACHE_SLOT).__set__
        lines.append("    _sh(_o, None)")
    lines.append("    return _o")
    exec(compile("\n".join(lines), f"<wire evolve {nested.cls.__name__}>", "exec"), ns)
    return ns["evolve"]  # type: ignore[no-any-return]


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

    def encode_source(self, value: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        ns[key] = {cls: nested._fast_encode for cls, nested in self._by_cls.items()}
        return [f"{out} = {key}[type({value})]({value})"]

    def decode_source(self, raw: str, out: str, key: str, ns: dict[str, Any]) -> Source:
        # The exact-int test keeps True from selecting tag 1; an unknown tag (KeyError) or
        # an empty list (IndexError) leaves the fast path like any bad value.
        ns[key] = {tag: nested._fast_decode for tag, nested in self._by_tag.items()}
        return [
            f"if type({raw}) is not list or type({raw}[0]) is not int: raise _Bad",
            f"{out} = {key}[{raw}[0]]({raw})",
        ]

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
