"""Spot ids and the reserved format (spec 06 §2, §2.1, §3.2; checklist S06-01 … S06-03),
on two and three nodes, through both stores: one global SpotId namespace across meshes,
kinds and types; the reserved Entry shape refused before anything is reserved; the
framework-issued UUID v4 of ``create(type)`` and no second UUID on a conflict."""

from __future__ import annotations

import re
import uuid

import pytest
from spot_kit import SpotRecorder, hosts, instance_app, spot_app

from zlink_trio import (
    AlreadyExists,
    App,
    ConfigurationError,
    DisableRelocation,
    InvalidId,
    InvalidOperation,
    MeshConfig,
    ServerConfig,
    SpotCreated,
    SpotExisting,
    SpotId,
    SpotWide,
    StableType,
    TypeMismatch,
    open_server,
)
from zlink_trio.store.api import ObjectKey, ObjectKind, OwnerFence, Reservation
from zlink_trio.testing import (
    CountingStore,
    open_cluster,
    published_descriptors,
    set_spot_id_source,
)

UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
MUTATIONS = ("reserve", "commit_ready", "abort_creation", "put_root", "begin_closing", "release")


def _mutations(store: CountingStore) -> int:
    return sum(store.count(m) for m in MUTATIONS)


async def test_s06_01_one_spot_id_across_meshes_kinds_and_types(
    clock: object, store: CountingStore
) -> None:
    """S06-01: a SpotId is a global key: GetOrCreate in mesh "a" then in mesh "b" gives
    Existing with the first SpotRef (MeshName a); the same id with another stable type,
    or held by an Instance Spot type of the same name, is TypeMismatch; case matters."""
    rec = SpotRecorder()
    two_meshes = ServerConfig(
        meshes=[MeshConfig(name="a"), MeshConfig(name="b")], cluster_secret=b"k" * 32
    )

    def app(index: int) -> App:
        return spot_app(rec, types=("room", "hall"))

    async with open_cluster(2, store=store, app=app, config=two_meshes) as cluster:
        await cluster.wait_all_admitted()
        first_node, second_node = cluster.servers
        first = await first_node.spots.get_or_create("lobby", "room").in_mesh("a").timeout(10)
        assert isinstance(first, SpotCreated) and first.spot.mesh_name.value == "a"
        again = await second_node.spots.get_or_create("lobby", "room").in_mesh("b").timeout(10)
        assert again == SpotExisting(first.spot)
        with pytest.raises(TypeMismatch):
            await second_node.spots.get_or_create("lobby", "hall").in_mesh("b").timeout(10)
        other_case = await first_node.spots.get_or_create("Lobby", "room").in_mesh("b")
        assert isinstance(other_case, SpotCreated) and other_case.spot.mesh_name.value == "b"
        assert rec.runs("lobby") == 1 and rec.runs("Lobby") == 1
        assert await second_node.spots.find("lobby") == first.spot


@pytest.mark.parametrize("nodes", [2, 3])
async def test_s06_01_the_id_is_checked_before_any_store_mutation(
    clock: object, store: CountingStore, nodes: int
) -> None:
    """S06-01: a 255-byte UTF-8 id is accepted; an empty, 256-byte or invalid UTF-8 id is
    refused (a configuration failure, InvalidId) before any Store mutation."""
    rec = SpotRecorder()
    async with open_cluster(nodes, store=store, app=hosts(rec)) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[-1].spots
        longest = "é" * 127 + "x"  # 255 bytes
        assert len(longest.encode()) == 255
        created = await spots.get_or_create(longest, "room").timeout(10)
        assert isinstance(created, SpotCreated) and created.spot.spot_id.value == longest
        store.reset()
        for bad in ("", "x" * 256, "é" * 128, b"\xff\xfe", "\ud800"):
            with pytest.raises(InvalidId):
                spots.get_or_create(bad, "room")  # type: ignore[arg-type]
            with pytest.raises(InvalidId):
                await spots.find(bad)  # type: ignore[arg-type]
        assert _mutations(store) == 0 and store.count("read") == 0
        assert rec.runs(longest) == 1


@pytest.mark.parametrize("nodes", [2, 3])
async def test_s06_01_another_kind_holds_the_id(
    clock: object, store: CountingStore, nodes: int
) -> None:
    """S06-01: the namespace is one across kinds: an Instance Spot row under an id makes
    a User Spot GetOrCreate of it TypeMismatch (the kind differs), with nothing reserved
    for it. (The Instance row is made the way a cold activation's target reserves.)"""
    rec = SpotRecorder()
    async with open_cluster(nodes, store=store, app=lambda i: instance_app(rec)) as cluster:
        await cluster.wait_all_admitted()
        host = cluster.servers[0]
        (record,) = [
            r for r in await store.list_nodes() if r.descriptor.node_rid == host.identity.node_rid
        ]
        owner = OwnerFence(
            record.descriptor.mesh_name,
            host.identity.node_rid,
            host.identity.node_generation,
            record.lease_generation,
        )
        await store.reserve(
            Reservation(
                key=ObjectKey.spot("cart-1"),
                kind=ObjectKind.INSTANCE_SPOT,
                stable_type=StableType("cart"),
                owner=owner,
            )
        )
        store.reset()
        with pytest.raises(TypeMismatch):
            await cluster.servers[-1].spots.get_or_create("cart-1", "room").timeout(10)
        assert store.count("reserve") == 0 and rec.runs("cart-1") == 0


