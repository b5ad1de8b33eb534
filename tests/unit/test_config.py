from __future__ import annotations

import math

import pytest

from zlink_trio import (
    ConfigurationError,
    MeshConfig,
    ObjectRole,
    PostgresStoreConfig,
    ServerConfig,
)

SECRET = b"s" * 16


def test_spec_defaults() -> None:
    c = ServerConfig()
    assert c.session_relocation_seal_timeout == 3.0
    assert c.session_replacement_callback_timeout == 30.0
    assert c.replacement_close_delay == 0.1
    assert c.cutover_fallback == 1.0
    assert c.route_cache_max_age == 15.0
    assert c.message_follow_duration == 30.0
    assert c.message_follow_max_hops == 8
    assert c.join_timeout == 5.0
    assert c.terminal_record_retention == 300.0
    assert c.max_request_bytes == 1024 * 1024
    assert not hasattr(c, "router")  # the router's tunables: zlink_trio.router.SessionRouterConfig


def test_route_cache_must_be_5s_shorter_than_follow() -> None:
    ServerConfig(route_cache_max_age=25.0, message_follow_duration=30.0)
    with pytest.raises(ConfigurationError):
        ServerConfig(route_cache_max_age=25.001, message_follow_duration=30.0)
    # 0 disables either side, and then the relation does not apply
    ServerConfig(route_cache_max_age=100.0, message_follow_duration=0)
    ServerConfig(route_cache_max_age=0, message_follow_duration=1.0)


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan, "3", True])
def test_durations_validated(bad: object) -> None:
    with pytest.raises(ConfigurationError):
        ServerConfig(session_relocation_seal_timeout=bad)  # type: ignore[arg-type]


def test_zero_allowed_only_where_spec_allows() -> None:
    with pytest.raises(ConfigurationError):
        ServerConfig(join_timeout=0)
    ServerConfig(route_cache_max_age=0, message_follow_duration=0)


def test_meshes() -> None:
    c = ServerConfig(
        meshes=[MeshConfig(name="a"), MeshConfig(name="b", object_role=ObjectRole.CLIENT)],
        cluster_secret=SECRET,
    )
    assert [m.name.value for m in c.object_meshes()] == ["a", "b"]
    with pytest.raises(ConfigurationError):
        ServerConfig(meshes=[MeshConfig(name="a"), MeshConfig(name="a")], cluster_secret=SECRET)
    with pytest.raises(ConfigurationError):
        ServerConfig(meshes=[MeshConfig(name="a")], cluster_secret=b"short")
    with pytest.raises(ConfigurationError):
        MeshConfig(name="")
    none = ServerConfig(
        meshes=[MeshConfig(name="a", object_role=ObjectRole.NONE)], cluster_secret=SECRET
    )
    assert none.object_meshes() == ()


@pytest.mark.parametrize(
    "fields",
    [
        {"listen_port": "80"},
        {"listen_port": True},
        {"listen_port": 80.0},
        {"listen_host": 5},
        {"advertise_host": 5},
        {"node_name": 5},
        {"cluster_secret": "a string, not bytes!"},
        {"meshes": ["world"]},
        {"location_store": "postgresql://x/y"},
    ],
)
def test_wrongly_typed_fields_are_configuration_errors(fields: dict[str, object]) -> None:
    # a wrong type is refused when the config is built, never a TypeError or a crash later
    with pytest.raises(ConfigurationError):
        ServerConfig(**fields)  # type: ignore[arg-type]


def test_mesh_role_and_postgres_settings_are_validated() -> None:
    with pytest.raises(ConfigurationError):
        MeshConfig(name="a", object_role="server")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        PostgresStoreConfig(dsn=5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        PostgresStoreConfig(dsn="postgresql://x/y", schema="a b")
    assert PostgresStoreConfig(dsn="postgresql://x/y").schema == "zlink"


def test_the_engine_owns_defaults_equal_to_the_config_defaults() -> None:
    # the engine no longer reads ServerConfig (it sits below config's users); a server
    # passes its configured values, and the two defaults agree
    from zlink_trio.engine.engine import DEFAULT_LANE_CAPACITY, DEFAULT_LIFECYCLE_BURST

    config = ServerConfig()
    assert (config.lane_capacity, config.lifecycle_burst) == (
        DEFAULT_LANE_CAPACITY,
        DEFAULT_LIFECYCLE_BURST,
    )


def test_the_default_location_store_is_the_embedded_memory_store() -> None:
    from zlink_trio import MemoryStoreConfig

    assert ServerConfig().location_store == MemoryStoreConfig()
    assert ServerConfig(location_store=None).location_store is None
