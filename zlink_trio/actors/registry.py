"""The Actor-specific registry: stable Actor types, their factories, relocation policies and
handler tables.

:class:`ActorRegistry` only records; :meth:`ActorRegistry.validate` appends every problem to
the caller's list and returns the validated :class:`ActorType` table. The application-facing
:class:`~zlink_trio.app.App` composes one registry (with the Spot and packet registrations
beside it), so the Actor runtime depends on this module and never on ``app``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, final

import attrs

from ..ids import StableType
from ..objects.handlers import MessageKind
from ..objects.policy import RelocationPolicy
from ..objects.registry import Handler, HandlerRegistrations, check_policy, parse_type
from ..wire.payloads import PayloadRegistry

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


ActorTypes = Mapping[StableType, ActorType]
"""The validated Actor types of one server, by stable type."""


@final
class ActorRegistry:
    """Actor type and handler registrations (unvalidated until :meth:`validate`)."""

    def __init__(self) -> None:
        self._types: list[tuple[object, object, object]] = []
        self._handlers = HandlerRegistrations("actor")

    def register_actor(
        self, stable_type: str, factory: Callable[[Any], Any], *, relocation: RelocationPolicy
    ) -> None:
        """Record a type; a class factory's ``@on_send`` / ``@on_request`` methods become
        the type's handlers."""
        self._types.append((stable_type, factory, relocation))
        self._handlers.add_class(stable_type, factory)

    def register_handler(
        self, stable_type: str, kind: MessageKind, packet: str, handler: ActorHandler
    ) -> None:
        """Record a function handler ``async def handler(actor, payload)``."""
        self._handlers.add(stable_type, kind, packet, handler)

    def validate(self, problems: list[str], payloads: PayloadRegistry) -> ActorTypes:
        """The validated types (typed handlers wrapped with their ``payloads`` codecs);
        every problem found is appended to ``problems``."""
        problems.extend(self._handlers.recorded_problems)
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
        return {
            st: ActorType(st, factory, policy, handlers[st])
            for st, (factory, policy) in types.items()
        }
