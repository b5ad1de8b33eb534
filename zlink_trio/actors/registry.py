"""The Actor-specific registry: stable Actor types, their factories, relocation policies and
handler tables.

:class:`ActorRegistry` only records; :meth:`ActorRegistry.validate` appends every problem to
the caller's list and returns the validated :class:`ActorType` table. The application-facing
:class:`~zlink_trio.app.App` composes one registry (with the Spot and packet registrations
beside it), so the Actor runtime depends on this module and never on ``app``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast, final

import attrs

from ..ids import InvalidId, StableType, check_text_id
from ..wire.payloads import PayloadRegistry
from .handlers import (
    HandlerKey,
    MessageKind,
    TypedHandler,
    declared_handlers,
    declared_timers,
    typed_handler,
)
from .policy import (
    DisableRelocation,
    PreserveStateWith,
    RecreateOnRelocation,
    RelocationPolicy,
)

__all__ = ["ActorHandler", "ActorRegistry", "ActorType", "ActorTypes"]

ActorHandler = Callable[[Any, Any], Awaitable[Any]]
"""``async def handler(actor, payload) -> reply | None`` (bound methods drop ``actor``):
payload and reply are bytes, or registered payload classes (``App.register_codec``)."""

_POLICIES = (DisableRelocation, RecreateOnRelocation, PreserveStateWith)


@attrs.frozen
class ActorType:
    """One registered Actor stable type, validated."""

    stable_type: StableType
    factory: Callable[[Any], Any]
    relocation: RelocationPolicy
    handlers: Mapping[tuple[MessageKind, str], ActorHandler]
    timers: Mapping[str, ActorHandler] = attrs.field(factory=dict)
    """Timer handlers by timer name (``@on_timer``): ``handler(actor, payload: bytes)``."""


ActorTypes = Mapping[StableType, ActorType]
"""The validated Actor types of one server, by stable type."""


def _method_handler(cls: type, name: str) -> ActorHandler:
    """The handler for method ``name`` of Actor class ``cls``: the class's own function
    when it is a plain function (called as ``fn(actor, payload)``, no extra frame per
    message), else a wrapper that looks the method up on the Actor at call time."""
    fn = inspect.getattr_static(cls, name, None)
    if inspect.isfunction(fn) and inspect.iscoroutinefunction(fn):
        return cast(ActorHandler, fn)

    async def call(actor: Any, payload: bytes) -> bytes | None:
        result: bytes | None = await getattr(actor, name)(payload)
        return result

    call.__qualname__ = f"method:{name}"
    return call


@final
class ActorRegistry:
    """Actor type and handler registrations (unvalidated until :meth:`validate`)."""

    def __init__(self) -> None:
        self._types: list[tuple[object, object, object]] = []
        self._handlers: list[tuple[object, MessageKind, object, ActorHandler]] = []
        self._timers: list[tuple[object, object, ActorHandler]] = []
        self._problems: list[str] = []

    def register_actor(
        self, stable_type: str, factory: Callable[[Any], Any], *, relocation: RelocationPolicy
    ) -> None:
        """Record a type; a class factory's ``@on_send`` / ``@on_request`` methods become
        the type's handlers."""
        self._types.append((stable_type, factory, relocation))
        if isinstance(factory, type):
            for kind, packet, name in declared_handlers(factory):
                method = inspect.getattr_static(factory, name, None)
                if inspect.isfunction(method) and not inspect.iscoroutinefunction(method):
                    self._problems.append(
                        f"actor type {stable_type!r}: handler {factory.__qualname__}.{name} "
                        f"({kind.name.lower()} {packet!r}) must be an async def"
                    )
                    continue
                self._handlers.append((stable_type, kind, packet, _method_handler(factory, name)))
            for timer, name in declared_timers(factory):
                method = inspect.getattr_static(factory, name, None)
                if inspect.isfunction(method) and not inspect.iscoroutinefunction(method):
                    self._problems.append(
                        f"actor type {stable_type!r}: timer handler {factory.__qualname__}."
                        f"{name} ({timer!r}) must be an async def"
                    )
                    continue
                self._timers.append((stable_type, timer, _method_handler(factory, name)))

    def register_handler(
        self, stable_type: str, kind: MessageKind, packet: str, handler: ActorHandler
    ) -> None:
        """Record a function handler ``async def handler(actor, payload)``."""
        self._handlers.append((stable_type, kind, packet, handler))

    def register_timer_handler(self, stable_type: str, name: str, handler: ActorHandler) -> None:
        """Record a function timer handler ``async def handler(actor, payload: bytes)``."""
        self._timers.append((stable_type, name, handler))

    def validate(self, problems: list[str], payloads: PayloadRegistry) -> ActorTypes:
        """The validated types (typed handlers wrapped with their ``payloads`` codecs);
        every problem found is appended to ``problems``."""
        problems.extend(self._problems)
        types: dict[StableType, tuple[Callable[[Any], Any], RelocationPolicy]] = {}
        for raw, factory, policy in self._types:
            try:
                st = StableType.parse(raw)
            except InvalidId as exc:
                problems.append(f"actor type {raw!r}: {exc}")
                continue
            if st in types:
                problems.append(f"actor stable type {st.value!r} registered twice")
                continue
            if not isinstance(policy, _POLICIES):
                problems.append(
                    f"actor type {st.value!r}: relocation must be DisableRelocation, "
                    f"RecreateOnRelocation or PreserveStateWith(adapter), got {policy!r}"
                )
                continue
            if not callable(factory):
                problems.append(f"actor type {st.value!r}: factory is not callable")
                continue
            types[st] = (factory, policy)
        handlers: dict[StableType, dict[tuple[MessageKind, str], ActorHandler]] = {
            st: {} for st in types
        }
        for raw, kind, packet, fn in self._handlers:
            try:
                st = StableType.parse(raw)
                name = check_text_id(packet, "packet name")
            except InvalidId as exc:
                problems.append(f"handler {raw!r}/{packet!r}: {exc}")
                continue
            if st not in handlers:
                problems.append(f"handler for unregistered actor type {st.value!r}")
                continue
            if (kind, name) in handlers[st]:
                problems.append(f"handler key {HandlerKey(st, kind, name)!r} registered twice")
                continue
            try:
                handlers[st][(kind, name)] = typed_handler(fn, payloads)
            except TypeError as exc:
                problems.append(f"handler {HandlerKey(st, kind, name)!r}: {exc}")
        timers = self._validate_timers(types, problems, payloads)
        return {
            st: ActorType(st, factory, policy, handlers[st], timers[st])
            for st, (factory, policy) in types.items()
        }

    def _validate_timers(
        self, types: Mapping[StableType, object], problems: list[str], payloads: PayloadRegistry
    ) -> dict[StableType, dict[str, ActorHandler]]:
        timers: dict[StableType, dict[str, ActorHandler]] = {st: {} for st in types}
        for raw, timer, fn in self._timers:
            try:
                st = StableType.parse(raw)
                name = check_text_id(timer, "timer name")
            except InvalidId as exc:
                problems.append(f"timer handler {raw!r}/{timer!r}: {exc}")
                continue
            if st not in timers:
                problems.append(f"timer handler for unregistered actor type {st.value!r}")
                continue
            if name in timers[st]:
                problems.append(f"actor type {st.value!r}: timer {name!r} has two handlers")
                continue
            if not callable(fn) or (inspect.isfunction(fn) and not inspect.iscoroutinefunction(fn)):
                problems.append(
                    f"actor type {st.value!r}: timer handler {name!r} must be an async def"
                )
                continue
            try:
                typed = typed_handler(fn, payloads)
            except TypeError as exc:
                problems.append(f"actor type {st.value!r}: timer handler {name!r}: {exc}")
                continue
            if type(typed) is TypedHandler:
                problems.append(
                    f"actor type {st.value!r}: timer handler {name!r} takes the payload "
                    "bytes given at registration and returns None"
                )
                continue
            timers[st][name] = fn
        return timers
