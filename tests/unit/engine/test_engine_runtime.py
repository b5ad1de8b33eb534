"""The engine as a whole: idle lanes hold no task, handler failures are isolated,
cancellation and shutdown are clean, and there is one engine for every lane kind."""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import Hashable, Iterator
from typing import Any

import pytest
import trio
import trio.testing
from engine_kit import Recorder

from zlink_trio.engine import (
    ActorDeliveryLane,
    Engine,
    Gate,
    Lane,
    SessionLane,
    SpotLane,
    open_engine,
)
from zlink_trio.engine.core import LaneCore
from zlink_trio.errors import ConfigurationError, ShuttingDown

RUNNER = "zlink_trio.engine.runner"


def all_tasks() -> Iterator[trio.lowlevel.Task]:
    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        if task is None:
            continue
        yield task
        for nursery in task.child_nurseries:
            todo.extend(nursery.child_tasks)


def runner_tasks() -> int:
    return sum(1 for task in all_tasks() if task.name == RUNNER)


async def test_idle_lanes_hold_no_task(recorder: Recorder) -> None:
    async with open_engine(idle_runners=0) as engine:
        before = len(list(all_tasks()))
        lanes = [engine.new_lane(ActorDeliveryLane(), recorder) for _ in range(500)]
        assert len(list(all_tasks())) == before  # making lanes spawns nothing
        for n, lane in enumerate(lanes):
            lane.submit_nowait(n)
        assert runner_tasks() > 0
        await engine.wait_idle()
        await trio.testing.wait_all_tasks_blocked()
        assert runner_tasks() == 0
        assert len(list(all_tasks())) == before
        stats = engine.statistics()
        assert (stats.runners, stats.ready_lanes, stats.running_lanes) == (0, 0, 0)
        assert stats.turns == 500
        assert {lane.statistics().scheduled for lane in lanes} == {"idle"}
        # An idle lane owns no queue object either.
        assert all(lane._core._app is None and lane._core._life is None for lane in lanes)


async def test_parked_runners_are_bounded_and_belong_to_the_engine(recorder: Recorder) -> None:
    async with open_engine(idle_runners=2) as engine:
        releases = [recorder.hold(n) for n in range(5)]
        lanes = [engine.new_lane(ActorDeliveryLane(), recorder) for _ in range(5)]
        for n, lane in enumerate(lanes):
            lane.submit_nowait(n)
        for n in range(5):
            await recorder.wait_entered(n)
        assert runner_tasks() == 5  # one per blocked turn
        for release in releases:
            release.set()
        await engine.wait_idle()
        await trio.testing.wait_all_tasks_blocked()
        assert runner_tasks() == 2
        assert engine.statistics().idle_runners == 2
    assert runner_tasks() == 0  # the engine's nursery took them along


async def test_engine_keeps_no_reference_to_an_idle_lane(recorder: Recorder) -> None:
    async with open_engine() as engine:
        lane = engine.new_lane(ActorDeliveryLane(), recorder)
        lane.submit_nowait(1)
        await engine.wait_idle()
        gc.collect()
        # Only this test's frame refers to the lane: nothing in the engine does, so an
        # idle lane whose owner drops it is garbage.
        assert [r for r in gc.get_referrers(lane) if r is not sys._getframe()] == []


async def test_handler_exception_is_logged_and_the_lane_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[int] = []

    async def handler(n: int) -> None:
        seen.append(n)
        if n % 2:
            raise ValueError(f"bad {n}")

    async with open_engine() as engine:
        lane = engine.new_lane(ActorDeliveryLane(), handler)
        other_seen: list[int] = []

        async def other_handler(n: int) -> None:
            other_seen.append(n)

        other = engine.new_lane(ActorDeliveryLane(), other_handler)
        with caplog.at_level(logging.ERROR, logger="zlink_trio.engine"):
            for n in range(6):
                lane.submit_nowait(n)
                other.submit_nowait(n)
            await engine.wait_idle()
        assert engine.statistics().handler_failures == 3
    assert seen == other_seen == list(range(6))
    failures = [r for r in caplog.records if r.name == "zlink_trio.engine"]
    assert len(failures) == 3
    assert all(r.exc_info and isinstance(r.exc_info[1], ValueError) for r in failures)


async def test_exiting_the_engine_cancels_running_turns() -> None:
    cancelled = trio.Event()
    entered = trio.Event()

    async def handler(_: int) -> None:
        entered.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.set()
            raise

    async with open_engine() as engine:
        lane = engine.new_lane(ActorDeliveryLane(), handler)
        lane.submit_nowait(0)
        await entered.wait()
    assert cancelled.is_set()
    with pytest.raises(ShuttingDown):
        lane.submit_nowait(1)
    with pytest.raises(ShuttingDown):
        engine.new_lane(ActorDeliveryLane(), handler)


