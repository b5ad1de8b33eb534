"""The turn gate and the session-lifetime lease (spec 10 §3.2, §6.2, §6.4, §7.2–§7.4), the
drain loop (§7.1 F3–F4, §9.3), hand-off (§3.3, §7.3) and interrupts (§5.1, §8)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing
from router_app import Registry, Shared, World, cluster, no_overlap, on_time
from router_kit import AGENT, OTHER_AGENT, S1, Advance, CallLog, message

from zlink_trio.router import (
    ConflictingAgentError,
    DispositionKind,
    ExecutedLocally,
    Forwarded,
    InterruptReason,
    NodeId,
    Priority,
    RejectedAt,
    RejectionReason,
    SessionMetrics,
    SessionSignal,
    SignalKind,
    SubmitRequest,
    TurnInterrupted,
    yield_signals,
)
from zlink_trio.testing import settle

B = NodeId("b")


def _request(text: str = "hi", **kw: object) -> SubmitRequest:
    return SubmitRequest(session_id=S1, agent_ref=AGENT, user_input=text, **kw)  # type: ignore[arg-type]


def _spy_leases(shared: Shared, log: CallLog) -> Shared:
    return attrs.evolve(shared, leases=log.spy("leases", shared.leases))


async def test_r10_05_one_acquire_serves_many_turns_and_outlives_the_pass(
    shared: Shared,
    world: World,
    registry: Registry,
    advance: Advance,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-05: consecutive turns on one node acquire the lease once; it is still held when
    the drain loop has ended; a second submit while a turn runs makes no lease-store call."""
    log = CallLog()
    world.duration = lambda _t: 4.0
    async with cluster(_spy_leases(shared, log), world, registry, ["a"]) as (a,):
        for i in range(3):
            await (await a.submit(_request(f"t{i}"))).result
        assert log.calls.count("leases.try_acquire") == 1
        lease = await shared.leases.current(S1)
        assert lease is not None and lease.holder_id == a.node_id
        running = await a.submit(_request("long"))
        await settle()
        log.calls.clear()
        second = await a.submit(_request("while-running"))
        assert log.of("leases") == []
        assert isinstance(second, Forwarded)
        await running.result
        await second.result
    assert [t.text for t in world.turns][-2:] == ["long", "while-running"]


