"""Turns on the router (spec 10 §2, §3.6, §5.1, §6.2, §7.1 F4, §7.3, §7.4, §9.3, §11.1)."""

from __future__ import annotations

import threading
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from router_app import Registry, Shared, World, all_on_time, cluster, on_time
from router_kit import AGENT, OTHER_AGENT, S1, S2, Advance, message

from zlink_trio.router import (
    ConflictingAgentError,
    InterruptReason,
    LiveSessionOptions,
    NodeId,
    OpenAttributes,
    Priority,
    SessionId,
    SessionMetrics,
    SubmitOptions,
    SubmitRequest,
    TurnInterrupted,
    yield_signals,
)
from zlink_trio.testing import settle

B = NodeId("b")


def _request(text: str = "hi", session: SessionId = S1, **kw: object) -> SubmitRequest:
    return SubmitRequest(session_id=session, agent_ref=AGENT, user_input=text, **kw)  # type: ignore[arg-type]


class RenewLog:
    def __init__(self, target: Any) -> None:
        self._target = target
        self.ticks: list[tuple[SessionId, float]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    async def renew(self, lease: Any, ttl: float) -> Any:
        self.ticks.append((lease.session_id, trio.current_time()))
        return await self._target.renew(lease, ttl)


async def test_r10_02_an_interrupted_turn_commits_no_partial_state(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-02: a turn cut midway (user interrupt, lost lease, shutdown) leaves no transcript
    of itself in the record store."""
    world.duration = lambda t: 1.0 if t == "kept" else 100.0
    async with cluster(shared, world, registry, ["a"]) as (a,):
        await (await a.submit(_request("kept"))).result
        cut = await a.submit(_request("cut"))
        await settle()
        a.interrupt(S1, InterruptReason.USER)
        with pytest.raises(TurnInterrupted):
            await cut.result
        lost = await a.submit(_request("lost"))
        await settle()
        lease = await shared.leases.current(S1)
        assert lease is not None and await shared.leases.release(lease)  # taken away
        with pytest.raises(TurnInterrupted, match="LEASE_LOST"):
            await lost.result
        shutdown = await a.submit(_request("shutdown"))
        await settle()
        await a.close_gracefully(shared.s(2.0))
        with pytest.raises(TurnInterrupted, match="SYSTEM_SHUTDOWN"):
            await shutdown.result
    view = await shared.records.load(S1)
    assert view is not None
    assert [e.text for e in view.transcript] == ["kept", "re:kept"]


async def test_r10_07_the_first_turn_decides_the_agent(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-07: after the first turn, another agentRef is ConflictingAgentError (409) with
    no lease or idempotency side effect; the record's agent is unchanged; the loaded view
    is immutable."""
    async with cluster(shared, world, registry, ["a"]) as (a,):
        await (await a.submit(_request())).result
        with pytest.raises(ConflictingAgentError):
            await a.submit(attrs.evolve(_request(), agent_ref=OTHER_AGENT))
    view = await shared.records.load(S1)
    assert view is not None and view.agent_ref == AGENT
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        view.agent_ref = OTHER_AGENT  # type: ignore[misc]
    assert isinstance(view.transcript, tuple)


async def test_r10_26_interrupt_without_turn_id_is_session_scoped(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-26: interrupt(id, reason) stops whatever turn of the session is active, and the
    turn ends interrupted with that reason."""
    world.duration = lambda _t: 50.0
    async with cluster(shared, world, registry, ["a"]) as (a,):
        running = await a.submit(_request())
        await settle()
        a.interrupt(S1, InterruptReason.SYSTEM_SHUTDOWN)
        with pytest.raises(TurnInterrupted, match="SYSTEM_SHUTDOWN"):
            await running.result
    assert world.turns[0].interrupted


async def test_r10_31_closing_touches_only_node_local_resources(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-31: close() and close_gracefully() close handles and give leases back; the
    AgentRuntime's close count stays 0."""
    async with cluster(shared, world, registry, ["a"]) as (a,):
        await (await a.submit(_request())).result
        await (await a.submit(_request(session=S2))).result
        await a.aclose()
        assert await shared.leases.current(S1) is None
        assert await shared.leases.current(S2) is None
    assert world.closes == {"a": 2}
    assert world.runtime_closes == 0


async def test_r10_84_the_next_holder_collects_orphans_before_its_turn(
    shared: Shared,
    world: World,
    registry: Registry,
    advance: Advance,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-84: messages left in the inbox when the previous holder let go (delivered after
    its last collect, their doorbell missed) run in the next holder's first pass, before its
    own turn at the same priority; a NOW orphan runs first."""
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
        await (await a.submit(_request("a-turn"))).result
        await a.aclose()  # the holder lets go; nobody hears the orphans' doorbells
        await shared.inbox.deliver(message("orphan-next"))
        await advance(1)
        await shared.inbox.deliver(message("orphan-now", priority=Priority.NOW))
        await advance(1)
        await (await b.submit(_request("b-turn"))).result
    assert [t.text for t in world.turns] == ["a-turn", "orphan-now", "orphan-next", "b-turn"]


async def test_r10_90_hand_off_instead_of_not_holder(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-90: a YIELD mid-turn interrupts the turn; the handle closes before the lease is
    released; the requester's next acquire succeeds; nothing answers NOT_HOLDER."""
    order: list[str] = []

    class Leases:
        def __init__(self, target: Any) -> None:
            self._target = target

        def __getattr__(self, name: str) -> Any:
            return getattr(self._target, name)

        async def release(self, lease: Any) -> bool:
            order.append(f"release(closes={world.closes.get('a', 0)})")
            return bool(await self._target.release(lease))

    world.duration = lambda _t: 100.0
    async with cluster(
        attrs.evolve(shared, leases=Leases(shared.leases)), world, registry, ["a"]
    ) as (a,):
        running = await a.submit(_request())
        await settle()
        for signal in yield_signals(S1, B):
            await shared.bus.publish(signal)
        with pytest.raises(TurnInterrupted) as info:
            await running.result
        assert "NOT_HOLDER" not in str(info.value)
        await settle()
        assert order == ["release(closes=1)"]
        assert (await shared.leases.try_acquire(S1, B, 30)).kind == "granted"


async def test_r10_93_the_renewer_keeps_a_blocked_turn_s_lease(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-93: a turn stuck 60 s in a fake LLM call still sees renewals every 10 s on the
    renewer's own task, and the lease is never lost."""
    t0 = trio.current_time()
    renewals = RenewLog(shared.leases)
    world.duration = lambda _t: 60.0
    async with cluster(attrs.evolve(shared, leases=renewals), world, registry, ["a"]) as (a,):
        answer = await (await a.submit(_request())).result
    assert answer.text == "a:hi:0"
    ticks = [t - t0 for _, t in renewals.ticks][:6]
    assert all_on_time(shared, ticks, [10.0, 20.0, 30.0, 40.0, 50.0, 60.0])


async def test_r10_95_a_blocking_lease_loss_hook_costs_no_other_lease(
    shared: Shared,
    world: World,
    registry: Registry,
    advance: Advance,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-95 / R10-172: the loss path never blocks the renewers. The lease-loss hook blocks
    its thread until the test has seen the other session's renewals stay on their 10 s ticks
    (and keep its lease) for 40 s more: the hook returns released only if the router kept
    running while it blocked. (Run on the router's own thread, it would stall everything —
    the test could not release it, its wait would time out, and it would report that.)"""
    unblock = threading.Event()
    hook_returned = threading.Event()
    released: list[bool] = []

    class Blocking(SessionMetrics):
        def on_lease_extend_failed(self, session_id: SessionId) -> None:
            released.append(unblock.wait(5))
            hook_returned.set()

    t0 = trio.current_time()
    renewals = RenewLog(shared.leases)
    world.duration = lambda _t: 100.0
    async with cluster(
        attrs.evolve(shared, leases=renewals), world, registry, ["a"], metrics=Blocking()
    ) as (a,):
        one = await a.submit(_request("one"))
        two = await a.submit(_request("two", session=S2))
        await advance(5)
        lease = await shared.leases.current(S1)
        assert lease is not None and await shared.leases.release(lease)
        with pytest.raises(TurnInterrupted):
            await one.result
        for _ in range(4):
            await advance(10)
        # half a tick more: read at 50 s, the fifth tick ties with the reading, which the
        # real clock of a scaled run turns into a race (it read 4 ticks once at -n 2)
        await advance(5)
        s2_ticks = [t - t0 for s, t in renewals.ticks if s == S2]
        assert all_on_time(shared, s2_ticks[:5], [10.0, 20.0, 30.0, 40.0, 50.0])
        current = await shared.leases.current(S2)
        assert current is not None and current.holder_id == a.node_id
        unblock.set()
        assert await trio.to_thread.run_sync(hook_returned.wait, 5)
        assert released == [True]
        assert (await two.result).text == "a:two:0"  # S2 kept its lease to the end


async def test_r10_127_next_and_later_run_in_the_same_pass(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-127: NEXT and LATER messages delivered during a turn run as later turns of the
    same drain pass (one after the other, no new pass in between)."""
    world.duration = lambda _t: 4.0
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
        first = await a.submit(_request("first"))
        await settle()
        later = await b.submit(_request("later", priority=Priority.LATER))
        nxt = await b.submit(_request("next", priority=Priority.NEXT))
        await first.result
        await later.result
        await nxt.result
    assert [t.text for t in world.turns] == ["first", "next", "later"]
    # the same pass: each next turn at once (exactly in memory, within the slack on PostgreSQL)
    assert on_time(shared, world.turns[1].start - world.turns[0].end, 0.0)
    assert on_time(shared, world.turns[2].start - world.turns[1].end, 0.0)


async def test_r10_141_open_options_only_on_a_miss_submit_options_every_turn(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-141 / R10-20 (holder side): options and open attributes reach the opener on the
    cache miss only; a later submit with other options, local or forwarded, calls no opener
    and changes nothing; submit_options reach every local turn."""
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
        first = _request(
            "one",
            options=LiveSessionOptions({"model": "m1"}),
            open_attributes=OpenAttributes({"tenant": "t1"}),
            submit_options=SubmitOptions({"trace": "x1"}),
        )
        await (await a.submit(first)).result
        second = attrs.evolve(
            first,
            user_input="two",
            options=LiveSessionOptions({"model": "m2"}),
            open_attributes=OpenAttributes({"tenant": "t2"}),
            submit_options=SubmitOptions({"trace": "x2"}),
        )
        await (await a.submit(second)).result
        await (await b.submit(attrs.evolve(second, user_input="three"))).result
    assert world.opens == {"a": 1}
    assert world.open_options == [{"model": "m1"}]
    assert world.open_attributes == [{"tenant": "t1"}]
    assert world.turn_options[:2] == [{"trace": "x1"}, {"trace": "x2"}]


async def test_r10_23_a_blocked_publish_does_not_delay_renewals(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-23 (a remote publish that hangs): a bus whose publish hangs does not delay a
    renewal tick (the three schedules together: test_r10_router_sweeps.py)."""

    class StuckBus:
        def __init__(self, target: Any) -> None:
            self._target = target

        async def publish(self, signal: Any) -> None:
            await trio.sleep_forever()

        def subscribe(self) -> Any:
            return self._target.subscribe()

    t0 = trio.current_time()
    renewals = RenewLog(shared.leases)
    world.duration = lambda _t: 35.0
    async with cluster(
        attrs.evolve(shared, leases=renewals, bus=StuckBus(shared.bus)), world, registry, ["a"]
    ) as (a,):
        running = await a.submit(_request())
        a.interrupt(S2, InterruptReason.USER)  # its publish hangs forever, on its own task
        await running.result
    assert all_on_time(shared, [t - t0 for _, t in renewals.ticks][:3], [10.0, 20.0, 30.0])


async def test_r10_129_now_without_a_running_turn_means_first_in_the_next_pass(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-129: NOW is immediate only on a holder running a turn; with no turn running (or
    the doorbell missed) a NOW message is simply the first turn of the next pass."""
    async with cluster(shared, world, registry, ["a"]) as (a,):
        await (await a.submit(_request("bind"))).result
        await settle()  # the bind's pass ends (its last collect must not take them)
        await shared.inbox.deliver(message("next-waiting"))  # doorbells missed
        await shared.inbox.deliver(message("now-waiting", priority=Priority.NOW))
        await (await a.submit(_request("trigger", priority=Priority.LATER))).result
    assert world.injected == []
    assert [t.text for t in world.turns] == ["bind", "now-waiting", "next-waiting", "trigger"]


async def test_r10_91_a_submit_from_inside_its_own_session_s_turn_is_refused(
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R10-91: the router is not re-entrant. A submit to a session from inside one of that
    session's turns (directly, or from a task the turn spawned) raises ReentrantSubmitError
    at once and queues nothing, and the turn itself completes; a submit to another session
    from inside a turn is ordinary."""
    from router_app import FakeSession

    from zlink_trio.router import ReentrantSubmitError

    routers: list[Any] = []
    seen: list[str] = []
    original = FakeSession.run_turn

    async def nesting(self: Any, turn: Any, listener: Any) -> Any:
        if turn.user_input.as_text() == "outer":
            (router,) = routers
            try:
                await router.submit(_request("nested"))
            except ReentrantSubmitError:
                seen.append("direct refused")

            async def spawned() -> None:
                try:
                    await router.submit(_request("nested-in-task"))
                except ReentrantSubmitError:
                    seen.append("spawned refused")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(spawned)
            other = await router.submit(_request("elsewhere", session=S2))
            seen.append(f"other session: {other.kind.name}")
        return await original(self, turn, listener)

    monkeypatch.setattr(FakeSession, "run_turn", nesting)
    async with cluster(shared, world, registry, ["a"]) as (a,):
        routers.append(a)
        outer = await a.submit(_request("outer"))
        assert (await outer.result).text == "a:outer:0"
        await settle()
        assert not await shared.inbox.has_pending(S1)
    assert seen == ["direct refused", "spawned refused", "other session: EXECUTED_LOCALLY"]
    assert sorted(t.text for t in world.turns) == ["elsewhere", "outer"]
