"""A call's deadline and its caller's cancel scopes (docs/api.md, "The call convention").

A call's deadline is ``min(submit time + its timeout, trio.current_effective_deadline())``.
When the caller's deadline is the binding one, the call never ends DeadlineExceeded: the
caller's own scope ends it (``fail_after`` raises TooSlowError, ``move_on_*`` leaves its
block), as trio users expect.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

import trio

from ..errors import DeadlineExceeded

__all__ = ["call_deadline", "yield_to_caller", "yield_to_caller_scope"]

R = TypeVar("R")


def call_deadline(timeout: float) -> tuple[float, bool]:
    """``(deadline, caller_bound)``: ``min(now + timeout, the caller's effective
    deadline)``, and whether the caller's deadline is the binding one."""
    own = trio.current_time() + timeout
    callers = trio.current_effective_deadline()
    if callers <= own:
        return callers, True
    return own, False


async def yield_to_caller(run: Coroutine[Any, Any, R], deadline: float) -> R:
    """Run a call whose deadline is its caller's: it never ends DeadlineExceeded, the
    caller's own cancel scope ends it. An owner told that deadline (rounded down to whole
    milliseconds) may answer DeadlineExceeded a moment early: wait for the scope to fire
    then (a checkpoint when it already has)."""
    try:
        return await run
    except DeadlineExceeded:
        await trio.sleep_until(deadline)
        raise


async def yield_to_caller_scope(own: float) -> None:
    """A call bounded by its ``own`` deadline ended DeadlineExceeded without having looked
    up its caller's deadline: when the caller's effective deadline is not later than
    ``own``, let the caller's scope end the call (see :func:`yield_to_caller`). Returns
    (the caller then raises its DeadlineExceeded) when the call's own timeout was first."""
    callers = trio.current_effective_deadline()
    if callers <= own:
        await trio.sleep_until(callers)
