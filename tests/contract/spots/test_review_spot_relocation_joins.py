"""Adversarial review of live Spot relocation: a Join racing the move of its PerActor
User Spot (spec 04 §3.1 / A04-10; spec 06 §6.1, S06-18 "PerActor: Join goes to the
target after the Spot commit"), over real TCP, through the public surface only."""

from __future__ import annotations

import sys
from pathlib import Path

import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).parents[1] / "actors"))

from join_kit import JoinLog, create_on, make_join_app, spot_on

from zlink_trio import (
    App,
    Approve,
    JoinEvent,
    JoinOutcome,
    RecreateOnRelocation,
    SpotCallback,
    SpotContext,
    SpotWide,
    Unavailable,
    ZLinkError,
    on_lifecycle,
    on_request,
)
from zlink_trio.ids import SpotId
from zlink_trio.store.api import ObjectKey
from zlink_trio.testing import CountingStore, FaultPlan, open_cluster
from zlink_trio.wire.commands import Command

LONG = 30.0


async def test_review_a_join_during_the_seal_of_its_per_actor_spot(
    clock: object, store: CountingStore
) -> None:
    """A04-10 (Join vs Relocate seal: the seal came first): an Actor on node 1 joins a
    PerActor User Spot of node 0 while that Spot is sealed for a move to node 1 (its 121
    held on the wire). Either the Join fails Unavailable and the Actor has no Spot, or it
    is accepted and then the moved Spot counts it: the Actor's row names the Spot and the
    Spot on its new owner keeps it (its Close is False, S06-20)."""
    log = JoinLog()
    plan = FaultPlan(seed=21)
    async with open_cluster(
        2, store=store, app=make_join_app(log, spots=True), fault_plan=plan
    ) as cluster:
        await cluster.wait_all_admitted()
        first, second = cluster.servers
        member = await create_on(first, cluster.servers, 1, "jm")
        lobby = await spot_on(first, cluster.servers, 0, "lobby")
        plan.delay(5.0, command=Command.RELOCATION_RESTORE)
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:

                async def move() -> None:
                    await first.relocate(SpotId(lobby), to=second.identity.node_rid)

                nursery.start_soon(move)
                await trio.sleep(1)  # sealed, marked, 121 on its way
                row = await store.read(ObjectKey.spot(lobby))
                assert row is not None and row.relocation is not None
                await second.actors.request(member, "join-spot", f"{lobby}|in".encode()).timeout(
                    LONG
                )
                await log.wait_for(lambda: len(log.completions_of(member)) == 1)
        (completion,) = log.completions_of(member)
        actor_row = await store.read(ObjectKey.actor(member))
        assert actor_row is not None
        spot_row = await store.read(ObjectKey.spot(lobby))
        assert spot_row is not None and spot_row.owner.node_rid == second.identity.node_rid
        if completion.outcome is JoinOutcome.ACCEPTED:
            assert actor_row.membership == SpotId(lobby)
            ref = await first.spots.find(lobby)
            assert ref is not None
            assert await first.spots.close(ref) is False  # it still has its member
        else:
            assert isinstance(completion.error, Unavailable), completion
            assert actor_row.membership is None or actor_row.membership != SpotId(lobby)


async def test_review_a_per_actor_spot_and_its_member_move_at_the_same_time(
    clock: object, store: CountingStore
) -> None:
    """Spec 06 §6.1 (PerActor: the Spot and its member Actors move separately): a PerActor
    User Spot of node 0 and its member Actor of node 0 are relocated to node 1 at the same
    time; both commit, the Actor's row still names the Spot, the Spot still counts it (its
    Close is False) and both answer from either node."""
    log = JoinLog()
    async with open_cluster(2, store=store, app=make_join_app(log, spots=True)) as cluster:
        await cluster.wait_all_admitted()
        first, second = cluster.servers
        member = await create_on(first, cluster.servers, 0, "pm")
        lobby = await spot_on(first, cluster.servers, 0, "lobby")
        await first.actors.request(member, "join-spot", f"{lobby}|in".encode()).timeout(LONG)
        await log.wait_for(lambda: len(log.completions_of(member)) == 1)
        assert log.completions_of(member)[0].outcome is JoinOutcome.ACCEPTED
        results: list[object] = []
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:

                async def move(what: object) -> None:
                    try:
                        results.append(await first.relocate(what, to=second.identity.node_rid))  # type: ignore[call-overload]
                    except ZLinkError as exc:
                        results.append(exc)

                nursery.start_soon(move, SpotId(lobby))
                nursery.start_soon(move, member)
        assert all(not isinstance(r, ZLinkError) and r.committed for r in results), results  # type: ignore[attr-defined]
        actor_row = await store.read(ObjectKey.actor(member))
        spot_row = await store.read(ObjectKey.spot(lobby))
        assert actor_row is not None and spot_row is not None
        assert actor_row.owner.node_rid == second.identity.node_rid
        assert spot_row.owner.node_rid == second.identity.node_rid
        assert actor_row.membership == SpotId(lobby)
        for server in (first, second):
            assert await server.actors.request(member, "echo", b"e").timeout(LONG) == b"e"
        ref = await first.spots.find(lobby)
        assert ref is not None
        assert await first.spots.close(ref) is False


