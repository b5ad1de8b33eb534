"""Timer handler declaration and registration, for every owner kind (Actor and Spot types).

``@on_timer("name")`` marks ``async def handler(self, payload: bytes) -> None`` as the
handler of the owner's timer ``name``; :class:`TimerHandlerRegistrations` records the
marked methods of a class factory and function handlers, and validates them at startup
into one table per stable type (two handlers for one name, a handler for an unregistered
type, a non-``async def``, or a payload annotation other than bytes is a problem). Timer
names are static per type: registering a timer at run time whose name has no handler is a
ConfigurationError there (the kind's adapter checks it).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final, TypeVar, final

from ...ids import InvalidId, StableType, check_text_id
from ...wire.payloads import PayloadRegistry
from ..handlers import (
    TypedHandler,
    call_shape_problem,
    is_async_callable,
    method_handler,
    typed_handler,
)

__all__ = [
    "TIMER_MARK",
    "TimerHandler",
    "TimerHandlerRegistrations",
    "TimerHandlers",
    "declared_timers",
    "on_timer",
]

TIMER_MARK: Final = "__zlink_timer__"

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

TimerHandler = Callable[[Any, Any], Awaitable[Any]]
"""``async def handler(owner, payload: bytes) -> None``."""

TimerHandlers = Mapping[str, TimerHandler]
"""One type's timer handlers by timer name."""


def on_timer(name: str) -> Callable[[F], F]:
    """Mark ``async def handler(self, payload: bytes) -> None`` as the handler of the
    timer ``name`` (registered at run time with ``self.context.timers.once`` / ``every``).
    Each tick runs it as a turn of its owner, with the payload given at registration.

    Raises:
        InvalidId: ``name`` is not a text id (UTF-8, 1..255 bytes).
    """
    check_text_id(name, "timer name")

    def decorate(fn: F) -> F:
        names: list[str] = list(getattr(fn, TIMER_MARK, ()))
        names.append(name)
        setattr(fn, TIMER_MARK, tuple(names))
        return fn

    return decorate


def declared_timers(cls: type) -> list[tuple[str, str]]:
    """(timer name, attribute name) of every ``@on_timer`` method of ``cls`` (MRO order)."""
    found: list[tuple[str, str]] = []
    seen: set[str] = set()
    for klass in cls.__mro__:
        for attr, value in vars(klass).items():
            if attr in seen:
                continue
            seen.add(attr)
            found.extend((name, attr) for name in getattr(value, TIMER_MARK, ()))
    return found


@final
class TimerHandlerRegistrations:
    """Timer handler registrations of one kind (unvalidated until :meth:`validate`)."""

    def __init__(self, noun: str) -> None:
        self._noun = noun
        self._handlers: list[tuple[object, object, TimerHandler]] = []
        self._problems: list[str] = []

    def add_class(self, stable_type: object, cls: object) -> None:
        """Record the ``@on_timer`` methods of ``cls`` (a class factory)."""
        if not isinstance(cls, type):
            return
        for name, attr in declared_timers(cls):
            method = inspect.getattr_static(cls, attr, None)
            if inspect.isfunction(method) and not inspect.iscoroutinefunction(method):
                self._problems.append(
                    f"{self._noun} type {stable_type!r}: timer handler {cls.__qualname__}."
                    f"{attr} ({name!r}) must be an async def"
                )
                continue
            self._handlers.append((stable_type, name, method_handler(cls, attr)))

    def add(self, stable_type: object, name: object, handler: TimerHandler) -> None:
        """Record a function timer handler ``async def handler(owner, payload: bytes)``."""
        self._handlers.append((stable_type, name, handler))

    @property
    def recorded_problems(self) -> tuple[str, ...]:
        return tuple(self._problems)

    def validate(
        self, types: Iterable[StableType], problems: list[str], payloads: PayloadRegistry
    ) -> dict[StableType, dict[str, TimerHandler]]:
        """The timer handler table of each of ``types``; every problem found (the ones
        recorded too) is appended to ``problems``."""
        problems.extend(self._problems)
        noun = self._noun
        tables: dict[StableType, dict[str, TimerHandler]] = {st: {} for st in types}
        for raw, raw_name, fn in self._handlers:
            try:
                st = StableType.parse(raw)
                name = check_text_id(raw_name, "timer name")
            except InvalidId as exc:
                problems.append(f"timer handler {raw!r}/{raw_name!r}: {exc}")
                continue
            if st not in tables:
                problems.append(f"timer handler for unregistered {noun} type {st.value!r}")
                continue
            if name in tables[st]:
                problems.append(f"{noun} type {st.value!r}: timer {name!r} has two handlers")
                continue
            if not is_async_callable(fn):
                problems.append(
                    f"{noun} type {st.value!r}: timer handler {name!r} must be an async def"
                )
                continue
            shape = call_shape_problem(fn)
            if shape is not None:
                problems.append(f"{noun} type {st.value!r}: timer handler {name!r}: {shape}")
                continue
            try:
                typed = typed_handler(fn, payloads)
            except TypeError as exc:
                problems.append(f"{noun} type {st.value!r}: timer handler {name!r}: {exc}")
                continue
            if type(typed) is TypedHandler:
                problems.append(
                    f"{noun} type {st.value!r}: timer handler {name!r} takes the payload "
                    "bytes given at registration and returns None"
                )
                continue
            tables[st][name] = fn
        return tables
