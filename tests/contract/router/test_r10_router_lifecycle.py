"""Status heartbeats and the projection (spec 10 §3.3 STATUS, §5.1, §5.4), release and delete
(§5.1, §6.3 A, §7.7) on the router."""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing
from conftest import Advance
from router_app import Registry, Shared, World, cluster
from router_kit import AGENT, OTHER_AGENT, S1, CallLog

from zlink_trio.router import (
    NodeId,
    SessionActivity,
    SessionEvicted,
    SessionHeldElsewhere,
    SessionSignal,
    SignalKind,
    SubmitRequest,
)

GHOST = NodeId("ghost")


def _request(text: str = "hi", **kw: object) -> SubmitRequest:
    return SubmitRequest(session_id=S1, agent_ref=AGENT, user_input=text, **kw)  # type: ignore[arg-type]


class StatusLog:
    def __init__(self, target: object) -> None:
        self._target = target
        self.times: list[float] = []

    async def publish(self, signal: SessionSignal) -> None:
        if signal.kind is SignalKind.STATUS:
            self.times.append(trio.current_time())
        await self._target.publish(signal)  # type: ignore[attr-defined]

    def subscribe(self) -> object:
        return self._target.subscribe()  # type: ignore[attr-defined]


async def test_r10_16_status_is_published_every_heartbeat(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-16 / R10-151: the holder publishes a STATUS snapshot for its session every
    statusHeartbeatInterval (10 s)."""
    statuses = StatusLog(shared.bus)
    world.duration = lambda _t: 45.0
    async with cluster(attrs.evolve(shared, bus=statuses), world, registry, ["a"]) as (a,):
        await (await a.submit(_request())).result
    assert statuses.times[:4] == [10.0, 20.0, 30.0, 40.0]


async def test_r10_30_status_is_a_best_effort_observation(
    shared: Shared,
    world: World,
    registry: Registry,
    advance: Advance,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-30: the holder reports RUNNING with the active turn; a peer learns it from the
    heartbeat (nothing before the first one); submit's disposition, not status, decides:
    the peer's submit is FORWARDED whatever status said."""
    world.duration = lambda _t: 30.0
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
        running = await a.submit(_request("long"))
        await trio.testing.wait_all_tasks_blocked()
        own = a.status(S1)
        assert own is not None and own.activity is SessionActivity.RUNNING
        assert own.active_turn_id == running.turn_id
        assert b.status(S1) is None
        await advance(10)
        seen = b.status(S1)
        assert seen is not None and seen.origin == a.node_id
        assert seen.active_turn_id == running.turn_id
        forwarded = await b.submit(_request("next"))
        assert forwarded.kind.name == "FORWARDED"
        await running.result
        await forwarded.result
        idle = a.status(S1)
        assert idle is not None and idle.activity is SessionActivity.IDLE


async def test_r10_28_release_keeps_the_history(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-28 / R10-55: release returns the handle and the lease; a later submit with the
    same id sees the earlier turn in its history."""
    async with cluster(shared, world, registry, ["a"]) as (a,):
        await (await a.submit(_request("before"))).result
        await a.release_session(S1)
        assert world.closes == {"a": 1}
        assert await shared.leases.current(S1) is None
        after = await a.submit(_request("after"))
        assert (await after.result).text == "a:after:2"
    assert world.opens == {"a": 2}


async def test_r10_56_release_interrupts_the_turn_then_closes_returns_and_evicts(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-56 (without the publisher step, part 2): release of a running session
    interrupts the turn (SESSION_RELEASED), waits for it, closes the handle, returns the
    lease, and only then publishes EVICT."""
    log = CallLog()
    spied = attrs.evolve(
        shared, bus=log.spy("bus", shared.bus), leases=log.spy("leases", shared.leases)
    )
    world.duration = lambda _t: 100.0
    async with cluster(spied, world, registry, ["a"]) as (a,):
        running = await a.submit(_request())
        await trio.testing.wait_all_tasks_blocked()
        await a.release_session(S1)
        assert world.turns[0].interrupted
        assert running.result.done()
    assert log.calls.index("leases.release") < log.calls.index("bus.publish:EVICT")


async def test_r10_29_only_the_holder_deletes_and_a_holder_is_asked_to_yield(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-29 / R10-103: delete on a non-holder while the holder is alive publishes YIELD
    and INTERRUPT(SESSION_RELEASED); the holder yields (its turn is interrupted); the record
    is deleted; a later submit may bind another agent."""
    log = CallLog()
    world.duration = lambda _t: 100.0
    async with cluster(
        attrs.evolve(shared, bus=log.spy("bus", shared.bus)), world, registry, ["a", "b"]
    ) as (a, b):
        running = await a.submit(_request("long"))
        await trio.testing.wait_all_tasks_blocked()
        assert await b.delete_session(S1)
        assert "bus.publish:YIELD" in log.calls and "bus.publish:INTERRUPT" in log.calls
        assert running.result.done()
        assert await shared.records.load(S1) is None
        world.duration = lambda _t: 1.0
        fresh = await b.submit(attrs.evolve(_request("fresh"), agent_ref=OTHER_AGENT))
        assert (await fresh.result).text == "b:fresh:0"


async def test_r10_103_delete_gives_up_when_the_holder_never_yields(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-103 (timeout): with a holder that never yields, delete raises
    SessionHeldElsewhere at releaseInterruptTimeout (5 s) and the record is intact."""
    async with cluster(shared, world, registry, ["a"]) as (a,):
        await (await a.submit(_request("kept"))).result
        await a.release_session(S1)
        await shared.leases.try_acquire(S1, GHOST, 10_000)
        start = trio.current_time()
        with pytest.raises(SessionHeldElsewhere):
            await a.delete_session(S1)
        assert trio.current_time() - start == pytest.approx(5.0, abs=0.5)
    view = await shared.records.load(S1)
    assert view is not None and [e.text for e in view.transcript] == ["kept", "re:kept"]


async def test_r10_11_evict_removes_the_status_projection(
    shared: Shared,
    world: World,
    registry: Registry,
    advance: Advance,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-11 (projection part): a peer's status projection of the session is removed when
    EVICT arrives, and its pending forwarded results fail."""
    world.duration = lambda _t: 100.0
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
        await a.submit(_request("long"))
        await advance(10)
        assert b.status(S1) is not None
        pending = await b.submit(_request("waiting"))
        await trio.testing.wait_all_tasks_blocked()  # b heard its doorbell and lost the claim
        await a.release_session(S1)
        await trio.testing.wait_all_tasks_blocked()
        assert b.status(S1) is None
        with pytest.raises(SessionEvicted):
            await pending.result
