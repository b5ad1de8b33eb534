"""Live Spot relocation (spec 06 §6, §6.1, §8; spec 04 §6.1, §6.7; docs/relocation.md,
"Spots"): ``server.relocate`` of User and Instance Spots between nodes over real TCP, on
both stores."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from spot_relocation_kit import (
    LONG,
    SpotLog,
    apps,
    instance_on,
    owner_row,
    user_spot_on,
)

from zlink_trio import (
    AuthorityOwnerGeneration,
    NotConfigured,
    ServerConfig,
    Unavailable,
    ZLinkError,
)
from zlink_trio.ids import SpotId
from zlink_trio.store.api import ObjectKey
from zlink_trio.testing import (
    CountingStore,
    FaultPlan,
    TapDirection,
    WireTap,
    forget_spot_member,
    open_cluster,
    record_spot_member,
)
from zlink_trio.wire.commands import Command


async def test_a04_13_instance_spot_state_moves_generation_stays(
    clock: object, store: CountingStore
) -> None:
    """A04-13 (PreserveStateWith, an Instance Spot): a Spot activated on node 0 moves to
    node 1 and back: the adapter's captured state is restored on each target, the
    ObjectGeneration never changes, the AuthorityOwnerGeneration rises by one per move
    (target-only CAS, the relocation mark cleared), and requests by SpotId from a third
    node reach the current owner."""
    log = SpotLog()
    async with open_cluster(3, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        spot = await instance_on(c, cluster.servers, 0, "bag", "bag", store)
        for i in range(3):
            await c.spots.send(spot, "add", str(i).encode())
        row = await store.read(ObjectKey.spot(spot))
        assert row is not None
        generation = row.object_generation.value
        assert await c.spots.request(spot, "get").timeout(LONG) == f"4@node0:{generation}".encode()

        result = await a.relocate(SpotId(spot), to=b.identity.node_rid)
        assert result.committed and result.spot_id == SpotId(spot)
        assert result.owner_generation == AuthorityOwnerGeneration(row.owner_generation.value + 1)
        assert result.object_generation.value == generation
        moved = await owner_row(store, spot, b, row.owner_generation.value + 1)
        assert moved.object_generation.value == generation and moved.relocation is None
        assert await c.spots.request(spot, "get").timeout(LONG) == f"4@node1:{generation}".encode()
        assert log.restored == [(spot, b"4")]

        await b.relocate(SpotId(spot), to=a.identity.node_rid)
        await owner_row(store, spot, a, row.owner_generation.value + 2)
        assert await c.spots.request(spot, "get").timeout(LONG) == f"4@node0:{generation}".encode()
        assert log.factory_runs[spot] == 3
        ref = await c.spots.find(spot)
        assert ref is not None and ref.object_generation.value == generation


async def test_a04_13_recreate_on_relocation_keeps_the_spot_generation_not_its_state(
    clock: object, store: CountingStore
) -> None:
    """A04-13 (RecreateOnRelocation, an Instance Spot): the target recreates the Spot with
    its factory and no application state; the ObjectGeneration is the same, the
    AuthorityOwnerGeneration one higher; no adapter runs."""
    log = SpotLog()
    async with open_cluster(2, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        spot = await instance_on(b, cluster.servers, 0, "fresh", "fresh", store)
        before = await store.read(ObjectKey.spot(spot))
        assert before is not None
        gen = before.object_generation.value
        assert await b.spots.request(spot, "get").timeout(LONG) == f"1@node0:{gen}".encode()
        await a.relocate(SpotId(spot), to=b.identity.node_rid)
        # b's own route cache still names node 0: Message Follow brings it to node 1.
        assert await b.spots.request(spot, "get").timeout(LONG) == f"0@node1:{gen}".encode()
        after = await owner_row(store, spot, b, before.owner_generation.value + 1)
        assert after.object_generation == before.object_generation
        assert log.restored == [] and log.factory_runs[spot] == 2


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_instance_spot_timers_move_and_a_pending_tick_fires_once_on_the_target(
    clock: object, store: CountingStore
) -> None:
    """Spec 06 §8 (timers move with the Spot): a one-shot timer that came due while the
    Spot's handler ran (its tick queued behind it) and a registration not yet due both
    move: the pending tick runs once, on the target, before the saved messages; the other
    registration is still registered on the target (the application never registers it
    again) and fires there once at its time; nothing fires on the source. (Memory store:
    the times are exact with MockClock.)"""
    log = SpotLog()
    async with open_cluster(2, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        spot = await instance_on(b, cluster.servers, 0, "tick", "bag", store)
        assert await b.spots.request(spot, "once", b"1").timeout(LONG) == b"ok"
        log.gate = trio.Event()
        async with trio.open_nursery() as nursery:

            async def hold() -> None:
                await b.spots.request(spot, "hold").timeout(LONG)

            nursery.start_soon(hold)
            await log.entered.wait()
            await trio.sleep(2)  # (virtual time) the tick is due: queued behind "hold"
            await b.spots.send(spot, "add", b"saved")
            results: list[object] = []

            async def move() -> None:
                results.append(await a.relocate(SpotId(spot), to=b.identity.node_rid))

            nursery.start_soon(move)
            await trio.testing.wait_all_tasks_blocked()
            log.gate.set()
        assert log.ticks == [] or log.ticks == [(spot, "node1", b"ding")]
        await log.wait_for(lambda: len(log.ticks) == 1 and len(log.payloads(spot)) == 1)
        assert log.ticks == [(spot, "node1", b"ding")]
        assert log.nodes(spot) == {"node1"}
        assert log.payloads(spot) == [b"saved"]
        # a registration not due yet moves as a registration
        assert await a.spots.request(spot, "once", b"5").timeout(LONG) == b"ok"
        await b.relocate(SpotId(spot), to=a.identity.node_rid)
        assert await a.spots.request(spot, "timers").timeout(LONG) == b"ding"
        await log.wait_for(lambda: len(log.ticks) == 2)
        assert log.ticks[1] == (spot, "node0", b"ding")
        await trio.sleep(30)
        assert len(log.ticks) == 2
        assert await a.spots.request(spot, "timers").timeout(LONG) == b""


async def test_s06_19_close_during_a_move_seal_is_unavailable(
    clock: object, store: CountingStore
) -> None:
    """S06-19 (Close during a move seal): while a SpotWide User Spot is sealed for a move
    (its target's Restore is held), ``spots.close`` of its SpotRef — from its owner and
    from another node — ends Unavailable and closes nothing; once the move committed,
    the same SpotRef closes it on its new owner (True)."""
    log = SpotLog()
    async with open_cluster(2, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        ref = await user_spot_on(b, cluster.servers, 0, "hall", "hall")
        spot = ref.spot_id.value
        await b.spots.send(spot, "add", b"1")
        assert await b.spots.request(spot, "get").timeout(LONG) is not None
        log.restore_gate = trio.Event()
        async with trio.open_nursery() as nursery:

            async def move() -> None:
                await a.relocate(ref, to=b.identity.node_rid)

            nursery.start_soon(move)
            await log.restore_entered.wait()  # the source is sealed and marked
            for server in (a, b):
                with pytest.raises(Unavailable):
                    await server.spots.close(ref)
            await b.spots.send(spot, "add", b"2")  # held at the source, not refused
            log.restore_gate.set()
        await owner_row(store, spot, b, 2)
        await log.wait_for(lambda: len(log.payloads(spot)) == 2)
        assert log.payloads(spot) == [b"1", b"2"]
        assert log.restored == [(spot, b"1")]
        assert await a.spots.close(ref) is True
        assert await b.spots.find(spot) is None


async def test_s06_18_spot_follow_reads_no_store_and_keeps_the_operation_id(
    clock: object, store: CountingStore
) -> None:
    """S06-18: after a move node 0 → node 1, a caller on node 2 whose route cache still
    names node 0 reaches node 1 through node 0's committed follow route: the Location
    Store is read 0 times for the whole call, node 1 receives the operation id node 0
    received (follow_hops 1), one terminal comes back, and node 0 runs no handler."""
    log = SpotLog()
    tap = WireTap()
    async with open_cluster(3, store=store, app=apps(log), tap=tap) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        spot = await instance_on(c, cluster.servers, 0, "follow", "bag", store)
        assert (await c.spots.request(spot, "get").timeout(LONG)).startswith(b"1@node0")
        await a.relocate(SpotId(spot), to=b.identity.node_rid)
        store.reset()
        tap.clear()
        assert await c.spots.request(spot, "add-req", b"x").timeout(LONG) == b"x"
        assert store.reads == 0 and store.writes == 0
        (at_a,) = tap.select(
            node=a.identity.node_rid,
            direction=TapDirection.RECEIVED,
            command=Command.SPOT_DIRECT_ROUTE,
        )
        (at_b,) = tap.select(
            node=b.identity.node_rid,
            direction=TapDirection.RECEIVED,
            command=Command.SPOT_DIRECT_ROUTE,
        )
        assert at_a.record.operation_id == at_b.record.operation_id
        assert at_a.record.follow_hops == 0 and at_b.record.follow_hops == 1
        assert at_b.record.payload == b"x"
        replies = tap.select(
            node=c.identity.node_rid,
            direction=TapDirection.RECEIVED,
            command=Command.TERMINAL_REPLY,
        )
        assert len(replies) == 1
        assert [n for s, p, _, n in log.handled if s == spot and p == "add-req"] == [
            "node0",
            "node1",
        ]
        stats = a.statistics().spots
        assert stats is not None and stats.relocation.followed == 1


async def test_s06_18_a_burst_during_the_spot_move_is_all_delivered_in_order(
    clock: object, store: CountingStore
) -> None:
    """S06-18 / A04-06: a burst sent while the source is sealed — several times a lane's
    capacity — is held (never refused), relayed and run on the target, then a burst sent
    after the move follows the committed route: every message runs exactly once, in the
    order it was sent, all on the target."""
    log = SpotLog()

    def config(i: int) -> ServerConfig:
        return ServerConfig(lane_capacity=64)

    async with open_cluster(3, store=store, app=apps(log), config=config) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        spot = await instance_on(c, cluster.servers, 0, "burst", "bag", store)
        log.restore_gate = trio.Event()
        async with trio.open_nursery() as nursery:

            async def move() -> None:
                await a.relocate(SpotId(spot), to=b.identity.node_rid)

            nursery.start_soon(move)
            await log.restore_entered.wait()
            for i in range(300):
                await c.spots.send(spot, "add", f"held-{i}".encode())
            log.restore_gate.set()
        for i in range(300):
            await c.spots.send(spot, "add", f"after-{i}".encode())
        await log.wait_for(lambda: len(log.payloads(spot)) == 600)
        expected = [f"held-{i}".encode() for i in range(300)]
        expected += [f"after-{i}".encode() for i in range(300)]
        assert log.payloads(spot) == expected
        assert [n for s, p, _, n in log.handled if s == spot and p == "add"] == ["node1"] * 600


async def test_a04_07_spot_restore_failure_before_relay_ready_leaves_it_on_the_source(
    clock: object, store: CountingStore
) -> None:
    """A04-07 (explicit failure before relay-ready acceptance): the target's Restore
    raises: ``relocate`` fails, the Spot stays Ready on the source with its state, its
    row is unchanged (same owner and AuthorityOwnerGeneration, the relocation mark
    cleared), what was held during the seal runs on the source in arrival order, no
    handler ran on the target, and a later move succeeds."""
    log = SpotLog()
    async with open_cluster(2, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        spot = await instance_on(b, cluster.servers, 0, "fail", "bag", store)
        before = await store.read(ObjectKey.spot(spot))
        assert before is not None
        log.restore_gate = trio.Event()
        log.fail_restore = True
        errors: list[BaseException] = []
        with trio.fail_after(60):  # a hang shows where it waits
            await _fail_once(a, b, spot, log, errors)
        assert len(errors) == 1, errors
        await log.wait_for(lambda: len(log.payloads(spot)) == 5)
        assert log.payloads(spot) == [f"held-{i}".encode() for i in range(5)]
        assert log.nodes(spot) == {"node0"}
        after = await store.read(ObjectKey.spot(spot))
        assert after is not None and after.relocation is None
        assert after.owner == before.owner and after.owner_generation == before.owner_generation
        gen = before.object_generation.value
        assert await b.spots.request(spot, "get").timeout(LONG) == f"6@node0:{gen}".encode()
        stats = a.statistics().spots
        assert stats is not None and stats.relocation.aborted == 1
        log.fail_restore = False
        log.restore_gate = None
        with trio.fail_after(60):
            result = await a.relocate(SpotId(spot), to=b.identity.node_rid)
        assert result.committed
        assert await a.spots.request(spot, "get").timeout(LONG) == f"6@node1:{gen}".encode()


async def _fail_once(
    a: object, b: object, spot: str, log: SpotLog, errors: list[BaseException]
) -> None:
    async with trio.open_nursery() as nursery:

        async def move() -> None:
            try:
                await a.relocate(SpotId(spot), to=b.identity.node_rid)  # type: ignore[attr-defined]
            except ZLinkError as exc:
                errors.append(exc)

        nursery.start_soon(move)
        await log.restore_entered.wait()
        for i in range(5):
            await b.spots.send(spot, "add", f"held-{i}".encode())  # type: ignore[attr-defined]
        assert log.restore_gate is not None
        log.restore_gate.set()


async def test_a_spot_wide_spot_with_members_is_not_moved_without_them(
    clock: object, store: CountingStore
) -> None:
    """Spec 06 §6.1 (SpotWide: the Spot and its members move in ONE aggregate commit,
    not built here): a SpotWide User Spot that has a member is refused NotConfigured and
    stays Ready where it is, untouched (row unchanged, no mark, it answers); without
    members it moves alone, and its members' set moves with it."""
    log = SpotLog()
    async with open_cluster(2, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        ref = await user_spot_on(b, cluster.servers, 0, "wide", "hall")
        spot = ref.spot_id.value
        await record_spot_member(a, spot, "some-member")
        row = await store.read(ObjectKey.spot(spot))
        with pytest.raises(NotConfigured, match="aggregate"):
            await a.relocate(ref, to=b.identity.node_rid)
        assert await store.read(ObjectKey.spot(spot)) == row
        assert (await b.spots.request(spot, "get").timeout(LONG)).startswith(b"0@node0")
        await forget_spot_member(a, spot, "some-member")
        result = await a.relocate(ref, to=b.identity.node_rid)
        assert result.committed
        assert (await a.spots.request(spot, "get").timeout(LONG)).startswith(b"0@node1")


async def test_drain_by_relocation_moves_the_spots_that_can_move(
    clock: object, store: CountingStore
) -> None:
    """Drain by relocation (a clean stop, step 3) for Spots: stopping node 0 moves its
    relocatable Instance and User Spots to the live peer (PreserveStateWith state and the
    ObjectGeneration kept, AuthorityOwnerGeneration + 1); they answer there by SpotId."""
    log = SpotLog()
    async with open_cluster(2, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        _, b = cluster.servers
        bags = [
            await instance_on(b, cluster.servers, 0, f"dbag{i}", "bag", store) for i in range(2)
        ]
        hall = await user_spot_on(b, cluster.servers, 0, "dhall", "hall")
        rows = {}
        for spot in [*bags, hall.spot_id.value]:
            await b.spots.send(spot, "add", b"x")
            rows[spot] = await store.read(ObjectKey.spot(spot))
        assert await b.spots.request(bags[0], "get").timeout(LONG) is not None
        await cluster.stop(0)
        for spot, before in rows.items():
            row = await store.read(ObjectKey.spot(spot))
            assert row is not None and row.owner.node_rid == b.identity.node_rid
            assert row.object_generation == before.object_generation
            assert row.owner_generation.value == before.owner_generation.value + 1
        gen = rows[bags[0]].object_generation.value
        assert await b.spots.request(bags[0], "get").timeout(LONG) == f"2@node1:{gen}".encode()
        reply = await b.spots.request(hall.spot_id, "get").timeout(LONG)
        assert reply.startswith(b"1@node1")


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_a04_04_a04_05_spot_temporary_queue_then_merge_order(
    clock: object, store: CountingStore
) -> None:
    """A04-04 / A04-05 for a Spot — A04-04: a message that reaches the target while its
    Restore runs goes into the temporary queue (checked before any instance or follow
    route) and no handler runs it before the commit; it runs once afterwards. A04-05: on
    the target the saved work (queued at the seal), then the pre-boundary relay (held at
    the source after the seal), then the remaining temporary work, then what arrived
    after the switch, run in that order, and nothing runs before the commit. (Memory
    store: the interleaving is made exact with MockClock's ``wait_all_tasks_blocked``.)"""
    log = SpotLog()
    async with open_cluster(3, store=store, app=apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        spot = await instance_on(c, cluster.servers, 0, "order", "bag", store)
        # node 0 → node 1 first; c's route cache still names node 0 afterwards.
        await a.relocate(SpotId(spot), to=b.identity.node_rid)
        assert (await c.spots.request(spot, "get").timeout(LONG)).startswith(b"1@node1")
        stats = a.statistics().spots
        assert stats is not None
        followed = stats.relocation.followed
        assert followed == 1  # c's request above went node 0 → node 1
        log.gate = trio.Event()
        log.restore_gate = trio.Event()
        log.restore_entered = trio.Event()
        async with trio.open_nursery() as nursery:

            async def hold() -> None:
                await b.spots.request(spot, "hold").timeout(LONG)

            nursery.start_soon(hold)
            await log.entered.wait()
            await b.spots.send(spot, "add", b"saved-1")
            await b.spots.send(spot, "add", b"saved-2")
            replies: list[bytes | None] = []

            async def saved_request() -> None:
                replies.append(await b.spots.request(spot, "add-req", b"req").timeout(LONG))

            nursery.start_soon(saved_request)  # queued at the source: relayed, answered
            await trio.testing.wait_all_tasks_blocked()

            async def move() -> None:
                await b.relocate(SpotId(spot), to=a.identity.node_rid)

            nursery.start_soon(move)
            await trio.testing.wait_all_tasks_blocked()  # the seal turn is queued
            stats_b = b.statistics().spots
            assert stats_b is not None and stats_b.relocation.in_flight == 1
            log.gate.set()  # the handler ends normally; the seal turn runs next
            await log.restore_entered.wait()  # node 0 restores: the source is sealed
            await b.spots.send(spot, "add", b"held-1")  # held at the source
            await c.spots.send(spot, "add", b"temp-1")  # c's cache: node 0 → temp queue
            assert log.payloads(spot) == []  # nothing of this Spot runs anywhere
            log.restore_gate.set()
        await log.wait_for(lambda: len(log.payloads(spot)) == 4)
        stats = a.statistics().spots
        assert stats is not None
        # temp-1 entered node 0's temporary queue (checked before its follow route)
        assert stats.relocation.followed == followed
        assert stats.relocation.committed == 1 and stats.relocation.restores == 1
        await c.spots.send(spot, "add", b"after-1")
        await log.wait_for(lambda: len(log.payloads(spot)) == 5)
        assert log.payloads(spot) == [b"saved-1", b"saved-2", b"held-1", b"temp-1", b"after-1"]
        assert log.nodes(spot) == {"node0"}
        assert replies == [b"req"]
        assert [n for s_, p, d, n in log.handled if s_ == spot and d == b"req"] == ["node0"]
        assert (await c.spots.request(spot, "get").timeout(LONG)).startswith(b"8@node0")


async def test_a04_08_spot_duplicated_restore_builds_one_shell_and_old_temp_work_never_runs(
    clock: object, store: CountingStore
) -> None:
    """A04-08 for a Spot (and A04-07's discard): an attempt whose Restore fails discards
    the target's temporary queue unrun (a message a third node sent straight to it never
    runs); the next attempt, its Restore written twice by the fault transport, runs the
    factory once and never sees that earlier temporary work."""
    log = SpotLog()
    plan = FaultPlan(seed=14)
    async with open_cluster(3, store=store, app=apps(log), fault_plan=plan) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        spot = await instance_on(c, cluster.servers, 0, "dup", "bag", store)
        await a.relocate(SpotId(spot), to=b.identity.node_rid)  # c's cache: node 0
        assert (await c.spots.request(spot, "get").timeout(LONG)).startswith(b"1@node1")
        log.restore_gate = trio.Event()
        log.restore_entered = trio.Event()
        log.fail_restore = True
        failure: list[BaseException] = []
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:

                async def move() -> None:
                    try:
                        await b.relocate(SpotId(spot), to=a.identity.node_rid)
                    except ZLinkError as exc:
                        failure.append(exc)

                nursery.start_soon(move)
                await log.restore_entered.wait()
                await b.spots.send(spot, "add", b"held-1")  # held at the source
                await c.spots.send(spot, "add", b"temp-x")  # node 0's temporary queue
                log.restore_gate.set()
        assert len(failure) == 1
        await log.wait_for(lambda: len(log.payloads(spot)) == 1)
        assert log.payloads(spot) == [b"held-1"] and log.nodes(spot) == {"node1"}
        stats_a = a.statistics().spots
        assert stats_a is not None and stats_a.relocation.discarded == 1
        log.fail_restore = False
        log.restore_gate = None
        runs = log.factory_runs[spot]
        duplicate = plan.duplicate(command=Command.RELOCATION_RESTORE, count=1)
        with trio.fail_after(60):
            await b.relocate(SpotId(spot), to=a.identity.node_rid)
        assert duplicate.fired == 1
        assert (await c.spots.request(spot, "get").timeout(LONG)).startswith(b"2@node0")
        assert log.factory_runs[spot] == runs + 1
        assert b"temp-x" not in log.payloads(spot)


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_a04_07_spot_cutover_lost_falls_back_after_1000_ms(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """A04-07 (after acceptance) and the cutover fallback for a Spot: the cutover (123) is
    held back on the wire; 1,000 ms after its relay-ready reply the target logs
    cutover_timeout and commits anyway; the messages held at the source run once, on the
    target, and never on the source."""
    log = SpotLog()
    plan = FaultPlan(seed=15)
    async with open_cluster(2, store=store, app=apps(log), fault_plan=plan) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        spot = await instance_on(b, cluster.servers, 0, "late", "bag", store)
        plan.delay(30.0, command=Command.RELOCATION_CUTOVER)
        log.restore_gate = trio.Event()
        async with trio.open_nursery() as nursery:

            async def move() -> None:
                await a.relocate(SpotId(spot), to=b.identity.node_rid)

            nursery.start_soon(move)
            await log.restore_entered.wait()
            for i in range(3):
                await b.spots.send(spot, "add", f"held-{i}".encode())
            log.restore_gate.set()
        await log.wait_for(lambda: len(log.payloads(spot)) == 3)
        assert log.payloads(spot) == [f"held-{i}".encode() for i in range(3)]
        assert log.nodes(spot) == {"node1"}
        stats = b.statistics().spots
        assert stats is not None and stats.relocation.cutover_timeouts == 1
        assert (await a.spots.request(spot, "get").timeout(LONG)).startswith(b"4@node1")
