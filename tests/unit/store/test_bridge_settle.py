"""Quiescence of the asyncio loop-thread bridge: calls in flight, ``wait_idle``, barriers,
and :func:`zlink_trio.testing.settle` (which ``wait_all_tasks_blocked`` alone is not)."""

from __future__ import annotations

import asyncio

import trio
import trio.testing

from zlink_trio.store._aiobridge import live_loop_threads, open_loop_thread
from zlink_trio.testing import settle


class _Gate:
    """An asyncio future on the loop thread that the Trio side opens."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.future: asyncio.Future[None] | None = None
        self.entered = trio.Event()
        self._token = trio.lowlevel.current_trio_token()

    async def wait(self) -> str:
        self.future = self._loop.create_future()
        self._token.run_sync_soon(self.entered.set)
        await self.future
        return "opened"

    def open(self) -> None:
        def done() -> None:
            assert self.future is not None
            self.future.set_result(None)

        self._loop.call_soon_threadsafe(done)


async def test_wait_all_tasks_blocked_returns_mid_statement_but_settle_does_not() -> None:
    async with open_loop_thread() as bridge, trio.open_nursery() as nursery:
        assert live_loop_threads() == (bridge,)
        gate = _Gate(bridge.loop)
        results: list[str] = []

        async def call() -> None:
            results.append(await bridge.run(gate.wait))

        nursery.start_soon(call)
        await gate.entered.wait()
        await trio.testing.wait_all_tasks_blocked()
        assert bridge.in_flight == 1 and results == []  # "blocked" with a call in flight
        settled = trio.Event()

        async def settler() -> None:
            await settle()
            settled.set()

        nursery.start_soon(settler)
        await trio.testing.wait_all_tasks_blocked()
        assert not settled.is_set()
        gate.open()
        await settled.wait()
        assert results == ["opened"] and bridge.in_flight == 0
    assert live_loop_threads() == ()


async def test_settle_reruns_barriers_until_nothing_more_runs() -> None:
    """A barrier whose delivery starts more work (here: a call) makes settle go round again;
    it returns once a round runs nothing but the barriers."""
    async with open_loop_thread() as bridge, trio.open_nursery() as nursery:
        rounds: list[int] = []
        done: list[str] = []

        async def follow_up() -> None:
            await bridge.run(asyncio.sleep, 0.01)
            done.append("follow-up")

        async def barrier() -> None:
            await bridge.run(asyncio.sleep, 0)  # a barrier's own statement
            rounds.append(len(rounds))
            if len(rounds) == 1:
                nursery.start_soon(follow_up)  # what the barrier "delivered"

        remove = bridge.add_barrier(barrier)
        await settle()
        assert rounds == [0, 1] and done == ["follow-up"]
        remove()
        assert bridge.barriers == ()
        await settle()
        assert rounds == [0, 1]


async def test_wait_idle_returns_at_once_when_nothing_is_in_flight() -> None:
    async with open_loop_thread() as bridge:
        before = bridge.submitted
        await bridge.wait_idle()
        await bridge.run(asyncio.sleep, 0)
        assert bridge.submitted == before + 1 and bridge.in_flight == 0


async def test_a_cancelled_call_is_no_longer_in_flight_once_settled() -> None:
    """The count drops when the cancelled call's asyncio task has finished (the caller's
    shielded wait), not before: settle never returns while it still runs."""
    async with open_loop_thread() as bridge:
        gate = _Gate(bridge.loop)
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                await bridge.run(gate.wait)

            nursery.start_soon(call)
            await gate.entered.wait()
            assert bridge.in_flight == 1
            nursery.cancel_scope.cancel()
        assert bridge.in_flight == 0
        await settle()
