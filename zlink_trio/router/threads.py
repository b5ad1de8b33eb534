"""Calling a synchronous application callback without stalling the router (issue 15: a
callback the application supplies never blocks the router; a slow one delays only itself).

:func:`call_in_thread` runs the callback in a daemon thread of its own and waits for it at
most ``bound`` seconds of wall-clock time (the callback runs outside Trio's clock, so the
bound is real time even under a MockClock). The awaiting task is the only one that waits;
every other task of the router keeps running. A callback still running at the bound is
abandoned — its thread finishes on its own, its outcome is dropped — and the answer says so.
"""

from __future__ import annotations

import contextlib
import enum
import threading
from collections.abc import Callable
from typing import Any

import attrs
import trio

__all__ = ["CallOutcome", "Called", "call_in_thread"]


class CallOutcome(enum.Enum):
    RETURNED = "returned"
    RAISED = "raised"
    ABANDONED = "abandoned"
    """Still running at the bound (or the waiting task was cancelled): outcome unknown."""


@attrs.frozen
class Called:
    outcome: CallOutcome
    error: BaseException | None = None


async def call_in_thread(fn: Callable[..., Any], *args: Any, bound: float) -> Called:
    """Run ``fn(*args)`` in a thread; wait for it at most ``bound`` wall-clock seconds.
    Never raises what ``fn`` raised (it is reported, SystemExit included).

    The worker thread wakes the waiting task itself (one hand-off back to Trio, no second
    thread polling it); a daemon timer thread wakes it at the bound."""
    token = trio.lowlevel.current_trio_token()
    woken = trio.Event()
    box: list[Called] = []

    def wake() -> None:
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(woken.set)

    def work() -> None:
        try:
            fn(*args)
        except BaseException as exc:  # (SystemExit too: it must not end the router)
            box.append(Called(CallOutcome.RAISED, exc))
        else:
            box.append(Called(CallOutcome.RETURNED))
        finally:
            wake()

    timer = threading.Timer(bound, wake)
    timer.daemon = True
    threading.Thread(target=work, name="zlink-router-callback", daemon=True).start()
    timer.start()
    try:
        await woken.wait()
    finally:
        timer.cancel()
    if not box:
        return Called(CallOutcome.ABANDONED)
    return box[0]
