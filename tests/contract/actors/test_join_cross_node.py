"""Cross-node Join to another node's Entry Spot (spec 04 §3.1, §5.2, §6.1, §8.1; checklist
A04-13, the Join parts of A04-09, A04-17, A04-22, A04-24, A04-25, and the draining rule):
the Actor is recreated on the target with the same ObjectGeneration, its old Context is
retired, the payloads its barrier held travel with it in order, and the durable
operation replays under one OperationId and ends as the spec's deadline rules say."""

from __future__ import annotations

import contextlib

import pytest
import trio
import trio.testing
from actor_kit import blackout
from join_kit import JoinLog, attempt, create_on, entry_id, make_join_app

from zlink_trio import (
    App,
    AuthorityOwnerGeneration,
    DeadlineExceeded,
    InvalidOperation,
    JoinOutcome,
    ShuttingDown,
    Unavailable,
)
from zlink_trio.store.api import ObjectKey
from zlink_trio.testing import CountingStore, FaultPlan, WireTap, node_of, open_cluster
from zlink_trio.wire.commands import Command


def _caller_app() -> App:
    app = App()
    app.enable_actor_dispatch()
    return app


async def test_a04_13_cross_node_join_keeps_the_generation_and_retires_the_old_context(
    clock: object, store: CountingStore
) -> None:
    """A04-13: on 3 nodes, an Actor of node 0 joins node 1's Entry Spot: the target
    factory runs once more with a NEW Context bound to node 1 and the target Spot, the
    ObjectGeneration is unchanged, only the AuthorityOwnerGeneration increments (and the
    membership moves, in the same Store row); the completion runs once, on the new
    activation; the old Context's identity stays readable but a send or a Join through it
    is Unavailable. A04-17 (Join part): messages by ActorId only reach the new activation
    afterwards."""
    log = JoinLog()
    async with open_cluster(3, store=store, app=make_join_app(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await create_on(c, cluster.servers, 0, "mover")
        before = await c.actors.find(actor)
        assert before is not None and before.node_rid == a.identity.node_rid
        row = await store.read(ObjectKey.actor(actor))
        assert row is not None and row.owner_generation == AuthorityOwnerGeneration(1)
        target = await entry_id(b)
        await c.actors.request(actor, "join", target.value.encode()).timeout(10)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 1)
        (done,) = log.completions_of(actor)
        assert done.outcome is JoinOutcome.ACCEPTED
        assert done.target == target and done.spot_id == target
        # A caller whose route cache still names the old owner gets a stale route ONCE
        # (an Unavailable; never re-sent: Message Follow is the relocation issue's), then
        # resolves afresh.
        with pytest.raises(Unavailable):
            await c.actors.request(actor, "echo", b"stale").timeout(10)
        old, new = log.instances[actor]
        assert log.completions[0][2] is new  # on the new activation
        assert log.factory_runs[actor] == 2
        assert new.context is not old.context
        assert new.context.object_generation == old.context.object_generation
        assert new.context.actor_id == old.context.actor_id
        assert new.context.spot_id == target and old.context.spot_id != target
        after = await c.actors.find(actor)
        assert after is not None and after.node_rid == b.identity.node_rid
        assert after.object_generation == before.object_generation
        row = await store.read(ObjectKey.actor(actor))
        assert row is not None
        assert row.owner_generation == AuthorityOwnerGeneration(2)
        assert row.object_generation == before.object_generation
        assert row.membership == target and row.owner.node_rid == b.identity.node_rid
        # the old Context: identity readable, every new call Unavailable, nothing forwarded
        assert old.context.actor_id.value == actor and old.context.retired
        with pytest.raises(Unavailable):
            await old.context.actors.send(actor, "note", b"through the old context")
        assert isinstance(
            attempt(log, "old-join", lambda: old.context.join_entry_spot().defer()), Unavailable
        )
        # by ActorId, from every node: the new activation handles it
        for server in cluster.servers:
            assert await server.actors.request(actor, "echo", b"hi").timeout(10) == b"hi"
        assert all(instance is new for a_, p, _, instance in log.handled if p == "echo")
        assert await c.actors.request(actor, "whoami") == target.value.encode()
        # and back again (the new owner generation fences the second move)
        home = await entry_id(a)
        await c.actors.request(actor, "join", home.value.encode()).timeout(10)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 2)
        assert log.completions_of(actor)[1].outcome is JoinOutcome.ACCEPTED
        row = await store.read(ObjectKey.actor(actor))
        assert row is not None and row.owner_generation == AuthorityOwnerGeneration(3)
        assert row.object_generation == before.object_generation
        assert row.owner.node_rid == a.identity.node_rid and row.membership == home
        assert not any(isinstance(e, Exception) for k, e in log.errors.items() if k == "child")


