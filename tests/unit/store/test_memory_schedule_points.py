"""The memory store's calls are cancellation points every time and schedule points every
``YIELD_EVERY``-th time (docs/decisions.md, "The memory store yields every 16th call")."""

from __future__ import annotations

import pytest
import trio

from zlink_trio.ids import MeshName
from zlink_trio.store.memory import YIELD_EVERY, MemoryLocationStore

MESH = MeshName("m")


class _Steps(trio.abc.Instrument):
    """Counts the steps of one task: each one after the first follows a yield."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


async def test_a_run_of_calls_yields_once_per_yield_every_calls() -> None:
    """In a loop of calls, exactly every YIELD_EVERY-th call yields to the scheduler; the
    calls between run without a scheduler pass."""
    store = MemoryLocationStore()
    counter = _Steps(trio.lowlevel.current_task())
    trio.lowlevel.add_instrument(counter)
    try:
        yielded = []
        for i in range(4 * YIELD_EVERY):
            before = counter.steps
            await store.list_nodes(MESH)
            if counter.steps != before:
                yielded.append(i)
    finally:
        trio.lowlevel.remove_instrument(counter)
    assert yielded == [YIELD_EVERY * k - 1 for k in range(1, 5)]


async def test_every_call_is_a_cancellation_point() -> None:
    """A cancelled caller gets Cancelled from every call, yield or not, and the call does
    nothing."""
    store = MemoryLocationStore()
    with trio.CancelScope() as scope:
        scope.cancel()
        for _ in range(2 * YIELD_EVERY):
            with pytest.raises(trio.Cancelled):
                await store.list_nodes(MESH)
    assert list(await store.list_nodes(MESH)) == []
