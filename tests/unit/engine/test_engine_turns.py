"""Turns on the engine: ordering, lifecycle-first with the burst bound, fairness."""

from __future__ import annotations

import trio
import trio.testing
from engine_kit import Recorder

from zlink_trio.engine import ActorDeliveryLane, Admission, SpotLane, open_engine


async def test_items_run_one_per_turn_in_acceptance_order(recorder: Recorder) -> None:
    async with open_engine() as engine:
        lane = engine.new_lane(ActorDeliveryLane(), recorder)
        for i in range(200):
            assert lane.submit_nowait(i) is Admission.ACCEPTED
        await engine.wait_idle()
    assert recorder.seen == list(range(200))
    assert recorder.peak == 1  # never two turns of one lane at once


async def test_lifecycle_first_with_burst_bound_and_no_starvation(recorder: Recorder) -> None:
    async with open_engine(lifecycle_burst=3) as engine:
        lane = engine.new_lane(SpotLane(), recorder)
        release = recorder.hold("first")
        lane.submit_nowait("first")
        await recorder.wait_entered("first")  # the lane is busy: the rest queues up
        for i in range(5):
            lane.submit_nowait(f"a{i}")
        for i in range(10):
            lane.submit_nowait(f"L{i}", lifecycle=True)
        release.set()
        await engine.wait_idle()
    kinds = "".join(x[0] for x in recorder.seen[1:])  # type: ignore[index]
    # At most 3 lifecycle turns in a row while application work waits, then one
    # application turn (yield debt); lifecycle never waits behind more than one.
    assert kinds == "LLLaLLLaLLLaLaa"
    assert [x for x in recorder.seen if str(x).startswith("L")] == [f"L{i}" for i in range(10)]
    assert [x for x in recorder.seen if str(x).startswith("a")] == [f"a{i}" for i in range(5)]


async def test_a_handler_may_submit_to_its_own_lane(recorder: Recorder) -> None:
    async with open_engine() as engine:
        seen: list[int] = []

        async def countdown(n: int) -> None:
            seen.append(n)
            if n:
                lane.submit_nowait(n - 1)

        lane = engine.new_lane(ActorDeliveryLane(), countdown)
        lane.submit_nowait(300)
        await engine.wait_idle()
    assert seen == list(range(300, -1, -1))


async def test_hot_lane_is_requeued_after_a_batch_so_others_run() -> None:
    """A lane whose handler keeps feeding itself cannot monopolize the engine."""
    async with open_engine(batch_size=8) as engine:
        hot_turns = 0
        hot_turns_when_cold_ran: list[int] = []
        cold_ran = trio.Event()

        async def hot(_: int) -> None:
            nonlocal hot_turns
            hot_turns += 1
            hot_lane.submit_nowait(0)  # never empties, never awaits

        async def cold(_: int) -> None:
            hot_turns_when_cold_ran.append(hot_turns)
            cold_ran.set()

        hot_lane = engine.new_lane(ActorDeliveryLane(), hot)
        cold_lane = engine.new_lane(ActorDeliveryLane(), cold)
        hot_lane.submit_nowait(0)
        cold_lane.submit_nowait(0)
        await cold_ran.wait()
        hot_lane.close()
        await engine.wait_idle()
    assert hot_turns_when_cold_ran == [8]  # exactly one hot batch ran before the cold lane


async def test_batches_interleave_ready_lanes() -> None:
    async with open_engine(batch_size=4, idle_runners=0) as engine:
        order: list[str] = []

        def handler(name: str):  # type: ignore[no-untyped-def]
            async def run(_: int) -> None:
                order.append(name)

            return run

        a = engine.new_lane(ActorDeliveryLane(), handler("a"))
        b = engine.new_lane(ActorDeliveryLane(), handler("b"))
        for i in range(12):
            a.submit_nowait(i)
            b.submit_nowait(i)
        await engine.wait_idle()
    # Runs of one lane never exceed the batch size while the other lane is ready.
    runs = "".join(order).replace("ab", "a|b").replace("ba", "b|a").split("|")
    assert max(len(r) for r in runs) <= 4
    assert order.count("a") == order.count("b") == 12


async def test_a_handler_awaiting_another_lane_does_not_deadlock() -> None:
    """Every ready lane gets a runner even when all others are blocked in handlers."""
    async with open_engine(idle_runners=0) as engine:
        replies: list[int] = []

        async def server(item: tuple[int, trio.Event]) -> None:
            item[1].set()

        async def client(n: int) -> None:
            done = trio.Event()
            server_lane.submit_nowait((n, done))
            await done.wait()
            replies.append(n)

        server_lane = engine.new_lane(ActorDeliveryLane(), server)
        clients = [engine.new_lane(ActorDeliveryLane(), client) for _ in range(50)]
        for n, lane in enumerate(clients):
            lane.submit_nowait(n)
        await engine.wait_idle()
    assert sorted(replies) == list(range(50))


async def test_a_burst_of_ready_lanes_grows_the_runner_pool_gradually() -> None:
    async with open_engine() as engine:
        peak = 0

        async def handler(_: int) -> None:
            nonlocal peak
            peak = max(peak, engine.statistics().runners)

        lanes = [engine.new_lane(ActorDeliveryLane(), handler) for _ in range(1000)]
        for lane in lanes:
            lane.submit_nowait(0)
        await engine.wait_idle()
        assert engine.statistics().turns == 1000
    assert peak < 50  # one runner per ready lane would be 1000 tasks (measured: 2-3)


async def test_wait_idle_of_one_lane(recorder: Recorder) -> None:
    async with open_engine() as engine:
        lane = engine.new_lane(ActorDeliveryLane(), recorder)
        other = engine.new_lane(ActorDeliveryLane(), recorder)
        await lane.wait_idle()  # already idle
        release = recorder.hold("held")
        other.submit_nowait("held")
        lane.submit_nowait("x")
        await lane.wait_idle()
        assert "x" in recorder.seen
        assert other.statistics().scheduled == "running"
        release.set()
        await engine.wait_idle()
        assert other.statistics().scheduled == "idle"


async def test_idle_engine_wait_is_a_checkpoint() -> None:
    async with open_engine() as engine:
        with trio.CancelScope() as scope:
            scope.cancel()
            await engine.wait_idle()
        assert scope.cancelled_caught
        await trio.testing.wait_all_tasks_blocked()
