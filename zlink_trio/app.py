"""The application object: everything a server hosts is registered here before serving.

Registration only records; :meth:`App.validate` (called by ``open_server`` at startup) turns
every problem into one :class:`~zlink_trio.errors.ConfigurationError`, so a misconfigured
server never starts.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, final

import attrs

from .actors.bindings import OnDisconnectActor
from .actors.handlers import MessageKind
from .actors.policy import RelocationPolicy
from .actors.registry import ActorHandler, ActorRegistry, ActorType, ActorTypes
from .errors import ConfigurationError
from .ids import StableType, check_text_id
from .objects.handlers import typed_handler
from .objects.registry import Handler
from .spots.approval import OnCreateActor
from .spots.execution import ExecutionMode
from .spots.lifecycle import SpotCallback, SpotCallbackFn
from .spots.registry import SpotRegistry, SpotTypes
from .spots.spot_kind import SpotKind
from .stream.server import Authenticate, OnSessionOpen, OnSessionReplaced, StreamCallbacks
from .stream.session import PacketRoute
from .wire.payloads import PayloadRegistry, build_registry

__all__ = ["ActorHandler", "ActorType", "App", "ValidatedApp"]

PacketHandler = Callable[..., Awaitable[Any]]


@attrs.frozen
class ValidatedApp:
    actor_dispatch: bool
    actor_types: ActorTypes
    on_create_actor: OnCreateActor | None
    packet_handlers: Mapping[str, PacketHandler]
    payloads: PayloadRegistry = attrs.field(factory=PayloadRegistry)
    """The payload codecs (``App.register_codec``): one registry for every message kind."""
    spot_types: SpotTypes = attrs.field(factory=dict)
    """The registered User and Instance Spot types (``App.register_spot``)."""
    stream: StreamCallbacks = attrs.field(factory=StreamCallbacks)
    """The STREAM session callbacks and the typed packet handlers."""
    on_disconnect_actor: OnDisconnectActor | None = None
    """The Entry Spot's OnDisconnectActor callback (``App.on_disconnect_actor``)."""

    @property
    def hosted_actor_types(self) -> frozenset[StableType]:
        """The stable types a SERVER mesh descriptor of this node publishes."""
        return frozenset(self.actor_types)

    @property
    def hosted_user_spot_types(self) -> frozenset[StableType]:
        """The User Spot types a SERVER mesh descriptor publishes (``spot_types``)."""
        return frozenset(st for st, t in self.spot_types.items() if t.kind is SpotKind.USER)

    @property
    def hosted_instance_spot_types(self) -> frozenset[StableType]:
        """The Instance Spot types a SERVER mesh descriptor publishes (``instance_types``)."""
        return frozenset(st for st, t in self.spot_types.items() if t.kind is SpotKind.INSTANCE)


