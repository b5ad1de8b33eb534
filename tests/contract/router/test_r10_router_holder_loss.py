"""Holder loss (spec 10 §6.3 D, §9.2, §10.2): a holder that dies mid-turn is detected by the
holder-loss sweepers of the surviving routers; exactly one of them wins the reservation's
compareAndReset and reports the lost turn by its idempotency key, turn-scoped (no EVICT, no
stream completion). The dead node is torn down with ``crash_session_router``: its tasks are
cancelled without its shutdown path, so its lease is left to expire."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from router_app import Registry, Shared, World, builder, cluster, near, on_time, start_crashable
from router_kit import AGENT, KEY, S1, S2

from zlink_trio.router import (
    DispositionKind,
    HolderLost,
    IdempotencyKey,
    IdempotencyState,
    InterruptedAt,
    InterruptReason,
    NodeId,
    ReserverId,
    SessionId,
    SessionMetrics,
    SessionSignal,
    SignalKind,
    SubmitRequest,
    TurnEvent,
    TurnId,
    open_session_router,
)
from zlink_trio.testing import crash_session_router, settle

K2 = IdempotencyKey("k-2")


def _request(text: str, session: SessionId = S1, **kw: object) -> SubmitRequest:
    return SubmitRequest(session_id=session, agent_ref=AGENT, user_input=text, **kw)  # type: ignore[arg-type]


class HolderLosses(SessionMetrics):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.keys: list[IdempotencyKey] = []

    def on_holder_lost(self, key: IdempotencyKey) -> None:
        with self.lock:
            self.keys.append(key)


@asynccontextmanager
async def recording_bus(shared: Shared) -> AsyncIterator[list[SessionSignal]]:
    """Every signal published on the cluster's bus while the block runs."""
    seen: list[SessionSignal] = []
    async with shared.bus.subscribe() as receive, trio.open_nursery() as nursery:

        async def pump() -> None:
            async for signal in receive:
                seen.append(signal)  # noqa: PERF401 (as they come)

        nursery.start_soon(pump)
        yield seen
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def watching(router: Any, session: SessionId) -> AsyncIterator[list[TurnEvent]]:
    """The frames one subscriber of ``router.events(session)`` receives, and whether the
    subscription ended (appended as None)."""
    frames: list[Any] = []
    async with trio.open_nursery() as nursery:

        async def watch(task_status: Any) -> None:
            async with router.events(session) as subscription:
                task_status.started()
                async for frame in subscription:
                    frames.append(frame)  # noqa: PERF401 (as they come)
            frames.append(None)

        await nursery.start(watch)
        yield frames
        nursery.cancel_scope.cancel()


def _lost_frames(frames: list[Any]) -> list[TurnEvent]:
    return [
        f
        for f in frames
        if f is not None
        and isinstance(f.event, InterruptedAt)
        and f.event.reason is InterruptReason.HOLDER_LOST
    ]


