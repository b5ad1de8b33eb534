from __future__ import annotations

import functools
from typing import Any

import pytest

from zlink_trio import ConfigurationError, StableType
from zlink_trio.actors.handlers import MessageKind, on_request, on_send
from zlink_trio.actors.policy import DisableRelocation, PreserveStateWith, RecreateOnRelocation
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


def _plain_handler(actor: Any, payload: bytes) -> bytes:
    return payload


async def _async_handler(actor: Any, payload: bytes) -> bytes:
    return payload


@pytest.mark.parametrize(
    "handler",
    [
        pytest.param(_plain_handler, id="plain-def"),
        pytest.param(lambda actor, payload: None, id="lambda"),
        pytest.param(functools.partial(_plain_handler), id="partial-of-plain-def"),
    ],
)
def test_a_non_async_actor_function_handler_is_a_configuration_error(handler: Any) -> None:
    """docs/api.md ("Handlers are async def"): a function handler that is a plain def, a
    lambda or a partial of one is refused at startup (Actors and Spots share the check)."""
    app = App()
    app.register_actor("counter", Counter, relocation=RecreateOnRelocation())
    app.register_actor_handler("counter", MessageKind.REQUEST, "echo", handler)
    with pytest.raises(ConfigurationError, match="must be an async def"):
        app.validate()


def test_an_async_partial_function_handler_is_accepted() -> None:
    app = App()
    app.register_actor("counter", Counter, relocation=RecreateOnRelocation())
    app.register_actor_handler(
        "counter", MessageKind.REQUEST, "echo", functools.partial(_async_handler)
    )
    t = app.validate().actor_types[StableType("counter")]
    assert (MessageKind.REQUEST, "echo") in t.handlers


class _SyncAdapter:
    def capture(self, actor: Any) -> bytes:
        return b""

    async def restore(self, actor: Any, payload: bytes) -> None:
        return None


@pytest.mark.parametrize(
    "adapter",
    [None, 42, _SyncAdapter()],
    ids=["none", "int", "sync-capture"],
)
def test_preserve_state_needs_an_async_adapter(adapter: Any) -> None:
    """PreserveStateWith(adapter) needs async capture and restore (RelocationAdapter)."""
    app = App()
    app.register_actor("counter", Counter, relocation=PreserveStateWith(adapter))
    with pytest.raises(ConfigurationError, match="PreserveStateWith needs a relocation adapter"):
        app.validate()


async def _no_payload(actor: Any) -> None:
    return None


def test_a_timer_handler_that_cannot_take_its_payload_is_a_configuration_error() -> None:
    """Timer handlers are called (owner, payload): a function timer handler without the
    payload parameter, or a partial of a plain def, is refused at startup."""
    app = App()
    app.register_actor("counter", Counter, relocation=RecreateOnRelocation())
    app.register_actor_timer_handler("counter", "tick", _no_payload)
    app.register_actor_timer_handler("counter", "tock", functools.partial(_plain_handler))
    with pytest.raises(ConfigurationError) as caught:
        app.validate()
    assert "cannot take (owner, payload)" in str(caught.value)
    assert "timer handler 'tock' must be an async def" in str(caught.value)


def test_a_message_handler_that_cannot_take_its_payload_is_a_configuration_error() -> None:
    app = App()
    app.register_actor("counter", Counter, relocation=RecreateOnRelocation())
    app.register_actor_handler("counter", MessageKind.SEND, "x", _no_payload)
    with pytest.raises(ConfigurationError, match=r"cannot take \(owner, payload\)"):
        app.validate()
