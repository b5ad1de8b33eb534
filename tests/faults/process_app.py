"""The application the ``zlink-trio node`` processes of tests/faults host
(``--app process_app:app``; the test puts this directory on the process's PYTHONPATH)."""

from __future__ import annotations

from typing import Any

from zlink_trio import App
from zlink_trio.actors.handlers import on_request, on_send
from zlink_trio.actors.policy import RecreateOnRelocation


class Cart:
    def __init__(self, context: Any) -> None:
        self.context = context
        self.notes: list[bytes] = []

    @on_request("echo")
    async def echo(self, payload: bytes) -> bytes:
        return payload

    @on_send("note")
    async def note(self, payload: bytes) -> None:
        self.notes.append(payload)


def app() -> App:
    """Hosts the Actor type ``cart``."""
    application = App()
    application.enable_actor_dispatch()
    application.register_actor("cart", Cart, relocation=RecreateOnRelocation())
    return application


def stream_app() -> App:
    """A STREAM session application: every credential is accepted as an Actor of type
    ``cart``; the packet ``echo`` is answered by the session's own handler."""
    from zlink_trio.stream import Authenticated, Packet

    application = app()

    @application.authenticate
    async def authenticate(request: Any) -> Authenticated:
        return Authenticated(request.credentials.decode(), "cart")

    @application.on_packet("echo")
    async def echo(packet: Packet, payload: bytes) -> bytes:
        return b"echo:" + payload

    return application
