"""Adversarial review of issue 15 (the part-1 SessionRouter), third round: failing tests
for the defects found through the public API only (``zlink_trio.router`` and its in-memory
SPIs; thin wrappers around those SPIs play a slow backend). Every test is bounded in time;
every TTL and lease runs on ``MockClock(autojump_threshold=0)``."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import trio
import trio.testing
from router_app import Registry, Shared, World, builder, no_overlap, on_time
from router_kit import AGENT, KEY, S1

from zlink_trio.router import (
    DispositionKind,
    IdempotencyKey,
    IdempotencyState,
    InterruptReason,
    Priority,
    SessionLease,
    SubmitRequest,
    open_session_router,
)


def _request(
    text: str, *, session: Any = S1, key: Any = None, priority: Priority = Priority.NEXT
) -> SubmitRequest:
    return SubmitRequest(
        session_id=session,
        agent_ref=AGENT,
        user_input=text,
        priority=priority,
        idempotency_key=key,
    )


# --- 1. a renew answer after the local deadline (a guard; the lapsed lease is given back) ---


class _SlowRenewAnswer:
    """A lease store whose next ``renew`` reaches the backend at once (the lease is extended
    there) but whose answer takes ``delay`` seconds to come back (a slow network or a loaded
    database answering late); everything else is the shared in-memory store."""

    def __init__(self, target: Any, delay: float) -> None:
        self._target = target
        self.delay = delay
        self.slow_next = False

    async def try_acquire(self, *args: Any) -> Any:
        return await self._target.try_acquire(*args)

    async def renew(self, lease: SessionLease, ttl: float) -> Any:
        renewed = await self._target.renew(lease, ttl)
        if self.slow_next:
            self.slow_next = False
            await trio.sleep(self.delay)
        return renewed

    async def release(self, lease: SessionLease) -> Any:
        return await self._target.release(lease)

    async def current(self, session_id: Any) -> Any:
        return await self._target.current(session_id)


async def test_a_renew_answer_later_than_the_local_deadline_loses_the_lease_cleanly(
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-03 / R10-92 / §7.4 (held in round 3; a guard): node a's renewal at 10 s reaches
    the store at once (store expiry 40 s) but its answer comes back at 35 s, after the local
    deadline (30 s). a must take the loss path at 30 s (its keyed turn interrupted, a caller
    attached by key on b told LEASE_LOST), no turn may overlap another, and a retry under the
    key at 36 s runs once, at once (a gave the store's copy of its lease back at 30 s, with
    the token it held; before that fix, the retry waited for the store's expiry at 40 s)."""
    slow = _SlowRenewAnswer(shared.leases, delay=25.0)
    world.duration = lambda text: 60.0 if text == "long" else 1.0  # type: ignore[method-assign]
    attached_outcome: list[Any] = []
    with trio.fail_after(1000):
        async with open_session_router(
            builder(shared, world, registry, "a", lease_store=slow)
        ) as a:
            slow.slow_next = True  # the renewal at 10 s answers at 35 s
            long = await a.submit(_request("long", key=KEY))
            assert long.kind is DispositionKind.EXECUTED_LOCALLY
            await trio.sleep(2)
            async with open_session_router(builder(shared, world, registry, "b")) as b:
                # b's holder-loss sweeps run at 17 s, 32 s, 47 s
                attached = await b.submit(_request("long", key=KEY))
                assert attached.kind is DispositionKind.FORWARDED
                with trio.move_on_after(200):
                    try:
                        attached_outcome.append((await attached.result).text)
                    except Exception as exc:
                        attached_outcome.append(exc)
                await trio.sleep_until(36)
                # the client retries the same input under the same key
                with contextlib.suppress(Exception):
                    retry = await b.submit(_request("long", key=KEY))
                    with trio.move_on_after(200), contextlib.suppress(Exception):
                        await retry.result
                with trio.move_on_after(200), contextlib.suppress(Exception):
                    await long.result
    runs = [(t.node, t.text, t.start) for t in world.turns]
    assert [type(o).__name__ for o in attached_outcome] == ["TurnInterrupted"], attached_outcome
    assert no_overlap(world.turns), runs
    # the interrupted input runs once more (the retry), when it is submitted: not at the
    # store's expiry of a's lease (renewed at 10 s, to 40 s), which a gave back at 30 s
    assert len(runs) == 2 and runs[1][2] == 36, runs


