"""S06-11, S06-12, S06-13: a message to a Missing Spot without Instance intent creates
nothing; Instance intent (optional type and in_mesh) cold-activates only a Missing Spot,
with the spec's errors; the type is chosen automatically from the selected mesh's serving
descriptors (spec 06 §4, §4.1, §4.2). Two and three nodes, both stores.
"""

from __future__ import annotations

import pytest
from call_kit import Recorder, client_app, client_config, server_config, spot_app

from zlink_trio import (
    CapacityExceeded,
    InvalidOperation,
    MeshConfig,
    NotConfigured,
    NotFound,
    ObjectRole,
    ServerConfig,
    SpotCreated,
    TypeMismatch,
)
from zlink_trio.testing import STORE_WRITE_METHODS, CountingStore, open_cluster

from call_kit import SECRET  # isort: skip

MUTATIONS = STORE_WRITE_METHODS - {"renew_lease"}
"""Store writes a call could make (lease renewals run in the background)."""


def mutations(store: CountingStore) -> int:
    return sum(store.count(method) for method in MUTATIONS)


def two_nodes(rec: Recorder, **app: object) -> object:
    return lambda i: client_app() if i == 0 else spot_app(rec, f"n{i}", **app)  # type: ignore[arg-type]


def two_configs(index: int) -> ServerConfig:
    return client_config() if index == 0 else server_config()


# --- S06-11 ----------------------------------------------------------------------------------


@pytest.mark.parametrize("nodes", [2, 3])
async def test_s06_11_a_missing_spot_without_instance_intent_is_not_found_and_nothing_is_made(
    clock: object, store: CountingStore, nodes: int
) -> None:
    """S06-11: a send or request to a Missing id without Instance intent ends NotFound
    (from the caller node and from the hosting node): no Location Store mutation, no
    Relocation Store write, no factory run."""
    rec = Recorder()
    async with open_cluster(nodes, store=store, app=two_nodes(rec), config=two_configs) as cluster:
        await cluster.wait_all_admitted()
        store.reset()
        for server in cluster.servers:
            with pytest.raises(NotFound):
                await server.spots.request("missing", "add", b"x").timeout(5)
            with pytest.raises(NotFound):
                await server.spots.send("missing", "note", b"x").timeout(5)
        assert mutations(store) == 0
        assert store.count("put_root") == 0
        assert store.reads >= 4  # each call read the Store (nothing cached)
        assert rec.total_runs == 0
        assert await cluster.servers[0].spots.find("missing") is None


# --- S06-12 ----------------------------------------------------------------------------------


