"""A clean stop drains (docs/decisions.md, "Graceful drain on a clean stop"; issue 10).

Leaving ``open_server`` (here ``Cluster.stop``) stops admission, lets the accepted turns
and the control transactions in progress finish until the drain deadline
(``drain_timeout``), then releases every authority row the lifecycle owns in the Store
(Ready/Closing → release, Creating → abort_creation, counted as RELEASED_AT_STOP) BEFORE
its registration is removed: peers see the ids Missing at once (``find`` → None,
``request`` → NotFound, ``get_or_create`` → Created on another lifecycle), not after the
lease. A node whose lease expired makes no Store call at all. tests/faults/
test_actor_processes.py stops a ``zlink-trio node`` process with SIGTERM and SIGINT.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import trio
import trio.testing
from actor_kit import Recorder, Wrapped, client_app, make_app

from zlink_trio import NotFound, ServerConfig, ShuttingDown, Unavailable, ZLinkError
from zlink_trio.actors.results import Created
from zlink_trio.spots.approval import ActorCreateEvent, Approve, CreateDecision
from zlink_trio.store.api import LocationStore, ObjectKey
from zlink_trio.testing import (
    Cluster,
    CountingStore,
    FlowEvent,
    advance_store_clock,
    flow_count,
    node_of,
    open_cluster,
)

LONG = 60.0
"""The calls' own timeout: far beyond anything a stop takes."""
IDS = ("cart-0", "cart-1", "cart-2")


class Ordered(Wrapped):
    """Records the order of the Store mutations that end a lifecycle's rows and its
    registration: ``(method, node rid or object id)``."""

    def __init__(self, inner: LocationStore) -> None:
        super().__init__(inner)
        self.log: list[tuple[str, str]] = []

    async def release(self, key: ObjectKey, expected_version: int) -> Any:
        self.log.append(("release", key.object_id))
        return await self._inner.release(key, expected_version)

    async def abort_creation(self, key: ObjectKey, expected_version: int, **kw: Any) -> Any:
        self.log.append(("abort_creation", key.object_id))
        return await self._inner.abort_creation(key, expected_version, **kw)

    async def remove_node(self, node_rid: Any, node_generation: Any, lease: Any) -> bool:
        self.log.append(("remove_node", node_rid.hex))
        return await self._inner.remove_node(node_rid, node_generation, lease)


def _backlog(server: Any) -> int:
    stats = server.statistics().actors
    return sum(t.application_backlog for t in stats.types)


async def _wait_queued(server: Any, count: int) -> None:
    """Until ``server``'s Actors hold ``count`` queued application items (a remote
    request travels over real TCP first: on the real clock "every task blocked" can
    come while its frame is still on the way)."""
    with trio.fail_after(10):
        while _backlog(server) < count:
            await trio.testing.wait_all_tasks_blocked(cushion=0.001)


async def _owned(store: LocationStore, cluster: Cluster, index: int) -> list[str]:
    rows = await store.scan_owned(cluster.servers[index].identity.node_rid)
    return sorted(r.key.object_id for r in rows)


