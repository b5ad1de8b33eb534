"""The connection's writer lane keeps the contract of the trio memory channel it replaced
(zlink_trio/mesh/writelane.py)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, strategies as st

from zlink_trio.mesh.writelane import WriterLane

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 99)),
        st.just(("take",)),
        st.just(("close_send",)),
        st.just(("close_receive",)),
    ),
    max_size=40,
)


def _outcome(call: Any, *args: Any) -> object:
    try:
        return ("ok", call(*args))
    except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError) as exc:
        return type(exc).__name__
    except trio.BrokenResourceError as exc:
        return type(exc).__name__


@given(capacity=st.integers(1, 4), ops=_OPS)
def test_without_waiting_it_answers_as_a_memory_channel(
    capacity: int, ops: list[tuple[Any, ...]]
) -> None:
    """Every put/take/close sequence (no waits) gets the channel's results and errors."""

    async def main() -> None:
        lane = WriterLane[int](capacity)
        send, recv = trio.open_memory_channel[int](capacity)
        for op in ops:
            if op[0] == "put":
                ours = _outcome(lane.put_nowait, op[1])
                theirs = _outcome(send.send_nowait, op[1])
            elif op[0] == "take":
                ours = _outcome(lane.take_nowait)
                theirs = _outcome(recv.receive_nowait)
            elif op[0] == "close_send":
                lane.close_send()
                send.close()
                continue
            else:
                lane.close_receive()
                recv.close()
                continue
            assert ours == theirs, op

    trio.run(main)


async def test_a_waiting_put_gets_the_room_a_take_makes_in_fifo_order() -> None:
    lane = WriterLane[str](1)
    lane.put_nowait("a")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lane.put, "b")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(lane.put, "c")
        await trio.testing.wait_all_tasks_blocked()
        assert lane.take_nowait() == "a"
        with pytest.raises(trio.WouldBlock):
            lane.put_nowait("x")  # the room is promised to "b"
        await trio.testing.wait_all_tasks_blocked()
        assert lane.take_nowait() == "b"
        await trio.testing.wait_all_tasks_blocked()
        assert lane.take_nowait() == "c"
    lane.put_nowait("d")
    assert lane.take_nowait() == "d"


async def test_a_cancelled_waiting_put_leaves_nothing_behind() -> None:
    lane = WriterLane[str](1)
    lane.put_nowait("a")
    with trio.move_on_after(1) as scope:
        await lane.put("never")
    assert scope.cancelled_caught
    assert lane.take_nowait() == "a"
    lane.put_nowait("b")  # no room was left promised to the cancelled put
    assert lane.take_nowait() == "b"
    with pytest.raises(trio.WouldBlock):
        lane.take_nowait()


@pytest.mark.parametrize(
    ("close", "error"),
    [("close_send", trio.ClosedResourceError), ("close_receive", trio.BrokenResourceError)],
)
async def test_a_close_wakes_a_waiting_put_with_the_channels_error(
    close: str, error: type[Exception]
) -> None:
    lane = WriterLane[str](1)
    lane.put_nowait("a")
    raised: list[type[BaseException]] = []

    async def put() -> None:
        try:
            await lane.put("b")
        except Exception as exc:
            raised.append(type(exc))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(put)
        await trio.testing.wait_all_tasks_blocked()
        getattr(lane, close)()
    assert raised == [error]


def test_a_lane_holds_at_least_one_item() -> None:
    with pytest.raises(ValueError, match="at least one"):
        WriterLane[int](0)