async def test_s06_01_a_spot_stable_type_registered_twice_is_a_startup_error() -> None:
    """S06-01: registering one Spot stable type twice fails at startup (nothing runs)."""
    app = App()

    class Room:
        def __init__(self, context: object) -> None:
            self.context = context

    app.register_spot("room", Room, execution=SpotWide(), relocation=DisableRelocation())
    app.register_spot("room", Room, execution=SpotWide(), relocation=DisableRelocation())
    config = ServerConfig(meshes=[MeshConfig(name="m")], cluster_secret=b"k" * 32)
    with pytest.raises(ConfigurationError, match="spot stable type 'room' registered twice"):
        async with open_server(config, app):
            raise AssertionError("the server must not start")


async def test_s06_02_the_reserved_entry_shape_is_refused_before_any_reservation(
    clock: object, store: CountingStore
) -> None:
    """S06-02: a caller-given User Spot id of the shape <prefix>-entry-<lowercase uuid4>
    (a made-up one, and a live node's real Entry Spot id) is InvalidOperation with no
    Store reservation or mutation and no factory run; near-misses (an uppercase or a
    non-v4 UUID) are ordinary ids."""
    rec = SpotRecorder()
    async with open_cluster(3, store=store, app=hosts(rec)) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[2].spots
        (descriptor, *_) = [
            d for d in await published_descriptors(cluster.servers[0]) if d.entry_spot_id
        ]
        live_entry = descriptor.entry_spot_id.value
        store.reset()
        for reserved in (f"room-entry-{uuid.uuid4()}", live_entry):
            with pytest.raises(InvalidOperation, match="reserved Entry Spot shape"):
                await spots.get_or_create(reserved, "room").timeout(10)
        assert _mutations(store) == 0 and store.count("read") == 0
        assert rec.total_runs == 0
        upper = f"room-entry-{str(uuid.uuid4()).upper()}"
        not_v4 = f"room-entry-{uuid.uuid1()}"
        for near_miss in (upper, not_v4):
            created = await spots.get_or_create(near_miss, "room").timeout(10)
            assert isinstance(created, SpotCreated)
        assert rec.total_runs == 2


async def test_s06_03_create_issues_a_lowercase_uuid4(clock: object, store: CountingStore) -> None:
    """S06-03: ``create(type)`` issues a lowercase canonical UUID v4 SpotId (new per call)."""
    rec = SpotRecorder()
    async with open_cluster(2, store=store, app=hosts(rec)) as cluster:
        await cluster.wait_all_admitted()
        ids = set()
        for server in cluster.servers:
            for _ in range(3):
                created = await server.spots.create("room").timeout(10)
                assert isinstance(created, SpotCreated)
                assert UUID4.match(created.spot.spot_id.value)
                ids.add(created.spot.spot_id.value)
        assert len(ids) == 6 and rec.total_runs == 6


async def test_s06_03_a_taken_id_is_already_exists_with_no_second_uuid(
    clock: object, store: CountingStore
) -> None:
    """S06-03: with an injected UUID collision (the id ``create`` issues is held by an
    active authority) the create ends AlreadyExists: no second UUID, no reservation of
    its own (the reservation count stays the first create's one), no factory run."""
    rec = SpotRecorder()
    async with open_cluster(2, store=store, app=hosts(rec, types=("room", "hall"))) as cluster:
        await cluster.wait_all_admitted()
        taken = str(uuid.uuid4())
        store.reset()
        first = await cluster.servers[0].spots.get_or_create(taken, "room").timeout(10)
        assert isinstance(first, SpotCreated)
        issued: list[SpotId] = []

        def colliding() -> SpotId:
            issued.append(SpotId(taken))
            return SpotId(taken)

        set_spot_id_source(cluster.servers[1], colliding)
        with pytest.raises(AlreadyExists):
            await cluster.servers[1].spots.create("room").timeout(10)
        assert issued == [SpotId(taken)]  # one id, never a second
        assert store.count("reserve") == 1
        assert rec.runs(taken) == 1
        # A create of another type that draws the taken id: the same conflict (the
        # caller never chose the id), not TypeMismatch.
        with pytest.raises(AlreadyExists):
            await cluster.servers[1].spots.create("hall").timeout(10)
        assert store.count("reserve") == 1 and len(issued) == 2
