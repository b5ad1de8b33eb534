"""Startup validation of Spot registrations (App.register_spot and friends): every problem
is one ConfigurationError naming it, before anything starts."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from zlink_trio import (
    App,
    ConfigurationError,
    DisableRelocation,
    MessageKind,
    PerActor,
    PreserveStateWith,
    RecreateOnRelocation,
    SpotCallback,
    SpotKind,
    SpotWide,
    StableType,
    on_lifecycle,
    on_request,
    on_send,
)
from zlink_trio.objects.handlers import TypedHandler


class _Adapter:
    async def capture(self, actor: Any) -> bytes:
        return b""

    async def restore(self, actor: Any, payload: bytes) -> None:
        return None


@attrs.frozen
class Ping:
    n: int


class Room:
    def __init__(self, context: Any) -> None:
        self.context = context

    @on_request("members")
    async def members(self, payload: bytes) -> bytes:
        return payload

    @on_send("chat")
    async def chat(self, payload: bytes) -> None:
        return None

    @on_request("ping")
    async def ping(self, payload: Ping) -> Ping:
        return payload

    @on_lifecycle(SpotCallback.CREATE)
    async def created(self, request: bytes | None) -> None:
        return None

    @on_lifecycle(SpotCallback.JOIN)
    async def join(self, event: object) -> None:
        return None


class Cart:
    def __init__(self, context: Any) -> None:
        self.context = context

    @on_request("add")
    async def add(self, payload: bytes) -> bytes:
        return payload


def _app() -> App:
    app = App()
    app.register_codec(Ping)
    return app


def _problem(app: App) -> str:
    with pytest.raises(ConfigurationError) as info:
        app.validate()
    return str(info.value)


def test_a_valid_registration_is_published_by_kind() -> None:
    app = _app()
    app.register_spot("room", Room, execution=SpotWide(), relocation=RecreateOnRelocation())
    app.register_spot(
        "cart", Cart, kind=SpotKind.INSTANCE, relocation=PreserveStateWith(_Adapter())
    )

    async def leave(spot: Any, event: object) -> None:
        return None

    app.register_spot_callback("room", SpotCallback.LEAVE, leave)
    validated = app.validate()
    room = validated.spot_types[StableType("room")]
    assert room.kind is SpotKind.USER and room.execution == SpotWide()
    assert set(room.handlers) == {
        (MessageKind.REQUEST, "members"),
        (MessageKind.SEND, "chat"),
        (MessageKind.REQUEST, "ping"),
    }
    assert isinstance(room.handlers[(MessageKind.REQUEST, "ping")], TypedHandler)
    assert set(room.callbacks) == {SpotCallback.CREATE, SpotCallback.JOIN, SpotCallback.LEAVE}
    cart = validated.spot_types[StableType("cart")]
    assert cart.kind is SpotKind.INSTANCE and cart.execution is None
    assert validated.hosted_user_spot_types == {StableType("room")}
    assert validated.hosted_instance_spot_types == {StableType("cart")}


def test_the_relocation_policy_has_no_default() -> None:
    app = _app()
    app.register_spot("room", Room, execution=SpotWide(), relocation=None)  # type: ignore[arg-type]
    assert "relocation must be DisableRelocation" in _problem(app)


def test_per_actor_allows_recreate_on_relocation_only() -> None:
    for policy in (DisableRelocation(), PreserveStateWith(_Adapter())):
        app = _app()
        app.register_spot("room", Room, execution=PerActor(), relocation=policy)
        assert "PerActor Spot allows RecreateOnRelocation only" in _problem(app)
    app = _app()
    app.register_spot("room", Room, execution=PerActor(), relocation=RecreateOnRelocation())
    app.validate()


def test_execution_is_required_for_user_spots_and_refused_for_instance_spots() -> None:
    app = _app()
    app.register_spot("room", Room, relocation=RecreateOnRelocation())
    assert "execution must be PerActor() or SpotWide()" in _problem(app)
    app = _app()
    app.register_spot(
        "cart", Cart, kind=SpotKind.INSTANCE, execution=SpotWide(), relocation=DisableRelocation()
    )
    assert "takes no execution mode" in _problem(app)


def test_stable_types_are_validated_and_unique() -> None:
    app = _app()
    app.register_spot("room", Room, execution=SpotWide(), relocation=DisableRelocation())
    app.register_spot("room", Cart, kind=SpotKind.INSTANCE, relocation=DisableRelocation())
    app.register_spot("", Cart, kind=SpotKind.INSTANCE, relocation=DisableRelocation())
    app.register_spot("x" * 256, Cart, kind=SpotKind.INSTANCE, relocation=DisableRelocation())
    app.register_spot("é" * 127 + "a", Cart, kind=SpotKind.INSTANCE, relocation=DisableRelocation())
    problem = _problem(app)
    assert "spot stable type 'room' registered twice" in problem
    assert "spot type ''" in problem
    assert f"spot type {'x' * 256!r}" in problem
    assert "é" not in problem  # 255 bytes is accepted


def test_a_spot_type_may_share_its_name_with_an_actor_type() -> None:
    app = _app()
    app.enable_actor_dispatch()
    app.register_actor("room", Cart, relocation=DisableRelocation())
    app.register_spot("room", Room, execution=SpotWide(), relocation=DisableRelocation())
    validated = app.validate()
    assert StableType("room") in validated.actor_types
    assert StableType("room") in validated.spot_types


def test_callback_and_handler_problems() -> None:
    class Sync:
        def __init__(self, context: Any) -> None:
            self.context = context

        @on_lifecycle(SpotCallback.CLOSE)
        def closing(self, event: object) -> None:  # not async
            return None

    async def cb(spot: Any, event: object) -> None:
        return None

    def sync_cb(spot: Any, event: object) -> None:
        return None

    app = _app()
    app.register_spot("sync", Sync, execution=SpotWide(), relocation=DisableRelocation())
    app.register_spot("cart", Cart, kind=SpotKind.INSTANCE, relocation=DisableRelocation())
    app.register_spot("room", Room, execution=SpotWide(), relocation=DisableRelocation())
    app.register_spot_callback("cart", SpotCallback.JOIN, cb)
    app.register_spot_callback("room", SpotCallback.JOIN, cb)
    app.register_spot_callback("room", SpotCallback.LEAVE, sync_cb)  # type: ignore[arg-type]
    app.register_spot_callback("nowhere", SpotCallback.CLOSE, cb)
    app.register_spot_handler("nowhere", MessageKind.SEND, "x", cb)
    app.register_spot_handler("cart", MessageKind.REQUEST, "add", cb)
    problem = _problem(app)
    assert "Sync.closing (close) must be an async def" in problem
    assert "Instance Spot has no Actor membership, so no join callback" in problem
    assert "spot type 'room': join callback registered twice" in problem
    assert "the leave callback must be an async def" in problem
    assert "callback for unregistered spot type 'nowhere'" in problem
    assert "handler for unregistered spot type 'nowhere'" in problem
    assert "registered twice" in problem and "'add'" in problem
