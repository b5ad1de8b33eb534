from __future__ import annotations

from typing import Any

import pytest

from zlink_trio import ConfigurationError, StableType
from zlink_trio.actors.handlers import MessageKind, on_request, on_send
from zlink_trio.actors.policy import DisableRelocation, RecreateOnRelocation
from zlink_trio.app import App


class Counter:
    def __init__(self, context: Any) -> None:
        self.context = context
        self.n = 0

    @on_send("inc")
    async def inc(self, payload: bytes) -> None:
        self.n += 1

    @on_request("get")
    async def get(self, payload: bytes) -> bytes:
        return str(self.n).encode()


def test_class_handlers_are_collected() -> None:
    app = App()
    app.register_actor("counter", Counter, relocation=RecreateOnRelocation())
    v = app.validate()
    t = v.actor_types[StableType("counter")]
    assert set(t.handlers) == {(MessageKind.SEND, "inc"), (MessageKind.REQUEST, "get")}


def test_same_stable_type_twice_is_a_configuration_error() -> None:
    app = App()
    app.register_actor("counter", Counter, relocation=RecreateOnRelocation())
    app.register_actor("counter", Counter, relocation=DisableRelocation())
    with pytest.raises(ConfigurationError, match="registered twice"):
        app.validate()


def test_duplicate_handler_key_is_a_configuration_error() -> None:
    app = App()
    app.register_actor("counter", Counter, relocation=RecreateOnRelocation())

    async def other(actor: Any, payload: bytes) -> bytes:
        return b""

    app.register_actor_handler("counter", MessageKind.REQUEST, "get", other)
    with pytest.raises(ConfigurationError, match="registered twice"):
        app.validate()


def test_duplicate_packet_key_is_a_configuration_error() -> None:
    app = App()

    @app.on_packet("login")
    async def a() -> None: ...

    @app.on_packet("login")
    async def b() -> None: ...

    with pytest.raises(ConfigurationError, match="packet handler key"):
        app.validate()


def test_relocation_policy_is_required_and_typed() -> None:
    app = App()
    with pytest.raises(TypeError):
        app.register_actor("counter", Counter)  # type: ignore[call-arg]
    app.register_actor("counter", Counter, relocation=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="relocation must be"):
        app.validate()


def test_invalid_stable_type() -> None:
    app = App()
    app.register_actor("", Counter, relocation=RecreateOnRelocation())
    with pytest.raises(ConfigurationError):
        app.validate()
