"""Queue bounds: submit_nowait raises CapacityExceeded, submit waits for space."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from engine_kit import Recorder

from zlink_trio.engine import ActorDeliveryLane, Admission, Handover, SpotLane, open_engine
from zlink_trio.errors import CapacityExceeded, ShuttingDown, Unavailable


async def test_submit_nowait_raises_when_full_and_the_item_enters_no_queue(
    recorder: Recorder,
) -> None:
    async with open_engine(lane_capacity=2) as engine:
        lane = engine.new_lane(ActorDeliveryLane(), recorder)
        release = recorder.hold("busy")
        lane.submit_nowait("busy")
        await recorder.wait_entered("busy")  # taken off the queue: it no longer counts
        lane.submit_nowait("a0")
        lane.submit_nowait("a1")
        with pytest.raises(CapacityExceeded):
            lane.submit_nowait("rejected")
        # the lifecycle queue has its own bound
        lane.submit_nowait("L0", lifecycle=True)
        lane.submit_nowait("L1", lifecycle=True)
        with pytest.raises(CapacityExceeded):
            lane.submit_nowait("rejected-L", lifecycle=True)
        stats = lane.statistics()
        assert (stats.application, stats.lifecycle, stats.scheduled) == (2, 2, "running")
        release.set()
        await engine.wait_idle()
    assert recorder.seen == ["busy", "L0", "L1", "a0", "a1"]


async def test_submit_waits_for_space_and_keeps_order(recorder: Recorder) -> None:
    async with open_engine(lane_capacity=1) as engine:
        lane = engine.new_lane(ActorDeliveryLane(), recorder)
        release = recorder.hold("busy")
        lane.submit_nowait("busy")
        await recorder.wait_entered("busy")
        assert await lane.submit("a0") is Admission.ACCEPTED  # space: no waiting
        done: list[str] = []

        async def producer() -> None:
            for item in ("a1", "a2", "a3"):
                await lane.submit(item)
                done.append(item)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(producer)
            await trio.testing.wait_all_tasks_blocked()
            assert done == []  # blocked on the full queue (backpressure)
            assert lane.statistics().application == 1
            release.set()
        await engine.wait_idle()
    assert done == ["a1", "a2", "a3"]
    assert recorder.seen == ["busy", "a0", "a1", "a2", "a3"]


async def test_cancelled_submit_leaves_no_item_behind(recorder: Recorder) -> None:
    async with open_engine(lane_capacity=1) as engine:
        lane = engine.new_lane(ActorDeliveryLane(), recorder)
        release = recorder.hold("busy")
        lane.submit_nowait("busy")
        await recorder.wait_entered("busy")
        lane.submit_nowait("a0")
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lane.submit, "never")
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()
        assert scope.cancelled_caught
        release.set()
        await engine.wait_idle()
    assert recorder.seen == ["busy", "a0"]


async def test_submit_in_a_cancelled_scope_admits_nothing(recorder: Recorder) -> None:
    async with open_engine() as engine:
        lane = engine.new_lane(ActorDeliveryLane(), recorder)
        with trio.CancelScope() as scope:
            scope.cancel()
            await lane.submit("x")
        assert scope.cancelled_caught
        await engine.wait_idle()
    assert recorder.seen == []


async def test_waiting_submitters_fail_when_the_lane_closes(recorder: Recorder) -> None:
    async with open_engine(lane_capacity=1) as engine:
        lane = engine.new_lane(ActorDeliveryLane(), recorder, on_drop=lambda item: None)
        release = recorder.hold("busy")
        lane.submit_nowait("busy")
        await recorder.wait_entered("busy")
        lane.submit_nowait("a0")
        errors: list[BaseException] = []

        async def producer() -> None:
            try:
                await lane.submit("a1")
            except Unavailable as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(producer)
            await trio.testing.wait_all_tasks_blocked()
            lane.close()
        release.set()
        await engine.wait_idle()
    assert len(errors) == 1
    assert recorder.seen == ["busy"]


async def test_lifecycle_waiter_is_not_woken_by_application_space(recorder: Recorder) -> None:
    async with open_engine(lane_capacity=1) as engine:
        lane = engine.new_lane(SpotLane(), recorder)
        release = recorder.hold("busy")
        lane.submit_nowait("busy")
        await recorder.wait_entered("busy")
        lane.submit_nowait("L0", lifecycle=True)
        lane.submit_nowait("a0")
        order: list[str] = []

        async def submit(item: str, lifecycle: bool) -> None:
            await lane.submit(item, lifecycle=lifecycle)
            order.append(item)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(submit, "L1", True)
            nursery.start_soon(submit, "a1", False)
            await trio.testing.wait_all_tasks_blocked()
            release.set()
        await engine.wait_idle()
    assert sorted(order) == ["L1", "a1"]
    assert recorder.seen[:2] == ["busy", "L0"]
    assert set(recorder.seen) == {"busy", "L0", "L1", "a0", "a1"}


async def test_take_held_wakes_every_submitter_it_made_room_for(recorder: Recorder) -> None:
    # A sealed lane runs no application item, so only take_held frees application space:
    # it frees the whole bound at once, and every waiting submitter must get a slot.
    async with open_engine(lane_capacity=2) as engine:
        lane = engine.new_lane(SpotLane(), recorder)
        lane.seal("r1")
        assert lane.submit_nowait("h0") is Admission.HELD
        assert lane.submit_nowait("h1") is Admission.HELD
        results: list[Admission] = []

        async def submit(item: str) -> None:
            results.append(await lane.submit(item))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(submit, "h2")
            nursery.start_soon(submit, "h3")
            await trio.testing.wait_all_tasks_blocked()
            assert results == []
            assert lane.take_held() == Handover(pending=(), held=("h0", "h1"))
            await trio.testing.wait_all_tasks_blocked()
            assert results == [Admission.HELD, Admission.HELD]
        assert sorted(lane.take_held().held) == ["h2", "h3"]


def test_a_submitter_waiting_for_space_fails_when_the_engine_shuts_down() -> None:
    # The submitter lives outside the engine's nursery: once the engine is gone nothing
    # will ever drain the queue, so it must not wait for ever (ShuttingDown, no item).
    errors: list[BaseException] = []

    async def main() -> None:
        async with trio.open_nursery() as outside:
            async with open_engine(lane_capacity=1) as engine:
                lane = engine.new_lane(SpotLane(), Recorder())
                lane.lend_turn()  # admits, runs nothing: the queue stays full
                lane.submit_nowait("a0")

                async def producer() -> None:
                    try:
                        await lane.submit("a1")
                    except ShuttingDown as exc:
                        errors.append(exc)

                outside.start_soon(producer)
                await trio.testing.wait_all_tasks_blocked()
            with trio.fail_after(60):
                await trio.testing.wait_all_tasks_blocked()
                assert len(errors) == 1
            outside.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_shutdown_runs_no_queued_turn_after_a_handler_waiting_for_space() -> None:
    # A turn blocked in submit() on another lane's full queue is a turn still running:
    # leaving the engine cancels it, and the work queued behind it is abandoned, never
    # started (before: the turn was woken with ShuttingDown first, logged as a handler
    # failure, and the runner started the next queued turn after the shutdown).
    seen: list[str] = []

    async def main() -> None:
        async with open_engine(lane_capacity=1) as engine:
            full = engine.new_lane(SpotLane(), Recorder())
            full.lend_turn()  # admits, runs nothing: its queue stays full
            full.submit_nowait("x0")

            async def handler(item: str) -> None:
                seen.append(item)
                if item == "b0":
                    await full.submit("x1")

            busy = engine.new_lane(ActorDeliveryLane(), handler)
            busy.submit_nowait("b0")
            await trio.testing.wait_all_tasks_blocked()
            assert seen == ["b0"]
            busy.submit_nowait("b1")
        assert seen == ["b0"]
        assert engine.statistics().handler_failures == 0

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
