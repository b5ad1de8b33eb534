"""The eight SessionMetrics hooks at their documented points (spec 10 §12). Hooks run in
worker threads; leaving the router's block waits for the queued ones (wall clock), so a
test reads the recorder after the block."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import attrs
import trio
import trio.testing
from router_app import Registry, Shared, World, builder, scaled_config
from router_kit import AGENT, KEY, S1, S2, message
from router_script import Script, ScriptedOpener, Stage, scripted_cluster

from zlink_trio.router import (
    DispositionKind,
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

GHOST = NodeId("ghost")
DRAIN = SessionRouterConfig(metrics_drain_timeout=10.0)
"""Wait up to 10 s of wall-clock time for the queued hook calls at the block's exit (a
loaded machine runs the hook threads late; the wait ends as soon as they ran)."""


def _drain(shared: Shared) -> SessionRouterConfig:
    """:data:`DRAIN` on the case's time scale (``DRAIN`` itself unless it is scaled)."""
    return scaled_config(DRAIN, shared.scale)


def _request(text: str, session: SessionId = S1, **kw: Any) -> SubmitRequest:
    return SubmitRequest(session_id=session, agent_ref=AGENT, user_input=text, **kw)


class Recorder(SessionMetrics):
    """Every hook, recorded as (hook, *args) in call order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: list[tuple[Any, ...]] = []

    def _add(self, *call: Any) -> None:
        with self._lock:
            self.calls.append(call)

    def on_lock_acquired(self, session_id: SessionId, latency: float) -> None:
        self._add("lock_acquired", session_id, latency)

    def on_lock_rejected(self, session_id: SessionId, latency: float) -> None:
        self._add("lock_rejected", session_id, latency)

    def on_cache_hit(self, session_id: SessionId) -> None:
        self._add("cache_hit", session_id)

    def on_cache_miss(self, session_id: SessionId) -> None:
        self._add("cache_miss", session_id)

    def on_evicted(self, session_id: SessionId, cause: str) -> None:
        self._add("evicted", session_id, cause)

    def on_lease_extend_failed(self, session_id: SessionId) -> None:
        self._add("lease_extend_failed", session_id)

    def on_submit(self, session_id: SessionId, kind: DispositionKind) -> None:
        self._add("submit", session_id, kind)

    def on_holder_lost(self, key: IdempotencyKey) -> None:
        self._add("holder_lost", key)

    def on_takeover_rejected(self, key: IdempotencyKey) -> None:
        self._add("takeover_rejected", key)

    def on_forward_doorbell_rerung(self, session_id: SessionId) -> None:
        self._add("rerung", session_id)

    def of(self, hook: str) -> list[tuple[Any, ...]]:
        return [c[1:] for c in self.calls if c[0] == hook]


async def test_r10_159_lock_latency_for_a_won_and_a_lost_election(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-159: the lock-acquire latency hook is called for a successful acquire (A's first
    submit) and for a rejected one (B's submit while A holds the lease), with a latency."""
    metrics = Recorder()
    stage = Stage(scripts={"long": Script(duration=10.0)})
    async with scripted_cluster(
        shared, world, registry, stage, ["a", "b"], metrics=metrics, config=_drain(shared)
    ) as (
        a,
        b,
    ):
        first = await a.submit(_request("long"))
        second = await b.submit(_request("next"))
        await first.result
        await second.result
    assert [c[0] for c in metrics.of("lock_acquired")] == [S1]
    assert [c[0] for c in metrics.of("lock_rejected")] == [S1]
    assert all(c[1] >= 0 for c in metrics.of("lock_acquired") + metrics.of("lock_rejected"))


