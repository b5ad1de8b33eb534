"""The takeover of a collected message's reservation (spec 10 §6.3 D, §9.2): win, reject or
unknown; the message runs in every case, and only a reject leaves the idempotency cache and
the touch slot alone."""

from __future__ import annotations

import threading
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from router_app import Registry, Shared, World, all_on_time, builder, near, on_time
from router_kit import AGENT, KEY, S1

from zlink_trio.router import (
    AgentExecutionResult,
    DispositionKind,
    HolderLost,
    IdempotencyKey,
    IdempotencyState,
    JsonMap,
    MarkDoneOutcome,
    NodeId,
    ReserverId,
    SessionMetrics,
    SubmitRequest,
    TakeoverOutcome,
    TurnId,
    TurnSucceeded,
    open_session_router,
    turn_result_to_wire,
)

FIRST = turn_result_to_wire(TurnId("turn-first"), TurnSucceeded(AgentExecutionResult("first")))
OTHER = ReserverId.new(NodeId("other"))


def _request(text: str, **kw: object) -> SubmitRequest:
    return SubmitRequest(session_id=S1, agent_ref=AGENT, user_input=text, **kw)  # type: ignore[arg-type]


class Rejections(SessionMetrics):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rejected: list[IdempotencyKey] = []
        self.lost: list[IdempotencyKey] = []

    def on_takeover_rejected(self, key: IdempotencyKey) -> None:
        with self.lock:
            self.rejected.append(key)

    def on_holder_lost(self, key: IdempotencyKey) -> None:
        with self.lock:
            self.lost.append(key)


