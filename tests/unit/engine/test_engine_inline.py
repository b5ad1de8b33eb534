"""Inline turns (``Lane.run_here``): an idle lane's turn run in the submitter's task."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from zlink_trio.engine import ActorDeliveryLane, SpotLane, open_engine
from zlink_trio.engine.inline import resume_turn, watch_first_block


class Host:
    """A TurnHost that records what the engine tells it."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.scope = trio.CancelScope()

    def enter_turn(self) -> None:
        self.calls.append("enter")

    def turn_suspended(self) -> None:
        self.calls.append("suspended")

    def exit_turn(self) -> None:
        self.calls.append("exit")

    def cancel_turn(self) -> None:
        self.calls.append("cancel")
        self.scope.cancel()


async def _idle_handler(item: object) -> None:
    await trio.lowlevel.checkpoint()


async def test_an_idle_lanes_turn_runs_in_the_calling_task_without_waiting() -> None:
    async with open_engine() as engine:
        ran_in: list[object] = []

        async def handler(item: int) -> None:
            ran_in.append((item, trio.lowlevel.current_task(), lane.in_turn()))

        lane = engine.new_lane(ActorDeliveryLane(), handler)
        host = Host()
        assert await lane.run_here(1, host)
        assert ran_in == [(1, trio.lowlevel.current_task(), True)]
        assert host.calls == ["enter", "exit"]  # never suspended: it did not wait
        assert lane.idle and engine.idle
        assert engine.statistics().turns == 1
        assert engine.statistics().runners == 0  # no runner was involved


async def test_a_lane_that_is_not_idle_is_not_run_here() -> None:
    async with open_engine() as engine:
        release = trio.Event()
        seen: list[int] = []

        async def handler(item: int) -> None:
            seen.append(item)
            if item == 0:
                await release.wait()

        lane = engine.new_lane(ActorDeliveryLane(), handler)
        lane.submit_nowait(0)
        await trio.testing.wait_all_tasks_blocked()  # item 0 runs on a runner, blocked
        host = Host()
        assert not await lane.run_here(1, host)  # a turn is running: nothing done
        lane.submit_nowait(2)
        assert not await lane.run_here(3, host)  # and now one is queued as well
        release.set()
        await engine.wait_idle()
        assert seen == [0, 2]
        assert host.calls == []


async def test_no_inline_turn_while_another_lane_waits_for_a_runner() -> None:
    """Fairness: a lane waiting in the ready set goes first; the caller submits."""
    async with open_engine() as engine:
        other = engine.new_lane(SpotLane(), _idle_handler)
        lane = engine.new_lane(ActorDeliveryLane(), _idle_handler)
        other.submit_nowait("x")
        other2 = engine.new_lane(SpotLane(), _idle_handler)
        other2.submit_nowait("y")  # the first went to a new runner, this one waits
        assert engine.statistics().ready_lanes == 2
        assert not await lane.run_here("z", Host())
        await engine.wait_idle()


async def test_a_lane_with_a_shared_gate_is_not_run_here() -> None:
    async with open_engine() as engine:
        gate = engine.new_gate()
        lane = engine.new_lane(SpotLane(), _idle_handler, gate=gate)
        assert not await lane.run_here("x", Host())


async def test_no_inline_turn_on_a_closed_lane_or_a_halted_engine() -> None:
    async with open_engine() as engine:
        lane = engine.new_lane(ActorDeliveryLane(), _idle_handler)
        lane.close()
        assert not await lane.run_here("x", Host())
        other = engine.new_lane(ActorDeliveryLane(), _idle_handler)
        engine.halt()
        assert not await other.run_here("x", Host())


async def test_items_admitted_during_an_inline_turn_run_on_a_runner_after_it() -> None:
    async with open_engine() as engine:
        seen: list[tuple[int, bool]] = []
        me = trio.lowlevel.current_task()

        async def handler(item: int) -> None:
            seen.append((item, trio.lowlevel.current_task() is me))
            if item == 0:
                lane.submit_nowait(1)
                lane.submit_nowait(2)

        lane = engine.new_lane(ActorDeliveryLane(), handler)
        assert await lane.run_here(0, Host())
        assert not lane.idle  # 1 and 2 wait for a runner
        await engine.wait_idle()
        assert seen == [(0, True), (1, False), (2, False)]


async def test_a_turn_that_waits_tells_its_host_once_before_it_waits() -> None:
    async with open_engine() as engine:
        steps: list[str] = []
        host = Host()
        release = trio.Event()

        async def handler(item: int) -> None:
            steps.append(f"start {item}, host told {host.calls}")
            if item == 7:
                await release.wait()
            await trio.lowlevel.checkpoint()
            steps.append(f"end {item}")

        lane = engine.new_lane(ActorDeliveryLane(), handler)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lane.run_here, 7, host)
            await trio.testing.wait_all_tasks_blocked()
            assert host.calls == ["enter", "suspended"]
            assert not lane.idle and not engine.idle  # the turn is in progress
            lane.submit_nowait(8)  # queued behind the running turn
            release.set()
        await engine.wait_idle()
        assert steps[:2] == ["start 7, host told ['enter']", "end 7"]
        assert steps[2:] == ["start 8, host told ['enter', 'suspended', 'exit']", "end 8"]
        assert host.calls == ["enter", "suspended", "exit"]
        assert engine.statistics().turns == 2


