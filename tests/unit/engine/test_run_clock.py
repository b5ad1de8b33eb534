"""``run_clock()``: the current run's clock reader, or ``trio.current_time`` outside a run."""

from __future__ import annotations

import trio
import trio.testing

from zlink_trio.engine.clock import run_clock


def test_inside_a_run_it_reads_that_runs_clock() -> None:
    clock = trio.testing.MockClock()
    seen: list[tuple[float, float]] = []

    async def main() -> None:
        now = run_clock()
        seen.append((now(), trio.current_time()))
        clock.jump(5.0)
        seen.append((now(), trio.current_time()))

    trio.run(main, clock=clock)
    assert seen == [(0.0, 0.0), (5.0, 5.0)]


def test_outside_a_run_it_is_trio_current_time() -> None:
    now = run_clock()
    assert now is trio.current_time
    clock = trio.testing.MockClock()
    clock.jump(3.0)

    async def main() -> float:
        return now()

    assert trio.run(main, clock=clock) == 3.0
