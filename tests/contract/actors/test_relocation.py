"""Live Actor relocation (spec 04 §6.1, §6.7, §9; spec 06 §6, §8; spec 02 §8.1 order;
docs/relocation.md): ``server.relocate`` between nodes over real TCP, on both stores."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from relocation_kit import RelocLog, create_on, make_reloc_app

from zlink_trio import (
    ApplicationError,
    AuthorityOwnerGeneration,
    InvalidOperation,
    NotFound,
    Unavailable,
    ZLinkError,
)
from zlink_trio.store.api import ObjectKey
from zlink_trio.testing import CountingStore, FaultPlan, open_cluster
from zlink_trio.wire.commands import Command


def _apps(log: RelocLog):  # type: ignore[no-untyped-def]
    return lambda i: make_reloc_app(log, f"node{i}")


async def test_a04_13_relocation_keeps_state_generation_and_raises_owner_generation(
    clock: object, store: CountingStore
) -> None:
    """A04-13 (PreserveStateWith and the move): an Actor of node 0 relocates to node 1 and
    back to node 0: its captured state is restored on each target, the ObjectGeneration
    never changes, the AuthorityOwnerGeneration rises by one per move (target-only CAS),
    and messages by ActorId reach the current owner."""
    log = RelocLog()
    async with open_cluster(3, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await create_on(c, cluster.servers, 0, "mover", "counter")
        for i in range(3):
            await c.actors.send(actor, "add", str(i).encode())
        assert await c.actors.request(actor, "get", b"").timeout(10) == b"3@node0"
        row = await store.read(ObjectKey.actor(actor))
        assert row is not None
        generation = row.object_generation
        assert row.owner_generation == AuthorityOwnerGeneration(1)

        result = await a.relocate(actor, to=b.identity.node_rid)
        assert result.owner_generation == AuthorityOwnerGeneration(2)
        assert result.object_generation == generation

        async def owner_is(server: object, gen: int) -> None:
            with trio.fail_after(30):
                while True:
                    row = await store.read(ObjectKey.actor(actor))
                    assert row is not None
                    if row.owner_generation == AuthorityOwnerGeneration(gen):
                        assert row.owner.node_rid == server.identity.node_rid  # type: ignore[attr-defined]
                        assert row.object_generation == generation
                        return
                    await trio.sleep(0.01)

        await owner_is(b, 2)
        moved = await store.read(ObjectKey.actor(actor))
        assert moved is not None and moved.membership is not None
        # an Entry Actor moves into the target node's Entry Spot
        assert moved.membership != row.membership and moved.membership.is_reserved_entry_shape
        assert await c.actors.request(actor, "get", b"").timeout(10) == b"3@node1"
        assert log.restored == [(actor, b"3")]

        await b.relocate(actor, to=a.identity.node_rid)
        await owner_is(a, 3)
        assert await c.actors.request(actor, "get", b"").timeout(10) == b"3@node0"
        assert log.factory_runs[actor] == 3
        ref = await c.actors.find(actor)
        assert ref is not None and ref.object_generation == generation


async def test_a04_13_recreate_on_relocation_keeps_the_generation_not_the_state(
    clock: object, store: CountingStore
) -> None:
    """A04-13 (RecreateOnRelocation): the target recreates the Actor with its factory and
    no application state; the ObjectGeneration is the same; queued work still moves."""
    log = RelocLog()
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "fresh", "fresh")
        await b.actors.send(actor, "add", b"1")
        assert await b.actors.request(actor, "get", b"").timeout(10) == b"1@node0"
        before = await b.actors.find(actor)
        assert before is not None
        await a.relocate(actor, to=b.identity.node_rid)
        # b's own route cache still names node 0: Message Follow brings it to node 1.
        assert await b.actors.request(actor, "get", b"").timeout(10) == b"0@node1"
        after = await a.actors.find(actor)
        assert after is not None and after.object_generation == before.object_generation
        assert log.restored == []


async def test_disable_relocation_refuses_and_the_actor_stays(
    clock: object, store: CountingStore
) -> None:
    """A DisableRelocation type refuses the move (InvalidOperation) and keeps running; an
    Actor not hosted on the node is NotFound; the node itself is not a target."""
    log = RelocLog()
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "pin", "pinned")
        with pytest.raises(InvalidOperation):
            await a.relocate(actor, to=b.identity.node_rid)
        with pytest.raises(NotFound):
            await b.relocate(actor, to=a.identity.node_rid)
        moving = await create_on(b, cluster.servers, 0, "self", "counter")
        with pytest.raises(InvalidOperation):
            await a.relocate(moving, to=a.identity.node_rid)
        assert await b.actors.request(actor, "get", b"").timeout(10) == b"0@node0"


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_a04_04_a04_05_temporary_queue_then_merge_order(
    clock: object, store: CountingStore
) -> None:
    """A04-04 / A04-05 — A04-04: a message that reaches the target while Restore runs goes into the
    temporary queue (registered before dispatch looks for the instance) and no handler
    runs it before the commit; it runs once afterwards. A04-05: on the target the saved
    work (queued at the seal), then the pre-boundary relay (held at the source after the
    seal), then the remaining temporary work, then what arrived after the switch, run in
    that order, and nothing runs before the commit. (Memory store: the interleaving is
    made exact with MockClock's ``wait_all_tasks_blocked``.)"""
    log = RelocLog()
    async with open_cluster(3, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await create_on(c, cluster.servers, 0, "order", "counter")
        assert await c.actors.request(actor, "get", b"").timeout(10) == b"0@node0"
        # First move node 0 → node 1; c's route cache still names node 0 afterwards.
        await a.relocate(actor, to=b.identity.node_rid)
        assert await c.actors.request(actor, "get", b"").timeout(10) == b"0@node1"

        stats = a.statistics().actors
        assert stats is not None
        followed_before = stats.relocation.followed
        assert followed_before == 1  # c's request above went node 0 → node 1
        log.gate = trio.Event()
        log.restore_gate = trio.Event()
        log.restore_entered = trio.Event()
        async with trio.open_nursery() as nursery:

            async def hold() -> None:
                await b.actors.request(actor, "hold", b"").timeout(30)

            nursery.start_soon(hold)
            await log.entered.wait()
            await b.actors.send(actor, "add", b"saved-1")
            await b.actors.send(actor, "add", b"saved-2")
            results: list[object] = []

            async def move() -> None:
                results.append(await b.relocate(actor, to=a.identity.node_rid))

            nursery.start_soon(move)
            await trio.testing.wait_all_tasks_blocked()  # the seal item is queued
            assert b.statistics().actors is not None
            assert b.statistics().actors.relocation.in_flight == 1
            log.gate.set()  # the handler ends normally; the seal turn runs next
            await log.restore_entered.wait()  # node 0 restores: the source is sealed
            await b.actors.send(actor, "add", b"held-1")  # held at the source
            await c.actors.send(actor, "add", b"temp-1")  # c's cache: node 0 → temp queue
            # Nothing of this Actor runs anywhere while Restore is held.
            handled_before = list(log.payloads(actor))
            assert handled_before == []
            log.restore_gate.set()
        await log.wait_for(lambda: len(log.payloads(actor)) == 4)
        stats = a.statistics().actors
        assert stats is not None
        # temp-1 entered node 0's temporary queue (checked before its follow route)
        assert stats.relocation.followed == followed_before
        assert stats.relocation.committed == 1 and stats.relocation.restores == 1
        await c.actors.send(actor, "add", b"after-1")
        await log.wait_for(lambda: len(log.payloads(actor)) == 5)
        assert log.payloads(actor) == [b"saved-1", b"saved-2", b"held-1", b"temp-1", b"after-1"]
        assert {node for a_, p, _, node in log.handled if a_ == actor and p == "add"} == {"node0"}
        assert await c.actors.request(actor, "get", b"").timeout(10) == b"6@node0"


async def _moved_once(
    cluster: object, log: RelocLog, prefix: str
) -> tuple[object, object, object, str]:
    """Three nodes; an Actor created on node 0 (c's route cache names node 0), moved to
    node 1 (so node 0 has a follow route and c's cache is stale)."""
    a, b, c = cluster.servers  # type: ignore[attr-defined]
    actor = await create_on(c, cluster.servers, 0, prefix, "counter")  # type: ignore[attr-defined]
    assert await c.actors.request(actor, "get", b"").timeout(10) == b"0@node0"
    await a.relocate(actor, to=b.identity.node_rid)
    assert await c.actors.request(actor, "get", b"").timeout(10) == b"0@node1"
    return a, b, c, actor


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_a04_07_a04_08_failure_before_relay_ready_restores_the_source(
    clock: object, store: CountingStore
) -> None:
    """A04-07 / A04-08 — A04-07 (before acceptance): Restore fails explicitly on the target: the relocation
    raises, the source stays owner (row unchanged), the held messages run at the source
    in arrival order and the target ran none of them; its temporary queue was discarded
    unrun. A04-08: a later attempt's handler never sees what the earlier attempt's
    temporary queue held, and a duplicated Restore (the fault transport writes 121 twice)
    builds one instance."""
    log = RelocLog()
    plan = FaultPlan(seed=14)
    async with open_cluster(3, store=store, app=_apps(log), fault_plan=plan) as cluster:
        await cluster.wait_all_admitted()
        a, b, c, actor = await _moved_once(cluster, log, "fail")
        row = await store.read(ObjectKey.actor(actor))
        assert row is not None and row.owner_generation == AuthorityOwnerGeneration(2)
        log.restore_gate = trio.Event()
        log.restore_entered = trio.Event()
        log.fail_restore = True
        failure: list[BaseException] = []
        async with trio.open_nursery() as nursery:

            async def move() -> None:
                try:
                    await b.relocate(actor, to=a.identity.node_rid)
                except ZLinkError as exc:
                    failure.append(exc)

            nursery.start_soon(move)
            await log.restore_entered.wait()
            await b.actors.send(actor, "add", b"held-1")  # held at the source
            await b.actors.send(actor, "add", b"held-2")
            await c.actors.send(actor, "add", b"temp-x")  # node 0's temporary queue
            await trio.testing.wait_all_tasks_blocked()
            log.restore_gate.set()
        assert len(failure) == 1 and isinstance(failure[0], ApplicationError)
        await log.wait_for(lambda: len(log.payloads(actor)) == 2)
        assert log.payloads(actor) == [b"held-1", b"held-2"]
        assert {n for x, p, _, n in log.handled if x == actor and p == "add"} == {"node1"}
        after = await store.read(ObjectKey.actor(actor))
        assert after is not None and after.owner_generation == AuthorityOwnerGeneration(2)
        assert after.owner.node_rid == b.identity.node_rid
        stats_a, stats_b = a.statistics().actors, b.statistics().actors
        assert stats_a is not None and stats_b is not None
        assert stats_a.relocation.discarded == 1 and stats_b.relocation.aborted == 1

        # A new attempt, its Restore duplicated on the wire: one instance, and the earlier
        # attempt's temporary work (temp-x) never runs.
        log.fail_restore = False
        log.restore_gate = None
        runs = log.factory_runs[actor]
        duplicate = plan.duplicate(command=Command.RELOCATION_RESTORE, count=1)
        await b.relocate(actor, to=a.identity.node_rid)
        assert duplicate.fired == 1
        assert await c.actors.request(actor, "get", b"").timeout(10) == b"2@node0"
        assert log.factory_runs[actor] == runs + 1
        assert b"temp-x" not in log.payloads(actor)


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_a04_07_cutover_lost_falls_back_after_1000_ms(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """A04-07 (after acceptance) and the cutover fallback: the cutover (123) is held back
    on the wire; 1,000 ms after its relay-ready reply the target logs cutover_timeout and
    commits anyway; the source never runs the relayed messages again and each runs once on
    the target."""
    log = RelocLog()
    plan = FaultPlan(seed=15)
    async with open_cluster(2, store=store, app=_apps(log), fault_plan=plan) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "late", "counter")
        log.gate = trio.Event()
        late = plan.delay(5.0, command=Command.RELOCATION_CUTOVER)
        async with trio.open_nursery() as nursery:

            async def hold() -> None:
                await b.actors.request(actor, "hold", b"").timeout(30)

            nursery.start_soon(hold)
            await log.entered.wait()
            await b.actors.send(actor, "add", b"q1")

            async def move() -> None:
                await a.relocate(actor, to=b.identity.node_rid)

            nursery.start_soon(move)
            await trio.testing.wait_all_tasks_blocked()
            started = trio.current_time()
            log.gate.set()
        # relocate returned once the target committed: after the 1,000 ms fallback
        assert trio.current_time() - started >= 1.0
        await log.wait_for(lambda: log.payloads(actor) == [b"q1"])
        assert late.fired == 1
        stats = b.statistics().actors
        assert stats is not None and stats.relocation.cutover_timeouts == 1
        assert [n for x, p, _, n in log.handled if x == actor and p == "add"] == ["node1"]
        assert await b.actors.request(actor, "get", b"").timeout(10) == b"2@node1"


async def test_a04_06_flood_during_moves_runs_each_message_exactly_once_in_order(
    clock: object, store: CountingStore
) -> None:
    """A04-06: while the Actor moves back and forth between three nodes (20 moves),
    callers on every node flood it with numbered sends and requests: each message runs
    exactly once, each caller's messages in the order it sent them, nothing is lost, the
    ObjectGeneration never changes and the AuthorityOwnerGeneration rises by one per
    move."""
    log = RelocLog()
    moves = 20
    async with open_cluster(3, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        servers = cluster.servers
        actor = await create_on(servers[2], servers, 0, "flood", "counter")
        generation = (await servers[2].actors.find(actor)).object_generation  # type: ignore[union-attr]
        done = trio.Event()
        sent: dict[int, list[bytes]] = {0: [], 1: [], 2: []}

        async def flood(index: int) -> None:
            server = servers[index]
            n = 0
            while not done.is_set():
                payload = f"{index}:{n}".encode()
                if n % 3 == 0:
                    await server.actors.request(actor, "add-req", payload).timeout(30)
                else:
                    await server.actors.send(actor, "add", payload)
                sent[index].append(payload)
                n += 1
                await trio.sleep(0.002)

        owner = 0
        async with trio.open_nursery() as nursery:
            for index in range(3):
                nursery.start_soon(flood, index)
            for move in range(moves):
                target = (owner + 1) % 3
                result = await servers[owner].relocate(actor, to=servers[target].identity.node_rid)
                assert result.owner_generation == AuthorityOwnerGeneration(move + 2)
                owner = target
                await trio.sleep(0.02)
            done.set()
        total = sum(len(v) for v in sent.values())
        await log.wait_for(
            lambda: len(log.payloads(actor, "add")) + len(log.payloads(actor, "add-req")) == total
        )
        handled = [d for x, p, d, _ in log.handled if x == actor and p in ("add", "add-req")]
        assert len(handled) == len(set(handled)) == total  # exactly once, nothing lost
        for index in range(3):
            mine = [d for d in handled if d.startswith(f"{index}:".encode())]
            assert mine == sent[index]  # per caller, in order
        row = await store.read(ObjectKey.actor(actor))
        assert row is not None
        assert row.object_generation == generation
        assert row.owner_generation == AuthorityOwnerGeneration(moves + 1)
        assert row.owner.node_rid == servers[owner].identity.node_rid


async def test_owner_fence_an_older_owner_generation_runs_at_the_current_owner(
    clock: object, store: CountingStore
) -> None:
    """The owner fence at ingress (docs/relocation.md): the Actor moves node 0 → node 1 →
    node 0; a caller whose route cache still names node 0 with AuthorityOwnerGeneration 1
    reaches the activation hosted there now (generation 3) and it runs: a message is
    never refused for its sender's cache age."""
    log = RelocLog()
    async with open_cluster(3, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await create_on(c, cluster.servers, 0, "back", "counter")
        assert await c.actors.request(actor, "get", b"").timeout(10) == b"0@node0"
        assert (await a.relocate(actor, to=b.identity.node_rid)).committed
        assert (await b.relocate(actor, to=a.identity.node_rid)).committed
        store.reset()
        assert await c.actors.request(actor, "get", b"").timeout(10) == b"0@node0"
        assert store.reads == 0
        row = await store.read(ObjectKey.actor(actor))
        assert row is not None and row.owner_generation == AuthorityOwnerGeneration(3)


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_timers_move_with_the_actor(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """Spec 06 §8 / 04 §6.1 (both policies keep framework timers): a periodic timer
    registered on node 0 keeps ticking on node 1 after the move, on its grid, without the
    application registering it again; node 0 ticks no more."""
    log = RelocLog()
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "timed", "fresh")
        assert await b.actors.request(actor, "tick-every", b"1.0").timeout(10) == b"ok"
        await log.wait_for(lambda: len(log.ticks) == 2)
        assert {node for _, node in log.ticks} == {"node0"}
        assert (await a.relocate(actor, to=b.identity.node_rid)).committed
        moved_at = len(log.ticks)
        await log.wait_for(lambda: len(log.ticks) >= moved_at + 3)
        assert {node for _, node in log.ticks[moved_at:]} == {"node1"}
        timers = b.statistics().timers
        assert timers is not None and timers.registered == 1
        old = a.statistics().timers
        assert old is not None and old.registered == 0


async def test_drain_by_relocation_moves_what_can_move_and_releases_the_rest(
    clock: object, store: CountingStore
) -> None:
    """Drain by relocation (owner-loss issue's clean stop, step 3): stopping node 0 moves
    its relocatable Actors to the live peer (state and generation kept, owner generation
    + 1) and releases the DisableRelocation one (Missing afterwards)."""
    log = RelocLog()
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        movers = [await create_on(b, cluster.servers, 0, f"drain{i}", "counter") for i in range(3)]
        pinned = await create_on(b, cluster.servers, 0, "drainpin", "pinned")
        for actor in movers:
            await b.actors.send(actor, "add", b"x")
        for actor in movers:
            # (A send is one-way: this request, behind it on the same link and lane, runs
            # after it did, so the stop below starts with every send run.)
            assert await b.actors.request(actor, "get", b"").timeout(10) == b"1@node0"
        generations = {}
        for actor in movers:
            ref = await b.actors.find(actor)
            assert ref is not None and ref.node_rid == a.identity.node_rid
            generations[actor] = ref.object_generation
        await cluster.stop(0)
        for actor in movers:
            row = await store.read(ObjectKey.actor(actor))
            assert row is not None and row.owner.node_rid == b.identity.node_rid
            assert row.object_generation == generations[actor]
            assert row.owner_generation == AuthorityOwnerGeneration(2)
            assert await b.actors.request(actor, "get", b"").timeout(10) == b"1@node1"
        assert await store.read(ObjectKey.actor(pinned)) is None


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_a04_07_cutover_dropped_by_the_fault_transport(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """A04-07 (after acceptance) with the cutover (123) DROPPED on the wire (the link
    then breaks at the gap and reconnects): the target still commits (its 1,000 ms
    fallback), every message the source held or relayed runs once on the target, none on
    the source, and calls afterwards work."""
    log = RelocLog()
    plan = FaultPlan(seed=16)
    async with open_cluster(3, store=store, app=_apps(log), fault_plan=plan) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await create_on(c, cluster.servers, 0, "dropcut", "counter")
        log.gate = trio.Event()
        dropped = plan.drop(command=Command.RELOCATION_CUTOVER, count=1)
        async with trio.open_nursery() as nursery:

            async def hold() -> None:
                await c.actors.request(actor, "hold", b"").timeout(30)

            async def move() -> None:
                await a.relocate(actor, to=b.identity.node_rid)

            nursery.start_soon(hold)
            await log.entered.wait()
            for i in range(5):
                await c.actors.send(actor, "add", f"q{i}".encode())
            nursery.start_soon(move)
            await trio.testing.wait_all_tasks_blocked()
            log.gate.set()
        assert dropped.fired == 1
        await log.wait_for(lambda: len(log.payloads(actor)) == 5)
        assert log.payloads(actor) == [f"q{i}".encode() for i in range(5)]
        assert {n for x, p, _, n in log.handled if x == actor and p == "add"} == {"node1"}
        stats = b.statistics().actors
        assert stats is not None and stats.relocation.cutover_timeouts == 1
        # The dropped frame's gap breaks that link at its next frame (a keepalive ping at
        # the latest, in virtual time here); once it reconnected, calls work.
        await trio.sleep(10)
        assert await c.actors.request(actor, "get", b"").timeout(10) == b"6@node1"


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_destroy_during_a_move_is_unavailable_and_the_move_completes(
    clock: object, store: CountingStore
) -> None:
    """A destroy that arrives while the Actor is sealed for a move ends Unavailable (the
    Actor is not destroyed under the move, as a Close of a sealed Spot, spec 06 §7); the
    move completes and a destroy afterwards (on the new owner) succeeds."""
    log = RelocLog()
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "nodestroy", "counter")
        ref = await b.actors.find(actor)
        assert ref is not None
        log.restore_gate = trio.Event()
        async with trio.open_nursery() as nursery:

            async def move() -> None:
                await a.relocate(actor, to=b.identity.node_rid)

            nursery.start_soon(move)
            await log.restore_entered.wait()
            with pytest.raises(Unavailable):
                await a.actors.destroy(ref)
            log.restore_gate.set()
        assert await b.actors.request(actor, "get", b"").timeout(10) == b"0@node1"
        moved = await b.actors.find(actor)
        assert moved is not None
        await b.actors.destroy(moved)
        assert await store.read(ObjectKey.actor(actor)) is None


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_a04_10_a_join_claimed_first_wins_over_the_relocation(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """A04-10 (Join vs maintenance): the handler running when the relocation's seal is
    queued registers a cross-node Join; the Join (claimed first) moves the Actor to node
    1's Entry Spot; the relocation does not seal it (it ends with an error, the Actor is
    not left sealed anywhere) and the Actor answers on node 1 afterwards."""
    from join_kit import JoinLog, entry_id, make_join_app

    from zlink_trio import JoinOutcome

    log = JoinLog()
    async with open_cluster(2, store=store, app=make_join_app(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "joinfirst", "mover")
        target = await entry_id(b)
        log.gate = trio.Event()
        failures: list[BaseException] = []
        async with trio.open_nursery() as nursery:

            async def join() -> None:
                await b.actors.request(actor, "join-block", target.value.encode()).timeout(30)

            async def move() -> None:
                try:
                    await a.relocate(actor, to=b.identity.node_rid)
                except ZLinkError as exc:
                    failures.append(exc)

            nursery.start_soon(join)
            await log.entered.wait()
            nursery.start_soon(move)
            await trio.testing.wait_all_tasks_blocked()
            log.gate.set()
        await log.wait_for(lambda: len(log.completions_of(actor)) == 1)
        (done,) = log.completions_of(actor)
        assert done.outcome is JoinOutcome.ACCEPTED and done.spot_id == target
        assert len(failures) == 1
        ref = await b.actors.find(actor)
        assert ref is not None and ref.node_rid == b.identity.node_rid
        assert await b.actors.request(actor, "echo", b"hi").timeout(10) == b"hi"
        stats = b.statistics().actors
        assert stats is not None and stats.relocation.sealed == 0
