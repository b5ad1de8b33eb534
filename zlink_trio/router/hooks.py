"""Calling application hooks without letting them hurt the router (spec 10 §7.4, §12).

:class:`MetricsDispatcher` queues every metrics call (bounded; overflow is dropped and
counted) for one task that hands each call to a worker thread of its own, up to
``workers`` at once: a hook that blocks holds only its own thread (it delays the others
only once every worker is stuck), never a turn, a renewal or a signal; a hook that raises is
counted and forgotten.

Closing drains: :meth:`MetricsDispatcher.drain` stops accepting calls and waits for the
queued and running ones at most ``bound`` seconds of wall-clock time (a hook runs in a
thread, outside Trio's clock, so the bound is real time even under a MockClock); calls still
running then are abandoned — their threads finish on their own, their outcome is dropped —
so a hook that never returns cannot hold the router's exit.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, final

import trio

from .application import SessionMetrics

__all__ = ["MetricsDispatcher"]

_log = logging.getLogger("zlink_trio.router")

_Call = tuple[Callable[..., None], tuple[Any, ...]]


@final
class MetricsDispatcher:
    def __init__(self, metrics: SessionMetrics, *, buffer: int = 4096, workers: int = 8) -> None:
        self._metrics = metrics
        self._send, self._receive = trio.open_memory_channel[_Call](buffer)
        self._noop = type(metrics) is SessionMetrics
        self._workers = workers
        self._finished = threading.Event()
        """Set once every queued call ran (or the dispatcher stopped): the drain waits on it
        from a thread, on the wall clock."""
        self.dropped = 0
        self.failed = 0
        self.abandoned = 0

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
        """Run queued calls until :meth:`close` (then finish the queue) or cancellation
        (then abandon what runs)."""
        slots = trio.Semaphore(self._workers)
        limiter = trio.CapacityLimiter(self._workers)
        try:
            async with self._receive, trio.open_nursery() as calls:
                async for method, args in self._receive:
                    await slots.acquire()
                    calls.start_soon(self._run, method, args, slots, limiter)
        finally:
            self._finished.set()

    async def _run(
        self,
        method: Callable[..., None],
        args: tuple[Any, ...],
        slots: trio.Semaphore,
        limiter: trio.CapacityLimiter,
    ) -> None:
        try:
            await trio.to_thread.run_sync(
                self._call, method, args, limiter=limiter, abandon_on_cancel=True
            )
        except trio.Cancelled:
            self.abandoned += 1
            raise
        finally:
            slots.release()

    def close(self) -> None:
        """Accept no more calls (later ones are dropped and counted)."""
        self._send.close()

    async def drain(self, bound: float) -> bool:
        """Close, then wait up to ``bound`` wall-clock seconds for the queued and running
        calls; answers whether they all finished. The caller then cancels :meth:`serve`."""
        self.close()
        if self._noop or self._finished.is_set():
            return True
        done: bool = await trio.to_thread.run_sync(
            self._finished.wait, bound, abandon_on_cancel=True
        )
        if not done:
            _log.warning("metrics hooks still running after %s s; abandoning them", bound)
        return done
