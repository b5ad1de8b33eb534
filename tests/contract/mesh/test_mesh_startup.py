"""Startup: one register_node; a descriptor / Entry claim conflict fails startup with a
ConfigurationError and leaves the Store (and the process) as it was."""

from __future__ import annotations

import pytest
import trio
from mesh_kit import MESH, fast, open_fds
from trio.testing import MockClock

import zlink_trio.mesh.node as node_module
from zlink_trio import ConfigurationError, DescriptorConflict, Server, open_server
from zlink_trio.config import MeshConfig
from zlink_trio.ids import NodeRid, SpotId
from zlink_trio.store.api import LocationStore, ObjectKey
from zlink_trio.store.memory import MemoryLocationStore
from zlink_trio.testing import CountingStore, node_of, server_store
from zlink_trio.testing.cluster import DEFAULT_MESH

SECRET = b"s" * 32


def config_for(store: LocationStore, **changes: object) -> object:
    return fast(
        meshes=(MeshConfig(name=DEFAULT_MESH),),
        cluster_secret=SECRET,
        location_store=store,
        **changes,
    )


async def snapshot(store: LocationStore, entry: SpotId) -> tuple[object, ...]:
    return (tuple(await store.list_nodes()), await store.read(ObjectKey.spot(entry.value)))


async def test_startup_publishes_one_descriptor_per_mesh_in_one_register_call(
    autojump_clock: MockClock,
) -> None:
    store = CountingStore(MemoryLocationStore())
    config = fast(
        meshes=(MeshConfig(name="alpha"), MeshConfig(name="beta")),
        cluster_secret=SECRET,
        location_store=store,
        node_name="edge",
    )
    async with open_server(config) as server:
        assert store.count("register_node") == 1
        records = await store.list_nodes()
        assert [str(r.descriptor.mesh_name) for r in records] == ["alpha", "beta"]
        node = node_of(server)
        for record in records:
            d = record.descriptor
            assert d.node_rid == server.identity.node_rid
            assert d.node_generation == server.identity.node_generation
            assert d.endpoint == server.endpoint
            assert server.endpoint is not None and server.endpoint.port != 0
            assert d.entry_spot_id == node.entry_spot_id(d.mesh_name)
            assert d.entry_spot_id.value.startswith("edge-entry-")
            claim = await store.read(ObjectKey.spot(d.entry_spot_id.value))
            assert claim is not None and claim.owner == node_of(server).owner_fence(d.mesh_name)
        assert len({r.descriptor.entry_spot_id for r in records}) == 2
    assert await store.list_nodes() == ()
    assert store.count("remove_node") == 1


async def test_entry_claim_conflict_fails_startup_and_changes_nothing(
    autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    inner = MemoryLocationStore()
    store = CountingStore(inner)
    async with open_server(config_for(store)) as first:
        taken = node_of(first).entry_spot_id(MESH)
        before = await snapshot(inner, taken)
        fds = open_fds()
        store.reset()
        monkeypatch.setattr(node_module, "new_entry_spot_id", lambda prefix: taken)
        with pytest.raises(DescriptorConflict) as caught:
            async with open_server(config_for(store)):
                pytest.fail("startup must fail")
        assert isinstance(caught.value, ConfigurationError)
        assert store.calls == {"register_node": 1}
        assert await snapshot(inner, taken) == before
        assert open_fds() == fds  # the listener bound before registering is closed
        assert node_of(first).admitting


async def test_node_rid_conflict_fails_startup_and_changes_nothing(
    autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    inner = MemoryLocationStore()
    store = CountingStore(inner)
    async with open_server(config_for(store)) as first:
        entry = node_of(first).entry_spot_id(MESH)
        before = await snapshot(inner, entry)
        store.reset()
        live_rid = first.identity.node_rid
        monkeypatch.setattr(NodeRid, "new", classmethod(lambda cls: live_rid))
        with pytest.raises(DescriptorConflict):
            async with open_server(config_for(store)):
                pytest.fail("startup must fail")
        assert store.calls == {"register_node": 1}
        assert await snapshot(inner, entry) == before


async def test_server_without_meshes_is_detached(autojump_clock: MockClock) -> None:
    with pytest.raises(TypeError):
        Server()  # made by open_server only
    async with open_server(fast()) as server:
        assert server.endpoint is None
        assert server_store(server) is None
        assert node_of(server).peers() == {}
        assert node_of(server).admitting
        with pytest.raises(Exception, match="not in mesh"):
            node_of(server).owner_fence(MESH)
        assert server.statistics().node.peers_admitted == 0
    await trio.lowlevel.checkpoint()
