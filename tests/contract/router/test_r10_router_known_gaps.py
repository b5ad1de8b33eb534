"""The original's known gaps (spec 10 §14), each tested for what this port does: live-only
events, a store-enforced markDone, a failed keyed turn's key released before its failure is
reported, a late release or write that cannot clobber a newer reservation, the YIELD shim
and the polling fallback's period."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing
from router_app import Registry, Shared, World, all_on_time, builder, on_time, scaled_config
from router_kit import AGENT, KEY, S1

from zlink_trio.router import (
    AssistantTextDelta,
    DispositionKind,
    ExecutionCompleted,
    HolderLost,
    IdempotencyKey,
    IdempotencyState,
    InterruptReason,
    NodeId,
    PutOutcome,
    ReserverId,
    SessionId,
    SessionRouterConfig,
    SignalKind,
    SubmitRequest,
    TurnFailedError,
    open_session_router,
    requests_hand_off,
    yield_signals,
)


def _request(text: str, session: SessionId = S1, **kw: object) -> SubmitRequest:
    return SubmitRequest(session_id=session, agent_ref=AGENT, user_input=text, **kw)  # type: ignore[arg-type]


async def test_r10_175_a_late_subscriber_sees_only_later_frames(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-175: events are live only. A subscriber that attaches after the turn emitted its
    first frame (and a retry attached by key on another node) never sees that frame; it gets
    the later ones (the terminal frame), and both callers get the final result through
    their futures."""
    world.duration = lambda _t: 10.0
    frames: list[Any] = []
    async with (
        open_session_router(builder(shared, world, registry, "a")) as a,
        open_session_router(builder(shared, world, registry, "b")) as b,
        trio.open_nursery() as nursery,
    ):
        first = await a.submit(_request("x", idempotency_key=KEY))
        await trio.sleep(shared.s(5))  # "thinking about x" went out at 0 s

        async def late(task_status: Any) -> None:
            async with b.events(S1) as subscription:
                task_status.started()
                async for frame in subscription:
                    frames.append(frame.event)
                    if isinstance(frame.event, ExecutionCompleted):
                        return

        await nursery.start(late)
        retry = await b.submit(_request("x", idempotency_key=KEY))
        assert retry.kind is DispositionKind.FORWARDED
        assert (await first.result).text == (await retry.result).text == "a:x:0"
    assert not any(isinstance(e, AssistantTextDelta) for e in frames)
    assert [type(e).__name__ for e in frames] == ["ExecutionCompleted"]


class Puts:
    def __init__(self, target: Any) -> None:
        self._target = target
        self.outcomes: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    async def put_if_absent(self, *args: Any, **kw: Any) -> PutOutcome:
        outcome: PutOutcome = await self._target.put_if_absent(*args, **kw)
        self.outcomes.append(outcome.kind)
        return outcome