async def test_a_clean_stop_releases_every_row_before_the_descriptor_goes(
    clock: object, store: CountingStore
) -> None:
    """Issue 10 (drain): node 0 hosts three Actors and stops cleanly. Each row is released
    (one CAS each, three RELEASED_AT_STOP) before node 0's ``remove_node``; right after
    the stop the Store holds no row of that lifecycle and node 1 sees every id Missing at
    once: ``find`` → None, ``request`` and ``send`` → NotFound, all without waiting for
    any lease; a new lifecycle then gets ``Created`` with a new ObjectGeneration."""
    ordered = Ordered(store)
    apps = [make_app(Recorder()), client_app()]
    async with open_cluster(2, store=ordered, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[1].actors
        generations = {}
        for actor_id in IDS:
            created = await caller.create(actor_id, "player").timeout(LONG)
            assert isinstance(created, Created)
            generations[actor_id] = created.actor.object_generation
            assert await caller.request(actor_id, "echo", b"x").timeout(LONG) == b"x"
        owner = cluster.servers[0]
        rid = owner.identity.node_rid.hex
        assert await _owned(store, cluster, 0) == sorted([*IDS, owner_entry(owner)])
        stopped = trio.current_time()
        await cluster.stop(0)
        assert sorted(ordered.log) == sorted(
            [("release", actor_id) for actor_id in IDS] + [("remove_node", rid)]
        )
        assert ordered.log[-1] == ("remove_node", rid)  # the rows went first
        assert flow_count(owner, FlowEvent.RELEASED_AT_STOP) == 3
        assert await _owned(store, cluster, 0) == []
        for actor_id in IDS:
            assert await store.read(ObjectKey.actor(actor_id)) is None
            assert await caller.find(actor_id) is None
            with pytest.raises(NotFound):
                await caller.request(actor_id, "echo", b"y").timeout(LONG)
            with pytest.raises(NotFound):
                await caller.send(actor_id, "note", b"y").timeout(LONG)
        if clock is not None:  # virtual time: nothing waited for a lease
            assert trio.current_time() == stopped
        await cluster.start(0)
        again = await caller.get_or_create("cart-0", "player").timeout(LONG)
        assert isinstance(again, Created)
        assert again.actor.node_rid == cluster.servers[0].identity.node_rid
        assert again.actor.object_generation != generations["cart-0"]


def owner_entry(server: Any) -> str:
    """The Entry Spot id of ``server`` (its claim row is removed by ``remove_node``)."""
    (spot_id,) = node_of(server).entry_spot_ids.values()
    return str(spot_id.value)


async def test_a_turn_in_flight_at_stop_finishes_and_its_callers_get_their_replies(
    clock: object, store: CountingStore
) -> None:
    """Issue 10 (drain): node 0's Actor runs a turn (blocked) for a caller on node 1, with
    a second request from node 1 and a local one from node 0 queued behind it, when node
    0 starts a clean stop. From then on new calls end at once (ShuttingDown on node 0,
    Unavailable from node 1); the accepted ones run: once the turn is released (well
    within ``drain_timeout``), each of the three callers gets its reply, and only then
    is the row released and the registration removed."""
    rec = Recorder(gate=trio.Event())
    apps = [make_app(rec), client_app()]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        owner, caller = cluster.servers
        created = await caller.actors.create("cart-0", "player").timeout(LONG)
        assert isinstance(created, Created)
        replies: dict[str, object] = {}

        async def call(name: str, server: Any, packet: str) -> None:
            try:
                replies[name] = await server.actors.request("cart-0", packet, b"").timeout(LONG)
            except Exception as exc:
                replies[name] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "running", caller, "block")
            await rec.entered.wait()
            nursery.start_soon(call, "queued remote", caller, "echo")
            nursery.start_soon(call, "queued local", owner, "echo")
            await _wait_queued(owner, 2)  # both accepted before the stop begins
            nursery.start_soon(cluster.stop, 0)
            await trio.testing.wait_all_tasks_blocked()  # the stop runs: its drain waits
            assert not node_of(owner).admitting
            with pytest.raises(ShuttingDown):
                await owner.actors.request("cart-0", "echo", b"new").timeout(LONG)
            with pytest.raises(Unavailable):
                await caller.actors.request("cart-0", "echo", b"new").timeout(LONG)
            assert await store.read(ObjectKey.actor("cart-0")) is not None  # still owned
            assert rec.gate is not None
            rec.gate.set()
        assert replies == {"running": b"unblocked", "queued remote": b"", "queued local": b""}
        assert await store.read(ObjectKey.actor("cart-0")) is None
        assert flow_count(owner, FlowEvent.RELEASED_AT_STOP) == 1


async def test_a_create_in_flight_at_stop_finishes_then_its_row_is_released(
    clock: object, store: CountingStore
) -> None:
    """Issue 10 (drain): a create from node 1 is in node 0's OnCreateActor (a control
    transaction) when node 0 stops cleanly. The stop lets it finish: once approved, the
    caller gets ``Created``; then the stop releases the new row (RELEASED_AT_STOP), so
    ``find`` sees nothing."""
    approving = trio.Event()
    approve = trio.Event()

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        approving.set()
        await approve.wait()
        return Approve()

    apps = [make_app(Recorder(), on_create=on_create), client_app()]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        owner, caller = cluster.servers
        outcome: list[object] = []

        async def create() -> None:
            outcome.append(await caller.actors.create("cart-0", "player").timeout(LONG))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(create)
            await approving.wait()
            nursery.start_soon(cluster.stop, 0)
            await trio.testing.wait_all_tasks_blocked()  # the stop runs: its drain waits
            assert not node_of(owner).admitting
            approve.set()
        (created,) = outcome
        assert isinstance(created, Created)
        assert created.actor.node_rid == owner.identity.node_rid
        assert flow_count(owner, FlowEvent.RELEASED_AT_STOP) == 1
        assert await store.read(ObjectKey.actor("cart-0")) is None
        assert await caller.actors.find("cart-0") is None


