"""Send to and request Actors by ActorId: the only message target (spec 04 §5).

Used by ``server.actors`` and by Actor handlers through ``context.actors``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from ..errors import InvalidOperation
from ..ids import ActorId, check_text_id
from ..wire.enums import MessageKind
from .calls import FluentCall

if TYPE_CHECKING:
    from .messenger import Messenger

__all__ = ["ActorClient", "RequestCall", "SendCall"]


@final
class SendCall(FluentCall[None]):
    """A one-way send: completes once the payload was admitted (locally, or queued to the
    owner's connection)."""

    __slots__ = ()


@final
class RequestCall(FluentCall[bytes | None]):
    """A request: completes once with the handler's reply or a typed error."""

    __slots__ = ()


@final
class ActorClient:
    __slots__ = ("_default_timeout", "_max_request", "_messenger")

    def __init__(self, messenger: Messenger, *, max_request: int, default_timeout: float) -> None:
        self._messenger = messenger
        self._max_request = max_request
        self._default_timeout = default_timeout

    def _check(self, actor_id: object, packet: str, payload: bytes) -> tuple[ActorId, str, bytes]:
        target = ActorId.parse(actor_id)
        check_text_id(packet, "packet name")
        if not isinstance(payload, bytes | bytearray | memoryview):
            raise InvalidOperation(f"payload must be bytes, got {type(payload).__name__}")
        if len(payload) > self._max_request:
            raise InvalidOperation(f"payload of {len(payload)} bytes exceeds {self._max_request}")
        return target, packet, bytes(payload)

    def send(self, actor_id: str | ActorId, packet: str, payload: bytes = b"") -> SendCall:
        """One-way ``packet`` to the Actor ``actor_id``. Await it (or ``.submit()``)."""
        target, name, data = self._check(actor_id, packet, payload)
        messenger = self._messenger

        async def run(_call: SendCall, deadline: float) -> None:
            await messenger.deliver(target, MessageKind.SEND, name, data, deadline)

        return SendCall(run, self._default_timeout)

    def request(self, actor_id: str | ActorId, packet: str, payload: bytes = b"") -> RequestCall:
        """Request ``packet`` of the Actor ``actor_id``; the reply bytes (or None)."""
        target, name, data = self._check(actor_id, packet, payload)
        messenger = self._messenger

        async def run(_call: RequestCall, deadline: float) -> bytes | None:
            return await messenger.deliver(target, MessageKind.REQUEST, name, data, deadline)

        return RequestCall(run, self._default_timeout)
