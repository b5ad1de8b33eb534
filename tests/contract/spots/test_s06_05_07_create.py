"""Create and GetOrCreate of User Spots (spec 06 §3, §3.1, §3.2; checklist S06-05 …
S06-07), on two and three nodes, through both stores: no target RID or endpoint, the
submit-once fluent call, mesh selection exactly as §3.1, no Instance Spot create, and
convergence of concurrent calls on one reservation and one factory run."""

from __future__ import annotations

import inspect

import pytest
import trio
import trio.testing
from spot_kit import SpotRecorder, caller_app, hosts, instance_app, spot_app

from zlink_trio import (
    DeadlineExceeded,
    InvalidArgument,
    InvalidOperation,
    MeshConfig,
    NotConfigured,
    NotFound,
    ObjectRole,
    OperationId,
    Rejected,
    ServerConfig,
    SpotCreated,
    SpotExisting,
    SpotRejected,
)
from zlink_trio.testing import CountingStore, open_cluster, spot_statistics


async def test_s06_05_no_target_and_a_submit_once_call(clock: object, store: CountingStore) -> None:
    """S06-05: create/get_or_create take no target RID, endpoint or predicate (their
    only inputs are ids and types; the fluent options are in_mesh, request, timeout and
    operation_id); an option set twice or a second submit is InvalidOperation; a
    creation request over 1 MiB is InvalidOperation before anything is reserved."""
    from zlink_trio.spots.manager import SpotManager

    assert list(inspect.signature(SpotManager.create).parameters) == ["self", "stable_type"]
    goc = inspect.signature(SpotManager.get_or_create)
    assert list(goc.parameters) == ["self", "spot_id", "stable_type"]
    rec = SpotRecorder()
    async with open_cluster(2, store=store, app=hosts(rec)) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        call = spots.get_or_create("s", "room")
        options = {n for n in dir(call) if not n.startswith("_") and callable(getattr(call, n))}
        assert options == {"in_mesh", "request", "timeout", "operation_id", "submit"}
        for twice in (
            lambda c: c.in_mesh("test").in_mesh("test"),
            lambda c: c.request(b"a").request(b"b"),
            lambda c: c.timeout(1).timeout(2),
            lambda c: c.operation_id(OperationId.new()).operation_id(OperationId.new()),
        ):
            with pytest.raises(InvalidOperation, match="set twice"):
                twice(spots.get_or_create("s", "room"))
        with pytest.raises(InvalidArgument):
            spots.create("room").timeout(0)
        call = spots.get_or_create("s", "room").timeout(10)
        assert isinstance(await call, SpotCreated)
        with pytest.raises(InvalidOperation, match="already submitted"):
            await call
        with pytest.raises(InvalidOperation, match="after submit"):
            call.request(b"late")
        store.reset()
        with pytest.raises(InvalidOperation, match="exceeds"):
            await spots.get_or_create("big", "room").request(b"x" * (1024 * 1024 + 1))
        assert store.count("reserve") == 0 and store.count("put_root") == 0
        exactly = await spots.get_or_create("one-mib", "room").request(b"y" * (1024 * 1024))
        assert isinstance(exactly, SpotCreated)
        assert rec.requests["one-mib"] == b"y" * (1024 * 1024)


