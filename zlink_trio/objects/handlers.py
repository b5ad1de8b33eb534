"""Handler declaration, for every object kind that runs application handlers (Actors,
User and Instance Spots): ``@on_send("packet")`` / ``@on_request("packet")`` on methods.

Handlers are selected by (stable type, message kind, packet name); one key registered
twice is a startup configuration error. ``actors/handlers.py`` re-exports this module (the
Actor's name for it); the Spot registry uses it the same way.

Typed handlers: a handler whose payload parameter (or return type) is annotated with a
payload class registered with ``App.register_codec`` is wrapped once, at startup, in a
:class:`TypedHandler` (annotations resolved with :func:`typing.get_type_hints`). It gets
the object (decoded from bytes, or the caller's very object on the local path) and its
reply is checked against the declared class. A handler annotated ``bytes`` (or not at all)
is called as it is, on the same path as before.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar, cast, final

import attrs

from ..errors import ApplicationError, InvalidOperation
from ..ids import StableType, check_text_id
from ..wire.enums import MessageKind
from ..wire.payloads import PayloadCodec, PayloadRegistry, TypedPayload, value_as

__all__ = [
    "HANDLER_MARK",
    "HandlerKey",
    "MessageKind",
    "TypedHandler",
    "call_shape_problem",
    "declared_handlers",
    "is_async_callable",
    "method_handler",
    "on_request",
    "on_send",
    "typed_handler",
]

HANDLER_MARK: Final = "__zlink_handler__"

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


@attrs.frozen
class HandlerKey:
    stable_type: StableType
    kind: MessageKind
    packet: str


def _mark(kind: MessageKind, packet: str) -> Callable[[F], F]:
    check_text_id(packet, "packet name")

    def decorate(fn: F) -> F:
        marks: list[tuple[MessageKind, str]] = list(getattr(fn, HANDLER_MARK, ()))
        marks.append((kind, packet))
        setattr(fn, HANDLER_MARK, tuple(marks))
        return fn

    return decorate


def on_send(packet: str) -> Callable[[F], F]:
    """Mark ``async def handler(self, payload: bytes) -> None`` for one-way sends (or
    ``payload: SomeRegisteredClass``)."""
    return _mark(MessageKind.SEND, packet)


def on_request(packet: str) -> Callable[[F], F]:
    """Mark ``async def handler(self, payload: bytes) -> bytes | None`` for requests (or
    with registered payload classes as the payload and/or the reply type)."""
    return _mark(MessageKind.REQUEST, packet)


def declared_handlers(cls: type) -> list[tuple[MessageKind, str, str]]:
    """(kind, packet, attribute name) of every marked method of ``cls`` (MRO order)."""
    found: list[tuple[MessageKind, str, str]] = []
    seen: set[str] = set()
    for klass in cls.__mro__:
        for name, value in vars(klass).items():
            if name in seen:
                continue
            seen.add(name)
            for kind, packet in getattr(value, HANDLER_MARK, ()):
                found.append((kind, packet, name))
    return found


def is_async_callable(fn: object) -> bool:
    """Whether ``fn`` is a callable whose call is a coroutine by construction: an ``async
    def`` function or bound method, a ``functools.partial`` of one (unwrapped however
    deep), or an object whose ``__call__`` is one. The startup check of every function
    handler, timer handler and lifecycle callback (a plain ``def``, a partial of one or a
    lambda is refused, even one that returns an awaitable)."""
    if not callable(fn):
        return False
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    if inspect.isroutine(fn) or inspect.ismethod(fn) or isinstance(fn, type):
        return False
    call = inspect.getattr_static(type(fn), "__call__", None)
    return inspect.iscoroutinefunction(call)


def call_shape_problem(fn: object) -> str | None:
    """Why ``fn`` cannot be called the way the framework calls every handler, timer
    handler and lifecycle callback -- ``fn(owner, argument)``, two positional arguments
    (a method's ``self`` is the owner) -- or None when its signature binds them (or it
    has no signature to inspect)."""
    try:
        signature = inspect.signature(fn)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    try:
        signature.bind(None, None)
    except TypeError as exc:
        return f"its signature {signature} cannot take (owner, payload): {exc}"
    return None


def method_handler(cls: type, name: str) -> Callable[[Any, Any], Awaitable[Any]]:
    """The handler for method ``name`` of class ``cls``: the class's own function when it
    is a plain coroutine function (called as ``fn(obj, payload)``, no extra frame per
    message), else a wrapper that looks the method up on the object at call time."""
    fn = inspect.getattr_static(cls, name, None)
    if inspect.isfunction(fn) and inspect.iscoroutinefunction(fn):
        return cast(Callable[[Any, Any], Awaitable[Any]], fn)

    async def call(obj: Any, payload: bytes) -> bytes | None:
        result: bytes | None = await getattr(obj, name)(payload)
        return result

    call.__qualname__ = f"method:{name}"
    return call


@final
class TypedHandler:
    """A handler with a declared payload class and/or reply class (see the module
    docstring). The Actor's turn first :meth:`accept`-s the payload: one that is not its
    class ends the request with InvalidOperation (a send is dropped, logged and counted)
    and the handler never runs; a reply that is not its declared class is an
    ApplicationError."""

    __slots__ = ("fn", "payload", "reply")

    def __init__(
        self,
        fn: Callable[[Any, Any], Awaitable[Any]],
        payload: PayloadCodec[Any] | None,
        reply: PayloadCodec[Any] | None,
    ) -> None:
        self.fn = fn
        self.payload = payload
        self.reply = reply

    def accept(self, payload: bytes | TypedPayload) -> object:
        """The value the handler gets for ``payload``: an object of its payload class (the
        caller's own in-process, else decoded), or bytes for a bytes parameter. Raises
        InvalidOperation (then the handler must not run)."""
        codec = self.payload
        if codec is not None:
            return value_as(payload, codec)
        if type(payload) is TypedPayload:
            return payload.encode()  # a bytes handler gets what a remote one would
        return payload

    async def __call__(self, actor: Any, value: object) -> object:
        """Run the handler on an :meth:`accept`-ed value; check and wrap its reply."""
        result = await self.fn(actor, value)
        reply = self.reply
        if reply is None:
            return result
        if type(result) is not reply.cls:
            raise ApplicationError(
                f"handler returned {type(result).__name__}, not {reply.cls.__qualname__}"
            )
        try:
            reply.check(result)
        except InvalidOperation as exc:
            raise ApplicationError(exc.message) from None
        return TypedPayload(reply, result)

    def __repr__(self) -> str:
        return f"TypedHandler({getattr(self.fn, '__qualname__', self.fn)!r})"


_UNTYPED: Final = (bytes, type(None), inspect.Parameter.empty, Any, object)


def _untyped(tp: object) -> bool:
    """``bytes``, ``None``, ``bytes | None``, unannotated: the handler takes/gives bytes."""
    if tp in _UNTYPED:
        return True
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return all(a in (bytes, type(None), bytearray, memoryview) for a in typing.get_args(tp))
    return tp in (bytearray, memoryview)


def _codec(tp: object, registry: PayloadRegistry, what: str) -> PayloadCodec[Any] | None:
    if _untyped(tp):
        return None
    codec: PayloadCodec[Any] | None = registry.get(tp) if isinstance(tp, type) else None
    if codec is None:
        if isinstance(tp, type) and attrs.has(tp):
            raise TypeError(
                f"{what} {tp.__qualname__} has no payload codec: App.register_codec({tp.__name__})"
            )
        raise TypeError(f"{what} {tp!r} is neither bytes nor a registered payload class")
    return codec


_BYTES_SPELLINGS: Final = frozenset(
    {"bytes", "bytes|None", "None|bytes", "Optional[bytes]", "None", "object", "Any"}
)
"""Annotation strings that mean "bytes" even when the handler's other annotations (say, a
name imported only under TYPE_CHECKING) cannot be resolved."""


def _hints_one_by_one(fn: Callable[..., Any], names: list[str]) -> dict[str, object]:
    """The annotations ``names`` of ``fn`` resolved one at a time (when
    :func:`typing.get_type_hints` fails on one of its annotations, maybe one delivery does
    not read): an unresolvable bytes spelling is bytes; any other unresolvable annotation
    is a TypeError naming it."""
    hints: dict[str, object] = {}
    namespace = getattr(fn, "__globals__", {})
    annotations = getattr(fn, "__annotations__", {})
    for name in names:
        if name not in annotations:
            continue
        annotation = annotations[name]
        if not isinstance(annotation, str):
            hints[name] = annotation
            continue
        try:
            hints[name] = eval(annotation, namespace)  # as get_type_hints does
        except Exception as exc:
            if annotation.replace(" ", "") in _BYTES_SPELLINGS:
                hints[name] = bytes if "bytes" in annotation else inspect.Parameter.empty
                continue
            raise TypeError(
                f"cannot resolve the annotation {annotation!r} of {fn.__qualname__}: {exc}"
            ) from None
    return hints


def typed_handler(
    fn: Callable[[Any, Any], Awaitable[Any]], registry: PayloadRegistry
) -> Callable[[Any, Any], Awaitable[Any]]:
    """``fn`` itself when it takes and gives bytes, else its :class:`TypedHandler`.

    ``fn`` is ``async def (actor, payload) -> reply``. Raises TypeError naming the
    problem (an annotation that is neither bytes nor a registered class, or annotations
    that cannot be resolved)."""
    if not (inspect.isfunction(fn) or inspect.ismethod(fn)):
        return fn  # a callable object or wrapper: untyped (nothing to resolve)
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    index = 0 if inspect.ismethod(fn) else 1
    names = ["return"] if len(params) <= index else [params[index].name, "return"]
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = _hints_one_by_one(fn, names)
    empty = inspect.Parameter.empty
    payload_tp: object = empty if len(params) <= index else hints.get(names[0], empty)
    payload = _codec(payload_tp, registry, "payload type")
    reply = _codec(hints.get("return", empty), registry, "reply type")
    if payload is None and reply is None:
        return fn
    return TypedHandler(fn, payload, reply)
