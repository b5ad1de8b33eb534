"""Calling application hooks without letting them hurt the router (spec 10 §7.4, §12).

:class:`MetricsDispatcher` queues every metrics call (bounded; overflow is dropped and
counted) for one task that runs the hooks in a worker thread, one at a time: a hook that
blocks delays only the hooks behind it, never a turn, a renewal or a signal; a hook that
raises is counted and forgotten.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, final

import trio

from .application import SessionMetrics

__all__ = ["MetricsDispatcher"]

_log = logging.getLogger("zlink_trio.router")


@final
class MetricsDispatcher:
    def __init__(self, metrics: SessionMetrics, *, buffer: int = 4096) -> None:
        self._metrics = metrics
        self._send, self._receive = trio.open_memory_channel[
            tuple[Callable[..., None], tuple[Any, ...]]
        ](buffer)
        self._noop = type(metrics) is SessionMetrics
        self.dropped = 0
        self.failed = 0

    def emit(self, hook: str, *args: Any) -> None:
        """Queue ``metrics.<hook>(*args)``; never blocks, never raises."""
        if self._noop:
            return
        method = getattr(self._metrics, hook)
        if getattr(type(self._metrics), hook) is getattr(SessionMetrics, hook):
            return  # not overridden: nothing to run
        try:
            self._send.send_nowait((method, args))
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            self.dropped += 1

    def _call(self, method: Callable[..., None], args: tuple[Any, ...]) -> None:
        try:
            method(*args)
        except BaseException:  # (SystemExit too: it must not end the router)
            self.failed += 1
            _log.warning("a SessionMetrics hook raised", exc_info=True)

    async def serve(self) -> None:
        limiter = trio.CapacityLimiter(1)
        async with self._receive:
            async for method, args in self._receive:
                await trio.to_thread.run_sync(self._call, method, args, limiter=limiter)

    def close(self) -> None:
        self._send.close()
