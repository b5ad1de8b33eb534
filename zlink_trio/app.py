"""The application object: everything a server hosts is registered here before serving.

Registration only records; :meth:`App.validate` (called by ``open_server`` at startup) turns
every problem into one :class:`~zlink_trio.errors.ConfigurationError`, so a misconfigured
server never starts.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast, final

import attrs

from .actors.approval import OnCreateActor
from .actors.handlers import HandlerKey, MessageKind, declared_handlers, typed_handler
from .actors.policy import (
    DisableRelocation,
    PreserveStateWith,
    RecreateOnRelocation,
    RelocationPolicy,
)
from .errors import ConfigurationError
from .ids import InvalidId, StableType, check_text_id
from .wire.payloads import PayloadRegistry, build_registry

__all__ = ["ActorHandler", "ActorType", "App", "ValidatedApp"]

ActorHandler = Callable[[Any, Any], Awaitable[Any]]
"""``async def handler(actor, payload) -> reply | None`` (bound methods drop ``actor``):
payload and reply are bytes, or registered payload classes (``App.register_codec``)."""

PacketHandler = Callable[..., Awaitable[Any]]

_POLICIES = (DisableRelocation, RecreateOnRelocation, PreserveStateWith)


@attrs.frozen
class ActorType:
    """One registered Actor stable type, validated."""

    stable_type: StableType
    factory: Callable[[Any], Any]
    relocation: RelocationPolicy
    handlers: Mapping[tuple[MessageKind, str], ActorHandler]


@attrs.frozen
class ValidatedApp:
    actor_dispatch: bool
    actor_types: Mapping[StableType, ActorType]
    on_create_actor: OnCreateActor | None
    packet_handlers: Mapping[str, PacketHandler]
    payloads: PayloadRegistry = attrs.field(factory=PayloadRegistry)
    """The payload codecs (``App.register_codec``): one registry for every message kind."""


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
class App:
    """Registrations of one server: Actor types, handlers, Entry Spot callbacks, packets."""

    def __init__(self) -> None:
        self._actor_dispatch = False
        self._actor_types: list[tuple[object, object, object]] = []
        self._actor_handlers: list[tuple[object, MessageKind, object, ActorHandler]] = []
        self._packet_handlers: list[tuple[object, PacketHandler]] = []
        self._on_create_actor: list[OnCreateActor] = []
        self._codecs: list[tuple[object, str | None]] = []

    # --- registration ------------------------------------------------------------------
    def enable_actor_dispatch(self) -> None:
        """Turn on global Actor dispatch. Takes no MeshName: the global ActorId authority
        finds the current mesh and owner. Startup then requires an Object Client/Server
        role and a Location Store."""
        self._actor_dispatch = True

    def register_actor(
        self,
        stable_type: str,
        factory: Callable[[Any], Any],
        *,
        relocation: RelocationPolicy,
    ) -> None:
        """Register a stable Actor type with its factory and REQUIRED relocation policy.

        ``factory(context)`` receives only the Actor Context and must return an Actor whose
        ``context`` attribute is that very object. When ``factory`` is a class, its methods
        marked with ``@on_send`` / ``@on_request`` become the type's handlers.
        """
        self._actor_types.append((stable_type, factory, relocation))
        if isinstance(factory, type):
            for kind, packet, name in declared_handlers(factory):
                self._actor_handlers.append(
                    (stable_type, kind, packet, _method_handler(factory, name))
                )

    def register_actor_handler(
        self, stable_type: str, kind: MessageKind, packet: str, handler: ActorHandler
    ) -> None:
        """Register a function handler ``async def handler(actor, payload)``."""
        self._actor_handlers.append((stable_type, kind, packet, handler))

    def register_codec(self, cls: type, *, name: str | None = None) -> None:
        """Register the frozen attrs class ``cls`` as a payload (and reply) type.

        Handlers may then declare it as their payload parameter or return type, and
        callers may pass its instances as payloads and state it as a request's
        ``reply_type``. ``name`` is its type name on the wire (default: the class's
        ``__qualname__``); every node must register the class under the same name.
        Registering a class twice, two classes under one name, a class with a field type
        a codec cannot carry, or a handler annotated with an unregistered class is a
        startup ConfigurationError.
        """
        self._codecs.append((cls, name))

    def on_create_actor(self, fn: OnCreateActor) -> OnCreateActor:
        """Decorator: the Entry Spot's OnCreateActor approval callback (default: approve)."""
        self._on_create_actor.append(fn)
        return fn

    def on_packet(self, key: str) -> Callable[[PacketHandler], PacketHandler]:
        """Decorator: a STREAM session packet handler for ``key``."""

        def decorate(fn: PacketHandler) -> PacketHandler:
            self._packet_handlers.append((key, fn))
            return fn

        return decorate

    # --- startup validation --------------------------------------------------------------
    def validate(self) -> ValidatedApp:
        """Check every registration; raise one ConfigurationError naming every problem."""
        payloads, problems = build_registry(self._codecs)
        types: dict[StableType, tuple[Callable[[Any], Any], RelocationPolicy]] = {}
        for raw, factory, policy in self._actor_types:
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
        for raw, kind, packet, fn in self._actor_handlers:
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
        packets: dict[str, PacketHandler] = {}
        for packet_key, packet_fn in self._packet_handlers:
            if not isinstance(packet_key, str) or not packet_key:
                problems.append(f"packet key {packet_key!r} must be a non-empty string")
            elif packet_key in packets:
                problems.append(f"packet handler key {packet_key!r} registered twice")
            else:
                packets[packet_key] = packet_fn
        if len(self._on_create_actor) > 1:
            problems.append("on_create_actor registered more than once")
        if problems:
            raise ConfigurationError("; ".join(problems))
        return ValidatedApp(
            actor_dispatch=self._actor_dispatch,
            actor_types={
                st: ActorType(st, factory, policy, handlers[st])
                for st, (factory, policy) in types.items()
            },
            on_create_actor=self._on_create_actor[0] if self._on_create_actor else None,
            packet_handlers=packets,
            payloads=payloads,
        )
