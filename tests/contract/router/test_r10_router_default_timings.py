"""The §11.2 defaults at work on a mock clock (spec 10 §6.2, §6.3 A–B, §7.4, §9.2): each
default observed in the timing it governs, with routers built with the default config."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing
from router_app import FakeSession, Registry, Shared, World, all_on_time, cluster, near, on_time
from router_kit import AGENT, KEY, S1

from zlink_trio.router import (
    AgentExecutionResult,
    DispositionKind,
    IdempotencyState,
    LeaseGranted,
    NodeId,
    ReserverId,
    SubmitRequest,
)
from zlink_trio.testing import settle

DAY = 86_400.0


def _request(text: str, **kw: object) -> SubmitRequest:
    return SubmitRequest(session_id=S1, agent_ref=AGENT, user_input=text, **kw)  # type: ignore[arg-type]


class AcquireLog:
    def __init__(self, target: Any) -> None:
        self._target = target
        self.ttls: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    async def try_acquire(self, session_id: Any, holder_id: Any, ttl: float) -> Any:
        self.ttls.append(ttl)
        return await self._target.try_acquire(session_id, holder_id, ttl)


async def test_r10_149_acquires_ask_for_the_default_30_s_lease(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-149: lockLease = 30 s is the TTL every acquire asks for, and the granted lease
    expires 30 s after it was taken."""
    acquires = AcquireLog(shared.leases)
    world.duration = lambda _t: 5.0
    t0 = trio.current_time()
    async with cluster(attrs.evolve(shared, leases=acquires), world, registry, ["a"]) as (a,):
        running = await a.submit(_request("x"))
        lease = await shared.leases.current(S1)
        assert lease is not None and near(shared, lease.expires_at - t0, 30.0)
        await running.result
    assert acquires.ttls == [shared.s(30.0)]


async def test_r10_54_idle_time_counts_from_the_last_activity(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-54 / R10-147: a follow-up on the same node is a cache hit (the opener count stays
    1) and counts as activity: with the default 10 min idle TTL and the 60 s cache sweep, a
    handle opened at 0 s and used again at 500–501 s is not closed at the first sweep past
    10 min after its open (660 s) but at the first one past 10 min after its last turn
    (1140 s)."""
    t0 = trio.current_time()
    async with cluster(shared, world, registry, ["a"]) as (a,):
        await (await a.submit(_request("one"))).result  # 0 → 1 s
        await trio.sleep(shared.s(499))
        await (await a.submit(_request("two"))).result  # 500 → 501 s
        await trio.sleep(shared.s(700))
        assert world.opens == {"a": 1}
    (closed, at), *_ = world.closed
    assert closed == S1.value and on_time(shared, at - t0, 1140.0)


async def test_r10_153_a_done_answer_lives_the_default_24_h(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-153 / R10-118: idempotencyPrimaryTtl = 24 h is the DONE entry's lifetime: a retry
    at 23 h 59 m after the turn ended gets the cached answer without a turn; at 24 h the
    key is new and the retry runs a new turn. (Routers come and go over the day; the shared
    stores keep the time.)"""
    request = _request("x", idempotency_key=KEY)
    async with cluster(shared, world, registry, ["a"]) as (a,):
        first = await (await a.submit(request)).result
        done_at = trio.current_time()
    entry = await shared.idempotency.find(KEY)
    assert entry is not None and entry.state is IdempotencyState.DONE
    assert entry.expires_at == done_at + DAY
    await trio.sleep_until(done_at + DAY - 60)
    async with cluster(shared, world, registry, ["b"]) as (b,):
        cached = await b.submit(request)
        assert cached.kind is DispositionKind.EXECUTED_LOCALLY and cached.result.done()
        assert await cached.result == first
    await trio.sleep_until(done_at + DAY)
    async with cluster(shared, world, registry, ["c"]) as (c,):
        again = await c.submit(request)
        assert not again.result.done()
        assert (await again.result).text == "c:x:2"
    assert [t.text for t in world.turns] == ["x", "x"]


class FindLog:
    def __init__(self, target: Any) -> None:
        self._target = target
        self.finds: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    async def find(self, key: Any) -> Any:
        self.finds.append(trio.current_time())
        return await self._target.find(key)


async def test_r10_154_the_default_secondary_ttl_and_poll_interval(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-154: secondaryTtl = 30 s is the staleness threshold (a reservation untouched for
    exactly 30 s is not stale, one untouched longer is), and a forward polls the store every
    secondary / 2 = 15 s."""
    finds = FindLog(shared.idempotency)
    dead = ReserverId.new(NodeId("dead"))
    stale_key = attrs.evolve(KEY, value="k-stale")
    await shared.idempotency.put_if_absent(stale_key, "h", dead)
    assert isinstance(await shared.leases.try_acquire(S1, NodeId("ghost"), 10_000), LeaseGranted)
    async with cluster(attrs.evolve(shared, idempotency=finds), world, registry, ["a"]) as (a,):
        forwarded = await a.submit(_request("x", idempotency_key=KEY))
        assert forwarded.kind is DispositionKind.FORWARDED
        await trio.sleep_until(30.0)
        assert await shared.idempotency.find_stale_in_flight() == ()
        await trio.sleep_until(30.5)
        assert [e.key for e in await shared.idempotency.find_stale_in_flight()] == [stale_key]
        await trio.sleep_until(50.0)
    assert finds.finds[:3] == [15.0, 30.0, 45.0]


async def test_r10_156_release_force_closes_at_the_default_5_s(
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R10-156: releaseInterruptTimeout = 5 s: releasing a session whose turn ignores the
    interrupt waits 5 s, then force-closes the handle, returns the lease and completes the
    subscribers at once (the turn's later frames are lost)."""
    original = FakeSession.run_turn

    async def stubborn(self: Any, turn: Any, listener: Any) -> AgentExecutionResult:
        if turn.user_input.as_text() != "stubborn":
            return await original(self, turn, listener)
        with trio.CancelScope(shield=True):
            await trio.sleep(shared.s(20))  # ignores the interrupt well past the 5 s
        return AgentExecutionResult("too late")

    monkeypatch.setattr(FakeSession, "run_turn", stubborn)
    completed: list[float] = []
    t0 = trio.current_time()
    async with cluster(shared, world, registry, ["a"]) as (a,), trio.open_nursery() as nursery:

        async def subscriber(task_status: Any) -> None:
            async with a.events(S1) as subscription:
                task_status.started()
                async for _ in subscription:
                    pass
            completed.append(trio.current_time())

        await nursery.start(subscriber)
        await a.submit(_request("stubborn"))
        await settle()
        await a.release_session(S1)
        assert on_time(shared, trio.current_time() - t0, 5.0)
        assert [s for s, _ in world.closed] == [S1.value]
        assert all_on_time(shared, [t - t0 for _, t in world.closed], [5.0])
        assert await shared.leases.current(S1) is None
        await settle()
        assert all_on_time(shared, [t - t0 for t in completed], [5.0])
