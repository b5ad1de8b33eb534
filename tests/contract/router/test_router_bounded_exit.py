"""Nothing the application does can hold a release or the router's exit unbounded (issue
15: "a hook or callback the application supplies never blocks the router"; spec 10 §6.3 A,
§6.3 C). Found by an adversarial review."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from router_app import FakeSession, Registry, Shared, World, cluster, on_time
from router_kit import AGENT, S1

from zlink_trio.router import (
    AgentExecutionResult,
    InterruptReason,
    SubmitRequest,
    TurnInterrupted,
)
from zlink_trio.testing import settle


def _request(text: str) -> SubmitRequest:
    return SubmitRequest(session_id=S1, agent_ref=AGENT, user_input=text)


async def test_a_handle_close_that_never_returns_is_abandoned_after_its_bound(
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R10-56 / R10-28: an application ``aclose()`` that never returns holds
    ``release_session`` for ``handle_close_timeout`` (5 s) only; the release then completes
    in order (the lease is free for any node) and the session opens again on the next
    submit. Leaving the router is bounded the same way."""
    closes: list[float] = []

    async def never(self: Any) -> None:
        closes.append(trio.current_time())
        await trio.sleep_forever()

    monkeypatch.setattr(FakeSession, "aclose", never)
    with trio.fail_after(100):
        async with cluster(shared, world, registry, ["a"]) as (a,):
            await (await a.submit(_request("one"))).result
            released = trio.current_time()
            await a.release_session(S1)
            assert on_time(shared, trio.current_time() - released, 5.0)
            assert await shared.leases.current(S1) is None
            assert (await (await a.submit(_request("two"))).result).text == "a:two:2"
            assert world.opens == {"a": 2}
        assert len(closes) == 2


async def test_close_gracefully_is_bounded_by_its_timeout_for_a_stubborn_turn(
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R10-61 / R10-31: ``close_gracefully(timeout)`` waits ``timeout`` for running turns,
    interrupts the rest (SYSTEM_SHUTDOWN) and waits at most ``timeout`` more for a turn
    that ignores the interrupt; then it closes the handle, gives the lease back and fails
    that turn's caller."""
    original = FakeSession.run_turn

    async def stubborn(self: Any, turn: Any, listener: Any) -> AgentExecutionResult:
        if turn.user_input.as_text() != "stubborn":
            return await original(self, turn, listener)
        with trio.CancelScope(shield=True):  # ignores every interrupt
            await trio.sleep(shared.s(20))
        return AgentExecutionResult("too late")

    monkeypatch.setattr(FakeSession, "run_turn", stubborn)
    config = shared.router_config(release_interrupt_timeout=5.0)
    with trio.fail_after(2000):
        async with cluster(shared, world, registry, ["a"], config=config) as (a,):
            running = await a.submit(_request("stubborn"))
            await settle()
            started = trio.current_time()
            await a.close_gracefully(shared.s(2.0))
            assert on_time(shared, trio.current_time() - started, 4.0)
            with pytest.raises(TurnInterrupted, match=InterruptReason.SYSTEM_SHUTDOWN.value):
                await running.result
            assert await shared.leases.current(S1) is None
            assert world.closes == {"a": 1}


async def test_a_hand_off_whose_handle_close_hangs_still_returns_the_lease(
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R10-12 / R10-90: a holder asked to yield mid-turn whose ``aclose()`` never returns
    still returns the lease, ``handle_close_timeout`` (5 s) after the turn ended, so the
    requester's acquire succeeds then instead of after the 30 s lease."""
    from router_kit import NODE_B

    from zlink_trio.router import LeaseGranted, yield_signals

    async def never(self: Any) -> None:
        await trio.sleep_forever()

    monkeypatch.setattr(FakeSession, "aclose", never)
    world.duration = lambda _t: 100.0
    async with cluster(shared, world, registry, ["a"]) as (a,):
        running = await a.submit(_request("long"))
        await settle()
        for signal in yield_signals(S1, NODE_B):
            await shared.bus.publish(signal)
        with pytest.raises(TurnInterrupted):
            await running.result
        await trio.sleep(4.9)
        assert await shared.leases.current(S1) is not None  # the close is still hanging
        await trio.sleep(0.1)
        await settle()
        assert await shared.leases.current(S1) is None
        assert isinstance(await shared.leases.try_acquire(S1, NODE_B, 30), LeaseGranted)
