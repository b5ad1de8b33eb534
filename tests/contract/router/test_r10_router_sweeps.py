"""The router's schedules and bounds (spec 10 §4.1, §5.2, §6.3 B, §6.3 D, §11.2): renewals,
the cache sweeper and the holder-loss sweeper each on their own task, the LRU bound of the
handle cache. Part 1 builds the pieces these ids observe; the pin rules and the whole
holder-loss protocol are checked in part 2 (R10-32 … R10-38, R10-63 … R10-71)."""

from __future__ import annotations

import threading
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from router_app import FakeSession, Registry, Shared, World, builder, cluster, on_time
from router_kit import AGENT, KEY, S1, S2

from zlink_trio.router import (
    DispositionKind,
    HolderLost,
    IdempotencyKey,
    NodeId,
    ReserverId,
    SessionId,
    SessionMetrics,
    SessionRouterConfig,
    SubmitRequest,
    open_session_router,
)
from zlink_trio.testing import settle

S3 = SessionId("s-3")


def _request(text: str, session: SessionId = S1, **kw: object) -> SubmitRequest:
    return SubmitRequest(session_id=session, agent_ref=AGENT, user_input=text, **kw)  # type: ignore[arg-type]


class Recorder(SessionMetrics):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[Any, ...]] = []

    def on_evicted(self, session_id: SessionId, cause: str) -> None:
        with self.lock:
            self.calls.append(("evicted", session_id, cause))

    def on_holder_lost(self, key: IdempotencyKey) -> None:
        with self.lock:
            self.calls.append(("holder_lost", key))


class SweepLog:
    """An idempotency store recording holder-loss sweeps; from sweep ``block_from`` on, a
    sweep's read never returns (a deliberately blocked sweeper)."""

    def __init__(self, target: Any, block_from: int | None = None) -> None:
        self._target = target
        self._block_from = block_from
        self.sweeps: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    async def find_stale_in_flight(self, limit: int = 100) -> Any:
        self.sweeps.append(trio.current_time())
        if self._block_from is not None and len(self.sweeps) >= self._block_from:
            await trio.sleep_forever()
        return await self._target.find_stale_in_flight(limit)


