"""Adversarial review of live relocation (spec 04 §6.1, §6.7, §9; spec 06 §6, §8; spec 02
§8.1): races and failure paths through the public surface only, real TCP, both stores."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from relocation_kit import HeldRead, RelocLog, create_on, make_reloc_app

from zlink_trio import (
    App,
    AuthorityOwnerGeneration,
    NodeRid,
    PreserveStateWith,
    RelocationResult,
    Unavailable,
    ZLinkError,
    on_request,
    on_send,
    on_timer,
)
from zlink_trio.store.api import ObjectKey
from zlink_trio.testing import CountingStore, FaultPlan, hosted_actors, open_cluster
from zlink_trio.wire.commands import Command


def _apps(log: RelocLog):  # type: ignore[no-untyped-def]
    return lambda i: make_reloc_app(log, f"node{i}")


async def test_two_relocations_of_one_actor_at_once_one_wins(
    clock: object, store: CountingStore
) -> None:
    """Two ``relocate`` calls for the same Actor started together (to two different
    nodes): exactly one moves it (owner generation + 1 once), the other is refused
    Unavailable and leaves the winner's seal alone: what arrives while the winner's
    Restore runs is held (runs nowhere) and then runs once, on the winner's target."""
    log = RelocLog()
    async with open_cluster(3, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await create_on(c, cluster.servers, 0, "twice", "counter")
        await c.actors.send(actor, "add", b"first")
        assert await c.actors.request(actor, "get", b"").timeout(10) == b"1@node0"
        outcomes: list[object] = []
        log.restore_gate = trio.Event()

        async def move(to: NodeRid) -> None:
            try:
                outcomes.append(await a.relocate(actor, to=to))
            except ZLinkError as exc:
                outcomes.append(exc)
                refused.set()

        refused = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(move, b.identity.node_rid)
            nursery.start_soon(move, c.identity.node_rid)
            await log.restore_entered.wait()
            with trio.fail_after(60):
                await refused.wait()  # the loser is refused
            for i in range(5):
                await a.actors.send(actor, "add", f"held-{i}".encode())
            await trio.testing.wait_all_tasks_blocked()
            assert log.payloads(actor) == [b"first"]  # the winner's seal still holds
            log.restore_gate.set()
        assert isinstance(outcomes[0], Unavailable), outcomes
        row = await store.read(ObjectKey.actor(actor))
        assert row is not None and row.owner_generation == AuthorityOwnerGeneration(2)
        await log.wait_for(lambda: len(log.payloads(actor)) == 6)
        assert log.payloads(actor) == [b"first"] + [f"held-{i}".encode() for i in range(5)]
        nodes = [n for x, p, _, n in log.handled if x == actor and p == "add"]
        assert nodes[0] == "node0" and len(set(nodes[1:])) == 1 and nodes[1] != "node0"
        assert log.factory_runs[actor] == 2


async def test_relocate_to_an_unknown_or_stopped_node_is_unavailable_and_the_actor_stays(
    clock: object, store: CountingStore
) -> None:
    """``relocate`` to a NodeRid no node has, and to a node that stopped: Unavailable;
    the Actor stays Ready where it was, its row unchanged, and keeps answering."""
    log = RelocLog()
    async with open_cluster(3, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "nowhere", "counter")
        gone = c.identity.node_rid
        with pytest.raises(Unavailable):
            await a.relocate(actor, to=NodeRid(b"\x07" * 16))
        await cluster.stop(2)
        with pytest.raises(Unavailable):
            await a.relocate(actor, to=gone)
        row = await store.read(ObjectKey.actor(actor))
        assert row is not None and row.owner_generation == AuthorityOwnerGeneration(1)
        assert await b.actors.request(actor, "get", b"").timeout(10) == b"0@node0"
        assert (await a.relocate(actor, to=b.identity.node_rid)).committed


def _capture_app(node_name: str, fail: list[bool], handled: list[bytes]) -> App:
    app = App()
    app.enable_actor_dispatch()

    class Box:
        def __init__(self, context: Any) -> None:
            self.context = context
            self.total = 0

        @on_send("add")
        async def add(self, payload: bytes) -> None:
            handled.append(payload)
            self.total += 1

        @on_request("get")
        async def get(self, payload: bytes) -> bytes:
            return f"{self.total}@{node_name}".encode()

        @on_request("once")
        async def once(self, payload: bytes) -> bytes:
            self.context.timers.once("ping", float(payload.decode()))
            return b"ok"

        @on_timer("ping")
        async def ping(self, payload: bytes) -> None:
            handled.append(f"tick@{node_name}".encode())

    class Adapter:
        async def capture(self, actor: Box) -> bytes:
            if fail[0]:
                raise RuntimeError("injected capture failure")
            return str(actor.total).encode()

        async def restore(self, actor: Box, payload: bytes) -> None:
            actor.total = int(payload.decode())

    app.register_actor("box", Box, relocation=PreserveStateWith(Adapter()))
    return app


async def test_a_raising_capture_adapter_aborts_with_a_typed_error_and_the_actor_stays(
    clock: object, store: CountingStore
) -> None:
    """PreserveStateWith whose ``capture`` raises: the relocation fails with a typed
    ZLinkError (not the application's exception), the Actor stays owner where it was and
    keeps its state and queued work; a later move works."""
    fail = [True]
    handled: list[bytes] = []
    async with open_cluster(
        2, store=store, app=lambda i: _capture_app(f"node{i}", fail, handled)
    ) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "cap", "box")
        await b.actors.send(actor, "add", b"x")
        with pytest.raises(ZLinkError):
            await a.relocate(actor, to=b.identity.node_rid)
        assert await b.actors.request(actor, "get", b"").timeout(10) == b"1@node0"
        fail[0] = False
        assert (await a.relocate(actor, to=b.identity.node_rid)).committed
        assert await b.actors.request(actor, "get", b"").timeout(10) == b"1@node1"


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_a_one_shot_timer_pending_over_the_move_fires_once_on_the_target(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """A one-shot timer registered on the source, due after the move: it fires exactly
    once, on the target; the source never fires it."""
    handled: list[bytes] = []
    async with open_cluster(
        2, store=store, app=lambda i: _capture_app(f"node{i}", [False], handled)
    ) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "oneshot", "box")
        assert await b.actors.request(actor, "once", b"5.0").timeout(10) == b"ok"
        assert (await a.relocate(actor, to=b.identity.node_rid)).committed
        await trio.sleep(20)
        assert [h for h in handled if h.startswith(b"tick")] == [b"tick@node1"]