class Takeovers:
    """The holder's idempotency store: the first ``acquire_holder`` of KEY meets the case
    ``mode`` (set up through the real store just before the call, or an injected error);
    every ``mark_done`` and ``touch`` is recorded."""

    def __init__(self, target: Any, mode: str) -> None:
        self._target = target
        self._mode = mode
        self.outcomes: list[object] = []
        self.marks: list[ReserverId] = []
        self.touches: list[tuple[ReserverId, bool]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    async def acquire_holder(self, key: IdempotencyKey, holder: ReserverId) -> TakeoverOutcome:
        mode, self._mode = self._mode, "win"
        if mode == "done":  # someone else's cached answer
            await self._target.acquire_holder(key, OTHER)
            await self._target.mark_done(key, OTHER, FIRST)
        elif mode == "held":  # another node runs it
            await self._target.acquire_holder(key, OTHER)
        elif mode == "expired":  # gone: that forward gave up
            await self._target.acquire_holder(key, OTHER)
            await self._target.compare_and_reset(key, OTHER)
        elif mode == "raise":  # the store threw, the write not applied
            self.outcomes.append("raised")
            raise ConnectionError("idempotency store unreachable")
        outcome: TakeoverOutcome = await self._target.acquire_holder(key, holder)
        self.outcomes.append(outcome.kind)
        if mode == "applied-raise":  # applied, the answer lost
            raise ConnectionError("the answer was lost")
        return outcome

    async def mark_done(
        self, key: IdempotencyKey, holder: ReserverId, result: JsonMap
    ) -> MarkDoneOutcome:
        self.marks.append(holder)
        outcome: MarkDoneOutcome = await self._target.mark_done(key, holder, result)
        return outcome

    async def touch(self, key: IdempotencyKey, holder: ReserverId) -> bool:
        matched = bool(await self._target.touch(key, holder))
        self.touches.append((holder, matched))
        return matched


async def _collected_with_takeover(
    mode: str, shared: Shared, world: World, registry: Registry
) -> tuple[Takeovers, Rejections, Any]:
    """h holds the session; a forwards a keyed message; h's takeover meets ``mode``.
    Answers h's store spy, the rejection metrics and the entry after the turn."""
    world.duration = lambda _t: 1.0
    store = Takeovers(shared.idempotency, mode)
    metrics = Rejections()
    h_shared = attrs.evolve(shared, idempotency=store)
    async with (
        open_session_router(builder(h_shared, world, registry, "h", metrics=metrics)) as h,
        open_session_router(builder(shared, world, registry, "a")) as a,
    ):
        await (await h.submit(_request("bind"))).result
        forwarded = await a.submit(_request("m", idempotency_key=KEY))
        assert forwarded.kind is DispositionKind.FORWARDED
        assert (await forwarded.result).text == "h:m:2"
        entry = await shared.idempotency.find(KEY)
    return store, metrics, entry


@pytest.mark.parametrize("mode", ["win", "done", "held", "expired", "raise", "applied-raise"])
async def test_r10_68_a_collected_message_runs_whatever_its_takeover_answers(
    mode: str,
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-68 / R10-122 / R10-176: h holds the session; a forwards a keyed message, and
    h's takeover of its reservation wins, is rejected (DONE — someone's cached answer —,
    held by another node, expired) or throws (with or without the write applied). In all
    six cases the message runs exactly once and a's caller gets h's answer over the rail;
    after a reject the entry is as the store had it (the DONE answer is still the first
    one)."""
    _, _, entry = await _collected_with_takeover(mode, shared, world, registry)
    assert [t.text for t in world.turns].count("m") == 1
    if mode == "done":
        assert entry is not None and entry.result == FIRST
    elif mode == "held":
        assert entry is not None and entry.holder_id == OTHER
        assert entry.state is IdempotencyState.IN_FLIGHT
    elif mode == "expired":
        assert entry is None
    elif mode in ("win", "applied-raise"):
        assert entry is not None and entry.state is IdempotencyState.DONE
        assert entry.result is not None and entry.result["text"] == "h:m:2"
    else:  # "raise": the store never named h, so its markDone was refused there
        assert entry is not None and entry.holder_id is None


@pytest.mark.parametrize("mode", ["win", "done", "held", "expired", "raise", "applied-raise"])
async def test_r10_69_win_reject_unknown(
    mode: str,
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-69: the takeover is a tri-state. A spy on h's store shows markDone attempted
    for a win and for an unknown (the store threw, applied or not), never after a reject
    (DONE, held, expired); the takeover-rejection metric counts the rejects only, never an
    unknown."""
    store, metrics, _ = await _collected_with_takeover(mode, shared, world, registry)
    rejected = mode in ("done", "held", "expired")
    assert metrics.rejected == ([KEY] if rejected else [])
    assert len(store.marks) == (0 if rejected else 1)


async def test_r10_70_a_takeover_applied_then_thrown_is_still_touched_and_never_swept(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-70 (applied, then the store threw): the reservation names h although h never
    heard so; h binds it to the touch slot anyway, so every renewal touches it (each touch
    matches, lastTouchedAt moves forward), no sweep resets it while the 100 s turn runs,
    nobody gets HOLDER_LOST, and the turn's answer reaches a and the cache."""
    world.duration = lambda t: 100.0 if t == "m" else 1.0
    store = Takeovers(shared.idempotency, "applied-raise")
    metrics = Rejections()
    t0 = trio.current_time()
    async with (
        open_session_router(
            builder(attrs.evolve(shared, idempotency=store), world, registry, "h", metrics=metrics)
        ) as h,
        open_session_router(builder(shared, world, registry, "a", metrics=metrics)) as a,
    ):
        await (await h.submit(_request("bind"))).result
        forwarded = await a.submit(_request("m", idempotency_key=KEY))
        await trio.sleep_until(t0 + shared.s(95.0))
        entry = await shared.idempotency.find(KEY)
        assert entry is not None and near(shared, entry.last_touched_at - t0, 90.0)
        assert (await forwarded.result).text == "h:m:2"
        done = await shared.idempotency.find(KEY)
    assert len(store.touches) == 10 and all(matched for _, matched in store.touches)
    assert metrics.lost == [] and metrics.rejected == []
    assert done is not None and done.state is IdempotencyState.DONE


async def test_r10_70_a_takeover_thrown_before_its_write_has_no_touch_effect(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-70 (thrown, the write not applied): the binding is harmless — the touches of
    the 100 s turn never match (the entry names nobody: lastTouchedAt stays at the
    forward's release) and raise nothing, the entry is never swept (holderless), and the
    message's answer still reaches a over the rail."""
    world.duration = lambda t: 100.0 if t == "m" else 1.0
    store = Takeovers(shared.idempotency, "raise")
    metrics = Rejections()
    t0 = trio.current_time()
    async with (
        open_session_router(
            builder(attrs.evolve(shared, idempotency=store), world, registry, "h", metrics=metrics)
        ) as h,
        open_session_router(builder(shared, world, registry, "a", metrics=metrics)) as a,
    ):
        await (await h.submit(_request("bind"))).result
        forwarded = await a.submit(_request("m", idempotency_key=KEY))
        await trio.sleep_until(t0 + shared.s(50.0))
        entry = await shared.idempotency.find(KEY)
        assert (
            entry is not None
            and entry.holder_id is None
            and near(shared, entry.last_touched_at - t0, 1.0)
        )
        assert (await forwarded.result).text == "h:m:2"
    assert store.touches and not any(matched for _, matched in store.touches)
    assert metrics.lost == [] and metrics.rejected == []


async def test_r10_121_the_holder_name_moves_from_the_submitter_to_the_collector(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-121 (router side): a keyed submit that loses the election leaves its reservation
    holderless (on the forward TTL, never swept however long it waits in the inbox behind
    a 100 s turn); when the holder collects it, the entry names the collector's reserverId
    (not the lease holder's bare node id) and is back on the secondary TTL."""
    world.duration = lambda t: 100.0 if t == "long" else 50.0
    metrics = Rejections()
    t0 = trio.current_time()
    async with (
        open_session_router(builder(shared, world, registry, "h", metrics=metrics)) as h,
        open_session_router(builder(shared, world, registry, "a", metrics=metrics)) as a,
    ):
        await h.submit(_request("long"))
        queued = await a.submit(_request("m", idempotency_key=KEY))
        await trio.sleep_until(t0 + shared.s(90.0))
        waiting = await shared.idempotency.find(KEY)
        assert waiting is not None and waiting.holder_id is None
        assert near(shared, waiting.expires_at - t0, 300.0)
        await trio.sleep_until(t0 + shared.s(110.0))  # collected at 100 s
        running = await shared.idempotency.find(KEY)
        assert running is not None and running.holder_id is not None
        assert running.holder_id.value.startswith("h/") and running.holder_id.value != "h"
        assert running.expires_at is None
        assert (await queued.result).text == "h:m:2"
    assert metrics.lost == []


async def test_r10_71_touch_failures_past_the_secondary_ttl_sweep_a_live_forwarded_turn(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-71 (the known cost, as the spec states it): the lease backend is healthy but
    every touch of h's idempotency store fails; the renewer swallows the errors (its lease
    renewals stay on their 10 s ticks and the lease is never lost) — and after the secondary
    TTL the sweep resets the live forwarded turn's reservation, so a's caller gets
    HOLDER_LOST although the turn is alive and later finishes."""

    class FailingTouch:
        def __init__(self, target: Any) -> None:
            self._target = target
            self.failed = 0

        def __getattr__(self, name: str) -> Any:
            return getattr(self._target, name)

        async def touch(self, key: IdempotencyKey, holder: ReserverId) -> bool:
            self.failed += 1
            raise ConnectionError("idempotency backend flaky")

    renewals: list[float] = []

    class Renewals:
        def __init__(self, target: Any) -> None:
            self._target = target

        def __getattr__(self, name: str) -> Any:
            return getattr(self._target, name)

        async def renew(self, lease: Any, ttl: float) -> Any:
            renewals.append(trio.current_time())
            return await self._target.renew(lease, ttl)

    world.duration = lambda t: 100.0 if t == "m" else 1.0
    flaky = FailingTouch(shared.idempotency)
    t0 = trio.current_time()
    h_shared = attrs.evolve(shared, idempotency=flaky, leases=Renewals(shared.leases))
    async with (
        open_session_router(builder(h_shared, world, registry, "h")) as h,
        open_session_router(builder(shared, world, registry, "a")) as a,
    ):
        await (await h.submit(_request("bind"))).result
        forwarded = await a.submit(_request("m", idempotency_key=KEY))
        with pytest.raises(HolderLost):
            await forwarded.result
        assert on_time(shared, trio.current_time() - t0, 45.0)
        await trio.sleep_until(t0 + shared.s(110.0))
        lease = await shared.leases.current(S1)
        assert lease is not None and lease.holder_id.value == "h"
    assert all_on_time(shared, [t - t0 for t in renewals[:10]], [10.0 * k for k in range(1, 11)])
    assert flaky.failed >= 4
    assert world.turns[-1].text == "m" and on_time(shared, world.turns[-1].end - t0, 101.0)
    assert not world.turns[-1].interrupted