class RenewLog:
    def __init__(self, target: Any) -> None:
        self._target = target
        self.ticks: list[tuple[SessionId, float]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    async def renew(self, lease: Any, ttl: float) -> Any:
        self.ticks.append((lease.session_id, trio.current_time()))
        return await self._target.renew(lease, ttl)


class StuckBus:
    """Every publish hangs forever (each on the task that publishes)."""

    def __init__(self, target: Any) -> None:
        self._target = target

    async def publish(self, signal: Any) -> None:
        await trio.sleep_forever()

    def subscribe(self) -> Any:
        return self._target.subscribe()


async def test_r10_148_the_1001st_open_evicts_the_least_recent_handle(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-148: max_cached_sessions defaults to 1000; opening a 1001st session's handle
    evicts the least recently used one (counted as an "lru" eviction): its handle closes and
    its lease is given back, the cache stays at 1000, and the evicted session reopens on
    its next submit."""
    assert SessionRouterConfig().max_cached_sessions == 1000
    metrics = Recorder()
    sessions = [SessionId(f"s-{i:04d}") for i in range(1001)]
    world.duration = lambda _t: 0.0
    async with cluster(shared, world, registry, ["a"], metrics=metrics) as (a,):
        for sid in sessions[:1000]:
            await (await a.submit(_request("x", session=sid))).result
        assert a.statistics().open_handles == 1000 and world.closed == []
        await (await a.submit(_request("x", session=sessions[0]))).result  # now most recent
        await (await a.submit(_request("x", session=sessions[1000]))).result
        await settle()
        assert a.statistics().open_handles == 1000
        assert [s for s, _ in world.closed] == [sessions[1].value]
        assert await shared.leases.current(sessions[1]) is None
        assert await shared.leases.current(sessions[0]) is not None
        assert (await (await a.submit(_request("y", session=sessions[1]))).result).text == ("a:y:2")
        assert world.opens == {"a": 1002}
    assert ("evicted", sessions[1], "lru") in metrics.calls


async def test_r10_152_the_holder_loss_sweep_ticks_every_fifteen_seconds(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-152 / R10-124: holder_loss_sweep_interval defaults to 15 s and the sweeper reads
    the stale reservations at 15, 30, 45 s… A reservation whose holder died (untouched since
    0 s) is stale only past the 30 s secondary TTL, so node a's 45 s sweep resets it (one
    holder-loss count) and the caller attached to it on node b (whose own sweeper is stuck)
    fails with HolderLost then, over the TURN_RESULT rail — within the ~45 s the spec
    promises, not at the 5 min forward deadline."""
    assert SessionRouterConfig().holder_loss_sweep_interval == 15.0
    sweeps = SweepLog(shared.idempotency)
    metrics = Recorder()
    request = _request("x", idempotency_key=KEY)
    dead = ReserverId.new(NodeId("dead"))
    reserved = await shared.idempotency.put_if_absent(
        KEY, request.input_hash(), dead, session_id=S1
    )
    assert reserved.kind == "reserved"
    async with (
        open_session_router(
            builder(attrs.evolve(shared, idempotency=sweeps), world, registry, "a", metrics=metrics)
        ),
        open_session_router(
            builder(
                attrs.evolve(shared, idempotency=SweepLog(shared.idempotency, block_from=1)),
                world,
                registry,
                "b",
            )
        ) as b,
    ):
        await trio.sleep(1)
        attached = await b.submit(request)
        assert attached.kind is DispositionKind.FORWARDED
        with pytest.raises(HolderLost):
            await attached.result
        assert trio.current_time() == 45.0
        await trio.sleep(20)
        assert await shared.idempotency.find(KEY) is None
    assert sweeps.sweeps[:4] == [15.0, 30.0, 45.0, 60.0]
    assert metrics.calls == [("holder_lost", KEY)]
    assert world.turns == []


async def test_r10_23_three_schedules_and_none_delays_a_renewal(
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R10-23: renewals tick every 10 s, the cache sweep every 60 s and the holder-loss
    sweep every 15 s, each on its own task. With the holder-loss sweeper stuck from its
    third round, a cache sweep held 5 s by a handle close that never returns, and every
    bus publish hanging, a long turn's renewals stay exactly on their 10 s ticks."""
    original_close = FakeSession.aclose

    async def close(self: Any) -> None:
        await original_close(self)
        if self.session_id == S2:
            await trio.sleep_forever()  # the sweep waits for it (bounded: 5 s)

    monkeypatch.setattr(FakeSession, "aclose", close)
    renewals = RenewLog(shared.leases)
    sweeps = SweepLog(shared.idempotency, block_from=3)
    spied = attrs.evolve(shared, leases=renewals, idempotency=sweeps, bus=StuckBus(shared.bus))
    config = SessionRouterConfig(idle_ttl=30.0)
    world.duration = lambda t: 130.0 if t == "long" else 1.0
    async with cluster(spied, world, registry, ["a"], config=config) as (a,):
        long = await a.submit(_request("long"))
        await (await a.submit(_request("idle soon", session=S2))).result  # idle from 1 s
        await trio.sleep(61)
        await (await a.submit(_request("idle later", session=S3))).result  # idle from 62 s
        await long.result
    assert [t for s, t in renewals.ticks if s == S1][:12] == [10.0 * k for k in range(1, 13)]
    assert [(s, t) for s, t in world.closed if s != S1.value][:2] == [
        (S2.value, 60.0),
        (S3.value, 120.0),
    ]
    assert sweeps.sweeps == [15.0, 30.0, 45.0]


async def test_r10_33_an_lru_evicted_running_session_closes_after_its_turn(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-33 / R10-36 (part 1's share): a session whose turn runs is still evicted by the
    LRU bound (the cache stays within its bound at once) but its handle closes only when the
    turn ends — the turn completes normally, with its history written — and its lease is
    released after that close."""
    released: list[tuple[SessionId, float, int]] = []

    class Leases:
        def __init__(self, target: Any) -> None:
            self._target = target

        def __getattr__(self, name: str) -> Any:
            return getattr(self._target, name)

        async def release(self, lease: Any) -> bool:
            released.append((lease.session_id, trio.current_time(), len(world.closed)))
            return bool(await self._target.release(lease))

    t0 = trio.current_time()
    config = shared.router_config(max_cached_sessions=1)
    world.duration = lambda t: 10.0 if t == "long" else 1.0
    spied = attrs.evolve(shared, leases=Leases(shared.leases))
    async with cluster(spied, world, registry, ["a"], config=config) as (a,):
        long = await a.submit(_request("long"))
        await trio.sleep(shared.s(1))
        await (await a.submit(_request("other", session=S2))).result  # evicts S1's handle
        assert a.statistics().open_handles == 1
        assert world.closed == []  # pinned: not closed while its turn runs
        assert (await long.result).text == "a:long:0"
        await settle()
        assert [s for s, _ in world.closed] == [S1.value]
        assert on_time(shared, world.closed[0][1] - t0, 10.0)
        assert (released[0][0], released[0][2]) == (S1, 1)  # after the close
        assert on_time(shared, released[0][1] - t0, 10.0)
    view = await shared.records.load(S1)
    assert view is not None and [e.text for e in view.transcript] == ["long", "re:long"]
