"""Application hooks that raise never reach the router (issue 15: "a hook that raises
never reaches the router"; spec 10 §9.3, §12), and a closed router's interrupt is a no-op.
Found by an adversarial review of the router."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import trio
import trio.testing
from router_app import FakeSession, Registry, Shared, World, cluster
from router_kit import AGENT, S1

from zlink_trio.router import (
    DispositionKind,
    InterruptReason,
    MemoryIdempotencyStore,
    MemorySessionInbox,
    MemorySessionLeaseStore,
    MemorySessionRecordStore,
    MemorySessionSignalBus,
    Priority,
    QueuedInput,
    SessionMetrics,
    SubmitRequest,
)


def _shared() -> Shared:
    return Shared(
        MemorySessionRecordStore(),
        MemorySessionLeaseStore(),
        MemorySessionInbox(),
        MemorySessionSignalBus(),
        MemoryIdempotencyStore(),
    )


def _request(text: str, priority: Priority = Priority.NEXT) -> SubmitRequest:
    return SubmitRequest(session_id=S1, agent_ref=AGENT, user_input=text, priority=priority)


async def test_a_now_message_whose_inject_raises_runs_as_its_own_turn(
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R10-126 (§9.3): a NOW message for a running turn is injected; when the application's
    ``inject`` raises, the router neither crashes nor loses the message: it runs as a turn
    of its own after the running one."""

    def broken(self: Any, queued: QueuedInput) -> None:
        raise RuntimeError("application inject bug")

    monkeypatch.setattr(FakeSession, "inject", broken)
    world.duration = lambda text: 50.0 if text == "long" else 1.0  # type: ignore[method-assign]
    with trio.fail_after(1000):
        async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
            first = await a.submit(_request("long"))
            await trio.sleep(shared.s(1))
            urgent = await b.submit(_request("urgent", Priority.NOW))
            assert first.kind is DispositionKind.EXECUTED_LOCALLY
            assert urgent.kind is DispositionKind.FORWARDED
            assert (await first.result).text == "a:long:0"
            assert (await urgent.result).text == "a:urgent:2"  # after the long turn
    assert [t.text for t in world.turns] == ["long", "urgent"]


class _Exiting(SessionMetrics):
    def on_submit(self, *args: Any) -> None:
        raise SystemExit("a metrics hook must not end the router")


async def test_a_metrics_hook_raising_a_base_exception_is_absorbed() -> None:
    """§12: whatever a SessionMetrics hook raises (SystemExit included) is counted and
    forgotten; the router keeps serving."""
    world = World()
    world.duration = lambda text: 0.01  # type: ignore[method-assign]
    registry = Registry(world, [AGENT])
    with trio.fail_after(10):
        async with cluster(_shared(), world, registry, ["a"], metrics=_Exiting()) as (a,):
            for text in ("x", "y"):
                done = await a.submit(_request(text))
                await done.result
    assert [t.text for t in world.turns] == ["x", "y"]


async def test_interrupt_after_close_is_a_no_op(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """After the router closed, interrupt (both forms) does nothing and
    raises nothing; submit says RouterShuttingDown."""
    async with cluster(shared, world, registry, ["a"]) as (a,):
        router = a
    router.interrupt(S1, InterruptReason.USER)
    router.interrupt(S1, InterruptReason.USER, turn_id=None)
    from zlink_trio.router import RouterShuttingDown

    with pytest.raises(RouterShuttingDown):
        await router.submit(_request("late"))


async def test_a_blocking_metrics_hook_delays_only_itself_and_never_holds_the_exit(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """§12 / R10-167 (and the issue's rule "a slow hook delays only itself"): while one hook
    blocks its thread, later hooks still run, and leaving the router waits for the blocked
    hook no longer than ``metrics_drain_timeout`` (wall clock), then abandons it."""
    stuck = threading.Event()
    missed = threading.Event()

    class Slow(SessionMetrics):
        def on_submit(self, *args: Any) -> None:
            stuck.wait(10)

        def on_cache_miss(self, *args: Any) -> None:
            missed.set()

    config = shared.router_config(metrics_drain_timeout=0.2)  # a wall-clock bound: unscaled
    try:
        async with cluster(shared, world, registry, ["a"], metrics=Slow(), config=config) as (a,):
            await (await a.submit(_request("x"))).result  # on_submit, then on_cache_miss
            assert await trio.to_thread.run_sync(missed.wait, 5)  # not behind on_submit
            leaving = time.monotonic()
        assert time.monotonic() - leaving < 3
    finally:
        stuck.set()
