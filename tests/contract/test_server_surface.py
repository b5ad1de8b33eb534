"""The application-facing server surface: the embedded default Location Store, the
``docs/api.md`` example run as written, ``serve_server`` for ``nursery.start`` users and
what a ``Server`` exposes (public surface only: ``zlink_trio`` and ``zlink_trio.testing``)."""

from __future__ import annotations

import pathlib
import re

import pytest
import trio
from trio.testing import MockClock

import zlink_trio
from zlink_trio import (
    App,
    ConfigurationError,
    Created,
    MemoryLocationStore,
    MemoryStoreConfig,
    MeshConfig,
    RecreateOnRelocation,
    ServerConfig,
    on_request,
    open_server,
    serve_server,
)
from zlink_trio.testing import node_of, open_cluster, server_app, server_engine, server_store

SECRET = b"k" * 32
API_MD = pathlib.Path(__file__).parents[2] / "docs" / "api.md"


class Counter:
    def __init__(self, context: object) -> None:
        self.context = context
        self.hits = 0

    @on_request("hit")
    async def hit(self, payload: bytes) -> bytes:
        self.hits += 1
        return str(self.hits).encode()


def counter_app() -> App:
    app = App()
    app.enable_actor_dispatch()
    app.register_actor("counter", Counter, relocation=RecreateOnRelocation())
    return app


def meshed(**changes: object) -> ServerConfig:
    return ServerConfig(meshes=[MeshConfig(name="world")], cluster_secret=SECRET, **changes)  # type: ignore[arg-type]


def api_example() -> str:
    """The first Python block of docs/api.md, verbatim."""
    match = re.search(r"```python\n(.*?)```", API_MD.read_text(), re.DOTALL)
    assert match is not None, "docs/api.md has no python example"
    return match.group(1)


def test_the_api_md_example_runs_unchanged_on_the_embedded_store(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The documented example names no Location Store: ``ServerConfig()``'s default is an
    in-process memory store the server creates, and the example works as written, its own
    ``trio.run(main)`` included (real TCP listener, real time)."""
    namespace: dict[str, object] = {"__name__": "api_example"}
    exec(compile(api_example(), str(API_MD), "exec"), namespace)
    config = namespace["config"]
    assert isinstance(config, ServerConfig)
    assert config.location_store == MemoryStoreConfig()
    assert capsys.readouterr().out.splitlines() == ["b'10'"]


async def test_default_config_means_one_private_memory_store_per_server(
    autojump_clock: MockClock,
) -> None:
    """``ServerConfig()`` without a store: each server creates its own memory store (two
    such servers do not see each other); an explicitly passed store is shared."""
    assert ServerConfig().location_store == MemoryStoreConfig()
    async with (
        open_server(meshed(), counter_app()) as a,
        open_server(meshed(), counter_app()) as b,
    ):
        store_a, store_b = server_store(a), server_store(b)
        assert isinstance(store_a, MemoryLocationStore)
        assert isinstance(store_b, MemoryLocationStore)
        assert store_a is not store_b
        assert [r.descriptor.node_rid for r in await store_a.list_nodes()] == [a.identity.node_rid]
        assert [r.descriptor.node_rid for r in await store_b.list_nodes()] == [b.identity.node_rid]
        result = await a.actors.create("c-1", "counter").timeout(5)
        assert isinstance(result, Created)
        assert await a.actors.request("c-1", "hit").timeout(5) == b"1"
        assert await b.actors.find("c-1") is None  # another store: another authority
    shared = MemoryLocationStore()
    async with (
        open_server(meshed(location_store=shared), counter_app()) as a,
        open_server(meshed(location_store=shared), counter_app()) as b,
    ):
        assert server_store(a) is shared and server_store(b) is shared
        assert len(await shared.list_nodes()) == 2


async def test_a_detached_server_creates_no_store(autojump_clock: MockClock) -> None:
    async with open_server(ServerConfig()) as server:
        assert server_store(server) is None
        assert server.endpoint is None


async def test_open_cluster_shares_one_store_even_with_a_default_template(
    autojump_clock: MockClock,
) -> None:
    async with open_cluster(2, app=lambda _: counter_app(), config=ServerConfig()) as cluster:
        await cluster.wait_all_admitted()
        assert all(server_store(s) is cluster.store for s in cluster.servers)
        a, b = cluster.servers
        await a.actors.create("c-2", "counter").timeout(5)
        assert await b.actors.request("c-2", "hit").timeout(5) == b"1"


async def test_a_store_object_that_is_no_location_store_fails_startup(
    autojump_clock: MockClock,
) -> None:
    class Fake:
        async def register_node(self) -> None: ...

    with pytest.raises(ConfigurationError):
        ServerConfig(location_store=object())  # type: ignore[arg-type]
    config = meshed(location_store=Fake())
    with pytest.raises(ConfigurationError, match="LocationStore protocol"):
        async with open_server(config, counter_app()):
            pytest.fail("startup must fail")


async def test_serve_server_runs_under_nursery_start_until_cancelled(
    autojump_clock: MockClock,
) -> None:
    """``nursery.start(serve_server, ...)`` returns the running Server (registered and
    accepting); cancelling the task stops it gracefully (its descriptor is removed)."""
    store = MemoryLocationStore()
    async with trio.open_nursery() as nursery:
        server = await nursery.start(serve_server, meshed(location_store=store), counter_app())
        assert isinstance(server, zlink_trio.Server)
        assert [r.descriptor.node_rid for r in await store.list_nodes()] == [
            server.identity.node_rid
        ]
        assert node_of(server).admitting
        await server.actors.create("c-3", "counter").timeout(5)
        assert await server.actors.request("c-3", "hit").timeout(5) == b"1"
        nursery.cancel_scope.cancel()
    assert await store.list_nodes() == ()
    with pytest.raises(zlink_trio.ShuttingDown):
        await server.actors.request("c-3", "hit").timeout(5)


async def test_serve_server_startup_errors_come_from_nursery_start(
    autojump_clock: MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        with pytest.raises(ConfigurationError, match="Location Store"):
            await nursery.start(serve_server, meshed(location_store=None), counter_app())


async def test_server_exposes_its_surface_not_its_parts(autojump_clock: MockClock) -> None:
    app = counter_app()
    async with open_server(meshed(), app) as server:
        for part in ("node", "engine", "store", "app"):
            assert not hasattr(server, part), part
        assert server.statistics().actors is not None
        assert server.endpoint is not None
        # the parts stay reachable for tests, through zlink_trio.testing
        assert node_of(server).identity == server.identity
        assert server_engine(server).statistics() == server.statistics().engine
        app_view = server_app(server)
        assert app_view is not None and app_view.actor_dispatch
        assert {t.value for t in app_view.actor_types} == {"counter"}
