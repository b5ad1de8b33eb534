"""Send to and request Actors by ActorId: the only message target (spec 04 §5).

Used by ``server.actors`` and by Actor handlers through ``context.actors``. A payload is
bytes or an instance of a registered payload class (``App.register_codec``), checked here,
before anything is sent; a request's reply is bytes, or with ``.reply_type(cls)`` an
instance of ``cls``.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast, final

from ..errors import InvalidOperation
from ..ids import ActorId, check_text_id
from ..objects.calls import FluentCall, message_payload
from ..wire.payloads import EMPTY_REGISTRY, PayloadCodec, PayloadRegistry, TypedPayload

if TYPE_CHECKING:
    from ..spots.client import SpotClient
    from .bindings import ActorBindings
    from .join import JoinRegistrar
    from .messenger import Messenger

__all__ = ["ActorClient", "RequestCall", "SendCall"]

R = TypeVar("R")
T = TypeVar("T")

_PARSED_MAX: Final = 4096
"""Validated ActorIds and packet names remembered per client (cleared when full): a
hot loop of calls to the same Actor validates its id once, not per message."""


class _MessageCall(FluentCall[R]):
    """A message to one Actor: the target, packet and payload it carries."""

    __slots__ = ("_messenger", "_packet", "_payload", "_target")

    def __init__(
        self,
        messenger: Messenger,
        target: ActorId,
        packet: str,
        payload: bytes | TypedPayload,
        default_timeout: float,
    ) -> None:
        super().__init__(default_timeout)
        self._messenger = messenger
        self._target = target
        self._packet = packet
        self._payload = payload


@final
class SendCall(_MessageCall[None]):
    """A one-way send: completes once the payload was admitted (locally, or queued to the
    owner's connection)."""

    __slots__ = ()

    def _begin(self) -> Coroutine[Any, Any, None]:
        """Run the send (once): ``await call.submit()`` (or ``await call``)."""
        # A send's deadline bounds its admission only (an accepted send never expires,
        # and no owner reads it), and its waits are all nested inside the caller's cancel
        # scopes, which therefore bound it already: the caller's effective deadline need
        # not be looked up (it costs a walk over every enclosing scope, ~2-5 us, on the
        # hottest path). Same outcomes: own timeout first → Unavailable; the caller's
        # scope first (or at the same instant: the outermost scope takes it) → its own.
        if self._submitted:
            raise InvalidOperation("the call was already submitted")
        self._submitted = True
        return self._messenger.send(
            self._target, self._packet, self._payload, self._messenger.now() + self._timeout
        )

    submit = _begin  # (FluentCall.submit, without its frame around _begin: per message)


@final
class RequestCall(_MessageCall[R]):
    """A request: completes once with the handler's reply or a typed error. The reply is
    bytes (or None) unless :meth:`reply_type` states its class."""

    __slots__ = ("_payloads", "_reply")

    def __init__(
        self,
        messenger: Messenger,
        target: ActorId,
        packet: str,
        payload: bytes | TypedPayload,
        default_timeout: float,
        payloads: PayloadRegistry,
    ) -> None:
        # (Every field set here rather than through the two base ``__init__``: one call
        # instead of three per request.)
        self._timeout = default_timeout
        self._options = 0
        self._submitted = False
        self._messenger = messenger
        self._target = target
        self._packet = packet
        self._payload = payload
        self._payloads = payloads
        self._reply: PayloadCodec[Any] | None = None

    def reply_type(self, cls: type[T]) -> RequestCall[T]:
        """The reply is an instance of the registered payload class ``cls`` (decoded from
        a remote reply, handed over as it is from a local one); any other reply ends the
        request with InvalidOperation."""
        bit = self._option("reply_type")
        codec = self._payloads.get(cls)
        if codec is None:
            raise InvalidOperation(f"reply_type {cls!r} is not a registered payload class")
        self._reply = codec
        self._options |= bit
        return cast("RequestCall[T]", self)

    def _begin(self) -> Coroutine[Any, Any, R]:
        """Run the request (once): ``await call.submit()`` (or ``await call``)."""
        # The caller's effective deadline (a walk over every enclosing cancel scope,
        # ~1.5 us) is looked up by the delivery only where it matters: before a request
        # leaves for a remote owner (its deadline travels), before it is queued behind
        # other work of a local Actor, and when it ends DeadlineExceeded. A local request
        # to an idle Actor starts before the clock can move; if the caller's scope ends the
        # wait first, the queued request is abandoned (it never starts). Same outcomes as
        # fixing min(own, caller's) at submit (FluentCall._begin).
        if self._submitted:
            raise InvalidOperation("the call was already submitted")
        self._submitted = True
        return self._messenger.request(
            self._target,
            self._packet,
            self._payload,
            self._messenger.now() + self._timeout,
            self._reply,
        )

    submit = _begin  # (FluentCall.submit, without its frame around _begin: per request)


@final
class ActorClient:
    __slots__ = (
        "_default_timeout",
        "_ids",
        "_max_request",
        "_messenger",
        "_packets",
        "_payloads",
        "barriers",
        "bindings",
        "spots",
    )

    def __init__(
        self,
        messenger: Messenger,
        *,
        max_request: int,
        default_timeout: float,
        payloads: PayloadRegistry = EMPTY_REGISTRY,
        spots: SpotClient | None = None,
    ) -> None:
        self.spots = spots
        """The Spot direct-call client Actor handlers use (``context.spots``)."""
        self._messenger = messenger
        self._payloads = payloads
        self._max_request = max_request
        self._default_timeout = default_timeout
        self._ids: dict[str, ActorId] = {}
        self._packets: set[str] = set()
        self.barriers: JoinRegistrar | None = None
        """Refuses a request that would wait behind its own handler's Join barrier."""
        self.bindings: ActorBindings | None = None
        """The Actor owner's session bindings (``context.session``), set by the runtime."""

    def _target(self, actor_id: object) -> ActorId:
        if type(actor_id) is not str:
            return ActorId.parse(actor_id)
        target = self._ids.get(actor_id)
        if target is None:
            target = ActorId.parse(actor_id)
            if len(self._ids) >= _PARSED_MAX:
                self._ids.clear()
            self._ids[actor_id] = target
        return target

    def _packet(self, packet: object) -> str:
        if type(packet) is str and packet in self._packets:
            return packet
        name = check_text_id(packet, "packet name")
        if len(self._packets) >= _PARSED_MAX:
            self._packets.clear()
        self._packets.add(name)
        return name

    def _content(self, packet: object, payload: object) -> tuple[str, bytes | TypedPayload]:
        """A message's checked packet name and payload, their common cases inline."""
        if type(packet) is not str or packet not in self._packets:
            packet = self._packet(packet)
        if type(payload) is bytes and len(payload) <= self._max_request:
            return packet, payload  # the common case, without a call
        return packet, message_payload(payload, self._payloads, self._max_request)

    def send(self, actor_id: str | ActorId, packet: str, payload: object = b"") -> SendCall:
        """One-way ``packet`` to the Actor ``actor_id``: ``payload`` is bytes or an
        instance of a registered payload class. Await it (or ``.submit()``)."""
        # (_target's common case inline, then packet and payload in one call: per message.)
        target = self._ids.get(actor_id) if type(actor_id) is str else None
        if target is None:
            target = self._target(actor_id)
        packet, data = self._content(packet, payload)
        return SendCall(self._messenger, target, packet, data, self._default_timeout)

    def request(
        self, actor_id: str | ActorId, packet: str, payload: object = b""
    ) -> RequestCall[bytes | None]:
        """Request ``packet`` of the Actor ``actor_id``; the reply bytes (or None), or with
        ``.reply_type(cls)`` an instance of ``cls``. InvalidOperation, before anything is
        sent, when this handler registered a deferred Join of that Actor (the request
        would wait behind its barrier for ever)."""
        # (_target's common case inline, then packet and payload in one call: per message.)
        target = self._ids.get(actor_id) if type(actor_id) is str else None
        if target is None:
            target = self._target(actor_id)
        barriers = self.barriers
        if barriers is not None and barriers.open:
            barriers.check_request(target)
        packet, data = self._content(packet, payload)
        return RequestCall(
            self._messenger, target, packet, data, self._default_timeout, self._payloads
        )
