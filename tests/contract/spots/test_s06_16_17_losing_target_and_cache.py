"""S06-16, S06-17: a target that lost creation authority makes no instance and forwards the
message once to the winner; a local Instance that does not match the Store never runs a
message; Missing, Creating and Store failures are never cached (spec 06 §4.1 step 13,
§4.2, §6). Two and three nodes, both stores.
"""

from __future__ import annotations

import pytest
import trio
from call_kit import SECRET, Recorder, client_app, client_config, server_config, spot_app

from zlink_trio import MeshConfig, NotFound, ObjectRole, ServerConfig, Unavailable
from zlink_trio.store.api import Applied, ObjectKey
from zlink_trio.testing import (
    CountingStore,
    CutOffStore,
    FlowEvent,
    RecordingStore,
    TapDirection,
    WireTap,
    flow_count,
    node_of,
    open_cluster,
)
from zlink_trio.wire.commands import Command
from zlink_trio.wire.tails import ColdActivation, ReadyFence

SPOT_DIRECT = int(Command.SPOT_DIRECT_ROUTE)


def _meshes(index: int) -> tuple[MeshConfig, ...]:
    """Node 0 calls in meshes A and B; node 1 hosts in A; node 2 hosts in B and calls in
    A (so it can reach node 1 there)."""
    client = ObjectRole.CLIENT
    return (
        (MeshConfig(name="A", object_role=client), MeshConfig(name="B", object_role=client)),
        (MeshConfig(name="A"),),
        (MeshConfig(name="B"), MeshConfig(name="A", object_role=client)),
    )[index]


async def test_s06_16_a_losing_target_waits_for_the_activation_and_forwards_once(
    clock: object, store: CountingStore
) -> None:
    """S06-16: first messages for one id reach two different targets (mesh A's node 1,
    mesh B's node 2) while node 1's factory runs: node 2 makes no local Spot, waits for
    that activation, then forwards its message ONCE to the winner with the original
    operation id; one factory run in the cluster; both callers get their replies from the
    single winner."""
    rec = Recorder(factory_gate=trio.Event())
    tap = WireTap()
    async with open_cluster(
        3,
        store=store,
        app=lambda i: client_app() if i == 0 else spot_app(rec, f"n{i}", slow_factory=True),
        config=lambda i: ServerConfig(meshes=_meshes(i), cluster_secret=SECRET),
        tap=tap,
    ) as cluster:
        await cluster.wait_all_admitted()
        caller, winner, loser = cluster.servers
        replies: dict[str, bytes | None] = {}

        async def call(mesh: str) -> None:
            call = caller.spots.request("c1", "whoami", mesh.encode()).instance("cart")
            replies[mesh] = await call.in_mesh(mesh).timeout(20)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "A")
            await rec.factory_entered.wait()
            nursery.start_soon(call, "B")
            await tap.wait_for(
                node=node_of(loser).identity.node_rid,
                direction=TapDirection.RECEIVED,
                command=SPOT_DIRECT,
            )
            await trio.testing.wait_all_tasks_blocked()
            assert rec.factory_gate is not None
            rec.factory_gate.set()
        generation = rec.handled[0][1]
        assert replies == {"A": f"n1:{generation}".encode(), "B": f"n1:{generation}".encode()}
        assert rec.total_runs == 1
        assert rec.of("c1") == [("whoami", b"A"), ("whoami", b"B")]
        assert flow_count(loser, FlowEvent.ACTIVATION_FORWARDED) == 1
        lost = loser.statistics().spots
        won = winner.statistics().spots
        assert lost is not None and lost.calls is not None
        assert won is not None and won.calls is not None
        assert (lost.calls.envelopes, lost.calls.reservations, lost.calls.forwarded) == (1, 0, 1)
        assert (won.calls.envelopes, won.calls.reservations, won.calls.forwarded) == (1, 1, 0)
        assert lost.hosted == 0  # the losing target made no local Spot
        [envelope] = [
            e.record
            for e in tap.select(
                node=node_of(caller).identity.node_rid,
                direction=TapDirection.SENT,
                command=SPOT_DIRECT,
            )
            if isinstance(e.record.route, ColdActivation)
            and e.record.route.target_mesh.value == "B"
        ]
        forwards = tap.select(
            node=node_of(loser).identity.node_rid, direction=TapDirection.SENT, command=SPOT_DIRECT
        )
        assert len(forwards) == 1
        forward = forwards[0].record
        assert isinstance(forward.route, ReadyFence)
        assert forward.route.target_rid == node_of(winner).identity.node_rid
        assert (forward.operation_id, forward.payload, forward.packet_name) == (
            envelope.operation_id,
            envelope.payload,
            envelope.packet_name,
        )