async def test_r10_92_losing_the_gate_never_touches_the_lease(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-92: gate first, lease second: during a local turn, a second submit on the same
    node makes zero lease-store calls."""
    log = CallLog()
    world.duration = lambda _t: 10.0
    async with cluster(_spy_leases(shared, log), world, registry, ["a"]) as (a,):
        first = await a.submit(_request("first"))
        await settle()
        before = len(log.of("leases"))
        await a.submit(_request("second"))
        assert len(log.of("leases")) == before
        await first.result


async def test_r10_88_the_drain_runs_follow_ups_and_keeps_the_lease(
    shared: Shared,
    world: World,
    registry: Registry,
    advance: Advance,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-88: a message delivered during a running turn runs as the next turn of the same
    pass without acquiring the lease again; after the loop the lease is still held (renewals
    go on) and the gate is free (a new local submit runs at once as EXECUTED_LOCALLY)."""
    log = CallLog()
    world.duration = lambda _t: 6.0
    async with cluster(_spy_leases(shared, log), world, registry, ["a", "b"]) as (a, b):
        first = await a.submit(_request("first"))
        await settle()
        lease = await shared.leases.current(S1)
        follow = await b.submit(_request("follow"))
        assert isinstance(follow, Forwarded)
        await follow.result
        assert [t.node for t in world.turns] == ["a", "a"]
        # the same pass, next turn (at once: exactly in memory, within the slack on PostgreSQL)
        assert on_time(shared, world.turns[1].start - world.turns[0].end, 0.0)
        now = await shared.leases.current(S1)
        assert lease is not None and now is not None
        assert now.fencing_token == lease.fencing_token  # the same acquisition
        await first.result
        renewals = log.calls.count("leases.renew")
        await advance(25)
        assert log.calls.count("leases.renew") > renewals
        again = await a.submit(_request("again"))
        assert isinstance(again, ExecutedLocally)
        await again.result


async def test_r10_54_renewals_every_ten_seconds_during_a_long_turn(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-54 / R10-150 / R10-93 (the renewal point, default extend interval): a 35 s turn started right after the lease was
    acquired sees renewals at 10, 20 and 30 s, on the renewer's own task (the turn is busy in
    a "LLM call"); a 60 s turn never loses the lease."""
    renewals: list[float] = []

    class Timing:
        def __init__(self, target: object) -> None:
            self._target = target

        def __getattr__(self, name: str) -> object:
            return getattr(self._target, name)

        async def renew(self, lease: object, ttl: float) -> object:
            renewals.append(trio.current_time())
            return await self._target.renew(lease, ttl)  # type: ignore[attr-defined]

    world.duration = lambda t: 35.0 if t == "35s" else 60.0
    async with cluster(
        attrs.evolve(shared, leases=Timing(shared.leases)), world, registry, ["a"]
    ) as (a,):
        start = trio.current_time()
        await (await a.submit(_request("35s"))).result
        expected = [10.0, 20.0, 30.0]
        assert len(renewals) == len(expected)
        assert all(on_time(shared, r - start, e) for r, e in zip(renewals, expected, strict=True))
        long = await a.submit(_request("60s"))
        await long.result
        assert len(renewals) == 9  # 40, 50, ..., 90 s
        lease = await shared.leases.current(S1)
        assert lease is not None and lease.holder_id == a.node_id


async def test_r10_77_a_lost_lease_interrupts_the_turn_once(
    shared: Shared,
    world: World,
    registry: Registry,
    advance: Advance,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-77 / R10-133 / R10-162: when renewal finds the lease gone, the lease-extend
    failure fires exactly once, the turn ends interrupted (LEASE_LOST) without writing its
    history, and later ticks make no lease-store calls."""
    lost: list[object] = []

    class Recording(SessionMetrics):
        def on_lease_extend_failed(self, session_id: object) -> None:
            lost.append(session_id)

    log = CallLog()
    world.duration = lambda _t: 100.0
    t0 = trio.current_time()
    async with cluster(_spy_leases(shared, log), world, registry, ["a"], metrics=Recording()) as (
        a,
    ):
        disposition = await a.submit(_request("doomed"))
        await advance(5)
        lease = await shared.leases.current(S1)
        assert lease is not None
        assert await shared.leases.release(lease)  # taken from under the holder
        with pytest.raises(TurnInterrupted, match="LEASE_LOST"):
            await disposition.result
        # the first renewal tick found it gone
        assert on_time(shared, trio.current_time() - t0, 10.0)
        calls = len(log.of("leases"))
        await advance(10)
        await advance(10)
        assert len(log.of("leases")) == calls
        await settle()
    assert lost == [S1]
    assert world.turns[0].interrupted
    view = await shared.records.load(S1)
    assert view is not None and view.transcript == ()


async def test_r10_82_a_doorbell_starts_at_most_one_drain(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-82 / R10-43: doorbells while a turn runs start no second, concurrent drain; a
    doorbell while idle starts exactly one; extra doorbells find an empty inbox and run
    nothing, raising nothing."""
    world.duration = lambda _t: 5.0
    ring = SessionSignal(kind=SignalKind.MESSAGE_ENQUEUED, session_id=S1, origin=B, payload={})
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
        first = await a.submit(_request("first"))
        await settle()
        queued = await b.submit(_request("queued"))
        for _ in range(3):
            await shared.bus.publish(ring)
        await first.result
        await queued.result
        await settle()
        idle = await b.submit(_request("idle"))
        await idle.result
        for _ in range(3):
            await shared.bus.publish(ring)
        await settle()
    assert no_overlap(world.turns)
    assert [t.text for t in world.turns] == ["first", "queued", "idle"]


async def test_r10_83_the_drain_orders_tiers_and_rechecks_the_binding(
    shared: Shared,
    world: World,
    registry: Registry,
    advance: Advance,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-83 / R10-84 / R10-128 / R10-129: messages waiting in the inbox (delivered at
    interleaved times, no doorbell heard) are collected in one pass and run NOW, then NEXT,
    then LATER, FIFO within a tier; one whose agentRef mismatches the binding is dropped
    with RejectedAt(CONFLICTING_AGENT) on the session's stream, and the others still run."""
    world.duration = lambda _t: 2.0
    frames: list[Any] = []
    async with cluster(shared, world, registry, ["a"]) as (a,), trio.open_nursery() as watching:

        async def watch(task_status: Any) -> None:
            async with a.events(S1) as subscription:
                task_status.started()
                async for frame in subscription:
                    frames.append(frame.event)  # noqa: PERF401 (seen as they come)

        await watching.start(watch)
        await (await a.submit(_request("bind"))).result
        # The bind's pass collects once more after its turn: on PostgreSQL that collect may
        # land after the first delivery below (it then runs the messages as they arrive).
        # The case is about messages that wait with no pass open, so let the pass end.
        await settle()
        plan = [
            ("later-1", Priority.LATER, AGENT),
            ("next-1", Priority.NEXT, AGENT),
            ("wrong", Priority.NEXT, OTHER_AGENT),
            ("now-1", Priority.NOW, AGENT),
            ("next-2", Priority.NEXT, AGENT),
            ("later-2", Priority.LATER, AGENT),
            ("now-2", Priority.NOW, AGENT),
        ]
        for text, priority, agent in plan:
            await shared.inbox.deliver(message(text, priority=priority, agent=agent))
            await advance(1)
        last = await a.submit(_request("submitted"))  # its pass collects the orphans first
        await last.result
        watching.cancel_scope.cancel()
    assert frames.count(RejectedAt(RejectionReason.CONFLICTING_AGENT)) == 1
    ran = [t.text for t in world.turns]
    assert ran == ["bind", "now-1", "now-2", "next-1", "next-2", "submitted", "later-1", "later-2"]


async def test_r10_08_a_first_turn_race_binds_one_agent(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-08 / R10-110: concurrent first submits with agents X and Y on two nodes both pass
    the binding pre-check; the record ends up bound to exactly one agent; the other message
    is FORWARDED, never runs, its event stream shows RejectedAt(CONFLICTING_AGENT), and its
    forwarded result fails with ConflictingAgentError. (Which node wins is not asserted:
    R10-100.)"""
    world.duration = lambda _t: 3.0
    outcomes: dict[str, object] = {}
    kinds: dict[str, object] = {}
    frames: list[object] = []
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b):

        async def first(router: object, agent: object, text: str) -> None:
            request = SubmitRequest(session_id=S1, agent_ref=agent, user_input=text)  # type: ignore[arg-type]
            disposition = await router.submit(request)  # type: ignore[attr-defined]
            kinds[text] = disposition.kind
            try:
                outcomes[text] = await disposition.result
            except ConflictingAgentError as exc:
                outcomes[text] = exc

        async def watch(task_status: Any) -> None:
            async with a.events(S1) as subscription:
                task_status.started()
                async for frame in subscription:
                    frames.append(frame.event)  # noqa: PERF401 (seen as they come)

        async with trio.open_nursery() as watching:
            await watching.start(watch)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(first, a, AGENT, "x")
                nursery.start_soon(first, b, OTHER_AGENT, "y")
            await settle()
            watching.cancel_scope.cancel()
    failed = [t for t, o in outcomes.items() if isinstance(o, ConflictingAgentError)]
    assert len(failed) == 1
    assert kinds[failed[0]] is DispositionKind.FORWARDED
    assert RejectedAt(RejectionReason.CONFLICTING_AGENT) in frames
    winner = "x" if failed == ["y"] else "y"
    assert [t.text for t in world.turns] == [winner]
    view = await shared.records.load(S1)
    assert view is not None and view.agent_ref == (AGENT if winner == "x" else OTHER_AGENT)


async def test_r10_12_yield_hands_the_session_over(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-12 / R10-90: a YIELD to a holder mid-turn interrupts the turn, closes the handle,
    then returns the lease; the requester's next acquire succeeds; no NOT_HOLDER anywhere."""
    log = CallLog()
    world.duration = lambda _t: 100.0
    async with cluster(_spy_leases(shared, log), world, registry, ["a"]) as (a,):
        running = await a.submit(_request("long"))
        await settle()
        await shared.bus.publish(yield_signals(S1, B)[0])
        with pytest.raises(TurnInterrupted, match="SESSION_RELEASED"):
            await running.result
        await settle()
        assert world.closes == {"a": 1}
        assert log.calls.count("leases.release") == 1
        granted = await shared.leases.try_acquire(S1, B, 30)
        assert granted.kind == "granted"


async def test_r10_17_yield_and_the_legacy_interrupt_make_one_hand_off(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-17: a requester's YIELD + INTERRUPT(SESSION_RELEASED) pair makes one hand-off (one
    lease release, no error); either signal alone hands off too."""
    for signals in (yield_signals(S1, B), yield_signals(S1, B)[:1], yield_signals(S1, B)[1:]):
        log = CallLog()
        async with cluster(_spy_leases(shared, log), world, registry, ["a"]) as (a,):
            await (await a.submit(_request("idle holder"))).result
            for signal in signals:
                await shared.bus.publish(signal)
            await settle()
            assert log.calls.count("leases.release") == 1
            assert await shared.leases.current(S1) is None


async def test_r10_10_an_interrupt_stops_the_turn_and_keeps_the_session(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-10 / R10-26 / R10-105: interrupt(id, USER) on another node publishes INTERRUPT
    with that origin; the holder's turn ends interrupted (USER); the session stays: the
    lease is held and the next submit works on the same history."""
    log = CallLog()
    world.duration = lambda t: 100.0 if t == "long" else 1.0
    spied = attrs.evolve(shared, bus=log.spy("bus", shared.bus))
    async with cluster(spied, world, registry, ["a", "b"]) as (a, b):
        await (await a.submit(_request("before"))).result
        running = await a.submit(_request("long"))
        await settle()
        b.interrupt(S1, InterruptReason.USER)
        with pytest.raises(TurnInterrupted, match="USER"):
            await running.result
        assert "bus.publish:INTERRUPT" in log.calls
        lease = await shared.leases.current(S1)
        assert lease is not None and lease.holder_id == a.node_id
        after = await a.submit(_request("after"))
        assert (await after.result).text == "a:after:2"


async def test_r10_27_a_targeted_interrupt_of_an_old_turn_is_a_no_op(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-27 / R10-108: interrupt(id, staleTurnId, r) while a newer turn runs leaves the
    newer turn to complete; an interrupt after completion raises nothing."""
    world.duration = lambda _t: 5.0
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
        old = await a.submit(_request("old"))
        await old.result
        a.interrupt(S1, InterruptReason.USER)  # nothing running: silent
        newer = await a.submit(_request("newer"))
        await settle()
        a.interrupt(S1, InterruptReason.USER, old.turn_id)
        b.interrupt(S1, InterruptReason.USER, old.turn_id)
        assert (await newer.result).text == "a:newer:2"
        targeted = await a.submit(_request("targeted"))
        await settle()
        b.interrupt(S1, InterruptReason.USER, targeted.turn_id)
        with pytest.raises(TurnInterrupted):
            await targeted.result


async def test_r10_126_a_now_message_is_injected_into_the_running_turn(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-126: a NOW message delivered from another node mid-turn is injected into the
    running turn, not run apart; NEXT delivered at the same moment waits for the boundary.
    The injected message's caller gets the running turn's result."""
    world.duration = lambda t: 10.0 if t == "running" else 1.0
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
        running = await a.submit(_request("running"))
        await settle()
        now = await b.submit(_request("urgent", priority=Priority.NOW))
        nxt = await b.submit(_request("next", priority=Priority.NEXT))
        await settle()
        assert world.injected == ["urgent"]
        assert [t.text for t in world.turns] == ["running"]
        answer = await running.result
        assert await now.result == answer
        await nxt.result
    assert [t.text for t in world.turns] == ["running", "next"]


async def test_r10_101_no_extra_lease_for_work_inside_a_turn(
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R10-101: a turn that forks (three sub-tasks inside the parent turn, on the same node)
    runs them under the parent's lease: no lease acquire besides the parent's one, and the
    forks' fenced history writes are accepted."""
    from router_app import FakeSession

    from zlink_trio.router import AgentExecutionResult, TranscriptEntry

    async def forking(self: Any, turn: Any, listener: Any) -> Any:
        async def fork(i: int) -> None:
            await trio.sleep(1)
            await turn.history.append([TranscriptEntry("fork", f"fork-{i}")])

        async with trio.open_nursery() as forks:
            for i in range(3):
                forks.start_soon(fork, i)
        return AgentExecutionResult("parent done")

    monkeypatch.setattr(FakeSession, "run_turn", forking)
    log = CallLog()
    async with cluster(_spy_leases(shared, log), world, registry, ["a"]) as (a,):
        assert (await (await a.submit(_request("parent"))).result).text == "parent done"
    assert log.calls.count("leases.try_acquire") == 1
    view = await shared.records.load(S1)
    assert view is not None
    assert sorted(e.text for e in view.transcript) == ["fork-0", "fork-1", "fork-2"]


async def test_r10_05_two_end_paths_racing_release_the_lease_once(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-05 (the latch): a YIELD hand-off and a release_session arriving together — two
    paths that both end the session — release the lease exactly once, without error."""
    log = CallLog()
    async with cluster(_spy_leases(shared, log), world, registry, ["a"]) as (a,):
        await (await a.submit(_request("bind"))).result
        async with trio.open_nursery() as racing:
            for signal in yield_signals(S1, B):
                racing.start_soon(shared.bus.publish, signal)
            racing.start_soon(a.release_session, S1)
        await settle()
        assert log.calls.count("leases.release") == 1
        assert await shared.leases.current(S1) is None
        assert world.closes == {"a": 1}