async def test_a04_09_payloads_held_by_the_barrier_travel_in_order(
    clock: object, store: CountingStore
) -> None:
    """A04-09 (Join part): sends and requests accepted while the joining handler still
    runs, from a remote node and from the Actor's own node, are handled exactly once, on
    the new activation, after the completion callback, each sender's in its order; a
    request among them gets its reply relayed; payloads sent after the move follow."""
    log = JoinLog()
    async with open_cluster(3, store=store, app=make_join_app(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await create_on(c, cluster.servers, 0, "journal")
        target = await entry_id(b)
        log.gate = trio.Event()
        replies: list[object] = []
        async with trio.open_nursery() as nursery:

            async def join() -> None:
                await c.actors.request(actor, "join-block", target.value.encode()).timeout(30)

            async def ask() -> None:
                replies.append(await c.actors.request(actor, "echo", b"c3").timeout(30))

            nursery.start_soon(join)
            await log.entered.wait()
            await c.actors.send(actor, "note", b"c1")
            await c.actors.send(actor, "note", b"c2")
            nursery.start_soon(ask)
            await a.actors.send(actor, "note", b"a1")
            await a.actors.send(actor, "note", b"a2")
            await trio.testing.wait_all_tasks_blocked()
            log.gate.set()
        assert replies == [b"c3"]
        await c.actors.find(actor)  # a fresh route (no Message Follow from the old owner)
        await c.actors.send(actor, "note", b"c4")
        await log.wait_for(lambda: len(log.handled) >= 7, timeout=10)
        _old, new = log.instances[actor]
        trace = log.trace
        assert trace[:2] == ["join-block:" + target.value, "complete:accepted"]
        rest = trace[2:]
        assert sorted(rest) == sorted(
            ["note:c1", "note:c2", "echo:c3", "note:a1", "note:a2", "note:c4"]
        )
        assert [x for x in rest if x.endswith(("c1", "c2", "c3", "c4"))] == [
            "note:c1",
            "note:c2",
            "echo:c3",
            "note:c4",
        ]
        assert [x for x in rest if x.endswith(("a1", "a2"))] == ["note:a1", "note:a2"]
        moved = [instance for _, p, _, instance in log.handled if p in ("note", "echo")]
        assert all(instance is new for instance in moved)


async def test_a04_22_the_join_replays_under_one_operation_id(
    clock: object, store: CountingStore
) -> None:
    """A04-22 (Join part): the join's terminal is lost once: command 112 is sent again
    with the SAME OperationId, the target factory runs once, and the completion is the
    original ACCEPTED; no 112 after the terminal."""
    log = JoinLog()
    plan = FaultPlan(seed=22)
    tap = WireTap()
    async with open_cluster(
        2, store=store, app=make_join_app(log), fault_plan=plan, tap=tap
    ) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "replayed")
        target = await entry_id(b)
        tap.clear()
        lost = plan.drop(command=Command.TERMINAL_REPLY, sender=b.identity.node_rid, count=1)
        await a.actors.request(actor, "join", target.value.encode()).timeout(10)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 1)
        assert lost.fired == 1
        joins = tap.select(node=a.identity.node_rid, command=Command.ACTOR_JOIN)
        sent = [e for e in joins if e.direction.name == "SENT"]
        ops = {e.record.operation_id for e in sent}
        assert len(sent) == 2 and len(ops) == 1
        (done,) = log.completions_of(actor)
        assert done.outcome is JoinOutcome.ACCEPTED and {done.operation_id} == ops
        assert log.factory_runs[actor] == 2  # the create + ONE run on the target