@final
class App:
    """Registrations of one server: Actor types, handlers, Entry Spot callbacks, packets,
    User and Instance Spot types.

    The Actor part is an :class:`~zlink_trio.actors.registry.ActorRegistry`, the Spot part
    a :class:`~zlink_trio.spots.registry.SpotRegistry`; this object composes them with the
    Entry Spot callback and the STREAM packet handlers."""

    def __init__(self) -> None:
        self._actor_dispatch = False
        self._actors = ActorRegistry()
        self._spots = SpotRegistry()
        self._packet_handlers: list[tuple[object, PacketHandler]] = []
        self._on_create_actor: list[OnCreateActor] = []
        self._codecs: list[tuple[object, str | None]] = []
        self._session_callbacks: dict[str, list[Callable[..., Awaitable[Any]]]] = {
            "authenticate": [],
            "on_session_open": [],
            "on_session_replaced": [],
            "on_disconnect_actor": [],
        }

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
        marked with ``@on_send`` / ``@on_request`` become the type's handlers (and its
        ``@on_timer`` methods the handlers of its timers).
        """
        self._actors.register_actor(stable_type, factory, relocation=relocation)

    def register_actor_handler(
        self, stable_type: str, kind: MessageKind, packet: str, handler: ActorHandler
    ) -> None:
        """Register a function handler ``async def handler(actor, payload)``."""
        self._actors.register_handler(stable_type, kind, packet, handler)

    def register_actor_timer_handler(
        self, stable_type: str, name: str, handler: ActorHandler
    ) -> None:
        """Register a function handler ``async def handler(actor, payload: bytes)`` for the
        Actor timer ``name`` (the function form of ``@on_timer(name)``)."""
        self._actors.register_timer_handler(stable_type, name, handler)

    def register_spot(
        self,
        stable_type: str,
        factory: Callable[[Any], Any],
        *,
        kind: SpotKind = SpotKind.USER,
        execution: ExecutionMode | None = None,
        relocation: RelocationPolicy,
    ) -> None:
        """Register a User or Instance Spot stable type with its factory, execution mode
        and REQUIRED relocation policy.

        ``factory(context)`` receives only the :class:`~zlink_trio.SpotContext` and must
        return a Spot whose ``context`` attribute is that very object. When ``factory`` is
        a class, its ``@on_send`` / ``@on_request`` methods become the type's handlers and
        its ``@on_lifecycle(SpotCallback.X)`` methods its lifecycle callbacks.
        ``execution`` (PerActor() or SpotWide()) is required for ``SpotKind.USER`` and
        refused for ``SpotKind.INSTANCE``; a PerActor Spot allows RecreateOnRelocation only.
        """
        self._spots.register_spot(
            stable_type, factory, kind=kind, execution=execution, relocation=relocation
        )

    def register_spot_handler(
        self, stable_type: str, kind: MessageKind, packet: str, handler: Handler
    ) -> None:
        """Register a Spot function handler ``async def handler(spot, payload)``."""
        self._spots.register_handler(stable_type, kind, packet, handler)

    def register_spot_timer_handler(self, stable_type: str, name: str, handler: Handler) -> None:
        """Register a function handler ``async def handler(spot, payload: bytes)`` for the
        Spot timer ``name`` (the function form of ``@on_timer(name)``)."""
        self._spots.register_timer_handler(stable_type, name, handler)

    def register_spot_callback(
        self, stable_type: str, callback: SpotCallback, fn: SpotCallbackFn
    ) -> None:
        """Register a Spot lifecycle callback ``async def fn(spot, argument)`` (see
        :class:`~zlink_trio.SpotCallback` for the argument and the result of each)."""
        self._spots.register_callback(stable_type, callback, fn)

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

    def authenticate(self, fn: Authenticate) -> Authenticate:
        """Decorator: the STREAM authentication callback ``async def fn(request:
        AuthRequest) -> Authenticated | None``. It decides the session's domain Actor
        identity and type (spec 02 §1 step 1); None refuses the session. Without one,
        every session is refused."""
        self._session_callbacks["authenticate"].append(fn)
        return fn

    def on_session_open(self, fn: OnSessionOpen) -> OnSessionOpen:
        """Decorator: ``async def fn(session)``, the first lifecycle turn of every
        session (after the identity's automatic bind); raising refuses the session."""
        self._session_callbacks["on_session_open"].append(fn)
        return fn

    def on_session_replaced(self, fn: OnSessionReplaced) -> OnSessionReplaced:
        """Decorator: the duplicate-connection callback ``async def fn(session,
        SessionReplaced)``: a binding of this session moved to another connection, so
        it is closing (it may still ``session.send`` a notice; the connection closes
        100 ms after the callback's terminal; spec 02 §6)."""
        self._session_callbacks["on_session_replaced"].append(fn)
        return fn

    def on_disconnect_actor(self, fn: OnDisconnectActor) -> OnDisconnectActor:
        """Decorator: the Entry Spot's OnDisconnectActor ``async def fn(event:
        DisconnectEvent)``: a session binding of an Actor in an Entry Spot ended (a
        physical disconnect or NotifyDisconnected), once per binding (spec 02 §7).
        A User Spot gets it as ``SpotCallback.DISCONNECT_ACTOR``."""
        self._session_callbacks["on_disconnect_actor"].append(fn)
        return fn

    def on_packet(self, key: str) -> Callable[[PacketHandler], PacketHandler]:
        """Decorator: a STREAM session packet handler ``async def fn(packet: Packet,
        payload)`` for ``key`` (``payload`` bytes or a registered payload class, and the
        reply likewise, as for Actor handlers)."""

        def decorate(fn: PacketHandler) -> PacketHandler:
            self._packet_handlers.append((key, fn))
            return fn

        return decorate

    def route_packet(self, key: str, *, packet: str | None = None) -> None:
        """Register the STREAM packet ``key`` as a relay to the Actor bound under the
        session's identity (its ``packet`` handler, default ``key``): no application
        callback runs for it, so the framework relays it straight from the connection's
        reader while the session has nothing else queued (else in its turn, in order). A
        key shares the namespace of ``on_packet`` (registered twice: ConfigurationError)."""
        target = None if packet is None else check_text_id(packet, "packet name")
        self._packet_handlers.append((key, PacketRoute(target)))

    # --- startup validation --------------------------------------------------------------
    def validate(self) -> ValidatedApp:
        """Check every registration; raise one ConfigurationError naming every problem."""
        payloads, problems = build_registry(self._codecs)
        actor_types = self._actors.validate(problems, payloads)
        spot_types = self._spots.validate(problems, payloads)
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
        typed: dict[str, PacketHandler] = {}
        for packet_key, packet_fn in packets.items():
            if isinstance(packet_fn, PacketRoute):
                typed[packet_key] = packet_fn
                continue
            if not inspect.iscoroutinefunction(packet_fn):
                problems.append(f"packet handler {packet_key!r} must be an async def")
                continue
            try:
                typed[packet_key] = typed_handler(packet_fn, payloads)
            except TypeError as exc:
                problems.append(f"packet handler {packet_key!r}: {exc}")
        callbacks = {}
        for name, fns in self._session_callbacks.items():
            if len(fns) > 1:
                problems.append(f"{name} registered more than once")
            for fn in fns:
                if not inspect.iscoroutinefunction(fn):
                    problems.append(f"{name} callback must be an async def")
            callbacks[name] = fns[0] if fns else None
        if problems:
            raise ConfigurationError("; ".join(problems))
        return ValidatedApp(
            actor_dispatch=self._actor_dispatch,
            actor_types=actor_types,
            on_create_actor=self._on_create_actor[0] if self._on_create_actor else None,
            packet_handlers=packets,
            payloads=payloads,
            spot_types=spot_types,
            stream=StreamCallbacks(
                authenticate=callbacks["authenticate"],
                on_open=callbacks["on_session_open"],
                on_replaced=callbacks["on_session_replaced"],
                packets=typed,
            ),
            on_disconnect_actor=callbacks["on_disconnect_actor"],
        )
