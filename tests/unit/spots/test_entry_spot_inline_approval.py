"""An idle Entry Spot runs a creation's approval turn in the caller's task (no runner
hand-off); a busy one queues it; the engine's halt ends an inline approval Unavailable."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from zlink_trio.engine import open_engine
from zlink_trio.errors import Unavailable
from zlink_trio.ids import ActorId, MeshName, ObjectGeneration, SpotId, StableType
from zlink_trio.spots.approval import ActorCreateEvent, Approve
from zlink_trio.spots.entry import EntrySpot

SPOT = SpotId("node-entry-6f1d0c3e-9b7a-4a52-8e0d-2b6c1f4a7d90")
MESH = MeshName("main")


def _event() -> ActorCreateEvent:
    return ActorCreateEvent(
        ActorId("a"), StableType("player"), ObjectGeneration(1), SPOT, None, object()
    )


async def test_an_idle_entry_spot_approves_in_the_callers_task() -> None:
    tasks: list[trio.lowlevel.Task] = []

    async def on_create(event: ActorCreateEvent) -> Approve:
        tasks.append(trio.lowlevel.current_task())
        return Approve(b"ok")

    async def step() -> ActorCreateEvent:
        return _event()

    async with open_engine() as engine:
        spot = EntrySpot(engine, SPOT, MESH, on_create=on_create)
        _, decision = await spot.approve(step, trio.current_time() + 10)
        assert decision == Approve(b"ok")
        assert tasks == [trio.lowlevel.current_task()]
        assert spot.statistics().lifecycle_turns == 1
        spot.close()


async def test_a_busy_entry_spot_queues_the_approval_on_a_runner() -> None:
    release, entered = trio.Event(), trio.Event()
    tasks: list[trio.lowlevel.Task] = []

    async def hold() -> None:
        entered.set()
        await release.wait()

    async def on_create(event: ActorCreateEvent) -> Approve:
        tasks.append(trio.lowlevel.current_task())
        return Approve()

    async def step() -> ActorCreateEvent:
        return _event()

    async with open_engine() as engine, trio.open_nursery() as nursery:
        spot = EntrySpot(engine, SPOT, MESH, on_create=on_create)
        nursery.start_soon(spot.run_application_turn, hold)
        await entered.wait()
        results: list[object] = []

        async def approve() -> None:
            results.append(await spot.approve(step, trio.current_time() + 10))

        nursery.start_soon(approve)
        await trio.testing.wait_all_tasks_blocked()
        assert results == [] and tasks == []  # queued behind the running turn
        release.set()
        await trio.testing.wait_all_tasks_blocked()
        assert len(results) == 1 and len(tasks) == 1
        assert tasks[0] is not trio.lowlevel.current_task()
        spot.close()


async def test_the_engines_halt_ends_an_inline_approval_unavailable() -> None:
    entered = trio.Event()

    async def on_create(event: ActorCreateEvent) -> Approve:
        entered.set()
        await trio.sleep_forever()
        raise AssertionError("not reached")

    async def step() -> ActorCreateEvent:
        return _event()

    async with open_engine() as engine, trio.open_nursery() as nursery:
        spot = EntrySpot(engine, SPOT, MESH, on_create=on_create)
        failures: list[BaseException] = []

        async def approve() -> None:
            with pytest.raises(Unavailable) as caught:
                await spot.approve(step, trio.current_time() + 10)
            failures.append(caught.value)

        nursery.start_soon(approve)
        await entered.wait()
        engine.halt()
        await trio.testing.wait_all_tasks_blocked()
        assert len(failures) == 1 and "halted" in str(failures[0])