@pytest.mark.parametrize("backend", ["memory"])
async def test_a04_24_transport_loss_replays_and_intent_removal_ends_it(
    clock: object, store: CountingStore
) -> None:
    """A04-24 (Join part): with only the transport to the target cut, the Join waits (no
    completion) and goes on under the same OperationId once it is back; when the target's
    lifecycle ends (its intent removed, no admitted peer) the Join ends Unavailable well
    before its deadline, and the Actor stays where it was."""
    log = JoinLog()
    plan = FaultPlan(seed=24)
    tap = WireTap()
    async with open_cluster(
        3, store=store, app=make_join_app(log), fault_plan=plan, tap=tap
    ) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await create_on(a, cluster.servers, 0, "cut")
        target = await entry_id(b)
        await blackout(cluster, plan, 0, 1)
        start = trio.current_time()
        await c.actors.request(actor, "join-timeout", b"60|" + target.value.encode()).timeout(10)
        await trio.testing.wait_all_tasks_blocked()
        assert log.completions_of(actor) == []
        plan.clear()
        await log.wait_for(lambda: len(log.completions_of(actor)) == 1)
        assert log.completions_of(actor)[0].outcome is JoinOutcome.ACCEPTED
        assert trio.current_time() - start < 60
        # now away from node 1 again, towards node 2 whose lifecycle then ends
        other = await entry_id(c)
        await blackout(cluster, plan, 1, 2)
        start = trio.current_time()
        await a.actors.request(actor, "join-timeout", b"60|" + other.value.encode()).timeout(10)
        await trio.testing.wait_all_tasks_blocked()
        assert len(log.completions_of(actor)) == 1
        await cluster.stop(2)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 2)
        failed = log.completions_of(actor)[1]
        assert failed.outcome is JoinOutcome.FAILED and isinstance(failed.error, Unavailable)
        assert trio.current_time() - start < 30
        found = await a.actors.find(actor)
        assert found is not None and found.node_rid == b.identity.node_rid


@pytest.mark.parametrize("backend", ["memory"])
async def test_a04_25_the_completion_ends_with_the_operations_kind_and_instant(
    clock: object, store: CountingStore
) -> None:
    """A04-25 and A04-12 (default deadline): a Join never admitted ends FAILED
    Unavailable exactly at Defer time + 5 s (the default), one with a 1 ms timeout 1 ms
    after Defer (rounded up); one admitted whose terminal never comes ends FAILED
    DeadlineExceeded exactly at its deadline — the wrapper adds no timer of its own."""
    log = JoinLog()
    plan = FaultPlan(seed=25)
    apps = [make_join_app(log), _caller_app(), _caller_app()]
    async with open_cluster(3, store=store, app=lambda i: apps[i], fault_plan=plan) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await create_on(c, cluster.servers, 0, "timed")
        target = await entry_id(b)
        await blackout(cluster, plan, 0, 1)
        op = int(await c.actors.request(actor, "join", target.value.encode()) or b"0")
        await log.wait_for(lambda: len(log.completions_of(actor)) == 1, timeout=30)
        (never,) = log.completions_of(actor)
        assert never.outcome is JoinOutcome.FAILED and isinstance(never.error, Unavailable)
        assert log.times[f"complete:{op}"] == log.times[f"defer:{op}"] + 5
        op = int(
            await c.actors.request(actor, "join-timeout", b"0.0001|" + target.value.encode())
            or b"0"
        )
        await log.wait_for(lambda: len(log.completions_of(actor)) == 2, timeout=30)
        assert log.completions_of(actor)[1].outcome is JoinOutcome.FAILED
        assert log.times[f"complete:{op}"] == pytest.approx(log.times[f"defer:{op}"] + 0.001)
        # admitted, but the terminal never comes back (node 1 hosts no such type: it
        # refuses, and every reply of node 1 is lost)
        plan.clear()
        await cluster.wait_all_admitted()
        plan.drop(command=Command.TERMINAL_REPLY, sender=b.identity.node_rid, count=None)
        op = int(
            await c.actors.request(actor, "join-timeout", b"3|" + target.value.encode()) or b"0"
        )
        await log.wait_for(lambda: len(log.completions_of(actor)) == 3, timeout=30)
        late = log.completions_of(actor)[2]
        assert late.outcome is JoinOutcome.FAILED and isinstance(late.error, DeadlineExceeded)
        assert log.times[f"complete:{op}"] == log.times[f"defer:{op}"] + 3
        assert late.spot_id == await entry_id(a)  # nothing moved


