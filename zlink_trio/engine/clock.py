"""This trio run's clock, read with one call (a hot-path helper)."""

from __future__ import annotations

from collections.abc import Callable

import trio

__all__ = ["run_clock"]


def run_clock() -> Callable[[], float]:
    """The current run's ``clock.current_time``: what ``trio.current_time()`` reads, in one
    call instead of three (trio's wrapper, the runner, the clock). For an object that lives
    inside one run and reads the clock per message. Outside a run: ``trio.current_time``
    itself (it then reads whichever run later calls it)."""
    try:
        return trio.lowlevel.current_clock().current_time
    except RuntimeError:
        return trio.current_time