async def test_a_failing_handler_is_logged_and_counted_like_a_runners() -> None:
    async with open_engine() as engine:

        async def handler(item: int) -> None:
            raise RuntimeError("boom")

        lane = engine.new_lane(ActorDeliveryLane(), handler)
        host = Host()
        assert await lane.run_here(1, host)
        assert engine.statistics().handler_failures == 1
        assert host.calls == ["enter", "exit"]
        assert lane.idle


async def test_halting_the_engine_cancels_an_inline_turn_through_its_host() -> None:
    async with open_engine() as engine:
        host = Host()
        outcome: list[str] = []

        async def handler(item: int) -> None:
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                outcome.append("cancelled")
                raise

        lane = engine.new_lane(ActorDeliveryLane(), handler)

        async def run() -> None:
            with host.scope:
                await lane.run_here(1, host)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await trio.testing.wait_all_tasks_blocked()
            engine.halt()
        assert outcome == ["cancelled"]
        assert host.calls == ["enter", "suspended", "cancel", "exit"]


async def _inline(awaitable: Any, host: Host) -> None:
    """Drive ``awaitable`` as the engine drives an inline turn: one step by hand, then
    :func:`resume_turn`."""
    coro = awaitable.__await__()
    try:
        trap = coro.send(None)
    except StopIteration:
        return
    await resume_turn(coro, trap, host)


async def test_resume_turn_delegates_sends_throws_and_results() -> None:
    calls: list[str] = []
    host = Host()
    host.calls = calls

    async def body() -> None:
        await trio.lowlevel.checkpoint()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            calls.append("cancelled inside")
            raise

    with trio.move_on_after(0.01) as scope:
        await _inline(body(), host)
    assert scope.cancelled_caught
    assert calls == ["suspended", "cancelled inside"]

    async def quick() -> None:
        calls.append("quick")

    await _inline(quick(), host)
    assert calls[-1] == "quick"


async def test_watch_first_block_ignores_schedule_points_and_reports_the_first_real_wait() -> None:
    """Schedule points (``checkpoint``, ``cancel_shielded_checkpoint``) are not a wait:
    ``first_block`` runs once, just before the first yield that parks the task, and what
    the scheduler sends back still reaches the awaited code."""
    calls: list[str] = []
    event = trio.Event()

    async def body() -> None:
        await trio.lowlevel.checkpoint()
        await trio.lowlevel.cancel_shielded_checkpoint()
        calls.append("before the wait")
        await event.wait()
        calls.append("woken")
        await event.wait()  # set: no wait at all
        await trio.lowlevel.checkpoint()

    async def watched() -> None:
        await watch_first_block(body(), lambda: calls.append("blocked"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watched)
        await trio.testing.wait_all_tasks_blocked()
        assert calls == ["before the wait", "blocked"]
        event.set()
    assert calls == ["before the wait", "blocked", "woken"]

    quick: list[str] = []

    async def only_schedule_points() -> None:
        for _ in range(3):
            await trio.lowlevel.checkpoint()

    await watch_first_block(only_schedule_points(), lambda: quick.append("blocked"))
    assert quick == []


async def test_watch_first_block_passes_a_cancellation_to_the_awaited_code() -> None:
    seen: list[str] = []

    async def body() -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            seen.append("cancelled")
            raise

    with trio.move_on_after(1) as scope:
        await watch_first_block(body(), lambda: seen.append("blocked"))
    assert scope.cancelled_caught and seen == ["blocked", "cancelled"]


async def test_one_bare_schedule_point_first_is_no_suspension_the_next_yield_is() -> None:
    """A turn whose first yield is a bare schedule point (a burst of pushes' periodic
    one) keeps its host: the task runs again in the next pass. Any yield after it, and
    any other first yield, tells the host it is suspended, once."""
    async with open_engine() as engine:
        events: list[str] = []

        async def handler(item: int) -> None:
            if item == 1:
                await trio.lowlevel.cancel_shielded_checkpoint()
            elif item == 2:
                await trio.lowlevel.cancel_shielded_checkpoint()
                await trio.lowlevel.cancel_shielded_checkpoint()
                await trio.lowlevel.cancel_shielded_checkpoint()
            elif item == 3:
                await trio.sleep(0.001)
            else:
                await trio.lowlevel.cancel_shielded_checkpoint()
                await trio.sleep(0.001)
            events.append(f"end {item}")

        lane = engine.new_lane(ActorDeliveryLane(), handler)
        expected = {
            1: ["enter", "exit"],
            2: ["enter", "suspended", "exit"],
            3: ["enter", "suspended", "exit"],
            4: ["enter", "suspended", "exit"],
        }
        for item, calls in expected.items():
            host = Host()
            assert await lane.run_here(item, host)
            assert host.calls == calls
        assert events == ["end 1", "end 2", "end 3", "end 4"]
        assert engine.statistics().turns == 4
