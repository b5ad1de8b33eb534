"""Submit-once fluent calls (spec 04 §6.2): options may be set once, the terminal submit
runs once; doing either twice raises InvalidOperation. ``await call`` is ``await
call.submit()``."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Generic, Self, TypeVar

import trio

from ..errors import InvalidOperation
from ..ids import InvalidId

__all__ = ["FluentCall", "check_timeout"]

R = TypeVar("R")


def check_timeout(seconds: float) -> float:
    """A finite, positive timeout in seconds, rounded UP to whole milliseconds."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidId(f"timeout must be seconds, got {seconds!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidId(f"timeout must be finite and > 0, got {seconds!r}")
    return math.ceil(seconds * 1000) / 1000


class FluentCall(Generic[R]):
    """Base of the fluent calls: option bookkeeping and the one submit."""

    __slots__ = ("_options", "_run", "_submitted", "_timeout")

    def __init__(self, run: Callable[[Any, float], Awaitable[R]], default_timeout: float) -> None:
        self._run = run
        self._timeout = default_timeout
        self._options: set[str] = set()
        self._submitted = False

    def _option(self, name: str) -> None:
        if self._submitted:
            raise InvalidOperation(f"{name}() after submit")
        if name in self._options:
            raise InvalidOperation(f"{name}() set twice")
        self._options.add(name)

    def timeout(self, seconds: float) -> Self:
        """The operation's one end-to-end deadline, counted from submit."""
        self._option("timeout")
        self._timeout = check_timeout(seconds)
        return self

    async def submit(self) -> R:
        """Run the call (once). The deadline is fixed now: submit time + timeout."""
        if self._submitted:
            raise InvalidOperation("the call was already submitted")
        self._submitted = True
        deadline = trio.current_time() + self._timeout
        return await self._run(self, deadline)

    def __await__(self) -> Generator[Any, None, R]:
        return self.submit().__await__()