async def test_a04_13_a_disable_relocation_type_does_not_move(
    clock: object, store: CountingStore
) -> None:
    """A04-13 (domain): a DisableRelocation Actor never moves between nodes: a Join to
    another node's Spot ends FAILED InvalidOperation and no 112 is sent."""
    log = JoinLog()
    tap = WireTap()
    app = make_join_app(log, disable=True)
    async with open_cluster(2, store=store, app=app, tap=tap) as cluster:
        await cluster.wait_all_admitted()
        _a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "fixed")
        tap.clear()
        await b.actors.request(actor, "join", (await entry_id(b)).value.encode()).timeout(10)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 1)
        (done,) = log.completions_of(actor)
        assert done.outcome is JoinOutcome.FAILED and isinstance(done.error, InvalidOperation)
        assert tap.select(command=Command.ACTOR_JOIN) == []
        assert log.factory_runs[actor] == 1


@pytest.mark.parametrize("backend", ["memory"])
async def test_draining_blocks_new_membership(clock: object, store: CountingStore) -> None:
    """A04-10 (its race rule; 04 §8.1 draining): once the node's shutdown admission seal is in, a Join whose
    handler ends then is not started: FAILED ShuttingDown (its completion still runs,
    in the drain), and the Join never moved the Actor. (Changed deliberately by the
    relocation issue: the drain then relocates it to the live peer, its factory's second
    run, into that node's Entry Spot.)"""
    log = JoinLog()
    async with open_cluster(2, store=store, app=make_join_app(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "drained")
        target = await entry_id(b)
        log.gate = trio.Event()
        async with trio.open_nursery() as nursery:

            async def join() -> None:
                with contextlib.suppress(Unavailable):
                    await b.actors.request(actor, "join-block", target.value.encode()).timeout(30)

            nursery.start_soon(join)
            await log.entered.wait()
            nursery.start_soon(cluster.stop, 0)
            await trio.testing.wait_all_tasks_blocked()
            assert node_of(a).admission_error() is not None
            log.gate.set()
        await log.wait_for(lambda: len(log.completions_of(actor)) == 1)
        (done,) = log.completions_of(actor)
        assert done.outcome is JoinOutcome.FAILED and isinstance(done.error, ShuttingDown)
        assert done.spot_id != target  # the Join did not move it
        assert log.factory_runs[actor] == 2  # the drain's relocation did (to node 1)
        ref = await b.actors.find(actor)
        assert ref is not None and ref.node_rid == b.identity.node_rid


async def test_a04_22_a_join_whose_terminal_never_comes_is_settled_by_the_store(
    clock: object, store: CountingStore
) -> None:
    """A04-22 / A04-25 (unknown outcome): every terminal of the target is lost, but the
    target committed the move: the source's deadline passes without a terminal, the
    fencing CAS finds the row owned by the target, so the Actor moved — the completion
    runs ONCE, on the new activation, ACCEPTED, and the journal still travels."""
    log = JoinLog()
    plan = FaultPlan(seed=23)
    async with open_cluster(3, store=store, app=make_join_app(log), fault_plan=plan) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await create_on(c, cluster.servers, 0, "unsure")
        target = await entry_id(b)
        plan.drop(command=Command.TERMINAL_REPLY, sender=b.identity.node_rid, count=None)
        log.gate = trio.Event()
        async with trio.open_nursery() as nursery:

            async def join() -> None:
                await c.actors.request(actor, "join-block", target.value.encode()).timeout(30)

            nursery.start_soon(join)
            await log.entered.wait()
            await a.actors.send(actor, "note", b"held")
            log.gate.set()
        await log.wait_for(lambda: len(log.handled) >= 2, timeout=30)
        plan.clear()
        (done,) = log.completions_of(actor)
        assert done.outcome is JoinOutcome.ACCEPTED
        old, new = log.instances[actor]
        assert log.completions[0][2] is new and old.context.retired
        assert log.trace == ["join-block:" + target.value, "complete:accepted", "note:held"]
        found = await c.actors.find(actor)
        assert found is not None and found.node_rid == b.identity.node_rid


async def test_a_destroy_waits_for_the_join_that_claimed_the_actor_first(
    clock: object, store: CountingStore
) -> None:
    """A04-26 (Join part; 04 §3.1 races): a destroy that arrives while a Join of the
    Actor is pending waits for that Join's end (the Join claim came first), then applies
    to the state it left: the Actor moved, so the destroy at the old owner ends
    Unavailable (never re-targeted); destroying the same ref through the manager then
    reaches the new owner (same generation): True."""
    log = JoinLog()
    async with open_cluster(3, store=store, app=make_join_app(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await create_on(c, cluster.servers, 0, "doomed")
        ref = await c.actors.find(actor)
        assert ref is not None
        target = await entry_id(b)
        log.gate = trio.Event()
        outcome: list[object] = []
        async with trio.open_nursery() as nursery:

            async def join() -> None:
                await c.actors.request(actor, "join-block", target.value.encode()).timeout(30)

            async def destroy() -> None:
                try:
                    outcome.append(await a.actors.destroy(ref))
                except Unavailable as exc:
                    outcome.append(exc)

            nursery.start_soon(join)
            await log.entered.wait()
            nursery.start_soon(destroy)
            await trio.testing.wait_all_tasks_blocked()
            assert outcome == []  # waiting for the Join
            log.gate.set()
        assert len(outcome) == 1 and isinstance(outcome[0], Unavailable)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 1)
        assert log.completions_of(actor)[0].outcome is JoinOutcome.ACCEPTED
        assert await c.actors.destroy(ref) is True
        assert await c.actors.find(actor) is None


async def test_a04_17_after_a_move_messages_by_actor_id_reach_the_new_owner(
    clock: object, store: CountingStore
) -> None:
    """A04-17 (Join part): messaging names only the ActorId. After a cross-node Join a
    caller whose cached route names the old owner gets a stale route with exactly ONE
    command 24 on the wire (no automatic resend to the new owner); its next call
    resolves afresh from the Store and is handled by the new activation."""
    log = JoinLog()
    tap = WireTap()
    async with open_cluster(3, store=store, app=make_join_app(log), tap=tap) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await create_on(c, cluster.servers, 0, "followed")
        assert await c.actors.request(actor, "echo", b"cached") == b"cached"
        await a.actors.request(actor, "join", (await entry_id(b)).value.encode()).timeout(10)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 1)
        tap.clear()
        store.reset()
        with pytest.raises(Unavailable):
            await c.actors.request(actor, "echo", b"stale").timeout(10)
        sent = [
            e
            for e in tap.select(node=c.identity.node_rid, command=Command.ACTOR_SEND)
            if e.direction.name == "SENT"
        ]
        assert len(sent) == 1 and sent[0].peer is not None
        assert sent[0].peer.node_rid == a.identity.node_rid
        assert store.count("read") == 0  # the stale call used the cache, read nothing
        assert await c.actors.request(actor, "echo", b"fresh").timeout(10) == b"fresh"
        assert store.count("read") >= 1  # a fresh resolve
        _, new = log.instances[actor]
        assert [i for a_, p, d, i in log.handled if d == b"fresh"] == [new]
        assert not any(d == b"stale" for _, _, d, _ in log.handled)


async def test_a04_09_a_journal_frame_lost_on_the_wire_is_sent_again(
    clock: object, store: CountingStore
) -> None:
    """A04-09 (Join part; nothing accepted is lost or run twice): one journal frame (113)
    is lost on the wire (its connection is cut): the end-of-journal (114) answer names the
    first missing index, the source sends from there again, and every payload the barrier
    held runs exactly once, in order, on the new activation."""
    log = JoinLog()
    plan = FaultPlan(seed=9)
    async with open_cluster(2, store=store, app=make_join_app(log), fault_plan=plan) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "lossy")
        target = await entry_id(b)
        log.gate = trio.Event()
        replies: list[object] = []
        async with trio.open_nursery() as nursery:

            async def join() -> None:
                await b.actors.request(actor, "join-block", target.value.encode()).timeout(30)

            async def ask() -> None:
                replies.append(await a.actors.request(actor, "echo", b"q").timeout(30))

            nursery.start_soon(join)
            await log.entered.wait()
            for n in range(3):
                await a.actors.send(actor, "note", str(n).encode())
            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            for n in range(3, 6):
                await a.actors.send(actor, "note", str(n).encode())
            lost = plan.drop(command=Command.ACTOR_JOURNAL, sender=a.identity.node_rid, count=1)
            log.gate.set()
        await log.wait_for(lambda: len(log.handled) >= 8, timeout=30)
        assert lost.fired == 1
        assert replies == [b"q"]
        assert log.trace[:2] == ["join-block:" + target.value, "complete:accepted"]
        assert log.trace[2:] == [
            "note:0", "note:1", "note:2", "echo:q", "note:3", "note:4", "note:5",
        ]  # fmt: skip
        _, new = log.instances[actor]
        assert all(i is new for _, p, _, i in log.handled if p in ("note", "echo"))
