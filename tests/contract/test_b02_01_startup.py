"""Startup configuration errors of spec 02 §3 (B02-01)."""

from __future__ import annotations

import inspect

import pytest
from trio.testing import MockClock

from zlink_trio import ConfigurationError, ObjectRole, open_server
from zlink_trio.actors.policy import DisableRelocation
from zlink_trio.app import App
from zlink_trio.config import MeshConfig, ServerConfig
from zlink_trio.store.memory import MemoryLocationStore
from zlink_trio.testing import CountingStore, node_of

SECRET = b"b" * 32


class Player:
    def __init__(self, context: object) -> None:
        self.context = context


def dispatch_app() -> App:
    app = App()
    app.enable_actor_dispatch()
    return app


def config(*roles: ObjectRole, store: object = "memory") -> ServerConfig:
    return ServerConfig(
        meshes=tuple(MeshConfig(name=f"mesh-{i}", object_role=r) for i, r in enumerate(roles)),
        cluster_secret=SECRET,
        location_store=MemoryLocationStore() if store == "memory" else store,  # type: ignore[arg-type]
    )


def test_enable_actor_dispatch_takes_no_mesh_name() -> None:
    """B02-01: EnableActorDispatch() has no MeshName parameter."""
    assert list(inspect.signature(App.enable_actor_dispatch).parameters) == ["self"]


async def test_actor_dispatch_without_an_object_role_fails_startup(
    autojump_clock: MockClock,
) -> None:
    """B02-01: Actor dispatch with Object role None everywhere is a configuration error
    at startup, before anything touches the Store."""
    store = CountingStore(MemoryLocationStore())
    with pytest.raises(ConfigurationError, match="Object Client or Server role"):
        async with open_server(config(ObjectRole.NONE, store=store), dispatch_app()):
            pytest.fail("startup must fail")
    with pytest.raises(ConfigurationError, match="Object Client or Server role"):
        async with open_server(ServerConfig(location_store=store), dispatch_app()):
            pytest.fail("startup must fail")
    assert store.calls == {}


async def test_actor_dispatch_without_a_location_store_fails_startup(
    autojump_clock: MockClock,
) -> None:
    """B02-01: Actor dispatch without a Location Store is a configuration error at
    startup (no hidden same-process authority)."""
    with pytest.raises(ConfigurationError, match="Location Store"):
        async with open_server(config(ObjectRole.SERVER, store=None), dispatch_app()):
            pytest.fail("startup must fail")


async def test_duplicate_packet_handler_key_fails_startup(autojump_clock: MockClock) -> None:
    """B02-01: the same packet key registered twice is a configuration error at startup."""
    app = App()

    @app.on_packet("chat")
    async def first(*args: object) -> None: ...

    @app.on_packet("chat")
    async def second(*args: object) -> None: ...

    with pytest.raises(ConfigurationError, match="registered twice"):
        async with open_server(config(ObjectRole.SERVER), app):
            pytest.fail("startup must fail")


async def test_actor_type_needs_a_server_role(autojump_clock: MockClock) -> None:
    """B02-01 (related): a registered Actor type needs an Object Server role somewhere."""
    app = dispatch_app()
    app.register_actor("player", Player, relocation=DisableRelocation())
    with pytest.raises(ConfigurationError, match="Object Server role"):
        async with open_server(config(ObjectRole.CLIENT), app):
            pytest.fail("startup must fail")


async def test_several_meshes_start_fine(autojump_clock: MockClock) -> None:
    """B02-01: two or more meshes configured is not an error (positive control)."""
    app = dispatch_app()
    app.register_actor("player", Player, relocation=DisableRelocation())
    cfg = config(ObjectRole.SERVER, ObjectRole.CLIENT, ObjectRole.SERVER)
    async with open_server(cfg, app) as server:
        assert node_of(server).admitting
        records = await cfg.location_store.list_nodes()  # type: ignore[union-attr]
        assert len(records) == 3
        hosted = {str(r.descriptor.mesh_name): r.descriptor.actor_types for r in records}
        assert {k: sorted(t.value for t in v) for k, v in hosted.items()} == {
            "mesh-0": ["player"],
            "mesh-1": [],
            "mesh-2": ["player"],
        }


async def test_actor_types_without_actor_dispatch_fail_startup(autojump_clock: MockClock) -> None:
    """Registered Actor types on an App that never enabled Actor dispatch could never be
    hosted: startup says so instead of starting a server that silently hosts nothing."""
    app = App()
    app.register_actor("player", Player, relocation=DisableRelocation())
    with pytest.raises(ConfigurationError, match="enable_actor_dispatch"):
        async with open_server(config(ObjectRole.SERVER), app):
            pytest.fail("startup must fail")