async def test_s06_16_concurrent_first_messages_make_one_factory_run(
    clock: object, store: CountingStore
) -> None:
    """S06-16: first messages for the same ids sent at once from three nodes to two
    hosting targets: per id one factory run in the cluster, every caller replied by the
    same incarnation on the same node."""
    rec = Recorder()
    async with open_cluster(
        3,
        store=store,
        app=lambda i: spot_app(rec, f"n{i}", instance_types=("cart",) if i else ()),
        config=lambda i: server_config(),
    ) as cluster:
        await cluster.wait_all_admitted()
        ids = [f"c{i}" for i in range(8)]
        replies: dict[tuple[str, int], bytes | None] = {}

        async def call(spot_id: str, index: int) -> None:
            server = cluster.servers[index]
            reply = await server.spots.request(spot_id, "whoami").instance("cart").timeout(20)
            replies[spot_id, index] = reply

        async with trio.open_nursery() as nursery:
            for spot_id in ids:
                for index in range(3):
                    nursery.start_soon(call, spot_id, index)
        for spot_id in ids:
            assert rec.runs(spot_id) == 1
            assert len({replies[spot_id, i] for i in range(3)}) == 1
            assert len(rec.of(spot_id)) == 3


async def test_s06_16_a_stale_local_instance_never_runs_a_message(
    clock: object, store: CountingStore
) -> None:
    """S06-16: the Store no longer names node 1's local Instance (its row was released
    behind its back): a cold activation reaching node 1 does not run on that stale
    instance — it checks the Store, activates a new incarnation, and the stale one's
    handler count stays 0. (The caller keeps no route cache, so it resolves Missing and
    sends a route-kind-2 envelope.)"""
    rec = Recorder()
    recording = RecordingStore(store)
    async with open_cluster(
        2,
        store=recording,
        app=lambda i: client_app() if i == 0 else spot_app(rec, "n1"),
        config=lambda i: client_config(route_cache_max_age=0.0) if i == 0 else server_config(),
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        assert await caller.spots.request("c1", "add", b"a").instance("cart") == b"1"
        stale = rec.handled[0][1]
        key = ObjectKey.spot("c1")
        # The first record's cleanup (pointer removal, root deletion) follows its reply.
        await recording.wait_for(lambda h: any(c.method == "delete_root" for c in h))
        row = await store.read(key)
        assert row is not None and row.recovery is None
        # The Store forgets the incarnation behind node 1's back.
        assert isinstance(await store.release(key, row.store_version), Applied)
        before = len(rec.handled)
        assert await caller.spots.request("c1", "add", b"b").instance("cart") == b"1"
        assert await caller.spots.request("c1", "add", b"c") == b"2"
        later = rec.handled[before:]
        assert len(later) == 2
        assert all(generation != stale for _, generation, _, _, _ in later)
        assert rec.runs("c1") == 2


async def test_s06_17_missing_and_creating_are_never_cached(
    clock: object, store: CountingStore
) -> None:
    """S06-17: after NotFound for a Missing id, and for an id whose activation is still
    Creating, every next call reads the Store again; a Spot Ready right after a Missing
    result is reached by the very next call."""
    rec = Recorder(factory_gate=trio.Event())
    caller_store = CountingStore(store)
    configs = [
        client_config(location_store=caller_store, route_cache_max_age=25.0),
        server_config(),
    ]
    async with open_cluster(
        2,
        store=store,
        app=lambda i: client_app() if i == 0 else spot_app(rec, "n1", slow_factory=True),
        config=lambda i: configs[i],
    ) as cluster:
        await cluster.wait_all_admitted()
        caller, host = cluster.servers
        caller_store.reset()
        for expected_reads in (1, 2, 3):
            with pytest.raises(NotFound):
                await caller.spots.request("c1", "add").timeout(5)
            assert caller_store.count("read") == expected_reads
        await host.spots.send("c1", "note", b"first").instance("cart")  # admitted at once
        await rec.factory_entered.wait()
        assert (await store.read(ObjectKey.spot("c1"))) is not None  # Creating
        for expected_reads in (4, 5):
            with pytest.raises(NotFound):
                await caller.spots.send("c1", "note").timeout(5)
            assert caller_store.count("read") == expected_reads
        assert rec.factory_gate is not None
        rec.factory_gate.set()
        await rec.wait_handled(1)
        assert await caller.spots.request("c1", "add", b"x").timeout(5) == b"2"
        assert caller_store.count("read") == 6
        assert await caller.spots.request("c1", "add", b"y").timeout(5) == b"3"
        assert caller_store.count("read") == 6  # Ready: cached


async def test_s06_17_a_store_failure_is_never_cached(clock: object, store: CountingStore) -> None:
    """S06-17: a call whose Store read fails ends Unavailable; once the Store answers
    again the very next call resolves and reaches the Spot (nothing negative was kept)."""
    rec = Recorder()
    cut = CutOffStore(store)
    configs = [client_config(location_store=cut), server_config()]
    async with open_cluster(
        2,
        store=store,
        app=lambda i: client_app() if i == 0 else spot_app(rec, "n1"),
        config=lambda i: configs[i],
    ) as cluster:
        await cluster.wait_all_admitted()
        caller, host = cluster.servers
        cut.cut()
        with pytest.raises(Unavailable):
            await caller.spots.request("c1", "add").instance("cart").timeout(5)
        with pytest.raises(Unavailable):
            await caller.spots.request("c1", "add").timeout(5)
        assert await host.spots.request("c1", "add", b"a").instance("cart") == b"1"
        cut.heal()
        assert await caller.spots.request("c1", "add", b"b").timeout(5) == b"2"
        assert rec.runs("c1") == 1