async def test_r10_160_cache_hits_and_misses(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-160: a first submit per session is a miss, a follow-up on the same node a hit."""
    metrics = Recorder()
    stage = Stage()
    async with scripted_cluster(
        shared, world, registry, stage, ["a"], metrics=metrics, config=DRAIN
    ) as (a,):
        for text, session in [("1", S1), ("2", S1), ("3", S2), ("4", S1), ("5", S2)]:
            await (await a.submit(_request(text, session))).result
    # Hooks run on the dispatcher's worker threads: their order is not the submits' order,
    # so the calls are compared as multisets.
    assert Counter(metrics.of("cache_miss")) == Counter([(S1,), (S2,)])
    assert Counter(metrics.of("cache_hit")) == Counter([(S1,), (S1,), (S2,)])


async def test_r10_161_evictions_by_lru_and_by_idle(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-161: the evict hook is called for an LRU eviction and for an idle one, naming
    the cause."""
    metrics = Recorder()
    config = SessionRouterConfig(max_cached_sessions=1, metrics_drain_timeout=10.0)
    stage = Stage()
    async with scripted_cluster(
        shared, world, registry, stage, ["a"], metrics=metrics, config=config
    ) as (a,):
        await (await a.submit(_request("1", S1))).result
        await (await a.submit(_request("2", S2))).result  # pushes S1 out
        await trio.sleep(700)  # S2 idles out
    # (A multiset: each hook call runs on a worker thread of its own, so the two calls
    # may run in either order on a loaded machine, as for R10-160 / R10-163.)
    assert Counter(metrics.of("evicted")) == Counter([(S1, "lru"), (S2, "idle")])


async def test_r10_162_one_extend_failure_per_lost_lease(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-162: with renewals refused, the lease-extend-failure hook is called exactly once
    for the lost lease, however many ticks follow."""

    class Refusing:
        def __init__(self, target: Any) -> None:
            self._target = target

        def __getattr__(self, name: str) -> Any:
            return getattr(self._target, name)

        async def renew(self, lease: Any, ttl: float) -> Any:
            return None

    metrics = Recorder()
    stage = Stage(scripts={"long": Script(duration=50.0)})
    refusing = attrs.evolve(shared, leases=Refusing(shared.leases))
    async with scripted_cluster(
        refusing, world, registry, stage, ["a"], metrics=metrics, config=_drain(shared)
    ) as (a,):
        running = await a.submit(_request("long"))
        await trio.sleep(shared.s(60))
        assert running.result.done()
    assert metrics.of("lease_extend_failed") == [(S1,)]


async def test_r10_163_one_submit_outcome_per_submit(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-163: each submit reports its disposition once: the holder's EXECUTED_LOCALLY,
    the peer's FORWARDED, a keyed retry answered from the cache EXECUTED_LOCALLY."""
    metrics = Recorder()
    stage = Stage(scripts={"long": Script(duration=10.0)})
    async with scripted_cluster(
        shared, world, registry, stage, ["a", "b"], metrics=metrics, config=_drain(shared)
    ) as (
        a,
        b,
    ):
        first = await a.submit(_request("long", idempotency_key=KEY))
        forwarded = await b.submit(_request("next"))
        await first.result
        await forwarded.result
        replay = await b.submit(_request("long", idempotency_key=KEY))
        await replay.result
    expected = [
        DispositionKind.EXECUTED_LOCALLY,
        DispositionKind.FORWARDED,
        DispositionKind.EXECUTED_LOCALLY,
    ]
    # One hook call per submit; worker threads may report them in any order.
    assert Counter(c[1] for c in metrics.of("submit")) == Counter(expected)
    assert [first.kind, forwarded.kind, replay.kind] == expected


async def test_r10_164_holder_loss_once_per_won_reset(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-164: a reservation whose holder died goes stale; both nodes sweep it, exactly
    one wins compareAndReset, and the holder-loss hook is called once in the cluster."""
    metrics = Recorder()
    stage = Stage()
    await shared.idempotency.put_if_absent(KEY, "h", ReserverId.new(GHOST), session_id=S1)
    async with scripted_cluster(
        shared, world, registry, stage, ["a", "b"], metrics=metrics, config=_drain(shared)
    ):
        await trio.sleep(shared.s(100))
    assert metrics.of("holder_lost") == [(KEY,)]
    assert await shared.idempotency.find(KEY) is None


async def test_r10_165_a_rejected_takeover_is_counted_an_unknown_one_is_not(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-165: a collected message whose key the store says is someone else's (DONE)
    counts one rejected takeover — and still runs; a takeover whose store call throws
    (nothing learned about ownership) is not counted, and its message runs too."""
    k2 = IdempotencyKey("k-2")

    class Throwing:
        def __init__(self, target: Any) -> None:
            self._target = target

        def __getattr__(self, name: str) -> Any:
            return getattr(self._target, name)

        async def acquire_holder(self, key: IdempotencyKey, holder: ReserverId) -> Any:
            if key == k2:
                raise ConnectionError("store down")
            return await self._target.acquire_holder(key, holder)

    ghost = ReserverId.new(GHOST)
    await shared.idempotency.put_if_absent(KEY, "h", ghost, session_id=S1)
    await shared.idempotency.mark_done(KEY, ghost, {"status": "ok", "text": "old"})
    await shared.inbox.deliver(message("done elsewhere", key=KEY))
    await shared.inbox.deliver(message("unknown", key=k2))
    metrics = Recorder()
    stage = Stage()
    throwing = attrs.evolve(shared, idempotency=Throwing(shared.idempotency))
    async with scripted_cluster(
        throwing, world, registry, stage, ["a"], metrics=metrics, config=DRAIN
    ) as (a,):
        await trio.sleep(1)
        await (await a.submit(_request("own"))).result
        await settle()
    assert metrics.of("takeover_rejected") == [(KEY,)]
    assert stage.kinds().count("turn end") == 3


async def test_r10_166_rerings_count_retries_and_stop_once_drained(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-166: a forwarded message nobody can collect (a dead holder's lease, 40 s left)
    is re-rung at every poll (15, 30, 45 s); at 45 s the lease is free, the doorbell's
    drain takes the session and runs it, and the re-rings stop. The drain-path acquire
    emits no lock-acquire hook (only the submit's rejected election is reported)."""
    stage = Stage()
    async with scripted_cluster(shared, world, registry, stage, ["x"]) as (x,):
        await (await x.submit(_request("first"))).result  # the session's record exists
    await shared.leases.try_acquire(S1, GHOST, shared.s(40.0))
    metrics = Recorder()
    async with open_session_router(
        builder(
            shared,
            world,
            registry,
            "b",
            metrics=metrics,
            config=_drain(shared),
            session_opener=ScriptedOpener(stage),
        )
    ) as b:
        waiting = await b.submit(_request("orphan"))
        assert waiting.kind.name == "FORWARDED"
        assert (await waiting.result).text == "orphan:2"
        await trio.sleep(shared.s(120))
    assert metrics.of("rerung") == [(S1,)] * 3  # at 15, 30 and 45 s
    assert metrics.of("lock_acquired") == []
    assert [c[0] for c in metrics.of("lock_rejected")] == [S1]
    assert Counter(c[0] for c in metrics.calls)["submit"] == 1