async def test_a_stale_route_after_two_moves_follows_two_hops(
    clock: object, store: CountingStore
) -> None:
    """A caller whose cache names the first owner after two moves (0 → 1 → 2) reaches
    the Actor (two follow hops); its sends keep their order."""
    log = RelocLog()
    async with open_cluster(3, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await create_on(c, cluster.servers, 0, "stale2", "counter")
        assert await c.actors.request(actor, "get", b"").timeout(10) == b"0@node0"
        assert (await a.relocate(actor, to=b.identity.node_rid)).committed
        assert (await b.relocate(actor, to=c.identity.node_rid)).committed
        for i in range(5):
            await c.actors.send(actor, "add", str(i).encode())
        assert await c.actors.request(actor, "get", b"").timeout(10) == b"5@node2"
        assert log.payloads(actor) == [str(i).encode() for i in range(5)]


async def test_cancelling_relocate_after_relay_ready_loses_nothing(
    clock: object, store: CountingStore
) -> None:
    """The caller of ``relocate`` is cancelled just after the relay-ready reply was
    accepted (the point of no return): the move still completes and every message held
    during the seal runs once, on the target."""
    log = RelocLog()
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "cancelmove", "counter")
        log.restore_gate = trio.Event()
        async with trio.open_nursery() as nursery:
            scope = trio.CancelScope()

            async def move() -> None:
                with scope:
                    await a.relocate(actor, to=b.identity.node_rid)

            nursery.start_soon(move)
            await log.restore_entered.wait()
            for i in range(20):
                await b.actors.send(actor, "add", str(i).encode())
            answers: list[bytes] = []

            async def held_request() -> None:
                answers.append(await b.actors.request(actor, "get", b"").timeout(30))

            nursery.start_soon(held_request)
            await trio.testing.wait_all_tasks_blocked()
            log.restore_gate.set()
            with trio.fail_after(30):
                while True:
                    stats = a.statistics().actors
                    assert stats is not None
                    if stats.relocation.moved_out == 1:
                        break
                    await trio.lowlevel.checkpoint()
            scope.cancel()
        await log.wait_for(lambda: len(log.payloads(actor)) == 20, timeout=30)
        assert log.payloads(actor) == [str(i).encode() for i in range(20)]
        assert {n for x, p, _, n in log.handled if x == actor and p == "add"} == {"node1"}
        assert answers == [b"20@node1"]  # the held request's reply came back


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_a_relocation_that_times_out_before_its_seal_turn_leaves_the_actor_open(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """A handler runs longer than ``relocation_timeout``: ``relocate`` gives up (a typed
    error) and the Actor is not moved; once the handler ends the Actor keeps running
    here (it is not sealed later by the abandoned seal turn) and a new move works."""
    log = RelocLog()
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "slowseal", "counter")
        log.gate = trio.Event()
        async with trio.open_nursery() as nursery:

            async def hold() -> None:
                await b.actors.request(actor, "hold", b"").timeout(120)

            nursery.start_soon(hold)
            await log.entered.wait()
            with pytest.raises(ZLinkError):
                await a.relocate(actor, to=b.identity.node_rid)
            log.gate.set()
        await b.actors.send(actor, "add", b"after")
        assert await b.actors.request(actor, "get", b"").timeout(10) == b"2@node0"
        assert log.payloads(actor) == [b"after"]
        assert (await a.relocate(actor, to=b.identity.node_rid)).committed


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
@pytest.mark.parametrize("where", ["source", "remote"])
async def test_a_held_request_keeps_its_deadline_and_its_cancellation(
    clock: trio.testing.MockClock, store: CountingStore, where: str
) -> None:
    """Spec 04 §6.7 / 02 §8: requests held during the seal each keep their own deadline
    and cancellation. While the target's Restore is held 2 s: a request with a 0.5 s
    timeout fails DeadlineExceeded at 0.5 s, one whose caller's cancel scope ends is
    cancelled; neither runs anywhere after the move; a request with room runs on the
    target and answers."""
    log = RelocLog()
    async with open_cluster(3, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await create_on(c, cluster.servers, 0, "helddl", "counter")
        caller = a if where == "source" else c
        assert await caller.actors.request(actor, "get", b"").timeout(10) == b"0@node0"
        log.restore_gate = trio.Event()
        outcomes: dict[str, object] = {}
        async with trio.open_nursery() as nursery:

            async def move() -> None:
                await a.relocate(actor, to=b.identity.node_rid)

            async def short() -> None:
                started = trio.current_time()
                try:
                    await caller.actors.request(actor, "add-req", b"short").timeout(0.5)
                except ZLinkError as exc:
                    outcomes["short"] = (type(exc).__name__, trio.current_time() - started)

            async def cancelled() -> None:
                with trio.move_on_after(0.5) as scope:
                    await caller.actors.request(actor, "add-req", b"cancelled").timeout(30)
                outcomes["cancelled"] = scope.cancelled_caught

            async def roomy() -> None:
                outcomes["roomy"] = await caller.actors.request(actor, "add-req", b"roomy").timeout(
                    30
                )

            nursery.start_soon(move)
            await log.restore_entered.wait()
            nursery.start_soon(short)
            nursery.start_soon(cancelled)
            nursery.start_soon(roomy)
            await trio.sleep(2)
            log.restore_gate.set()
        assert outcomes["roomy"] == b"ok"
        name, elapsed = outcomes["short"]  # type: ignore[misc]
        assert name == "DeadlineExceeded" and elapsed < 1.0
        assert outcomes["cancelled"] is True
        await trio.sleep(5)
        assert log.payloads(actor, "add-req") == [b"roomy"]


async def test_follow_routes_after_a_round_trip_lead_forward_not_in_a_loop(
    clock: object, store: CountingStore
) -> None:
    """Message Follow after 0 → 1 → 0 → 2: node 0 had a follow route to node 1 from the
    first move and node 1 one back to node 0; a caller whose cache names node 1 reaches
    the Actor on node 2 (1 → 0 → 2, not 1 → 0 → 1 …) with each send once and in order."""
    log = RelocLog()
    async with open_cluster(4, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c, d = cluster.servers
        actor = await create_on(d, cluster.servers, 0, "loop", "counter")
        assert (await a.relocate(actor, to=b.identity.node_rid)).committed
        assert await d.actors.request(actor, "get", b"").timeout(10) == b"0@node1"
        assert (await b.relocate(actor, to=a.identity.node_rid)).committed
        assert (await a.relocate(actor, to=c.identity.node_rid)).committed
        for i in range(4):
            await d.actors.send(actor, "add", str(i).encode())
        assert await d.actors.request(actor, "get", b"").timeout(10) == b"4@node2"
        assert log.payloads(actor) == [str(i).encode() for i in range(4)]
        assert {n for x, p, _, n in log.handled if x == actor and p == "add"} == {"node2"}


async def test_the_target_dying_during_restore_leaves_the_source_owner_in_order(
    clock: object, store: CountingStore
) -> None:
    """The target's lifecycle ends like a crash (sockets closed, nobody told) while its
    Restore runs (before relay-ready): ``relocate`` fails with a typed error, the source
    stays owner (row unchanged) and the messages held meanwhile run there once, in
    order; a move to a live node works afterwards."""
    log = RelocLog()
    async with open_cluster(3, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await create_on(c, cluster.servers, 0, "deadtarget", "counter")
        log.restore_gate = trio.Event()
        failure: list[BaseException] = []
        async with trio.open_nursery() as nursery:

            async def move() -> None:
                try:
                    await a.relocate(actor, to=b.identity.node_rid)
                except ZLinkError as exc:
                    failure.append(exc)

            nursery.start_soon(move)
            await log.restore_entered.wait()
            for i in range(5):
                await c.actors.send(actor, "add", str(i).encode())
            await cluster.kill(1)
        assert len(failure) == 1
        log.restore_gate = None
        await log.wait_for(lambda: len(log.payloads(actor)) == 5)
        assert log.payloads(actor) == [str(i).encode() for i in range(5)]
        assert {n for x, p, _, n in log.handled if x == actor and p == "add"} == {"node0"}
        row = await store.read(ObjectKey.actor(actor))
        assert row is not None and row.owner_generation == AuthorityOwnerGeneration(1)
        assert await c.actors.request(actor, "get", b"").timeout(10) == b"5@node0"
        assert (await a.relocate(actor, to=c.identity.node_rid)).committed
        assert await c.actors.request(actor, "get", b"").timeout(10) == b"5@node2"


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_the_target_dying_after_relay_ready_never_reopens_the_source_nor_wedges(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """A04-07 (after acceptance), target dead: the cutover is held on the wire and the
    target's lifecycle ends (crash-like) after the relay-ready reply was accepted and
    before its CAS. The source never runs the Actor again; ``relocate`` returns
    uncommitted after ``relocation_timeout``; the id is not wedged: calls end with a
    typed error, and a create makes the Actor anew."""
    log = RelocLog()
    plan = FaultPlan(seed=77)
    async with open_cluster(3, store=store, app=_apps(log), fault_plan=plan) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await create_on(c, cluster.servers, 0, "deadafter", "counter")
        plan.delay(5.0, command=Command.RELOCATION_CUTOVER)
        results: list[object] = []
        async with trio.open_nursery() as nursery:

            async def move() -> None:
                results.append(await a.relocate(actor, to=b.identity.node_rid))

            nursery.start_soon(move)
            with trio.fail_after(30):
                while True:
                    stats = a.statistics().actors
                    assert stats is not None
                    if stats.relocation.moved_out == 1:
                        break
                    await trio.lowlevel.checkpoint()
            await c.actors.send(actor, "add", b"lost-with-the-target")
            await cluster.kill(1)
        (result,) = results
        assert not result.committed  # type: ignore[attr-defined]
        assert [n for x, _, _, n in log.handled if x == actor] == []
        with pytest.raises(ZLinkError):
            await c.actors.request(actor, "get", b"").timeout(10)
        # the source released the unconfirmed row (one fenced CAS): a create works now
        created = await c.actors.get_or_create(actor, "counter").timeout(10)
        assert created.actor is not None  # type: ignore[attr-defined]
        assert (await c.actors.request(actor, "get", b"").timeout(10)).startswith(b"0@")


async def test_a_relocation_racing_a_deferred_join_is_refused_and_the_join_completes(
    clock: object, store: CountingStore
) -> None:
    """A04-10 with relocation: a handler defers a Join (to another node's Entry Spot)
    and is still running when ``relocate`` is called: the relocation is refused
    Unavailable (the seal turn finds the Join), the Join completes accepted exactly once,
    the message queued behind its barrier runs once after the completion, and a
    relocation afterwards works."""
    from join_kit import JoinLog, create_on as join_create_on, entry_id, make_join_app

    log = JoinLog()
    async with open_cluster(3, store=store, app=make_join_app(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await join_create_on(c, cluster.servers, 0, "joinmove")
        target = await entry_id(b)
        log.gate = trio.Event()
        refused: list[BaseException] = []
        async with trio.open_nursery() as nursery:

            async def join() -> None:
                await c.actors.request(actor, "join-block", target.value.encode()).timeout(30)

            async def move() -> None:
                try:
                    await a.relocate(actor, to=c.identity.node_rid)
                except ZLinkError as exc:
                    refused.append(exc)

            nursery.start_soon(join)
            await log.entered.wait()
            nursery.start_soon(move)
            await trio.testing.wait_all_tasks_blocked()
            await c.actors.send(actor, "note", b"behind")
            log.gate.set()
        assert len(refused) == 1 and isinstance(refused[0], Unavailable), refused
        await log.wait_for(lambda: len(log.completions_of(actor)) == 1)
        await log.wait_for(lambda: ("note", b"behind") in log.packets(actor))
        assert log.packets(actor).count(("note", b"behind")) == 1
        assert log.trace.index("complete:accepted") < log.trace.index("note:behind")
        ref = await c.actors.find(actor)
        assert ref is not None and ref.node_rid == b.identity.node_rid
        assert (await b.relocate(actor, to=c.identity.node_rid)).committed
        ref = await a.actors.find(actor)
        assert ref is not None


@pytest.mark.parametrize("order", ["destroy-first", "relocate-first"])
async def test_a_destroy_and_a_relocation_started_together_never_both_win(
    clock: object, store: CountingStore, order: str
) -> None:
    """A destroy and a relocation of the same Actor started in the same instant: either
    the destroy wins (the row is gone, nothing answers, the relocation failed typed) or
    the move wins (the destroy failed typed, the Actor answers on the target), or the
    move completes first and the destroy, whose Store read came after its commit,
    destroys the same incarnation on the target (both succeed, one after the other: the
    row is gone, no node hosts it, nothing answers; docs/decisions.md, "Destroy racing a
    relocation"); never a destroyed row with a live instance, nor a move of a destroyed
    Actor."""
    log = RelocLog()
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, f"dr-{order}", "counter")
        ref = await b.actors.find(actor)
        assert ref is not None
        outcome: dict[str, object] = {}

        async def destroy() -> None:
            try:
                outcome["destroy"] = await a.actors.destroy(ref)
            except ZLinkError as exc:
                outcome["destroy"] = exc

        async def move() -> None:
            try:
                outcome["move"] = await a.relocate(actor, to=b.identity.node_rid)
            except ZLinkError as exc:
                outcome["move"] = exc

        async with trio.open_nursery() as nursery:
            first, second = (destroy, move) if order == "destroy-first" else (move, destroy)
            nursery.start_soon(first)
            nursery.start_soon(second)
        row = await store.read(ObjectKey.actor(actor))
        moved = outcome["move"]
        if not isinstance(outcome["destroy"], ZLinkError):
            # The destroy won, or ran after the move had committed (then it destroyed the
            # moved incarnation on the target: True). Either way nothing of it is left.
            if isinstance(moved, RelocationResult) and moved.committed:
                assert outcome["destroy"] is True, outcome
            else:
                assert isinstance(moved, ZLinkError | RelocationResult), outcome
            assert row is None, outcome
            assert all(r.actor_id.value != actor for s in cluster.servers for r in hosted_actors(s))
            for server in cluster.servers:
                with pytest.raises(ZLinkError):
                    await server.actors.request(actor, "get", b"").timeout(10)
        else:
            assert isinstance(outcome["destroy"], ZLinkError), outcome
            assert not isinstance(outcome["move"], ZLinkError), outcome
            assert row is not None and row.owner.node_rid == b.identity.node_rid
            assert await a.actors.request(actor, "get", b"").timeout(10) == b"0@node1"


@pytest.mark.parametrize("read", ["after-the-move", "before-the-move"])
async def test_a_destroy_whose_store_read_lands_after_a_relocation_committed(
    clock: object, store: CountingStore, read: str
) -> None:
    """A04-26: a destroy started before a relocation of the same Actor, its Store read
    slow (held on purpose: the window the race above leaves to the machine's load), and
    the move commits meanwhile. Read after the commit, the destroy names the same
    incarnation (a move keeps the ObjectGeneration) at its new owner and destroys it
    there — the move, then the destroy: both succeed, the row is gone, no node hosts it,
    nothing answers. Read before the commit, the destroy finds the Actor gone from the
    node its row named and fails typed; the Actor answers on the target."""
    log = RelocLog()
    held = HeldRead(store)
    async with open_cluster(2, store=held, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, f"slow-{read}", "counter")
        ref = await b.actors.find(actor)
        assert ref is not None
        key = ObjectKey.actor(actor)
        destroyed: list[object] = []

        async def destroy() -> None:
            try:
                destroyed.append(await a.actors.destroy(ref))
            except ZLinkError as exc:
                destroyed.append(exc)

        held.arm(key, before=read == "after-the-move")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(destroy)
            with trio.fail_after(60):
                await held.held.wait()  # the destroy's read is under way
            moved = await a.relocate(actor, to=b.identity.node_rid)
            assert moved.committed, moved
            held.let_go.set()
        row = await store.read(key)
        if read == "after-the-move":
            assert destroyed == [True], destroyed
            assert row is None
            assert all(r.actor_id.value != actor for s in cluster.servers for r in hosted_actors(s))
            for server in cluster.servers:
                with pytest.raises(ZLinkError):
                    await server.actors.request(actor, "get", b"").timeout(10)
        else:
            assert isinstance(destroyed[0], Unavailable), destroyed
            assert row is not None and row.owner.node_rid == b.identity.node_rid
            assert row.owner_generation == AuthorityOwnerGeneration(2)
            assert [r.actor_id.value for r in hosted_actors(b)].count(actor) == 1
            assert await a.actors.request(actor, "get", b"").timeout(10) == b"0@node1"


async def test_relocate_to_a_node_without_the_type_is_refused_and_the_actor_stays(
    clock: object, store: CountingStore
) -> None:
    """The target node does not register the Actor's type: the move fails with a typed
    error before relay-ready, the source stays owner and the messages held meanwhile
    run there once, in order."""
    log = RelocLog()

    def apps(i: int) -> App:
        if i == 1:
            bare = App()
            bare.enable_actor_dispatch()
            return bare
        return make_reloc_app(log, f"node{i}")

    async with open_cluster(2, store=store, app=apps) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(a, cluster.servers, 0, "notype", "counter")
        await a.actors.send(actor, "add", b"1")
        with pytest.raises(ZLinkError):
            await a.relocate(actor, to=b.identity.node_rid)
        await b.actors.send(actor, "add", b"2")
        assert await b.actors.request(actor, "get", b"").timeout(10) == b"2@node0"
        assert log.payloads(actor) == [b"1", b"2"]
        row = await store.read(ObjectKey.actor(actor))
        assert row is not None and row.owner_generation == AuthorityOwnerGeneration(1)