async def test_r10_177_a_failed_keyed_turn_s_key_is_free_when_its_failure_is_reported(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-177 (fixed here: docs/router.md): h's keyed local turn fails at 2 s inside a
    pass that still has a 100 s message to run. Its key is released before its caller
    hears the failure — not at the end of the pass — so the client's retry right then is a
    new reservation (it runs again, and succeeds), never an attach to the attempt just
    reported dead."""
    world.duration = lambda t: 100.0 if t == "later" else 1.0
    world.failing.add("bad")
    puts = Puts(shared.idempotency)
    t0 = trio.current_time()
    spied = attrs.evolve(shared, idempotency=puts)
    async with (
        open_session_router(builder(spied, world, registry, "h")) as h,
        open_session_router(builder(spied, world, registry, "b")) as b,
    ):
        await (await h.submit(_request("bind"))).result
        bad = await h.submit(_request("bad", idempotency_key=KEY))  # runs 1 → 2 s
        later = await b.submit(_request("later"))  # queued behind it in the same pass
        assert later.kind is DispositionKind.FORWARDED
        with pytest.raises(TurnFailedError):
            await bad.result
        assert on_time(shared, trio.current_time() - t0, 2.0)
        assert await shared.idempotency.find(KEY) is None
        world.failing.clear()
        retry = await b.submit(_request("bad", idempotency_key=KEY))
        assert (await retry.result).text == "h:bad:4"  # after "later" wrote its turn
        await later.result
    assert puts.outcomes == ["reserved", "reserved"]
    assert [t.text for t in world.turns] == ["bind", "bad", "later", "bad"]


@pytest.mark.parametrize("first_ends", ["succeeds", "fails"])
async def test_r10_176_a_late_write_or_release_cannot_clobber_a_newer_reservation(
    first_ends: str,
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-176 (closed in the store here: docs/router.md) and the late-release fix: h runs
    a keyed forwarded message for 100 s, but its touches fail until 50 s, so the sweep
    resets the live reservation at 45 s (the R10-71 cost) and a's caller gets HOLDER_LOST;
    the client's retry reserves the key anew and waits in the inbox. When the first attempt
    ends at 101 s its write (markDone) or its release (compareAndReset after a failure) names
    the old reservation's holder, so the store refuses it: the retry's reservation is still
    there, the first attempt's TURN_RESULT does not name the key (the retry's caller, waiting
    under it, is not answered by the attempt it replaced), the retry then runs, and the
    answer its caller gets is the one cached."""

    class TouchDownUntil50:
        def __init__(self, target: Any) -> None:
            self._target = target

        def __getattr__(self, name: str) -> Any:
            return getattr(self._target, name)

        async def touch(self, key: IdempotencyKey, holder: ReserverId) -> bool:
            if trio.current_time() < 50.0:
                raise ConnectionError("idempotency backend flaky")
            return bool(await self._target.touch(key, holder))

    world.duration = lambda t: 100.0 if t == "m" else 1.0
    h_shared = attrs.evolve(shared, idempotency=TouchDownUntil50(shared.idempotency))
    async with (
        open_session_router(builder(h_shared, world, registry, "h")) as h,
        open_session_router(builder(shared, world, registry, "a")) as a,
    ):
        await (await h.submit(_request("bind"))).result
        first = await a.submit(_request("m", idempotency_key=KEY))
        with pytest.raises(HolderLost):
            await first.result
        if first_ends == "fails":
            world.failing.add("m")
        retry = await a.submit(_request("m", idempotency_key=KEY))
        assert retry.kind is DispositionKind.FORWARDED
        await trio.sleep_until(101.5)  # the first attempt ended at 101 s
        world.failing.clear()
        between = await shared.idempotency.find(KEY)
        assert between is not None and between.state is IdempotencyState.IN_FLIGHT
        answer = await retry.result
        done = await shared.idempotency.find(KEY)
    expected_history = 4 if first_ends == "succeeds" else 2
    assert answer.text == f"h:m:{expected_history}"
    assert done is not None and done.result is not None
    assert done.result["text"] == answer.text


async def test_r10_179_the_yield_shim_and_the_polling_period(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-179 (informational): a hand-off request is still sent as YIELD plus the legacy
    INTERRUPT(SESSION_RELEASED), and a receiver honours either; the polling fallback's
    period (secondary TTL / 2) is also the period of the re-rings, so a longer secondary
    TTL (40 s → 20 s polls) means slower re-rings of a waiting message."""
    yield_signal, legacy = yield_signals(S1, NodeId("n"))
    assert yield_signal.kind is SignalKind.YIELD and requests_hand_off(yield_signal)
    assert legacy.kind is SignalKind.INTERRUPT and requests_hand_off(legacy)
    assert legacy.payload["reason"] == InterruptReason.SESSION_RELEASED.value
    config = SessionRouterConfig(idempotency_secondary_ttl=40.0)
    assert config.forward_poll_interval == 20.0
    rings: list[float] = []
    t0 = trio.current_time()
    world.duration = lambda t: 70.0 if t == "long" else 1.0
    async with (
        open_session_router(builder(shared, world, registry, "h")) as h,
        open_session_router(
            builder(shared, world, registry, "a", config=scaled_config(config, shared.scale))
        ) as a,
        shared.bus.subscribe() as receive,
        trio.open_nursery() as nursery,
    ):

        async def pump() -> None:
            async for signal in receive:
                if signal.kind is SignalKind.MESSAGE_ENQUEUED:
                    rings.append(trio.current_time())  # noqa: PERF401

        nursery.start_soon(pump)
        await h.submit(_request("long"))
        await (await a.submit(_request("waiting"))).result
        nursery.cancel_scope.cancel()
    assert all_on_time(shared, [t - t0 for t in rings], [0.0, 20.0, 40.0, 60.0])