async def test_r10_67_a_holder_crashed_mid_turn_fails_its_caller_within_lease_and_sweep(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-67 / R10-63 / R10-66 / R10-136 (the issue's Done-means test, three routers): h
    holds the session; a's keyed submit is forwarded, h collects it, takes its reservation
    over (the store names h's reserver while it runs) and starts it; then h is torn down
    mid-turn without its shutdown path (tasks cancelled, lease left to expire). h's last
    renewal touched the reservation at 50 s; the surviving routers' sweeps find it stale
    past the 30 s secondary TTL, exactly one wins (one holder-loss count in the cluster)
    and a's caller gets HolderLost at the 90 s sweep — after 50 + 30, no later than
    50 + 30 + 15, not at the 5 min forward deadline. A retry with the same key then runs
    once (on b, with the dead turn's history never written), and a second retry answers
    from the cache without running anything."""
    world.duration = lambda t: 1000.0 if t == "job" else 1.0
    counts = {n: HolderLosses() for n in "hab"}
    async with trio.open_nursery() as nursery:
        h = await start_crashable(
            nursery, builder(shared, world, registry, "h", metrics=counts["h"])
        )
        async with (
            open_session_router(builder(shared, world, registry, "a", metrics=counts["a"])) as a,
            open_session_router(builder(shared, world, registry, "b", metrics=counts["b"])) as b,
        ):
            await (await h.submit(_request("bind"))).result  # h holds the lease from 0 s
            job = await a.submit(_request("job", idempotency_key=KEY))
            assert job.kind is DispositionKind.FORWARDED
            await settle()
            assert [(t.node, t.text) for t in world.turns] == [("h", "bind"), ("h", "job")]
            entry = await shared.idempotency.find(KEY)
            assert entry is not None and entry.holder_id is not None
            assert entry.holder_id.value.startswith("h/")  # the collector's reserverId
            await trio.sleep_until(55.0)
            crash_session_router(h)
            with pytest.raises(HolderLost):
                await job.result
            lost_at = trio.current_time()
            assert 50.0 + 30.0 < lost_at <= 50.0 + 30.0 + 15.0
            assert lost_at == 90.0
            retry = await b.submit(_request("job", idempotency_key=KEY))
            assert (await retry.result).text == "b:job:2"
            again = await a.submit(_request("job", idempotency_key=KEY))
            assert again.kind is DispositionKind.EXECUTED_LOCALLY
            assert (await again.result).text == "b:job:2"
        nursery.cancel_scope.cancel()
    assert [(t.node, t.text) for t in world.turns] == [("h", "bind"), ("h", "job"), ("b", "job")]
    assert world.turns[1].interrupted  # cancelled with its node, never finished
    assert sum(len(c.keys) for c in counts.values()) == 1
    assert counts["h"].keys == []
    view = await shared.records.load(S1)
    assert view is not None and [e.text for e in view.transcript] == [
        "bind",
        "re:bind",
        "job",
        "re:job",
    ]


async def test_r10_64_holder_loss_is_turn_scoped(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-64 / R10-63: after HOLDER_LOST nothing session-scoped happens: no EVICT is
    published, a's events() subscriber stays open — it gets the InterruptedAt(HOLDER_LOST)
    frame once (over the EVENT rail or locally, whichever node won) and then the successor's
    next turn — a's status projection of the session is still there and its approvals are
    kept."""
    world.duration = lambda t: 1000.0 if t == "job" else 1.0
    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        h = await start_crashable(nursery, builder(shared, world, registry, "h"))
        async with (
            cluster(shared, world, registry, ["a", "b"]) as (a, b),
            recording_bus(shared) as signals,
            watching(a, S1) as frames,
        ):
            await (await h.submit(_request("bind"))).result
            a.approvals(S1).grant("tool:search")
            job = await a.submit(_request("job", idempotency_key=KEY))
            await trio.sleep_until(t0 + shared.s(25.0))  # two STATUS heartbeats of h heard by a
            assert a.status(S1) is not None
            crash_session_router(h)
            with pytest.raises(HolderLost):
                await job.result
            await settle()
            assert a.status(S1) is not None
            assert a.approvals(S1).is_granted("tool:search")
            nxt = await b.submit(_request("next"))
            assert (await nxt.result).text == "b:next:2"
            await trio.sleep(shared.s(1))
        nursery.cancel_scope.cancel()
    assert [s for s in signals if s.kind is SignalKind.EVICT] == []
    assert None not in frames  # the subscription never ended
    lost = _lost_frames(frames)
    assert len(lost) == 1
    assert lost[0].idempotency_key == KEY and lost[0].turn_id == TurnId.unknown()
    after = frames[frames.index(lost[0]) + 1 :]
    assert any(f.event.__class__.__name__ == "ExecutionCompleted" for f in after)


async def test_r10_65_the_announcement_names_the_key_and_only_its_callers_fail(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-65: the lost turn is named by its idempotency key: the announcement (a
    TURN_RESULT with code HOLDER_LOST) carries the key and no message id or turn id; the
    futures waiting under that key fail (a's forward, and c's caller attached by key alone),
    while a future under another key (a turn of another session, alive on b) is not
    affected and later completes."""
    world.duration = lambda t: 1000.0 if t == "job" else (200.0 if t == "other" else 1.0)
    async with trio.open_nursery() as nursery:
        h = await start_crashable(nursery, builder(shared, world, registry, "h"))
        async with (
            cluster(shared, world, registry, ["a", "b", "c"]) as (a, b, c),
            recording_bus(shared) as signals,
        ):
            await (await h.submit(_request("bind"))).result
            await (await b.submit(_request("bind", session=S2))).result
            job = await a.submit(_request("job", idempotency_key=KEY))
            other = await a.submit(_request("other", session=S2, idempotency_key=K2))
            assert other.kind is DispositionKind.FORWARDED  # runs on b
            await settle()
            attached = await c.submit(_request("job", idempotency_key=KEY))
            assert attached.kind is DispositionKind.FORWARDED
            crash_session_router(h)
            with pytest.raises(HolderLost):
                await job.result
            with pytest.raises(HolderLost):
                await attached.result
            assert not other.result.done()
            assert (await other.result).text == "b:other:2"
        nursery.cancel_scope.cancel()
    announced = [
        s
        for s in signals
        if s.kind is SignalKind.TURN_RESULT and s.payload.get("code") == "HOLDER_LOST"
    ]
    assert len(announced) == 1
    payload = announced[0].payload
    assert payload["idempotencyKey"] == KEY.value
    assert "messageId" not in payload and payload.get("turnId") is None


async def test_r10_63_a_killed_holder_s_turn_is_reported_once_by_three_sweepers(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-63: the holder h is killed mid-turn, so touching stops; three surviving routers
    sweep. Past the secondary TTL plus a sweep, compareAndReset has exactly one winner (one
    holder-loss count in the cluster), exactly one InterruptedAt(HOLDER_LOST) frame is
    emitted for the lost turn (each node's subscriber sees it once), and the waiting
    forwarded future fails with HolderLost."""
    world.duration = lambda t: 1000.0 if t == "job" else 1.0
    counts = [HolderLosses() for _ in range(3)]
    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        h = await start_crashable(nursery, builder(shared, world, registry, "h"))
        async with (
            open_session_router(builder(shared, world, registry, "a", metrics=counts[0])) as a,
            open_session_router(builder(shared, world, registry, "b", metrics=counts[1])) as b,
            open_session_router(builder(shared, world, registry, "c", metrics=counts[2])) as c,
            recording_bus(shared) as signals,
            watching(a, S1) as fa,
            watching(b, S1) as fb,
            watching(c, S1) as fc,
        ):
            await (await h.submit(_request("bind"))).result
            job = await a.submit(_request("job", idempotency_key=KEY))
            await trio.sleep_until(t0 + shared.s(12.0))  # touched at 1 s (takeover) and 10 s
            crash_session_router(h)
            with pytest.raises(HolderLost):
                await job.result
            assert on_time(shared, trio.current_time() - t0, 45.0)
            await trio.sleep(shared.s(30))
        nursery.cancel_scope.cancel()
    assert sum(len(m.keys) for m in counts) == 1
    assert (
        len([s for s in signals if s.kind is SignalKind.EVENT and "idempotencyKey" in s.payload])
        == 1
    )
    for frames in (fa, fb, fc):
        assert len(_lost_frames(frames)) == 1


async def test_r10_123_three_sweepers_one_winner_one_frame_one_announcement(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-123 / R10-63: three routers sweep at the same instants and find the same stale
    reservation (its holder died at 0 s); compareAndReset answers True exactly once in the
    cluster, so there is one holder-loss count, one TURN_RESULT(HOLDER_LOST) and one
    InterruptedAt(HOLDER_LOST) frame — each node's subscriber sees it exactly once, relayed
    or local."""
    resets: list[bool] = []

    class Resets:
        def __init__(self, target: Any) -> None:
            self._target = target

        def __getattr__(self, name: str) -> Any:
            return getattr(self._target, name)

        async def compare_and_reset(self, key: IdempotencyKey, holder: ReserverId) -> bool:
            won = bool(await self._target.compare_and_reset(key, holder))
            resets.append(won)
            return won

    request = _request("x", idempotency_key=KEY)
    dead = ReserverId.new(NodeId("dead"))
    await shared.idempotency.put_if_absent(KEY, request.input_hash(), dead, session_id=S1)
    counts = [HolderLosses() for _ in range(3)]
    spied = attrs.evolve(shared, idempotency=Resets(shared.idempotency))
    async with (
        open_session_router(builder(spied, world, registry, "a", metrics=counts[0])) as a,
        open_session_router(builder(spied, world, registry, "b", metrics=counts[1])) as b,
        open_session_router(builder(spied, world, registry, "c", metrics=counts[2])) as c,
        recording_bus(shared) as signals,
        watching(a, S1) as fa,
        watching(b, S1) as fb,
        watching(c, S1) as fc,
    ):
        await trio.sleep(50)
    assert resets.count(True) == 1 and len(resets) == 3
    assert sum(len(m.keys) for m in counts) == 1
    assert len([s for s in signals if s.kind is SignalKind.TURN_RESULT]) == 1
    assert len([s for s in signals if s.kind is SignalKind.EVENT]) == 1
    for frames in (fa, fb, fc):
        assert len(_lost_frames(frames)) == 1


async def test_r10_66_detection_is_never_before_the_secondary_ttl(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-66: a reservation last touched at 10 s (one renewal after it was taken, its node
    dead at 12 s) is not announced at the 15 s or 30 s sweeps (the 30 s secondary TTL has
    not passed since its last touch), nor by 44 s, and is announced at the 45 s sweep:
    within 30 + 15 s of its last touch."""
    world.duration = lambda t: 1000.0
    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        h = await start_crashable(nursery, builder(shared, world, registry, "h"))
        async with cluster(shared, world, registry, ["a"]) as (a,):
            job = await h.submit(_request("job", idempotency_key=KEY))
            attached = await a.submit(_request("job", idempotency_key=KEY))
            await trio.sleep_until(t0 + shared.s(12.0))
            entry = await shared.idempotency.find(KEY)
            assert entry is not None and near(shared, entry.last_touched_at - t0, 10.0)
            crash_session_router(h)
            await trio.sleep_until(t0 + shared.s(44.0))
            assert not attached.result.done()
            with pytest.raises(HolderLost):
                await attached.result
            assert on_time(shared, trio.current_time() - t0, 45.0)
        nursery.cancel_scope.cancel()
    assert not job.result.done()  # its caller died with its node


async def test_r10_136_a_dead_node_s_delivered_messages_are_drained_by_a_peer(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-136 / R10-72 / R10-74: h dies mid-turn with a message still waiting in the
    inbox behind that turn (delivered by a, uncollected, holderless, so no sweep sees it).
    a's forward waiter rings the doorbell again at every poll tick while the inbox holds it;
    once h's lease has expired (30 s) a peer claims the session at the next tick and runs
    it, so the forward completes no later than 45 s after h died, while the subscribers see
    HOLDER_LOST for h's own keyed turn."""
    world.duration = lambda t: 1000.0 if t == "long" else 1.0
    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        h = await start_crashable(nursery, builder(shared, world, registry, "h"))
        async with (
            cluster(shared, world, registry, ["a", "b"]) as (a, b),
            recording_bus(shared) as signals,
            watching(b, S1) as frames,
        ):
            await h.submit(_request("long", idempotency_key=KEY))  # h holds from 0 s
            queued = await a.submit(_request("queued"))  # waits behind "long"
            assert queued.kind is DispositionKind.FORWARDED
            await trio.sleep_until(t0 + shared.s(2.0))
            crash_session_router(h)  # its lease, renewed at 0 s, expires at 30 s
            answer = await queued.result
            done_at = trio.current_time() - t0
            await trio.sleep_until(t0 + shared.s(60.0))
        nursery.cancel_scope.cancel()
    assert answer.text.endswith(":queued:0")
    assert shared.s(30.0) < done_at <= shared.by(2.0 + 45.0)
    rings = [s for s in signals if s.kind is SignalKind.MESSAGE_ENQUEUED and s.origin == a.node_id]
    assert len(rings) == 3  # the delivery's ring, then one per poll tick (15, 30 s)
    assert len(_lost_frames(frames)) == 1


async def test_a_crashed_router_keeps_its_lease_and_answers_nothing_more(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """The crash helper itself (zlink_trio.testing.crash_session_router): no shutdown
    path — the turn is cancelled, not interrupted or announced; the lease stays in the store
    until it expires (30 s after its last renewal); the reservation is neither finished nor
    reset; no signal is published after the crash; the handle is not closed. Its own event
    subscribers end and a later close returns at once."""
    world.duration = lambda _t: 1000.0
    t0 = trio.current_time()
    async with trio.open_nursery() as nursery, recording_bus(shared) as signals:
        h = await start_crashable(nursery, builder(shared, world, registry, "h"))
        async with watching(h, S1) as frames:
            await h.submit(_request("job", idempotency_key=KEY))
            await trio.sleep_until(t0 + shared.s(15.0))
            published = len(signals)
            crash_session_router(h)
            await settle()
            assert frames[-1] is None  # the subscription ended
        await h.aclose()
        lease = await shared.leases.current(S1)
        assert lease is not None and near(shared, lease.expires_at - t0, 40.0)
        entry = await shared.idempotency.find(KEY)
        assert entry is not None and entry.state is IdempotencyState.IN_FLIGHT
        assert entry.holder_id is not None and entry.holder_id.value.startswith("h/")
        await trio.sleep_until(t0 + shared.by(40.0))
        assert await shared.leases.current(S1) is None
        assert len(signals) == published
        nursery.cancel_scope.cancel()
    assert world.turns[0].interrupted and world.closed == []
