"""Status heartbeats and the projection (spec 10 §3.3 STATUS, §5.1, §5.4), release and delete
(§5.1, §6.3 A, §7.7) on the router."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing
from router_app import Registry, Shared, World, all_on_time, cluster, on_time
from router_kit import AGENT, OTHER_AGENT, S1, Advance, CallLog

from zlink_trio.router import (
    NodeId,
    SessionActivity,
    SessionEvicted,
    SessionHeldElsewhere,
    SessionSignal,
    SignalKind,
    SubmitRequest,
    TurnInterrupted,
)
from zlink_trio.testing import settle

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
    t0 = trio.current_time()
    statuses = StatusLog(shared.bus)
    world.duration = lambda _t: 45.0
    async with cluster(attrs.evolve(shared, bus=statuses), world, registry, ["a"]) as (a,):
        await (await a.submit(_request())).result
    assert all_on_time(shared, [t - t0 for t in statuses.times[:4]], [10.0, 20.0, 30.0, 40.0])


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
        await settle()
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


async def test_r10_56_release_of_a_running_session_keeps_the_order(
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R10-56: releasing a session whose turn runs goes, in this order: the turn is
    interrupted (SESSION_RELEASED) and awaited, the handle closes (still cached while it
    closes), the cache drops it, the lease is released, EVICT is published, and the
    subscribers complete — last."""
    from router_app import FakeSession

    order: list[str] = []
    routers: list[Any] = []

    def cached() -> int:
        return int(routers[0].statistics().open_handles)

    original_turn, original_close = FakeSession.run_turn, FakeSession.aclose

    async def turn(self: Any, turn: Any, listener: Any) -> Any:
        try:
            return await original_turn(self, turn, listener)
        except trio.Cancelled:
            order.append("turn interrupted")
            raise

    async def close(self: Any) -> None:
        order.append(f"handle closed (cached={cached()})")
        await original_close(self)

    class Leases:
        def __init__(self, target: Any) -> None:
            self._target = target

        def __getattr__(self, name: str) -> Any:
            return getattr(self._target, name)

        async def release(self, lease: Any) -> bool:
            order.append(f"lease released (cached={cached()})")
            return bool(await self._target.release(lease))

    class Bus:
        def __init__(self, target: Any) -> None:
            self._target = target

        async def publish(self, signal: SessionSignal) -> None:
            if signal.kind is SignalKind.EVICT:
                order.append("EVICT")
            await self._target.publish(signal)

        def subscribe(self) -> Any:
            return self._target.subscribe()

    async def subscriber(task_status: Any) -> None:
        async with routers[0].events(S1) as subscription:
            task_status.started()
            async for _ in subscription:
                pass
        order.append("subscribers complete")

    monkeypatch.setattr(FakeSession, "run_turn", turn)
    monkeypatch.setattr(FakeSession, "aclose", close)
    world.duration = lambda _t: 100.0
    spied = attrs.evolve(shared, bus=Bus(shared.bus), leases=Leases(shared.leases))
    async with cluster(spied, world, registry, ["a"]) as (a,), trio.open_nursery() as nursery:
        routers.append(a)
        await nursery.start(subscriber)
        running = await a.submit(_request())
        await settle()
        await a.release_session(S1)
        with pytest.raises(TurnInterrupted, match="SESSION_RELEASED"):
            await running.result
    assert order == [
        "turn interrupted",
        "handle closed (cached=1)",
        "lease released (cached=0)",
        "EVICT",
        "subscribers complete",
    ]


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
        await settle()
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
    """R10-103 / R10-156 (timeout): with a holder that never yields, delete raises
    SessionHeldElsewhere at the default releaseInterruptTimeout (5 s) and the record is
    intact."""
    async with cluster(shared, world, registry, ["a"]) as (a,):
        await (await a.submit(_request("kept"))).result
        await a.release_session(S1)
        await shared.leases.try_acquire(S1, GHOST, 10_000)
        start = trio.current_time()
        with pytest.raises(SessionHeldElsewhere):
            await a.delete_session(S1)
        assert on_time(shared, trio.current_time() - start, 5.0)
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
        await settle()  # b heard its doorbell and lost the claim
        await a.release_session(S1)
        await settle()
        assert b.status(S1) is None
        with pytest.raises(SessionEvicted):
            await pending.result


async def test_r10_11_evict_discards_the_session_s_approvals_on_every_node(
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R10-11 / R10-104 (approvals part): approvals are node-local — one granted by a turn
    on the holder, one granted through the router on a peer. When the session is deleted
    (from the peer: the holder yields) every node discards that session's approvals, on
    EVICT receipt; other sessions' approvals stay."""
    from router_app import FakeSession

    from zlink_trio.router import SessionId

    other = SessionId("s-other")
    original = FakeSession.run_turn

    async def granting(self: Any, turn: Any, listener: Any) -> Any:
        turn.approvals.grant(f"tool:{turn.user_input.as_text()}")
        return await original(self, turn, listener)

    monkeypatch.setattr(FakeSession, "run_turn", granting)
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
        await (await a.submit(_request("search"))).result
        assert a.approvals(S1).granted() == {"tool:search"}
        b.approvals(S1).grant("tool:browse")
        b.approvals(other).grant("tool:keep")
        assert b.approvals(S1).is_granted("tool:browse")
        assert await b.delete_session(S1)
        await settle()
        assert a.approvals(S1).granted() == frozenset()
        assert b.approvals(S1).granted() == frozenset()
        assert b.approvals(other).granted() == {"tool:keep"}