async def test_a_lease_lost_locally_is_released_in_the_store_at_once(
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-03 / §7.4: node a's renewal at 10 s reaches the store at once (store expiry 40 s)
    but its answer comes back at 35 s, after the local deadline (30 s). a declares the lease
    lost at 30 s and gives the store's copy back with the fencing token it held, so a retry
    under the same key on b at 31 s runs at once, not after the store's expiry (40 s)."""
    slow = _SlowRenewAnswer(shared.leases, delay=shared.s(25.0))
    t0 = trio.current_time()
    world.duration = lambda text: 60.0 if text == "long" else 1.0  # type: ignore[method-assign]
    with trio.fail_after(1000):
        async with open_session_router(
            builder(shared, world, registry, "a", lease_store=slow)
        ) as a:
            slow.slow_next = True  # the renewal at 10 s answers at 35 s
            long = await a.submit(_request("long", key=KEY))
            assert long.kind is DispositionKind.EXECUTED_LOCALLY
            with trio.move_on_after(200), contextlib.suppress(Exception):
                await long.result
            assert on_time(shared, trio.current_time() - t0, 30.0)  # the local deadline
            await trio.sleep_until(t0 + shared.s(31))
            async with open_session_router(builder(shared, world, registry, "b")) as b:
                retry = await b.submit(_request("long", key=KEY))
                with trio.move_on_after(200), contextlib.suppress(Exception):
                    await retry.result
    runs = [(t.node, t.text, t.start) for t in world.turns]
    assert no_overlap(world.turns), runs
    assert len(runs) == 2, runs
    # at once: not at the store's expiry (40 s)
    assert on_time(shared, runs[1][2] - t0, 31.0) and runs[1][2] - t0 < shared.s(40.0), runs


# --- 2. keyed submits from many routers with failing turns and interrupts -------------------


@pytest.mark.parametrize("priority_now", [False, True], ids=["next", "now-injected"])
async def test_keyed_submits_from_three_routers_with_failures_and_interrupts_settle(
    priority_now: bool,
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-139 … R10-158 (the idempotency matrix) / R10-03: three routers submit the same
    keys at once; some turns fail, some are interrupted. Every caller completes; no key is
    left IN_FLIGHT once all callers are answered; a key whose turn succeeded never runs its
    input again; turns never overlap."""
    world.failing = {"k1", "k4"}
    world.duration = lambda text: 3.0  # type: ignore[method-assign]
    keys = [IdempotencyKey(f"k{i}") for i in range(6)]
    answers: dict[tuple[str, str, int], Any] = {}
    with trio.fail_after(shared.s(3000)):
        async with (
            open_session_router(builder(shared, world, registry, "a")) as a,
            open_session_router(builder(shared, world, registry, "b")) as b,
            open_session_router(builder(shared, world, registry, "c")) as c,
        ):
            routers = {"a": a, "b": b, "c": c}

            async def caller(name: str, key: IdempotencyKey, attempt: int) -> None:
                router = routers[name]
                await trio.sleep(shared.s(attempt * 0.5))
                try:
                    now = priority_now and int(key.value[1:]) % 2 == 0
                    prio = Priority.NOW if now else Priority.NEXT
                    d = await router.submit(_request(key.value, key=key, priority=prio))
                    answers[(name, key.value, attempt)] = (await d.result).text
                except Exception as exc:
                    answers[(name, key.value, attempt)] = type(exc).__name__

            async def interrupter() -> None:
                for _ in range(6):
                    await trio.sleep(shared.s(4.1))
                    b.interrupt(S1, InterruptReason.USER)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(interrupter)
                for attempt in range(2):
                    for key in keys:
                        for name in routers:
                            nursery.start_soon(caller, name, key, attempt)
            await trio.sleep(shared.s(1))
            stuck = []
            for key in keys:
                entry = await shared.idempotency.find(key)
                if entry is not None and entry.state is IdempotencyState.IN_FLIGHT:
                    stuck.append(key.value)
    succeeded = {t.text for t in world.turns if t.end is not None and not t.interrupted}
    succeeded -= world.failing
    reruns = {
        text: sum(1 for t in world.turns if t.text == text)
        for text in succeeded
        if sum(1 for t in world.turns if t.text == text and not t.interrupted) > 1
    }
    assert len(answers) == 36, answers
    assert stuck == [], f"keys left IN_FLIGHT: {stuck}; answers {answers}"
    assert reruns == {}, f"succeeded inputs ran again: {reruns}"
    assert no_overlap(world.turns)
