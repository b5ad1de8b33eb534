"""A call's deadline and its caller's cancel scopes (docs/api.md, "The call convention").

A call's deadline is ``min(submit time + its timeout, trio.current_effective_deadline())``.
When the caller's deadline is the binding one, the call never ends DeadlineExceeded: the
caller's own scope ends it (``fail_after`` raises TooSlowError, ``move_on_*`` leaves its
block), as trio users expect.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import attrs
import trio

from ..errors import DeadlineExceeded

__all__ = ["call_deadline", "caller_deadline", "yield_to_caller", "yield_to_caller_scope"]

R = TypeVar("R")


def _walk_deadline() -> float:
    # trio.current_effective_deadline() without its recursion: the same walk over the
    # task's cancel statuses (innermost first, up to the root or the first shield), read
    # from the fields trio's own walk reads. Scopes on a task's chain are entered, so
    # their ``_deadline`` is absolute (a relative deadline is fixed on entry).
    status: Any = trio.lowlevel.current_task()._cancel_status
    deadline = math.inf
    while True:
        if status.effectively_cancelled:
            return -math.inf
        scope = status._scope
        if scope._deadline < deadline:
            deadline = scope._deadline
        status = status._parent
        if status is None or scope._shield:
            return deadline


def _walk_matches() -> bool:
    """The fields :func:`_walk_deadline` reads exist in this trio (checked once, on the
    attrs classes themselves; tests/unit/test_caller_deadline.py compares the results)."""
    try:
        from trio._core._run import CancelStatus

        task = attrs.fields_dict(trio.lowlevel.Task)
        scope = attrs.fields_dict(trio.CancelScope)
        status = attrs.fields_dict(CancelStatus)
    except (ImportError, TypeError, attrs.exceptions.NotAnAttrsClassError):
        return False
    return (
        "_cancel_status" in task
        and {"_deadline", "_shield"} <= scope.keys()
        and {"_scope", "_parent", "effectively_cancelled"} <= status.keys()
    )


caller_deadline: Callable[[], float] = (
    _walk_deadline if _walk_matches() else trio.current_effective_deadline
)
"""``trio.current_effective_deadline()``, about 3x cheaper under a deep stack of scopes
(a request's caller is typically 6-8 scopes deep: ~1.5-3 us per call, on the hottest
path of a remote request); falls back to trio's function when its fields differ."""


def call_deadline(timeout: float) -> tuple[float, bool]:
    """``(deadline, caller_bound)``: ``min(now + timeout, the caller's effective
    deadline)``, and whether the caller's deadline is the binding one."""
    own = trio.current_time() + timeout
    callers = caller_deadline()
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
    callers = caller_deadline()
    if callers <= own:
        await trio.sleep_until(callers)