async def test_outer_cancellation_propagates_through_handlers(autojump_clock: object) -> None:
    entered = trio.Event()

    async def handler(_: int) -> None:
        entered.set()
        await trio.sleep_forever()

    with trio.move_on_after(5) as scope:
        async with open_engine() as engine:
            engine.new_lane(SpotLane(), handler).submit_nowait(0)
            await entered.wait()
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert trio.current_time() == 5


async def test_handler_cannot_swallow_engine_cancellation_by_catching_exception() -> None:
    """``except Exception`` in the engine never catches trio.Cancelled."""
    outcomes: list[str] = []

    async def handler(_: int) -> None:
        try:
            await trio.sleep_forever()
        finally:
            outcomes.append("unwound")

    async with open_engine() as engine:
        engine.new_lane(ActorDeliveryLane(), handler).submit_nowait(0)
        await trio.testing.wait_all_tasks_blocked()
    assert outcomes == ["unwound"]
    assert engine.statistics().handler_failures == 0


async def test_body_exception_is_not_wrapped_in_a_group() -> None:
    with pytest.raises(KeyError):
        async with open_engine():
            raise KeyError("mine")


async def test_bounds_are_validated() -> None:
    for kwargs in (
        {"lane_capacity": 0},
        {"lifecycle_burst": 0},
        {"batch_size": 0},
        {"idle_runners": -1},
    ):
        with pytest.raises(ConfigurationError):
            async with open_engine(**kwargs):
                pass  # pragma: no cover


async def test_engine_objects_come_only_from_their_factories(recorder: Recorder) -> None:
    async with open_engine() as engine:
        with pytest.raises(TypeError):
            Lane(engine, None, recorder, None, None)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            Gate(engine)
        with pytest.raises(TypeError):
            Engine(None, None, 1, 1)  # type: ignore[arg-type]


async def test_one_engine_runs_every_lane_kind(recorder: Recorder) -> None:
    """Spec 02 §11 white-box: Spot, session and Actor delivery lanes are the same lane
    type, on the same engine, with the same core; only the policy value differs."""
    async with open_engine() as engine:
        lanes: list[Lane[Any, Hashable]] = [
            engine.new_lane(SpotLane(), recorder),
            engine.new_lane(SessionLane(), recorder),
            engine.new_lane(ActorDeliveryLane(), recorder),
        ]
        assert {type(lane) for lane in lanes} == {Lane}
        assert {type(lane._core) for lane in lanes} == {LaneCore}
        assert all(lane._engine is engine for lane in lanes)
        assert isinstance(engine, Engine)
        for n, lane in enumerate(lanes):
            lane.submit_nowait(n)
        await engine.wait_idle()
    assert sorted(recorder.seen) == [0, 1, 2]  # type: ignore[type-var]


async def test_an_error_during_outer_cancellation_leaves_open_engine_as_itself() -> None:
    """A running turn is cancelled by the surrounding scope while the body raises: the
    engine's nursery holds that Cancelled beside the error, and the error still leaves as
    itself (zlink_trio/_exceptions.py)."""

    class Boom(Exception):
        pass

    entered = trio.Event()

    async def handler(_: int) -> None:
        entered.set()
        await trio.sleep_forever()

    with trio.CancelScope() as outer, pytest.raises(Boom):
        async with open_engine() as engine:
            engine.new_lane(SpotLane(), handler).submit_nowait(0)
            await entered.wait()
            outer.cancel()
            raise Boom
    assert not outer.cancelled_caught


async def test_halt_cancels_turns_in_progress_and_runs_no_other() -> None:
    """Engine.halt (a fail-stopped node): the turn in progress is cancelled, queued items
    never run, nothing more is admitted, blocked submitters get ShuttingDown, wait_idle
    returns at once; the code around the engine (its owner's tasks) keeps running."""
    seen: list[tuple[str, str]] = []
    entered = trio.Event()
    release = trio.Event()

    async def handler(item: str) -> None:
        seen.append((item, "start"))
        if item == "held":
            entered.set()
            await release.wait()
        seen.append((item, "end"))

    async with open_engine(lane_capacity=2) as engine:
        lane = engine.new_lane(ActorDeliveryLane(), handler)
        lane.submit_nowait("held")
        await entered.wait()
        lane.submit_nowait("queued-1")
        lane.submit_nowait("queued-2")
        blocked: list[BaseException] = []

        async def submit_blocked() -> None:
            try:
                await lane.submit("third")
            except ShuttingDown as exc:
                blocked.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(submit_blocked)
            await trio.testing.wait_all_tasks_blocked()
            engine.halt()
            release.set()
        assert len(blocked) == 1
        await trio.testing.wait_all_tasks_blocked()
        assert seen == [("held", "start")]  # cancelled in its await, nothing else ran
        assert runner_tasks() == 0
        with pytest.raises(ShuttingDown):
            lane.submit_nowait("late")
        with trio.fail_after(1):
            await engine.wait_idle()
        engine.halt()  # idempotent
        await trio.lowlevel.checkpoint()  # the owner's own task is not cancelled