async def test_s06_12_in_mesh_never_moves_a_ready_spot(clock: object, store: CountingStore) -> None:
    """S06-12: with two meshes A and B, a Spot activated in A (``in_mesh("A")``) is then
    reached by a call with ``in_mesh("B")``: delivered to the mesh-A owner, no factory
    runs; an unknown mesh for a Missing id is NotFound; several Object meshes and no
    in_mesh is InvalidOperation; in_mesh without instance() is InvalidOperation."""
    rec = Recorder()
    meshes = {
        0: (
            MeshConfig(name="A", object_role=ObjectRole.CLIENT),
            MeshConfig(name="B", object_role=ObjectRole.CLIENT),
        ),
        1: (MeshConfig(name="A"),),
        2: (MeshConfig(name="B"),),
    }
    async with open_cluster(
        3,
        store=store,
        app=lambda i: client_app() if i == 0 else spot_app(rec, f"n{i}"),
        config=lambda i: ServerConfig(meshes=meshes[i], cluster_secret=SECRET),
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        assert await caller.spots.request("c1", "add", b"a").instance("cart").in_mesh("A") == b"1"
        assert rec.handled[-1][2] == "n1"
        reply = await caller.spots.request("c1", "add", b"b").instance("cart").in_mesh("B")
        assert reply == b"2"
        assert rec.handled[-1][2] == "n1"
        assert rec.runs("c1") == 1
        with pytest.raises(InvalidOperation):
            await caller.spots.request("c2", "add").instance("cart")  # two Object meshes
        with pytest.raises(NotFound):
            await caller.spots.request("c2", "add").instance("cart").in_mesh("nowhere")
        with pytest.raises(InvalidOperation):
            await caller.spots.request("c1", "add").in_mesh("A")  # in_mesh needs instance()
        assert rec.runs("c2") == 0


async def test_s06_12_no_object_mesh_is_not_configured(clock: object, store: CountingStore) -> None:
    """S06-12: a node with no Object Client/Server mesh cannot cold-activate anything:
    NotConfigured (before any Store access)."""
    rec = Recorder()
    configs = [
        ServerConfig(
            meshes=(MeshConfig(name="test", object_role=ObjectRole.NONE),), cluster_secret=SECRET
        ),
        server_config(),
    ]
    async with open_cluster(
        2,
        store=store,
        app=lambda i: client_app() if i == 0 else spot_app(rec, "n1"),
        config=lambda i: configs[i],
    ) as cluster:
        with pytest.raises(NotConfigured):
            await cluster.servers[0].spots.request("c1", "add").instance("cart")
        assert rec.total_runs == 0


async def test_s06_12_a_type_nobody_hosts_is_not_found_and_full_hosts_are_capacity_exceeded(
    clock: object, store: CountingStore
) -> None:
    """S06-12: an explicit Instance type that no serving node provides → NotFound; the
    type is provided but its hosts have no capacity left → CapacityExceeded; nothing is
    reserved by either."""
    rec = Recorder()
    configs = [client_config(), server_config(node_capacity=1)]
    async with open_cluster(
        2,
        store=store,
        app=lambda i: client_app() if i == 0 else spot_app(rec, "n1"),
        config=lambda i: configs[i],
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        with pytest.raises(NotFound):
            await caller.spots.request("c1", "add").instance("unknown-type")
        assert await caller.spots.request("c1", "add", b"a").instance("cart") == b"1"
        store.reset()
        with pytest.raises(CapacityExceeded):
            await caller.spots.request("c2", "add").instance("cart")
        assert store.count("reserve") == 0 and store.count("put_root") == 0
        assert rec.runs("c2") == 0


async def test_s06_12_an_existing_spot_of_another_kind_or_type_is_a_type_mismatch(
    clock: object, store: CountingStore
) -> None:
    """S06-12: Instance intent on an existing User Spot, or naming another Instance type
    than the existing one → TypeMismatch; without a type (and without intent) the stored
    type is used however many Instance types are registered, and no factory runs again."""
    rec = Recorder()
    async with open_cluster(
        3,
        store=store,
        app=lambda i: (
            client_app() if i == 0 else spot_app(rec, f"n{i}", instance_types=("cart", "bag"))
        ),
        config=lambda i: client_config() if i == 0 else server_config(),
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        created = await caller.spots.get_or_create("r1", "room")
        assert isinstance(created, SpotCreated)
        with pytest.raises(TypeMismatch):
            await caller.spots.request("r1", "add").instance()
        with pytest.raises(TypeMismatch):
            await caller.spots.send("r1", "note").instance("cart")
        assert await caller.spots.request("b1", "add", b"a").instance("bag") == b"1"
        with pytest.raises(TypeMismatch):
            await caller.spots.request("b1", "add").instance("cart")
        count = 1
        for server in cluster.servers:
            for call in (
                server.spots.request("b1", "add", b"x").instance(),
                server.spots.request("b1", "add", b"y"),
            ):
                count += 1
                assert await call == str(count).encode()
        assert rec.runs("b1") == 1
        assert rec.runs("r1") == 1


# --- S06-13 ----------------------------------------------------------------------------------


async def test_s06_13_one_instance_type_on_two_nodes_is_chosen_automatically(
    clock: object, store: CountingStore
) -> None:
    """S06-13: the mesh's serving descriptors publish ONE distinct Instance type (on two
    nodes): ``instance()`` without a type activates it (one factory run)."""
    rec = Recorder()
    async with open_cluster(3, store=store, app=two_nodes(rec), config=two_configs) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        for i in range(4):
            assert await caller.spots.request(f"c{i}", "add", b"a").instance() == b"1"
            assert rec.runs(f"c{i}") == 1


async def test_s06_13_two_instance_types_need_the_type_and_none_is_not_found(
    clock: object, store: CountingStore
) -> None:
    """S06-13: two distinct Instance types in the mesh → ``instance()`` without a type is
    InvalidOperation (naming one works); a mesh whose nodes register no Instance type →
    NotFound. Nothing is reserved by the refused calls."""
    rec = Recorder()
    async with open_cluster(
        3,
        store=store,
        app=lambda i: (
            client_app()
            if i == 0
            else spot_app(rec, f"n{i}", instance_types=(("cart",), ("bag",))[i - 1])
        ),
        config=two_configs,
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        store.reset()
        with pytest.raises(InvalidOperation):
            await caller.spots.request("c1", "add").instance()
        assert store.count("reserve") == 0
        assert await caller.spots.request("c1", "add", b"a").instance("bag") == b"1"
        assert rec.handled[-1][2] == "n2"
    rec = Recorder()
    async with open_cluster(
        2,
        store=store,
        app=lambda i: client_app() if i == 0 else spot_app(rec, "n1", instance_types=()),
        config=two_configs,
    ) as cluster:
        await cluster.wait_all_admitted()
        with pytest.raises(NotFound):
            await cluster.servers[0].spots.request("c9", "add").instance()
        assert rec.total_runs == 0


async def test_s06_02_an_instance_id_of_the_reserved_entry_shape_is_refused_before_anything(
    clock: object, store: CountingStore
) -> None:
    """S06-02 (Instance Spot side): Instance intent on a caller id of the reserved Entry
    shape ``<prefix>-entry-<lowercase uuid4>`` ends InvalidOperation before any Store
    mutation or factory run."""
    rec = Recorder()
    async with open_cluster(2, store=store, app=two_nodes(rec), config=two_configs) as cluster:
        await cluster.wait_all_admitted()
        store.reset()
        with pytest.raises(InvalidOperation):
            await (
                cluster.servers[0]
                .spots.request("shop-entry-0f0e4a7e-8d5c-4b3a-9e2f-1a2b3c4d5e6f", "add")
                .instance("cart")
            )
        assert mutations(store) == 0
        assert rec.total_runs == 0
