"""The Spot registry: User and Instance Spot types, their factories, execution modes,
relocation policies, handlers and lifecycle callbacks (spec 06 §2, §8; spec 04 §3, §4).

:class:`SpotRegistry` only records; :meth:`SpotRegistry.validate` appends every problem to
the caller's list and returns the validated :class:`SpotType` table. The handler machinery
(``@on_send`` / ``@on_request``, typed payloads) is the one Actor types use
(:mod:`zlink_trio.objects.registry`).

Rules (each breach is a startup problem): a stable type is UTF-8 1..255 bytes and is
registered once among the Spot types; ``relocation`` is required (no default);
``execution`` is required for a User Spot and refused for an Instance Spot; a PerActor User
Spot takes RecreateOnRelocation only (spec 06 §8); membership callbacks only for User
Spots; one callback per (type, callback); callbacks are ``async def``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, final

import attrs

from ..ids import StableType
from ..objects.handlers import MessageKind, call_shape_problem, is_async_callable, method_handler
from ..objects.policy import RecreateOnRelocation, RelocationPolicy
from ..objects.registry import Handler, HandlerRegistrations, HandlerTable, check_policy, parse_type
from ..objects.timers.handlers import TimerHandlerRegistrations, TimerHandlers
from ..wire.payloads import PayloadRegistry
from .execution import ExecutionMode, PerActor, SpotWide
from .lifecycle import MEMBERSHIP_CALLBACKS, SpotCallback, SpotCallbackFn, declared_callbacks
from .spot_kind import SpotKind

__all__ = ["SpotHandler", "SpotRegistry", "SpotType", "SpotTypes"]

SpotHandler = Handler
"""``async def handler(spot, payload) -> reply | None`` (bound methods drop ``spot``)."""


@attrs.frozen
class SpotType:
    """One registered Spot stable type, validated."""

    stable_type: StableType
    kind: SpotKind
    factory: Callable[[Any], Any]
    execution: ExecutionMode | None
    """PerActor or SpotWide for a User Spot; None for an Instance Spot."""
    relocation: RelocationPolicy
    handlers: HandlerTable
    callbacks: Mapping[SpotCallback, SpotCallbackFn]
    timers: TimerHandlers = attrs.field(factory=dict)
    """Timer handlers by timer name (``@on_timer``): ``handler(spot, payload: bytes)``."""


SpotTypes = Mapping[StableType, SpotType]
"""The validated Spot types of one server, by stable type."""


@attrs.frozen
class _Registration:
    stable_type: object
    factory: object
    kind: object
    execution: object
    relocation: object


@final
class SpotRegistry:
    """Spot type, handler and callback registrations (unvalidated until :meth:`validate`)."""

    def __init__(self) -> None:
        self._types: list[_Registration] = []
        self._handlers = HandlerRegistrations("spot")
        self._timers = TimerHandlerRegistrations("spot")
        self._callbacks: list[tuple[object, object, SpotCallbackFn]] = []
        self._problems: list[str] = []

    def register_spot(
        self,
        stable_type: str,
        factory: Callable[[Any], Any],
        *,
        kind: SpotKind,
        execution: ExecutionMode | None,
        relocation: RelocationPolicy,
    ) -> None:
        """Record a type; a class factory's ``@on_send`` / ``@on_request`` methods become
        its handlers and its ``@on_lifecycle`` methods its callbacks."""
        self._types.append(_Registration(stable_type, factory, kind, execution, relocation))
        self._handlers.add_class(stable_type, factory)
        self._timers.add_class(stable_type, factory)
        if isinstance(factory, type):
            for callback, name in declared_callbacks(factory):
                method = inspect.getattr_static(factory, name, None)
                if inspect.isfunction(method) and not inspect.iscoroutinefunction(method):
                    self._problems.append(
                        f"spot type {stable_type!r}: callback {factory.__qualname__}.{name} "
                        f"({callback.value}) must be an async def"
                    )
                    continue
                self._callbacks.append((stable_type, callback, method_handler(factory, name)))

    def register_handler(
        self, stable_type: str, kind: MessageKind, packet: str, handler: SpotHandler
    ) -> None:
        """Record a function handler ``async def handler(spot, payload)``."""
        self._handlers.add(stable_type, kind, packet, handler)

    def register_timer_handler(self, stable_type: str, name: str, handler: SpotHandler) -> None:
        """Record a function timer handler ``async def handler(spot, payload: bytes)``."""
        self._timers.add(stable_type, name, handler)

    def register_callback(
        self, stable_type: str, callback: SpotCallback, fn: SpotCallbackFn
    ) -> None:
        """Record a function callback ``async def fn(spot, argument)``."""
        self._callbacks.append((stable_type, callback, fn))

    def validate(self, problems: list[str], payloads: PayloadRegistry) -> SpotTypes:
        """The validated types; every problem found is appended to ``problems``. (A Spot
        type may share its name with an Actor type: Actors and Spots are separate
        namespaces.)"""
        problems.extend(self._handlers.recorded_problems)
        problems.extend(self._problems)
        checked: dict[StableType, _Registration] = {}
        policies: dict[StableType, RelocationPolicy] = {}
        for reg in self._types:
            st = parse_type(reg.stable_type, "spot", problems)
            if st is None:
                continue
            if st in checked:
                problems.append(f"spot stable type {st.value!r} registered twice")
                continue
            if not isinstance(reg.kind, SpotKind):
                problems.append(
                    f"spot type {st.value!r}: kind must be SpotKind.USER or SpotKind.INSTANCE, "
                    f"got {reg.kind!r}"
                )
                continue
            policy = check_policy(st, "spot", reg.relocation, problems)
            if policy is None:
                continue
            if not self._execution_ok(st, reg, policy, problems):
                continue
            if not callable(reg.factory):
                problems.append(f"spot type {st.value!r}: factory is not callable")
                continue
            checked[st] = reg
            policies[st] = policy
        handlers = self._handlers.validate(checked, problems, payloads)
        callbacks = self._validate_callbacks(checked, problems)
        timers = self._timers.validate(checked, problems, payloads)
        return {
            st: SpotType(
                stable_type=st,
                kind=reg.kind,  # type: ignore[arg-type]  # checked above
                factory=reg.factory,  # type: ignore[arg-type]  # checked above
                execution=reg.execution,  # type: ignore[arg-type]  # checked above
                relocation=policies[st],
                handlers=handlers[st],
                callbacks=callbacks[st],
                timers=timers[st],
            )
            for st, reg in checked.items()
        }

    @staticmethod
    def _execution_ok(
        st: StableType, reg: _Registration, policy: RelocationPolicy, problems: list[str]
    ) -> bool:
        execution = reg.execution
        if reg.kind is SpotKind.INSTANCE:
            if execution is not None:
                problems.append(
                    f"instance spot type {st.value!r}: an Instance Spot has no members and "
                    f"takes no execution mode, got {execution!r}"
                )
                return False
            return True
        if not isinstance(execution, PerActor | SpotWide):
            problems.append(
                f"user spot type {st.value!r}: execution must be PerActor() or SpotWide(), "
                f"got {execution!r}"
            )
            return False
        if isinstance(execution, PerActor) and not isinstance(policy, RecreateOnRelocation):
            problems.append(
                f"user spot type {st.value!r}: a PerActor Spot allows RecreateOnRelocation "
                f"only, got {policy!r}"
            )
            return False
        return True

    def _validate_callbacks(
        self, types: Mapping[StableType, _Registration], problems: list[str]
    ) -> dict[StableType, dict[SpotCallback, SpotCallbackFn]]:
        tables: dict[StableType, dict[SpotCallback, SpotCallbackFn]] = {st: {} for st in types}
        for raw, callback, fn in self._callbacks:
            st = parse_type(raw, "spot", problems)
            if st is None:
                continue
            if st not in tables:
                problems.append(f"callback for unregistered spot type {st.value!r}")
                continue
            if not isinstance(callback, SpotCallback):
                problems.append(f"spot type {st.value!r}: {callback!r} is not a SpotCallback")
                continue
            if callback in MEMBERSHIP_CALLBACKS and types[st].kind is SpotKind.INSTANCE:
                problems.append(
                    f"instance spot type {st.value!r}: an Instance Spot has no Actor "
                    f"membership, so no {callback.value} callback"
                )
                continue
            if callback in tables[st]:
                problems.append(
                    f"spot type {st.value!r}: {callback.value} callback registered twice"
                )
                continue
            if not is_async_callable(fn):
                problems.append(
                    f"spot type {st.value!r}: the {callback.value} callback must be an async def"
                )
                continue
            shape = call_shape_problem(fn)
            if shape is not None:
                problems.append(f"spot type {st.value!r}: the {callback.value} callback: {shape}")
                continue
            tables[st][callback] = fn
        return tables
