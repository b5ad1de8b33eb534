"""Durable lifecycle operations: replay under one OperationId, deadline kinds, target
lifecycle end, wrappers (spec 04 §8.1; checklist A04-22 … A04-25)."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from actor_kit import Recorder, blackout, client_app, make_app

from zlink_trio import ApplicationError, DeadlineExceeded, Unavailable
from zlink_trio.actors.results import Created
from zlink_trio.config import MIB
from zlink_trio.spots.approval import ActorCreateEvent, Approve, CreateDecision, Reject
from zlink_trio.testing import CountingStore, FaultKind, FaultPlan, WireTap, open_cluster
from zlink_trio.testing.cluster import Cluster
from zlink_trio.wire.commands import Command


def _caller_and_host(rec: Recorder, **kwargs: object) -> object:
    apps = [client_app(), make_app(rec, **kwargs)]  # type: ignore[arg-type]
    return lambda i: apps[i]


def _ops(tap: WireTap, cluster: Cluster) -> list[object]:
    me = cluster.servers[0].identity.node_rid
    return [e.record.operation_id for e in tap.select(node=me, command=Command.ACTOR_CREATE)]


async def test_a04_22_durable_create_replays_under_one_operation_id(
    clock: object, store: CountingStore
) -> None:
    """A04-22: a create whose reply is lost (and one whose first attempt finds no route)
    is replayed with the SAME OperationId and gets its original terminal; the factory runs
    once. Exactly two attempts go on the wire where one reply was dropped (one where the
    first found no route): none after the terminal. An application request under the
    same fault is sent exactly once."""
    rec = Recorder()
    plan = FaultPlan(seed=22)
    tap = WireTap()
    async with open_cluster(
        2, store=store, app=_caller_and_host(rec), fault_plan=plan, tap=tap
    ) as cluster:
        await cluster.wait_all_admitted()
        host = cluster.servers[1].identity.node_rid
        # 1. the terminal reply is lost once
        lost = plan.drop(command=Command.TERMINAL_REPLY, sender=host, count=1)
        created = await cluster.servers[0].actors.create("durable", "player").timeout(30)
        assert isinstance(created, Created)
        assert lost.fired == 1
        ops = _ops(tap, cluster)
        # the original attempt and exactly one replay: never a resend after the terminal
        assert len(ops) == 2 and len(set(ops)) == 1
        assert rec.runs("durable") == 1 and rec.on_create_calls == 1
        # 2. no route at first: every frame to the host is lost until the rule goes away
        tap.clear()
        await blackout(cluster, plan, 0, 1)
        result: list[object] = []
        async with trio.open_nursery() as nursery:

            async def create() -> None:
                result.append(
                    await cluster.servers[0].actors.create("late-route", "player").timeout(60)
                )

            nursery.start_soon(create)
            await trio.testing.wait_all_tasks_blocked()
            assert _ops(tap, cluster) == []  # no route yet: nothing could be sent
            plan.clear()
        (late,) = result
        assert isinstance(late, Created)
        assert rec.runs("late-route") == 1
        ops = _ops(tap, cluster)
        assert len(ops) == 1  # sent once the route exists, never again after its terminal
        assert plan.fired(FaultKind.PARTITION) >= 1
        # 3. an application request whose reply is lost is NOT re-sent
        tap.clear()
        me = cluster.servers[0].identity.node_rid
        plan.drop(command=Command.TERMINAL_REPLY, sender=host, count=None)
        try:
            await cluster.servers[0].actors.request("durable", "echo", b"x").timeout(5)
            raise AssertionError("the reply was dropped: the request must time out")
        except DeadlineExceeded:
            pass
        assert tap.count(node=me, command=Command.ACTOR_SEND) == 1
        assert [h[3] for h in rec.handled] == [b"x"]  # it ran exactly once
        # 4. an application request that finds no route at first: sent once, when admitted
        plan.clear()
        await cluster.wait_all_admitted()
        await blackout(cluster, plan, 0, 1)
        tap.clear()
        answers: list[bytes | None] = []
        async with trio.open_nursery() as nursery:

            async def ask() -> None:
                answers.append(
                    await cluster.servers[0].actors.request("durable", "echo", b"y").timeout(60)
                )

            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            assert tap.count(node=me, command=Command.ACTOR_SEND) == 0
            plan.clear()
        assert answers == [b"y"]
        assert tap.count(node=me, command=Command.ACTOR_SEND) == 1
        assert [h[3] for h in rec.handled] == [b"x", b"y"]


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_a04_23_deadline_kind_depends_on_admission(
    clock: object, store: CountingStore
) -> None:
    """A04-23: never admitted until the deadline → Unavailable AT the deadline; admitted
    but no reply → DeadlineExceeded AT the deadline; a non-transient failure (the
    target's factory raising) ends at once after exactly one attempt."""
    rec = Recorder()
    plan = FaultPlan(seed=23)
    tap = WireTap()

    class Boom(Exception):
        pass

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        raise Boom("refuse by failing")

    apps = [
        client_app(),
        make_app(rec),
        make_app(Recorder(), types=("fragile",), on_create=on_create),
    ]
    async with open_cluster(
        3, store=store, app=lambda i: apps[i], fault_plan=plan, tap=tap
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0].actors
        host = cluster.servers[1].identity.node_rid
        me = cluster.servers[0].identity.node_rid
        # never admitted: the connection to the host is dead from the start
        await blackout(cluster, plan, 0, 1)
        start = trio.current_time()
        try:
            await caller.create("never", "player").timeout(7)
            raise AssertionError("must fail")
        except DeadlineExceeded:
            raise AssertionError(
                "never admitted must be Unavailable, not DeadlineExceeded"
            ) from None
        except Unavailable:
            assert trio.current_time() - start == 7.0
        plan.clear()
        await cluster.wait_all_admitted()
        # admitted, every reply lost: DeadlineExceeded exactly at the deadline
        plan.drop(command=Command.TERMINAL_REPLY, sender=host, count=None)
        start = trio.current_time()
        try:
            await caller.create("mute", "player").timeout(7)
            raise AssertionError("must fail")
        except DeadlineExceeded:
            assert trio.current_time() - start == 7.0
        plan.clear()
        await cluster.wait_all_admitted()
        # non-transient: one attempt, immediate typed failure
        tap.clear()
        start = trio.current_time()
        try:
            await caller.create("fragile-1", "fragile").timeout(60)
            raise AssertionError("must fail")
        except ApplicationError:
            pass
        assert trio.current_time() - start < 1.0
        assert tap.count(node=me, command=Command.ACTOR_CREATE) == 1


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_a04_24_target_lifecycle_end_stops_the_replay(
    clock: object, store: CountingStore
) -> None:
    """A04-24: when the target's connection intent is removed and no admitted peer is
    left, a replaying durable operation ends Unavailable well before its deadline; a
    transport break alone does not end it: after the reconnect the replay goes on under
    the same OperationId and gets the original terminal."""
    rec = Recorder()
    plan = FaultPlan(seed=24)
    tap = WireTap()
    async with open_cluster(
        2, store=store, app=_caller_and_host(rec), fault_plan=plan, tap=tap
    ) as cluster:
        await cluster.wait_all_admitted()
        host = cluster.servers[1].identity.node_rid
        # transport break only: the create is delivered, then the connection is cut
        cut = plan.cut(command=Command.ACTOR_CREATE, to=host, deliver=True, count=1)
        created = await cluster.servers[0].actors.create("survivor", "player").timeout(60)
        assert isinstance(created, Created) and cut.fired == 1
        ops = _ops(tap, cluster)
        assert len(ops) >= 2 and len(set(ops)) == 1
        assert rec.runs("survivor") == 1
        # lifecycle end: the host is unreachable, then leaves the cluster for good
        await blackout(cluster, plan, 0, 1)
        outcome: list[object] = []
        start = trio.current_time()
        async with trio.open_nursery() as nursery:

            async def create() -> None:
                try:
                    await cluster.servers[0].actors.create("orphan", "player").timeout(600)
                except Unavailable as exc:
                    outcome.append(exc)

            nursery.start_soon(create)
            await trio.testing.wait_all_tasks_blocked()
            await cluster.stop(1)
        assert len(outcome) == 1
        assert trio.current_time() - start < 60


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_a04_25_wrappers_end_with_the_wrapped_operation(
    clock: object, store: CountingStore
) -> None:
    """A04-25: the public create/get_or_create calls wrap the durable operation: they end
    with the same kind at the same instant as the operation (its one deadline), and never
    raise a timeout of their own while waiting for admission."""
    rec = Recorder()
    plan = FaultPlan(seed=25)
    async with open_cluster(2, store=store, app=_caller_and_host(rec), fault_plan=plan) as cluster:
        await cluster.wait_all_admitted()
        host = cluster.servers[1].identity.node_rid
        await blackout(cluster, plan, 0, 1)
        for call in (
            cluster.servers[0].actors.create("wrapped-1", "player"),
            cluster.servers[0].actors.get_or_create("wrapped-2", "player").in_mesh("test"),
        ):
            start = trio.current_time()
            try:
                await call.timeout(12.5)
                raise AssertionError("must fail")
            except Unavailable as exc:
                assert not isinstance(exc, DeadlineExceeded)
                assert trio.current_time() - start == 12.5
        plan.clear()
        await cluster.wait_all_admitted()
        plan.drop(command=Command.TERMINAL_REPLY, sender=host, count=None)
        start = trio.current_time()
        try:
            await cluster.servers[0].actors.get_or_create("wrapped-3", "player").timeout(3.25)
            raise AssertionError("must fail")
        except DeadlineExceeded:
            assert trio.current_time() - start == 3.25


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_a04_23_an_encode_failure_ends_at_once_after_one_attempt(
    clock: object, store: CountingStore
) -> None:
    """A04-23: an encode failure (the application approves or rejects with a reply that
    cannot be sent: over max_reply_bytes, 1 MiB) ends the create at once with the typed
    ApplicationError (the application's mistake, as for a handler reply; docs/decisions.md
    "A create callback's bad reply"), after exactly one attempt on the wire, never
    replayed; like any
    Failed create (A04-21) it leaves nothing behind: Find is None, the reserved capacity
    is given back, and the ActorId can be created right after."""
    rec = Recorder()
    tap = WireTap()

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        if event.request == b"approve-too-big":
            return Approve(b"x" * (MIB + 1))
        if event.request == b"reject-too-big":
            return Reject(b"x" * (MIB + 1))
        return Approve(b"fine")

    async with open_cluster(
        2, store=store, app=_caller_and_host(rec, on_create=on_create), tap=tap
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0].actors
        me = cluster.servers[0].identity.node_rid
        before = [(n.active, n.pending) for n in await store.list_nodes()]
        for attempt, request in enumerate((b"approve-too-big", b"reject-too-big"), 1):
            tap.clear()
            start = trio.current_time()
            with pytest.raises(ApplicationError, match="max_reply_bytes"):
                await caller.create("unencodable", "player").request(request).timeout(60)
            assert trio.current_time() - start == 0.0
            assert tap.count(node=me, command=Command.ACTOR_CREATE) == 1
            assert rec.runs("unencodable") == attempt
            assert await caller.find("unencodable") is None
            assert [(n.active, n.pending) for n in await store.list_nodes()] == before
        start = trio.current_time()
        created = await caller.create("unencodable", "player").timeout(60)
        assert trio.current_time() - start < 1.0
        assert isinstance(created, Created) and created.reply == b"fine"


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_a04_24_transport_outage_alone_waits_for_the_reconnect(
    clock: object, store: CountingStore
) -> None:
    """A04-24: the transport between caller and target is lost after the create was
    admitted (the connection intent stays): for 120 s of mock time, half the deadline, no
    terminal arrives and the operation does not end; once the transport is restored the
    replay goes on under the same OperationId and the caller gets the ORIGINAL terminal
    (the reply chosen by the one OnCreateActor run)."""
    rec = Recorder()
    plan = FaultPlan(seed=241)
    tap = WireTap()
    entered = trio.Event()
    release = trio.Event()

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        entered.set()
        await release.wait()
        return Approve(b"original")

    async with open_cluster(
        2,
        store=store,
        app=_caller_and_host(rec, on_create=on_create),
        fault_plan=plan,
        tap=tap,
    ) as cluster:
        await cluster.wait_all_admitted()
        outcome: list[object] = []
        async with trio.open_nursery() as nursery:

            async def create() -> None:
                try:
                    outcome.append(
                        await cluster.servers[0].actors.create("patient", "player").timeout(240)
                    )
                except Exception as exc:  # recorded, so the assertions below name it
                    outcome.append(exc)

            nursery.start_soon(create)
            await entered.wait()  # admitted: the target runs OnCreateActor
            await blackout(cluster, plan, 0, 1)  # transport only: the intent stays
            release.set()
            start = trio.current_time()
            await trio.sleep(120)  # mock clock: an observation window, not a wait
            assert outcome == []  # no terminal and no end while the transport is down
            assert trio.current_time() - start == 120
            plan.clear()
        (created,) = outcome
        assert isinstance(created, Created) and created.reply == b"original"
        ops = _ops(tap, cluster)
        assert len(ops) >= 2 and len(set(ops)) == 1
        assert rec.runs("patient") == 1 and rec.on_create_calls == 1
        assert await cluster.servers[0].actors.find("patient") == created.actor
