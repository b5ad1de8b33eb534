"""Adversarial review of a User Spot handler Deferring its members' Joins (spec 04 §3.1):
the handler's failure, a deadline that passes while it runs, the same member twice, a
request to the parked member, a member destroyed or messaged (remotely) while parked, a
node stopped while a Join is deferred, PerActor and SpotWide. Public surface only, two
nodes, both stores."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).parents[1] / "actors"))

from join_kit import JoinLog, attempt, create_on, entry_id, make_join_app, spot_on

from zlink_trio import (
    ActorId,
    App,
    Approve,
    DisableRelocation,
    InvalidOperation,
    JoinEvent,
    JoinOutcome,
    OperationId,
    PerActor,
    RecreateOnRelocation,
    ShuttingDown,
    SpotCallback,
    SpotContext,
    SpotId,
    SpotWide,
    Unavailable,
    on_lifecycle,
    on_request,
)
from zlink_trio.testing import CountingStore, open_cluster, spot_members


class _Holder:
    server: Any = None
    """The server the Spot handlers call ``actors`` through (set by the test)."""


def add_clans(app: App, log: JoinLog, holder: _Holder) -> None:
    class Clan:
        def __init__(self, context: SpotContext) -> None:
            self.context = context

        @on_lifecycle(SpotCallback.JOIN)
        async def join(self, event: JoinEvent) -> Approve:
            return Approve(reply=b"clan")

        @on_request("hold")
        async def hold(self, payload: bytes) -> bytes:
            """``<member>|<timeout s>|fail``: Defer the member's leave, wait for the gate,
            then fail or return."""
            actor, seconds, fail = payload.decode().split("|")
            call = self.context.join_entry_spot(actor)
            if seconds:
                call = call.timeout(float(seconds))
            op = call.defer()
            log.errors["held-op"] = op
            log.spot_entered.set()
            assert log.spot_gate is not None
            await log.spot_gate.wait()
            if fail:
                raise RuntimeError("the clan's handler fails after its defer")
            return str(op.value).encode()

        @on_request("hold-to")
        async def hold_to(self, payload: bytes) -> bytes:
            """``<member>|<user spot>``: Defer the member's Join, wait for the gate."""
            actor, target = payload.decode().split("|")
            log.errors["held-op"] = self.context.join_spot(actor, target).defer()
            log.spot_entered.set()
            assert log.spot_gate is not None
            await log.spot_gate.wait()
            return b""

        @on_request("big-reply")
        async def big_reply(self, payload: bytes) -> bytes:
            """Defer the member's leave, then a reply over the reply limit."""
            self.context.join_entry_spot(payload.decode()).defer()
            return b"x" * (16 * 1024 * 1024)

        @on_request("child-defer")
        async def child_defer(self, payload: bytes) -> bytes:
            """A child task the handler awaits Defers the member's leave."""

            async def child() -> None:
                await trio.lowlevel.checkpoint()
                attempt(
                    log, "child", lambda: self.context.join_entry_spot(payload.decode()).defer()
                )

            async with trio.open_nursery() as nursery:
                nursery.start_soon(child)
            return b""

        @on_request("twice")
        async def twice(self, payload: bytes) -> bytes:
            actor, other = payload.decode().split("|")
            attempt(log, "twice:first", lambda: self.context.join_entry_spot(actor).defer())
            attempt(log, "twice:second", lambda: self.context.join_spot(actor, other).defer())
            attempt(log, "twice:third", lambda: self.context.join_entry_spot(actor).defer())
            return b""

        @on_request("cycle")
        async def cycle(self, payload: bytes) -> bytes:
            """Defer the member's leave, then request the member and wait for its reply."""
            actor = payload.decode()
            self.context.join_entry_spot(actor).defer()
            try:
                reply = await holder.server.actors.request(actor, "echo", b"cycle").timeout(5)
            except Exception as exc:
                log.errors["cycle"] = exc
            else:
                log.errors["cycle"] = reply
            log._bump()
            return b""

    app.register_spot("clan", Clan, execution=PerActor(), relocation=RecreateOnRelocation())
    app.register_spot("camp", Clan, execution=SpotWide(), relocation=DisableRelocation())


