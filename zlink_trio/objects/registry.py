"""Registration steps every registered object kind shares (Actor types, Spot types).

A kind's registry records its types (stable type, factory, relocation policy, its own
extras) and their handlers, then validates everything at startup into one problem list
(``App.validate`` raises one ConfigurationError naming them all). What is the same for
every kind lives here:

* :class:`HandlerRegistrations` — handlers by (stable type, message kind, packet name):
  the ``@on_send`` / ``@on_request`` methods of a class factory and function handlers,
  validated into one table per type (a key registered twice, a handler for an unregistered
  type, a non-``async def`` method or an annotation that is neither bytes nor a registered
  payload class is a problem; typed handlers are wrapped once, here);
* :func:`parse_type` and :func:`check_policy` — the stable type name and the REQUIRED
  relocation policy of one registration (a ``PreserveStateWith`` adapter must have
  ``async def capture`` and ``restore``).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final, final

from ..ids import InvalidId, StableType, check_text_id
from ..wire.payloads import PayloadRegistry
from .handlers import (
    HandlerKey,
    MessageKind,
    call_shape_problem,
    declared_handlers,
    is_async_callable,
    method_handler,
    typed_handler,
)
from .policy import DisableRelocation, PreserveStateWith, RecreateOnRelocation, RelocationPolicy

__all__ = [
    "ADAPTER_METHODS",
    "POLICIES",
    "Handler",
    "HandlerRegistrations",
    "HandlerTable",
    "check_policy",
    "parse_type",
]

Handler = Callable[[Any, Any], Awaitable[Any]]
"""``async def handler(obj, payload) -> reply | None`` (bound methods drop ``obj``)."""

HandlerTable = Mapping[tuple[MessageKind, str], Handler]
"""One type's handlers by (message kind, packet name)."""

POLICIES: Final = (DisableRelocation, RecreateOnRelocation, PreserveStateWith)

ADAPTER_METHODS: Final = ("capture", "restore")
"""What a relocation adapter provides (``RelocationAdapter``): both ``async def``."""


def parse_type(raw: object, noun: str, problems: list[str]) -> StableType | None:
    """The stable type ``raw`` names, or None (the problem appended)."""
    try:
        return StableType.parse(raw)
    except InvalidId as exc:
        problems.append(f"{noun} type {raw!r}: {exc}")
        return None


def check_policy(
    stable_type: StableType, noun: str, policy: object, problems: list[str]
) -> RelocationPolicy | None:
    """``policy`` when it is one of the three relocation policies, else None (the problem
    appended): there is no default and no other value."""
    if isinstance(policy, PreserveStateWith):
        missing = [
            name
            for name in ADAPTER_METHODS
            if not is_async_callable(getattr(policy.adapter, name, None))
        ]
        if missing:
            problems.append(
                f"{noun} type {stable_type.value!r}: PreserveStateWith needs a relocation "
                "adapter with async capture(obj) -> bytes and async restore(obj, payload), "
                f"got {policy.adapter!r} (no async {' / '.join(missing)})"
            )
            return None
        return policy
    if isinstance(policy, POLICIES):
        return policy
    problems.append(
        f"{noun} type {stable_type.value!r}: relocation must be DisableRelocation, "
        f"RecreateOnRelocation or PreserveStateWith(adapter), got {policy!r}"
    )
    return None


@final
class HandlerRegistrations:
    """Handler registrations of one kind (unvalidated until :meth:`validate`)."""

    def __init__(self, noun: str) -> None:
        self._noun = noun
        self._handlers: list[tuple[object, MessageKind, object, Handler]] = []
        self._problems: list[str] = []

    def add_class(self, stable_type: object, cls: object) -> None:
        """Record the ``@on_send`` / ``@on_request`` methods of ``cls`` (a class factory)."""
        if not isinstance(cls, type):
            return
        for kind, packet, name in declared_handlers(cls):
            method = inspect.getattr_static(cls, name, None)
            if inspect.isfunction(method) and not inspect.iscoroutinefunction(method):
                self._problems.append(
                    f"{self._noun} type {stable_type!r}: handler {cls.__qualname__}.{name} "
                    f"({kind.name.lower()} {packet!r}) must be an async def"
                )
                continue
            self._handlers.append((stable_type, kind, packet, method_handler(cls, name)))

    def add(self, stable_type: object, kind: MessageKind, packet: object, handler: Handler) -> None:
        """Record a function handler ``async def handler(obj, payload)``."""
        self._handlers.append((stable_type, kind, packet, handler))

    @property
    def recorded_problems(self) -> tuple[str, ...]:
        """Problems found while recording (a marked method that is not an async def):
        a registry reports them first."""
        return tuple(self._problems)

    def validate(
        self, types: Iterable[StableType], problems: list[str], payloads: PayloadRegistry
    ) -> dict[StableType, dict[tuple[MessageKind, str], Handler]]:
        """The handler table of each of ``types`` (the validated types of the kind);
        every problem found is appended to ``problems``."""
        tables: dict[StableType, dict[tuple[MessageKind, str], Handler]] = {st: {} for st in types}
        for raw, kind, packet, fn in self._handlers:
            try:
                st = StableType.parse(raw)
                name = check_text_id(packet, "packet name")
            except InvalidId as exc:
                problems.append(f"handler {raw!r}/{packet!r}: {exc}")
                continue
            if st not in tables:
                problems.append(f"handler for unregistered {self._noun} type {st.value!r}")
                continue
            if (kind, name) in tables[st]:
                problems.append(f"handler key {HandlerKey(st, kind, name)!r} registered twice")
                continue
            if not is_async_callable(fn):
                problems.append(
                    f"handler {HandlerKey(st, kind, name)!r}: {fn!r} must be an async def"
                )
                continue
            shape = call_shape_problem(fn)
            if shape is not None:
                problems.append(f"handler {HandlerKey(st, kind, name)!r}: {shape}")
                continue
            try:
                tables[st][(kind, name)] = typed_handler(fn, payloads)
            except TypeError as exc:
                problems.append(f"handler {HandlerKey(st, kind, name)!r}: {exc}")
        return tables
