"""OneShot: the reply slot of a local ask."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from zlink_trio.engine import ActorDeliveryLane, OneShot, open_engine


async def test_value_reaches_the_waiter_and_the_first_delivery_wins() -> None:
    slot: OneShot[int] = OneShot()
    async with trio.open_nursery() as nursery:
        got: list[int] = []

        async def waiter() -> None:
            got.append(await slot.wait())

        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert slot.done is False
        assert slot.set(1)
        assert not slot.set(2)
        assert not slot.fail(RuntimeError("late"))
    assert got == [1]
    assert await slot.wait() == 1  # already done: returns at once


async def test_error_is_raised_by_wait() -> None:
    slot: OneShot[int] = OneShot()
    assert slot.fail(KeyError("k"))
    assert slot.done
    assert not slot.set(1)
    with pytest.raises(KeyError):
        await slot.wait()


async def test_cancelled_wait_can_be_retried() -> None:
    slot: OneShot[str] = OneShot()
    with trio.move_on_after(0) as scope:
        await slot.wait()
    assert scope.cancelled_caught
    slot.set("later")
    assert await slot.wait() == "later"


async def test_one_waiter_at_a_time() -> None:
    slot: OneShot[None] = OneShot()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(slot.wait)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(trio.BusyResourceError):
            await slot.wait()
        slot.set(None)


async def test_local_ask_through_a_lane() -> None:
    async def double(request: tuple[int, OneShot[int]]) -> None:
        value, reply = request
        reply.set(2 * value)

    async with open_engine() as engine:
        lane = engine.new_lane(ActorDeliveryLane(), double)
        for n in range(100):
            reply: OneShot[int] = OneShot()
            lane.submit_nowait((n, reply))
            assert await reply.wait() == 2 * n


def test_get_nowait_gives_the_result_without_waiting() -> None:
    pending: OneShot[int] = OneShot()
    with pytest.raises(trio.WouldBlock):
        pending.get_nowait()
    done: OneShot[int] = OneShot()
    done.set(7)
    assert done.get_nowait() == 7
    failed: OneShot[int] = OneShot()
    failed.fail(KeyError("k"))
    with pytest.raises(KeyError):
        failed.get_nowait()
