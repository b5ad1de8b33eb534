"""EntrySpotStatistics count what they name: ``lifecycle_turns`` the approvals run on the
Entry Spot's lifecycle queue, ``application_turns`` the turns of its application queue.
The A04-01/02/03/26 contract tests assert ``application_turns`` stays put while Actor
payloads flow; these tests prove the counter moves when application work does run."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from zlink_trio.engine import open_engine
from zlink_trio.ids import ActorId, MeshName, ObjectGeneration, SpotId, StableType
from zlink_trio.spots.approval import ActorCreateEvent, Approve
from zlink_trio.spots.entry import EntrySpot

SPOT = SpotId("node-entry-1d4a4e9b-2a59-4d0e-8f0c-3c5f8f0e9c11")
MESH = MeshName("main")


def counts(spot: EntrySpot) -> tuple[int, int, int]:
    s = spot.statistics()
    return s.lifecycle_turns, s.application_turns, s.on_create_actor_calls


async def staging() -> ActorCreateEvent:
    return ActorCreateEvent(
        ActorId("a"), StableType("player"), ObjectGeneration(1), SPOT, None, object()
    )


async def test_application_turns_count_application_work_and_only_that() -> None:
    ran: list[str] = []

    async def work() -> None:
        ran.append("work")

    async with open_engine() as engine:
        spot = EntrySpot(engine, SPOT, MESH, on_create=None)
        assert counts(spot) == (0, 0, 0)
        await spot.run_application_turn(work)
        await spot.run_application_turn(work)
        assert ran == ["work", "work"]
        assert counts(spot) == (0, 2, 0)
        event, decision = await spot.approve(staging, trio.current_time() + 10)
        assert isinstance(decision, Approve) and event.entry_spot_id == SPOT
        assert counts(spot) == (1, 2, 0)  # an approval is a lifecycle turn, not application
        spot.close()


async def test_a_failing_application_turn_counts_and_raises_to_its_caller() -> None:
    async def boom() -> None:
        raise LookupError("handler failed")

    async with open_engine() as engine:
        spot = EntrySpot(engine, SPOT, MESH, on_create=None)
        with pytest.raises(LookupError, match="handler failed"):
            await spot.run_application_turn(boom)
        assert counts(spot) == (0, 1, 0)
        spot.close()


async def test_application_work_waits_for_a_running_approval() -> None:
    """One turn at a time per Spot: application work queued behind a blocked approval
    runs only after it."""
    release, entered = trio.Event(), trio.Event()
    order: list[str] = []

    async def on_create(event: ActorCreateEvent) -> Approve:
        entered.set()
        await release.wait()
        order.append("approval")
        return Approve()

    async def work() -> None:
        order.append("application")

    async with open_engine() as engine, trio.open_nursery() as nursery:
        spot = EntrySpot(engine, SPOT, MESH, on_create=on_create)
        nursery.start_soon(spot.approve, staging, trio.current_time() + 10)
        await entered.wait()
        nursery.start_soon(spot.run_application_turn, work)
        await trio.testing.wait_all_tasks_blocked()
        assert order == [] and counts(spot) == (1, 0, 1)
        release.set()
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["approval", "application"]
        assert counts(spot) == (1, 1, 1)
        spot.close()


async def test_queued_application_work_fails_shutting_down_when_the_spot_closes() -> None:
    release, entered = trio.Event(), trio.Event()
    failures: list[BaseException] = []

    async def hold() -> None:
        entered.set()
        await release.wait()

    async def work() -> None:
        raise AssertionError("must not run")

    async def submit() -> None:
        try:
            await spot.run_application_turn(work)
        except Exception as exc:
            failures.append(exc)

    async with open_engine() as engine, trio.open_nursery() as nursery:
        spot = EntrySpot(engine, SPOT, MESH, on_create=None)
        nursery.start_soon(spot.run_application_turn, hold)
        await entered.wait()
        nursery.start_soon(submit)
        await trio.testing.wait_all_tasks_blocked()
        spot.close()
        release.set()
    assert [type(f).__name__ for f in failures] == ["ShuttingDown"]
    assert counts(spot) == (0, 1, 0)