def _with_relocatable_hall(log: JoinLog, gate: list[trio.Event] | None = None) -> App:
    """The join kit's app plus "whall": a SpotWide User Spot type that may relocate
    (RecreateOnRelocation) and approves every Join (once ``gate[0]`` is set, if any)."""
    app = make_join_app(log, spots=True)
    entered = log.spot_entered

    class WideRoom:
        def __init__(self, context: SpotContext) -> None:
            self.context = context

        @on_lifecycle(SpotCallback.JOIN)
        async def join(self, event: JoinEvent) -> Approve:
            if gate:
                entered.set()
                await gate[0].wait()
            return Approve(reply=b"welcome")

        @on_request("members")
        async def members(self, payload: bytes) -> bytes:
            return b"ok"

    app.register_spot("whall", WideRoom, execution=SpotWide(), relocation=RecreateOnRelocation())
    return app


async def test_review_a_join_during_the_seal_of_a_spot_wide_spot(
    clock: object, store: CountingStore
) -> None:
    """A04-10 (Join vs Relocate seal: the seal came first → Join Unavailable) for a SpotWide
    User Spot that had no member when its move was sealed (so it moves alone): an Actor
    joining it while it is sealed (its 121 held on the wire) either fails Unavailable,
    or, if accepted, is a member of the Spot wherever it ends up — never an Actor whose
    row names a Spot that does not count it."""
    log = JoinLog()
    plan = FaultPlan(seed=22)
    async with open_cluster(
        2, store=store, app=lambda _: _with_relocatable_hall(log), fault_plan=plan
    ) as cluster:
        await cluster.wait_all_admitted()
        first, second = cluster.servers
        member = await create_on(first, cluster.servers, 0, "wm")
        hall = await spot_on(first, cluster.servers, 0, "whall")
        plan.delay(5.0, command=Command.RELOCATION_RESTORE)
        outcome: list[object] = []
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:

                async def move() -> None:
                    try:
                        outcome.append(
                            await first.relocate(SpotId(hall), to=second.identity.node_rid)
                        )
                    except ZLinkError as exc:
                        outcome.append(exc)

                nursery.start_soon(move)
                await trio.sleep(1)  # sealed, marked, 121 on its way
                row = await store.read(ObjectKey.spot(hall))
                assert row is not None and row.relocation is not None
                await first.actors.request(member, "join-spot", f"{hall}|in".encode()).timeout(LONG)
                await log.wait_for(lambda: len(log.completions_of(member)) == 1)
        (completion,) = log.completions_of(member)
        actor_row = await store.read(ObjectKey.actor(member))
        assert actor_row is not None
        ref = await first.spots.find(hall)
        assert ref is not None
        if completion.outcome is JoinOutcome.ACCEPTED:
            assert actor_row.membership == SpotId(hall)
            assert await first.spots.close(ref) is False, (outcome, completion)
        else:
            assert isinstance(completion.error, Unavailable), completion
            assert actor_row.membership != SpotId(hall)


async def test_review_a_spot_wide_spot_whose_join_is_running_when_it_is_moved(
    clock: object, store: CountingStore
) -> None:
    """A04-10 (Join vs Relocate: the Join claim came first → the move waits for the Join
    terminal) and spec 06 §6.1 (a SpotWide Spot never moves without its members): an
    Actor's Join of a memberless SpotWide User Spot is in its JOIN callback when
    ``relocate`` of the Spot is called; the Join completes ACCEPTED, and then the Spot —
    which now has a member — is not moved away from it: the move is refused (or moves
    both), so the Spot and its member are owned by the same node."""
    log = JoinLog()
    gate = [trio.Event()]
    async with open_cluster(
        2, store=store, app=lambda _: _with_relocatable_hall(log, gate)
    ) as cluster:
        await cluster.wait_all_admitted()
        first, second = cluster.servers
        member = await create_on(first, cluster.servers, 0, "jr")
        hall = await spot_on(first, cluster.servers, 0, "whall")
        outcome: list[object] = []
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:

                async def move() -> None:
                    try:
                        outcome.append(
                            await first.relocate(SpotId(hall), to=second.identity.node_rid)
                        )
                    except ZLinkError as exc:
                        outcome.append(exc)

                await first.actors.request(member, "join-spot", f"{hall}|in".encode()).timeout(LONG)
                await log.spot_entered.wait()  # the JOIN callback runs
                nursery.start_soon(move)
                await trio.testing.wait_all_tasks_blocked()
                gate[0].set()
                await log.wait_for(lambda: len(log.completions_of(member)) == 1)
        (completion,) = log.completions_of(member)
        assert completion.outcome is JoinOutcome.ACCEPTED, completion
        actor_row = await store.read(ObjectKey.actor(member))
        spot_row = await store.read(ObjectKey.spot(hall))
        assert actor_row is not None and spot_row is not None
        assert actor_row.membership == SpotId(hall)
        assert actor_row.owner.node_rid == spot_row.owner.node_rid, outcome