async def test_s06_05_mesh_selection(clock: object, store: CountingStore) -> None:
    """S06-05 (§3.1): one Object mesh is chosen automatically; two without in_mesh is
    InvalidOperation; a named mesh that is not an Object mesh here is NotFound; no Object
    mesh at all is NotConfigured -- each before any reservation."""
    rec = SpotRecorder()

    def config(index: int) -> ServerConfig:
        if index == 2:  # a node with a mesh but no Object role
            return ServerConfig(
                meshes=[MeshConfig(name="a", object_role=ObjectRole.NONE)],
                cluster_secret=b"k" * 32,
            )
        return ServerConfig(
            meshes=[MeshConfig(name="a"), MeshConfig(name="b")], cluster_secret=b"k" * 32
        )

    def app(index: int) -> object:
        return spot_app(rec) if index == 0 else caller_app()

    async with open_cluster(3, store=store, app=app, config=config) as cluster:
        await cluster.wait_all_admitted()
        two = cluster.servers[1].spots
        store.reset()
        with pytest.raises(InvalidOperation, match="in_mesh"):
            await two.get_or_create("s", "room").timeout(10)
        with pytest.raises(NotFound, match="not an Object mesh"):
            await two.get_or_create("s", "room").in_mesh("nowhere").timeout(10)
        assert store.count("reserve") == 0
        with pytest.raises(NotConfigured):
            cluster.servers[2].spots  # noqa: B018 (no Object role: no Spot manager)
        created = await two.get_or_create("s", "room").in_mesh("b").timeout(10)
        assert isinstance(created, SpotCreated) and created.spot.mesh_name.value == "b"
        assert created.spot.node_rid == cluster.servers[0].identity.node_rid
    single = SpotRecorder()
    async with open_cluster(2, store=store, app=hosts(single)) as cluster:
        await cluster.wait_all_admitted()
        created = await cluster.servers[1].spots.create("room").timeout(10)
        assert isinstance(created, SpotCreated) and created.spot.mesh_name.value == "test"


async def test_s06_05_placement_checks_type_and_capacity(
    clock: object, store: CountingStore
) -> None:
    """S06-05 (§3.1): after the mesh, candidates are checked for the User Spot type
    (a node hosting it only as an Instance type, or not at all, is never chosen) and
    for capacity; an unhosted type is NotFound."""
    rec = SpotRecorder()

    def app(index: int) -> object:
        return (
            spot_app(rec) if index == 0 else instance_app(rec, types=("room-i",), with_user=False)
        )

    async with open_cluster(3, store=store, app=app) as cluster:
        await cluster.wait_all_admitted()
        host = cluster.servers[0].identity.node_rid
        for i in range(6):
            created = await cluster.servers[i % 3].spots.create("room").timeout(10)
            assert isinstance(created, SpotCreated) and created.spot.node_rid == host
        with pytest.raises(NotFound, match="no live node hosts user spot type 'room-i'"):
            await cluster.servers[1].spots.create("room-i").timeout(10)
        with pytest.raises(NotFound, match="'nothing'"):
            await cluster.servers[1].spots.get_or_create("x", "nothing").timeout(10)


@pytest.mark.parametrize("nodes", [2, 3])
async def test_s06_06_the_manager_offers_no_instance_spot_create(
    clock: object, store: CountingStore, nodes: int
) -> None:
    """S06-06: the Spot manager has no Instance-kind overload or Instance-only create:
    its creating operations are create(type) and get_or_create(id, type) only, and an
    Instance Spot type given to them is not a User Spot type anywhere (NotFound, nothing
    reserved, no factory)."""
    from zlink_trio.spots.manager import SpotManager

    public = {n for n in vars(SpotManager) if not n.startswith("_")}
    assert {n for n in public if "create" in n or "instance" in n} == {"create", "get_or_create"}
    assert {"find", "query", "close"} <= public
    for name in ("create", "get_or_create"):
        assert "kind" not in inspect.signature(getattr(SpotManager, name)).parameters
    rec = SpotRecorder()
    async with open_cluster(nodes, store=store, app=lambda i: instance_app(rec)) as cluster:
        await cluster.wait_all_admitted()
        store.reset()
        for call in (
            cluster.servers[0].spots.create("cart"),
            cluster.servers[-1].spots.get_or_create("c-1", "cart"),
        ):
            with pytest.raises(NotFound, match="user spot type 'cart'"):
                await call.timeout(10)
        assert store.count("reserve") == 0 and rec.total_runs == 0