async def test_a_reservation_still_creating_at_the_drain_deadline_is_aborted(
    clock: object, store: CountingStore
) -> None:
    """Issue 10 (drain): a create from node 1 is held in node 0's OnCreateActor past the
    drain deadline (``drain_timeout`` = 1 s). The stop then cancels the attempt and aborts
    the Creating reservation itself (``abort_creation`` before ``remove_node``, counted as
    RELEASED_AT_STOP), so the id is free at once; the creator ends Unavailable (its
    target's lifecycle ended without a terminal)."""
    approving = trio.Event()

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        approving.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    ordered = Ordered(store)
    apps = [make_app(Recorder(), on_create=on_create), client_app()]
    config = ServerConfig(drain_timeout=1.0)
    async with open_cluster(2, store=ordered, app=lambda i: apps[i], config=config) as cluster:
        await cluster.wait_all_admitted()
        owner, caller = cluster.servers
        outcome: list[object] = []

        async def create() -> None:
            try:
                outcome.append(await caller.actors.create("cart-0", "player").timeout(LONG))
            except Exception as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(create)
            await approving.wait()
            await cluster.stop(0)
            assert ordered.log[:2] == [
                ("abort_creation", "cart-0"),
                ("remove_node", owner.identity.node_rid.hex),
            ]
            assert await store.read(ObjectKey.actor("cart-0")) is None
        assert flow_count(owner, FlowEvent.RELEASED_AT_STOP) == 1
        (failure,) = outcome
        assert isinstance(failure, Unavailable), failure


class ReleaseFails(Ordered):
    """``release`` of ``failing`` never reaches the Store (Unavailable)."""

    failing: set[str]

    async def release(self, key: ObjectKey, expected_version: int) -> Any:
        if key.object_id in self.failing:
            self.log.append(("release failed", key.object_id))
            await trio.lowlevel.checkpoint()
            raise Unavailable("the Location Store does not answer")
        return await super().release(key, expected_version)


async def test_a_row_the_stop_could_not_release_is_reclaimed_by_the_next_call(
    clock: object, store: CountingStore
) -> None:
    """Issue 10 (drain): the Store refuses node 0's release of ``cart-0`` at its stop (the
    other row is released). The stop still ends (the release is retried from fresh scans,
    then given up) and removes the registration; the row left behind names a lifecycle
    that is no longer live, so node 1's next request reclaims it (RECLAIMED) and ends
    NotFound at once: a Store failure at stop costs one lazy reclaim, never a wedge."""
    failing = ReleaseFails(store)
    failing.failing = {"cart-0"}
    apps = [make_app(Recorder()), client_app()]
    config = ServerConfig(reclaim_sweep_interval=1000.0)  # the reclaim is the call's own
    async with open_cluster(2, store=failing, app=lambda i: apps[i], config=config) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[1].actors
        for actor_id in ("cart-0", "cart-1"):
            created = await caller.create(actor_id, "player").timeout(LONG)
            assert isinstance(created, Created)
            assert await caller.request(actor_id, "echo", b"x").timeout(LONG) == b"x"
        owner = cluster.servers[0]
        await cluster.stop(0)
        assert failing.log.count(("release failed", "cart-0")) > 1  # retried, then given up
        assert failing.log[-1] == ("remove_node", owner.identity.node_rid.hex)
        assert flow_count(owner, FlowEvent.RELEASED_AT_STOP) == 1
        assert await store.read(ObjectKey.actor("cart-1")) is None
        assert await store.read(ObjectKey.actor("cart-0")) is not None
        with pytest.raises(NotFound):
            await caller.request("cart-0", "echo", b"y").timeout(LONG)
        assert flow_count(cluster.servers[1], FlowEvent.RECLAIMED) == 1
        assert await store.read(ObjectKey.actor("cart-0")) is None


@pytest.mark.parametrize("backend", ["memory"])  # virtual time: MockClock only
async def test_a_node_whose_lease_expired_stops_without_any_store_call(
    clock: object, store: CountingStore
) -> None:
    """Issue 10 (drain): node 0's lease is lost (fail-stopped) while its Actor runs a
    blocked turn. Its stop then waits for nothing (no drain) and makes no Store call at
    all: no scan, no release, no ``remove_node``; its rows stay for the reclaim."""
    rec = Recorder(gate=trio.Event())
    apps = [make_app(rec), client_app()]
    config = ServerConfig(reclaim_sweep_interval=1000.0)  # node 1 reclaims nothing meanwhile
    async with open_cluster(2, store=store, app=lambda i: apps[i], config=config) as cluster:
        await cluster.wait_all_admitted()
        owner, caller = cluster.servers
        created = await caller.actors.create("cart-0", "player").timeout(LONG)
        assert isinstance(created, Created)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_ignore, caller.actors.request("cart-0", "block", b"").timeout(5))
            await rec.entered.wait()
            await advance_store_clock(store, cluster.configs[0].owner_lease_ttl + 1)
            await owner.wait_lease_lost()
            store.reset()
            stopped = trio.current_time()
            await cluster.stop(0)
            assert trio.current_time() == stopped
            for method in ("scan_owned", "release", "abort_creation", "remove_node"):
                assert store.count(method) == 0, method
        assert flow_count(owner, FlowEvent.RELEASED_AT_STOP) == 0
        assert await store.read(ObjectKey.actor("cart-0")) is not None


async def _ignore(call: Any) -> None:
    with contextlib.suppress(ZLinkError):  # it ends when the stopped node is seen gone
        await call