def make_app(log: JoinLog, holder: _Holder) -> App:
    app = make_join_app(log, spots=True)
    add_clans(app, log, holder)
    return app


async def _enter(server: Any, log: JoinLog, actor: str, spot: str, count: int) -> None:
    await server.actors.request(actor, "join-spot", f"{spot}|x".encode()).timeout(30)
    await log.wait_for(lambda: len(log.completions_of(actor)) == count)
    assert log.completions_of(actor)[-1].outcome is JoinOutcome.ACCEPTED


async def _raises(awaitable: Any) -> Exception | None:
    try:
        await awaitable
    except Exception as exc:
        return exc
    return None


@pytest.mark.parametrize("spot_type", ["clan", "camp"])
async def test_a04_11_a_member_request_while_parked_is_answered_after_a_discard(
    clock: object, store: CountingStore, spot_type: str
) -> None:
    """A04-11: while the Spot's handler that Deferred its member's leave still runs, a
    request to the member from another node waits (the member runs nothing); the handler
    then fails: the Join is discarded, the waiting request is answered (not lost), the
    member stays a member; PerActor and SpotWide."""
    log, holder = JoinLog(), _Holder()
    async with open_cluster(2, store=store, app=make_app(log, holder)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        member = await create_on(a, cluster.servers, 0, "parked")
        spot = await spot_on(a, cluster.servers, 0, spot_type)
        await _enter(b, log, member, spot, 1)
        log.spot_gate = trio.Event()
        replies: list[bytes | None] = []
        async with trio.open_nursery() as nursery:

            async def held() -> None:
                await _raises(b.spots.request(spot, "hold", f"{member}||fail".encode()).timeout(30))

            async def ask() -> None:
                replies.append(await b.actors.request(member, "echo", b"parked").timeout(30))

            nursery.start_soon(held)
            await log.spot_entered.wait()
            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            assert replies == [] and ("echo", b"parked") not in log.packets(member)
            log.spot_gate.set()
        assert replies == [b"parked"]
        assert len(log.completions_of(member)) == 1
        assert spot_members(a, spot) == {ActorId(member)}
        # and it goes on running normally
        assert await b.actors.request(member, "whoami").timeout(10) == spot.encode()


@pytest.mark.parametrize("spot_type", ["clan", "camp"])
async def test_a04_11_the_deadline_fixed_at_defer_passes_while_the_spot_handler_runs(
    clock: object, store: CountingStore, spot_type: str
) -> None:
    """A04-11: the Join's absolute deadline is fixed at ``defer()``; the Spot's handler
    outlives it and then ends normally: the Join does not move the member, the member's
    completion is FAILED (its deadline passed before it started), and the member (its parked messages
    included) runs again in its Spot."""
    log, holder = JoinLog(), _Holder()
    async with open_cluster(2, store=store, app=make_app(log, holder)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        member = await create_on(a, cluster.servers, 0, "late")
        spot = await spot_on(a, cluster.servers, 0, spot_type)
        await _enter(b, log, member, spot, 1)
        log.spot_gate = trio.Event()
        async with trio.open_nursery() as nursery:

            async def held() -> None:
                await b.spots.request(spot, "hold", f"{member}|0.2|".encode()).timeout(30)

            nursery.start_soon(held)
            await log.spot_entered.wait()
            await b.actors.send(member, "note", b"while parked")
            await trio.sleep(1)  # the Join's 0.2 s pass while the handler runs
            log.spot_gate.set()
        await log.wait_for(lambda: len(log.completions_of(member)) == 2)
        done = log.completions_of(member)[1]
        assert done.operation_id == log.errors["held-op"]
        assert done.outcome is JoinOutcome.FAILED
        # never started before its deadline: Unavailable (04 §8.1)
        assert isinstance(done.error, Unavailable)
        counters = a.statistics().actors
        assert counters is not None
        assert (counters.joins_accepted, counters.joins_failed) == (1, 1)
        await log.wait_for(lambda: ("note", b"while parked") in log.packets(member))
        assert spot_members(a, spot) == {ActorId(member)}
        assert await b.actors.request(member, "whoami").timeout(10) == spot.encode()


async def test_a04_10_the_same_member_twice_in_one_spot_handler(
    clock: object, store: CountingStore
) -> None:
    """A04-10: a Spot handler Defers its member's leave, then another Join of the same
    member: Unavailable (a pending transition), twice; the first Join runs."""
    log, holder = JoinLog(), _Holder()
    async with open_cluster(2, store=store, app=make_app(log, holder)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        member = await create_on(a, cluster.servers, 0, "twice")
        spot = await spot_on(a, cluster.servers, 0, "clan")
        other = await spot_on(a, cluster.servers, 0, "lobby")
        await _enter(b, log, member, spot, 1)
        await b.spots.request(spot, "twice", f"{member}|{other}".encode()).timeout(30)
        assert isinstance(log.errors["twice:first"], OperationId)
        assert isinstance(log.errors["twice:second"], Unavailable)
        assert isinstance(log.errors["twice:third"], Unavailable)
        await log.wait_for(lambda: len(log.completions_of(member)) == 2)
        done = log.completions_of(member)[1]
        assert done.operation_id == log.errors["twice:first"]
        assert done.outcome is JoinOutcome.ACCEPTED and done.spot_id == await entry_id(a)


@pytest.mark.parametrize("local", [True, False], ids=["local", "remote"])
async def test_a04_11_a_spot_handler_requesting_its_parked_member_is_refused(
    clock: object, store: CountingStore, local: bool
) -> None:
    """A04-11: a Spot handler that Deferred its member's Join and then requests that
    member (waiting for the reply) is refused with InvalidOperation before anything is
    sent, instead of waiting behind the barrier; called from its own node and from
    another one."""
    log, holder = JoinLog(), _Holder()
    async with open_cluster(2, store=store, app=make_app(log, holder)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        holder.server = a
        member = await create_on(a, cluster.servers, 0, "cyclic")
        spot = await spot_on(a, cluster.servers, 0, "clan")
        await _enter(b, log, member, spot, 1)
        caller = a if local else b
        await caller.spots.request(spot, "cycle", member.encode()).timeout(30)
        assert isinstance(log.errors["cycle"], InvalidOperation)
        assert ("echo", b"cycle") not in log.packets(member)
        await log.wait_for(lambda: len(log.completions_of(member)) == 2)
        assert log.completions_of(member)[1].outcome is JoinOutcome.ACCEPTED


@pytest.mark.parametrize("spot_type", ["clan", "camp"])
async def test_a04_11_a_member_destroyed_while_parked(
    clock: object, store: CountingStore, spot_type: str
) -> None:
    """A04-11: the member is destroyed while the Spot's handler that Deferred its leave
    still runs: the Join registered first runs first (its completion), then the destroy
    (queued behind the barrier) completes; nothing hangs, the Spot loses the member and
    keeps serving."""
    log, holder = JoinLog(), _Holder()
    async with open_cluster(2, store=store, app=make_app(log, holder)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        member = await create_on(a, cluster.servers, 0, "doomed")
        spot = await spot_on(a, cluster.servers, 0, spot_type)
        await _enter(b, log, member, spot, 1)
        log.spot_gate = trio.Event()
        destroyed: list[object] = []
        async with trio.open_nursery() as nursery:

            async def held() -> None:
                await b.spots.request(spot, "hold", f"{member}||".encode()).timeout(30)

            async def destroy() -> None:
                ref = await b.actors.find(member)
                assert ref is not None
                destroyed.append(await b.actors.destroy(ref))

            nursery.start_soon(held)
            await log.spot_entered.wait()
            nursery.start_soon(destroy)
            await trio.testing.wait_all_tasks_blocked()
            log.spot_gate.set()
        assert destroyed
        assert await b.actors.find(member) is None
        assert len(log.completions_of(member)) == 2
        assert log.completions_of(member)[1].operation_id == log.errors["held-op"]
        await log.wait_for(lambda: spot_members(a, spot) == frozenset())
        # the Spot still serves
        other = await create_on(a, cluster.servers, 0, "after")
        await _enter(b, log, other, spot, 1)


@pytest.mark.parametrize("spot_type", ["clan", "camp"])
async def test_a04_11_a_node_stopped_while_a_join_is_deferred(
    clock: object, store: CountingStore, spot_type: str
) -> None:
    """A04-11: the node hosting the Spot and its member stops while the Spot's handler
    that Deferred the member's leave still runs (a request to the member parked behind
    it, from the other node): the cluster stops within bound, the remote caller gets an
    error (not a hang), nothing of the Join runs."""
    log, holder = JoinLog(), _Holder()
    errors: list[Exception | None] = []
    with trio.fail_after(60):
        async with open_cluster(2, store=store, app=make_app(log, holder)) as cluster:
            await cluster.wait_all_admitted()
            a, b = cluster.servers
            member = await create_on(a, cluster.servers, 0, "stopped")
            spot = await spot_on(a, cluster.servers, 0, spot_type)
            await _enter(b, log, member, spot, 1)
            log.spot_gate = trio.Event()
            async with trio.open_nursery() as nursery:

                async def held() -> None:
                    errors.append(
                        await _raises(
                            b.spots.request(spot, "hold", f"{member}||".encode()).timeout(20)
                        )
                    )

                async def ask() -> None:
                    errors.append(await _raises(b.actors.request(member, "echo", b"x").timeout(20)))

                nursery.start_soon(held)
                await log.spot_entered.wait()
                nursery.start_soon(ask)
                await trio.testing.wait_all_tasks_blocked()
                await cluster.stop(0)
    assert len(errors) == 2 and all(e is not None for e in errors)
    assert len(log.completions_of(member)) == 1


@pytest.mark.parametrize("spot_type", ["clan", "camp"])
async def test_a04_11_the_target_spot_closes_while_the_join_is_deferred(
    clock: object, store: CountingStore, spot_type: str
) -> None:
    """A04-11: a Spot handler Defers its member's Join to another User Spot, and that
    target Spot closes before the handler ends: the Join fails (typed), the member stays
    where it was, and the message parked behind its barrier runs after the completion."""
    log, holder = JoinLog(), _Holder()
    async with open_cluster(2, store=store, app=make_app(log, holder)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        member = await create_on(a, cluster.servers, 0, "orphan")
        spot = await spot_on(a, cluster.servers, 0, spot_type)
        target = await spot_on(a, cluster.servers, 1, "lobby")
        await _enter(b, log, member, spot, 1)
        log.spot_gate = trio.Event()
        async with trio.open_nursery() as nursery:

            async def held() -> None:
                await b.spots.request(spot, "hold-to", f"{member}|{target}".encode()).timeout(30)

            nursery.start_soon(held)
            await log.spot_entered.wait()
            await b.actors.send(member, "note", b"parked")
            ref = await b.spots.find(target)
            assert ref is not None
            assert await b.spots.close(ref)
            log.spot_gate.set()
        await log.wait_for(lambda: len(log.completions_of(member)) == 2)
        done = log.completions_of(member)[1]
        assert done.operation_id == log.errors["held-op"]
        assert done.outcome is JoinOutcome.FAILED and done.error is not None
        assert done.spot_id == SpotId(spot)
        await log.wait_for(lambda: ("note", b"parked") in log.packets(member))
        assert log.trace.index("note:parked") > log.trace.index("complete:failed")
        assert spot_members(a, spot) == {ActorId(member)}


@pytest.mark.parametrize("local", [True, False], ids=["local", "remote"])
async def test_a04_11_a_spot_reply_over_the_limit_discards_the_members_join(
    clock: object, store: CountingStore, local: bool
) -> None:
    """A04-11: a Spot handler Defers its member's leave and returns a reply over the
    reply limit: a handler failure (the caller gets an error), the Join is discarded (no
    completion), the member stays and handles its next message; a child task the handler
    awaits may Defer (its Join runs)."""
    log, holder = JoinLog(), _Holder()
    async with open_cluster(2, store=store, app=make_app(log, holder)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        caller = a if local else b
        member = await create_on(a, cluster.servers, 0, "big")
        spot = await spot_on(a, cluster.servers, 0, "clan")
        await _enter(b, log, member, spot, 1)
        assert await _raises(caller.spots.request(spot, "big-reply", member.encode()).timeout(30))
        assert await caller.actors.request(member, "echo", b"next").timeout(10) == b"next"
        assert len(log.completions_of(member)) == 1
        assert spot_members(a, spot) == {ActorId(member)}
        await caller.spots.request(spot, "child-defer", member.encode()).timeout(30)
        assert isinstance(log.errors["child"], OperationId)
        await log.wait_for(lambda: len(log.completions_of(member)) == 2)
        assert log.completions_of(member)[1].outcome is JoinOutcome.ACCEPTED


@pytest.mark.parametrize("spot_type", ["clan", "camp"])
async def test_a04_11_messages_parked_during_a_cross_node_spot_handler_join_travel(
    clock: object, store: CountingStore, spot_type: str
) -> None:
    """A04-11 / A04-13: a Spot handler Defers its member's Join to a User Spot of another
    node; a send and a request to the member while the handler still runs are parked,
    then travel with the member: both run on the new instance on the target node, after
    its completion, in order; none is lost or run twice."""
    log, holder = JoinLog(), _Holder()
    async with open_cluster(2, store=store, app=make_app(log, holder)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        member = await create_on(a, cluster.servers, 0, "traveller")
        spot = await spot_on(a, cluster.servers, 0, spot_type)
        target = await spot_on(a, cluster.servers, 1, "lobby")
        await _enter(b, log, member, spot, 1)
        log.spot_gate = trio.Event()
        replies: list[bytes | None] = []
        async with trio.open_nursery() as nursery:

            async def held() -> None:
                await b.spots.request(spot, "hold-to", f"{member}|{target}".encode()).timeout(30)

            async def ask() -> None:
                replies.append(await b.actors.request(member, "echo", b"second").timeout(30))

            nursery.start_soon(held)
            await log.spot_entered.wait()
            await a.actors.send(member, "note", b"first")
            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            assert log.packets(member) == [("join-spot", f"{spot}|x".encode())]
            log.spot_gate.set()
        assert replies == [b"second"]
        await log.wait_for(lambda: ("note", b"first") in log.packets(member))
        done = log.completions_of(member)[1]
        assert done.outcome is JoinOutcome.ACCEPTED and done.spot_id == SpotId(target)
        old, new = log.instances[member]
        assert old.context.retired
        assert [(p, d) for x, p, d, inst in log.handled if x == member and inst is new] == [
            ("note", b"first"),
            ("echo", b"second"),
        ]
        last_completion = len(log.trace) - 1 - log.trace[::-1].index("complete:accepted")
        assert log.trace.index("note:first") > last_completion
        assert spot_members(b, target) == {ActorId(member)}


@pytest.mark.parametrize("spot_type", ["clan", "camp"])
async def test_a04_10_a_spot_handler_join_ending_during_the_drain_fails_shutting_down(
    clock: object, store: CountingStore, spot_type: str
) -> None:
    """A04-10 (Join vs maintenance): the node hosting the Spot and its member starts its
    graceful stop while the Spot's handler that Deferred the member's leave still runs;
    the handler then ends normally (the drain lets the accepted turn finish): the shutdown
    admission seal came first, so the member's completion is FAILED with ShuttingDown,
    exactly once, and the stop completes."""
    log, holder = JoinLog(), _Holder()
    with trio.fail_after(90):
        async with open_cluster(2, store=store, app=make_app(log, holder)) as cluster:
            await cluster.wait_all_admitted()
            a, b = cluster.servers
            member = await create_on(a, cluster.servers, 0, "drained")
            spot = await spot_on(a, cluster.servers, 0, spot_type)
            await _enter(b, log, member, spot, 1)
            log.spot_gate = trio.Event()
            async with trio.open_nursery() as nursery:

                async def held() -> None:
                    await _raises(
                        b.spots.request(spot, "hold", f"{member}|30|".encode()).timeout(60)
                    )

                nursery.start_soon(held)
                await log.spot_entered.wait()
                nursery.start_soon(cluster.stop, 0)
                await trio.testing.wait_all_tasks_blocked()
                log.spot_gate.set()
            await log.wait_for(lambda: len(log.completions_of(member)) == 2)
            done = log.completions_of(member)[1]
            assert done.operation_id == log.errors["held-op"]
            assert done.outcome is JoinOutcome.FAILED
            assert isinstance(done.error, ShuttingDown)
    assert len(log.completions_of(member)) == 2