@pytest.mark.parametrize("nodes", [2, 3])
async def test_s06_07_concurrent_creates_converge_on_one_factory_run(
    clock: object, store: CountingStore, nodes: int
) -> None:
    """S06-07: N concurrent GetOrCreate of one id from every node: exactly one Created,
    the rest Existing with the same SpotRef; one reservation, one factory run and one
    create callback; the winner's own request reached the callback."""
    rec = SpotRecorder(gate=trio.Event())
    async with open_cluster(nodes, store=store, app=hosts(rec)) as cluster:
        await cluster.wait_all_admitted()
        store.reset()
        results: list[object] = []

        async def one(index: int) -> None:
            server = cluster.servers[index % nodes]
            call = server.spots.get_or_create("arena", "room").request(f"r{index}".encode())
            results.append(await call.timeout(30))

        async with trio.open_nursery() as nursery:
            for index in range(3 * nodes):
                nursery.start_soon(one, index)
            await rec.entered.wait()
            assert rec.gate is not None
            rec.gate.set()
        created = [r for r in results if isinstance(r, SpotCreated)]
        existing = [r for r in results if isinstance(r, SpotExisting)]
        assert len(created) == 1 and len(existing) == 3 * nodes - 1
        assert all(r.spot == created[0].spot for r in existing)
        assert rec.runs("arena") == 1 and rec.callbacks("arena") == 1
        # One reservation applied across the cluster (the others' reserve CASes lost).
        assert sum(spot_statistics(s).creates for s in cluster.servers) == 1
        assert created[0].reply == b"hi:" + (rec.requests["arena"] or b"")[:16]
        stats = spot_statistics(cluster.servers[0])
        (room,) = stats.types
        assert room.factory_runs == 1 and room.lifecycle_callbacks["create"] == 1


async def test_s06_07_after_rejected_the_waiters_compete_with_their_own_request(
    clock: object, store: CountingStore
) -> None:
    """S06-07: a Rejected attempt's state and reply are never shared: a GetOrCreate that
    waited on it competes afresh and runs the factory with its OWN request; only a
    redelivery of the rejected operation's id gets the retained Rejected terminal."""
    rec = SpotRecorder(gate=trio.Event())
    async with open_cluster(2, store=store, app=hosts(rec)) as cluster:
        await cluster.wait_all_admitted()
        first_op = OperationId.new()
        results: dict[str, object] = {}

        async def first() -> None:
            call = cluster.servers[0].spots.get_or_create("r", "room").request(b"reject")
            results["first"] = await call.operation_id(first_op).timeout(30)

        async def second() -> None:
            await rec.entered.wait()  # the first attempt is in its create callback
            call = cluster.servers[1].spots.get_or_create("r", "room").request(b"mine")
            results["second"] = await call.timeout(30)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(first)
            nursery.start_soon(second)
            await rec.entered.wait()
            await trio.testing.wait_all_tasks_blocked()  # the second waits on Creating
            assert rec.gate is not None
            rec.gate.set()
        rejected = results["first"]
        assert isinstance(rejected, SpotRejected) and isinstance(rejected, Rejected)
        assert rejected.reply == b"no"
        second_result = results["second"]
        assert isinstance(second_result, SpotCreated) and second_result.reply == b"hi:mine"
        assert second_result.spot.object_generation != rejected.spot.object_generation
        assert rec.runs("r") == 2 and rec.requests["r"] == b"mine"
        # Only the same operation id gets the retained terminal (not the current state).
        replay = cluster.servers[0].spots.get_or_create("r", "room").request(b"reject")
        assert await replay.operation_id(first_op).timeout(10) == rejected
        assert rec.runs("r") == 2
        other = await cluster.servers[0].spots.get_or_create("r", "room").request(b"reject")
        assert other == SpotExisting(second_result.spot)


async def test_s06_07_neither_ready_nor_missing_by_the_deadline(
    clock: object, store: CountingStore
) -> None:
    """S06-07: a waiter whose deadline passes while the authority stays Creating ends
    DeadlineExceeded; the next call re-checks the Store and gets Existing."""
    rec = SpotRecorder(gate=trio.Event())
    async with open_cluster(2, store=store, app=hosts(rec)) as cluster:
        await cluster.wait_all_admitted()
        outcome: dict[str, object] = {}

        async def creator() -> None:
            outcome["creator"] = (
                await cluster.servers[0].spots.get_or_create("d", "room").timeout(60)
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(creator)
            await rec.entered.wait()
            with pytest.raises(DeadlineExceeded):
                await cluster.servers[1].spots.get_or_create("d", "room").timeout(0.5)
            assert rec.gate is not None
            rec.gate.set()
        created = outcome["creator"]
        assert isinstance(created, SpotCreated)
        again = await cluster.servers[1].spots.get_or_create("d", "room").timeout(10)
        assert again == SpotExisting(created.spot)
        assert rec.runs("d") == 1
