"""The Actor-specific registry: stable Actor types, their factories, relocation policies and
handler tables.

:class:`ActorRegistry` only records; :meth:`ActorRegistry.validate` appends every problem to
the caller's list and returns the validated :class:`ActorType` table. The application-facing
:class:`~zlink_trio.app.App` composes one registry (with the Spot and packet registrations
beside it), so the Actor runtime depends on this module and never on ``app``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, final

import attrs

from ..ids import StableType
from ..objects.handlers import MessageKind
from ..objects.policy import RelocationPolicy
from ..objects.registry import Handler, HandlerRegistrations, check_policy, parse_type
from ..objects.timers.handlers import TimerHandlerRegistrations, TimerHandlers
from ..wire.payloads import PayloadRegistry
from .membership import declared_join_complete

__all__ = ["ActorHandler", "ActorRegistry", "ActorType", "ActorTypes"]

ActorHandler = Handler
"""``async def handler(actor, payload) -> reply | None`` (bound methods drop ``actor``):
payload and reply are bytes, or registered payload classes (``App.register_codec``)."""


@attrs.frozen
class ActorType:
    """One registered Actor stable type, validated."""

    stable_type: StableType
    factory: Callable[[Any], Any]
    relocation: RelocationPolicy
    handlers: Mapping[tuple[MessageKind, str], ActorHandler]
    timers: TimerHandlers = attrs.field(factory=dict)
    """Timer handlers by timer name (``@on_timer``): ``handler(actor, payload: bytes)``."""
    join_complete: ActorHandler | None = None
    """The ``@on_join_complete`` method: ``fn(actor, JoinCompletion)`` (None: results are
    logged)."""


ActorTypes = Mapping[StableType, ActorType]
"""The validated Actor types of one server, by stable type."""


@final
class ActorRegistry:
    """Actor type and handler registrations (unvalidated until :meth:`validate`)."""

    def __init__(self) -> None:
        self._types: list[tuple[object, object, object]] = []
        self._handlers = HandlerRegistrations("actor")
        self._timers = TimerHandlerRegistrations("actor")
        self._join_complete: dict[object, ActorHandler] = {}
        self._problems: list[str] = []

    def register_actor(
        self, stable_type: str, factory: Callable[[Any], Any], *, relocation: RelocationPolicy
    ) -> None:
        """Record a type; a class factory's ``@on_send`` / ``@on_request`` methods become
        the type's handlers (its ``@on_timer`` methods its timer handlers)."""
        self._types.append((stable_type, factory, relocation))
        self._handlers.add_class(stable_type, factory)
        self._timers.add_class(stable_type, factory)
        if isinstance(factory, type):
            self._add_join_complete(stable_type, factory)

    def _add_join_complete(self, stable_type: object, cls: type) -> None:
        names = declared_join_complete(cls)
        if len(names) > 1:
            self._problems.append(
                f"actor type {stable_type!r}: more than one @on_join_complete method "
                f"({', '.join(names)})"
            )
            return
        for name in names:
            method = inspect.getattr_static(cls, name, None)
            if not inspect.iscoroutinefunction(method):
                self._problems.append(
                    f"actor type {stable_type!r}: @on_join_complete {cls.__qualname__}.{name} "
                    "must be an async def"
                )
                continue
            assert method is not None
            self._join_complete[stable_type] = method

    def register_handler(
        self, stable_type: str, kind: MessageKind, packet: str, handler: ActorHandler
    ) -> None:
        """Record a function handler ``async def handler(actor, payload)``."""
        self._handlers.add(stable_type, kind, packet, handler)

    def register_timer_handler(self, stable_type: str, name: str, handler: ActorHandler) -> None:
        """Record a function timer handler ``async def handler(actor, payload: bytes)``."""
        self._timers.add(stable_type, name, handler)

    def validate(self, problems: list[str], payloads: PayloadRegistry) -> ActorTypes:
        """The validated types (typed handlers wrapped with their ``payloads`` codecs);
        every problem found is appended to ``problems``."""
        problems.extend(self._handlers.recorded_problems)
        problems.extend(self._problems)
        types: dict[StableType, tuple[Callable[[Any], Any], RelocationPolicy]] = {}
        for raw, factory, raw_policy in self._types:
            st = parse_type(raw, "actor", problems)
            if st is None:
                continue
            if st in types:
                problems.append(f"actor stable type {st.value!r} registered twice")
                continue
            policy = check_policy(st, "actor", raw_policy, problems)
            if policy is None:
                continue
            if not callable(factory):
                problems.append(f"actor type {st.value!r}: factory is not callable")
                continue
            types[st] = (factory, policy)
        handlers = self._handlers.validate(types, problems, payloads)
        timers = self._timers.validate(types, problems, payloads)
        completions = {
            StableType.parse(raw): fn
            for raw, fn in self._join_complete.items()
            if parse_type(raw, "actor", []) is not None
        }
        return {
            st: ActorType(st, factory, policy, handlers[st], timers[st], completions.get(st))
            for st, (factory, policy) in types.items()
        }
