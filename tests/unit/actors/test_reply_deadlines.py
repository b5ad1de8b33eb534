"""The Actor runtime's one request-deadline timer (zlink_trio.routing.reply_deadlines): waiters
end exactly at their deadline, an earlier deadline added later moves the timer, settled
waiters are forgotten (the heap stays about the requests in flight), and a stopping
runtime ends every waiter with ShuttingDown."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from zlink_trio.engine.oneshot import OneShot
from zlink_trio.errors import DeadlineExceeded, ShuttingDown
from zlink_trio.routing.reply_deadlines import ReplyDeadlines


async def test_waiters_end_at_their_deadlines_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    deadlines = ReplyDeadlines()
    ended: list[tuple[str, float, type[BaseException]]] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(deadlines.serve)
        start = trio.current_time()

        async def wait(name: str, after: float) -> None:
            slot: OneShot[bytes | None] = OneShot()
            ticket = deadlines.watch(slot, start + after)
            try:
                await slot.wait()
            except DeadlineExceeded as exc:
                ended.append((name, trio.current_time() - start, type(exc)))
            finally:
                deadlines.settled(ticket)

        nursery.start_soon(wait, "late", 5.0)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(wait, "early", 3.0)  # earlier than the timer's current one
        nursery.start_soon(wait, "middle", 4.0)
        await trio.testing.wait_all_tasks_blocked()
        await trio.sleep(6)
        assert len(deadlines) == 0
        nursery.cancel_scope.cancel()
    assert ended == [
        ("early", 3.0, DeadlineExceeded),
        ("middle", 4.0, DeadlineExceeded),
        ("late", 5.0, DeadlineExceeded),
    ]


async def test_settled_waiters_are_forgotten(autojump_clock: trio.testing.MockClock) -> None:
    deadlines = ReplyDeadlines()
    async with trio.open_nursery() as nursery:
        await nursery.start(deadlines.serve)
        for _ in range(10_000):
            slot: OneShot[bytes | None] = OneShot()
            ticket = deadlines.watch(slot, trio.current_time() + 30)
            slot.set(b"reply")
            assert await slot.wait() == b"reply"
            deadlines.settled(ticket)
        assert len(deadlines) == 0
        assert len(deadlines._heap) < 200  # compacted, not 10,000 dead entries
        nursery.cancel_scope.cancel()


async def test_stopping_ends_waiters_with_shutting_down(
    autojump_clock: trio.testing.MockClock,
) -> None:
    deadlines = ReplyDeadlines()
    slot: OneShot[bytes | None] = OneShot()
    async with trio.open_nursery() as nursery:
        await nursery.start(deadlines.serve)
        deadlines.watch(slot, trio.current_time() + 30)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    with pytest.raises(ShuttingDown):
        await slot.wait()
    late: OneShot[bytes | None] = OneShot()
    deadlines.watch(late, trio.current_time() + 30)  # after the stop: ends at once
    with pytest.raises(ShuttingDown):
        await late.wait()
