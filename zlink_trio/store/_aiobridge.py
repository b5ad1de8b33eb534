"""Run asyncio coroutines (asyncpg) from Trio on a dedicated asyncio loop thread.

asyncpg only runs on an asyncio loop. :func:`open_loop_thread` starts one
``asyncio.SelectorEventLoop`` on its own thread for the lifetime of an ``async with`` block;
:meth:`LoopThread.run` runs one coroutine function there as an asyncio Task and hands its
outcome back to the calling Trio task. The loop thread does I/O only: callers keep
decoding and logic on the Trio side.

Cancellation (notes/postgres-under-trio.md, traps 1 and 4): when the calling Trio task is
cancelled (or gets ``KeyboardInterrupt``), :meth:`LoopThread.run` cancels the asyncio *Task*
itself and waits, shielded, until that task has finished; only then does the interruption
propagate. Nothing the coroutine started keeps running behind the caller's back, and
whatever the task ended with (a value, ``CancelledError``, or the ``ConnectionError``
asyncpg's cancel path may surface) is dropped: a cancelled call always raises. So a
coroutine that creates a resource (a connection) must hand it over on the loop side
(store it somewhere) instead of returning it, and must finish promptly once cancelled.

Hand-off between threads: the Trio side queues a call and rings the loop's selector only
while the loop sleeps (:class:`_HandOffSelector`); the loop starts queued calls from inside
its ``select()``, in the iteration that noticed them. The loop side answers by ringing a
per-call *doorbell* (an eventfd, or a socket pair where eventfd is missing) that the
waiting Trio task sleeps on with :func:`trio.lowlevel.wait_readable`. That skips Trio's
``run_sync_soon`` entry queue (one scheduler hop and a lock per call; ~30 µs per round trip
here) and, unlike a ``run_sync_soon`` callback, cannot raise into the Trio run. Doorbells
are pooled. ``call_soon_threadsafe`` is used only to cancel a call and to stop the loop.

Quiescence (test hook, :func:`zlink_trio.testing.settle`): every bridge counts its calls in
flight (submitted, not yet handed back to the Trio side) and can be waited on until none is
(:meth:`LoopThread.wait_idle`); the live bridges of the process are listed by
:func:`live_loop_threads`. ``trio.testing.wait_all_tasks_blocked`` alone returns while a
statement is in flight, since its caller sleeps on a doorbell. A component that delivers on
its own schedule (a LISTEN connection) registers a *barrier* with its bridge
(:meth:`LoopThread.add_barrier`): an awaitable that returns once everything it had received
before the call has been handed on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import selectors
import socket
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, Final, Generic, TypeVar, TypeVarTuple, Unpack, final

import outcome
import trio

__all__ = ["LoopThread", "live_loop_threads", "open_loop_thread"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


@final
class _Doorbell:
    """A one-shot wake-up from the loop thread to one waiting Trio task (reusable)."""

    __slots__ = ("_fd", "_pair")

    def __init__(self) -> None:
        self._pair: tuple[socket.socket, socket.socket] | None = None
        if hasattr(os, "eventfd"):
            self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        else:  # pragma: no cover - non-Linux
            a, b = socket.socketpair()
            a.setblocking(False)
            b.setblocking(False)
            self._pair = (a, b)
            self._fd = a.fileno()

    def fileno(self) -> int:
        return self._fd

    def drain(self) -> None:
        try:
            if self._pair is None:
                os.eventfd_read(self._fd)
            else:  # pragma: no cover - non-Linux
                self._pair[0].recv(64)
        except BlockingIOError:
            pass

    def close_fd(self) -> None:
        """Close without telling Trio (the fd was never waited on by Trio)."""
        if self._pair is None:
            os.close(self._fd)
        else:  # pragma: no cover - non-Linux
            for sock in self._pair:
                sock.close()

    def ring(self) -> None:
        """Loop thread: wake the waiter."""
        if self._pair is None:
            os.eventfd_write(self._fd, 1)
        else:  # pragma: no cover - non-Linux
            self._pair[1].send(b"\0")

    async def wait(self) -> None:
        """Trio thread: sleep until rung, then re-arm."""
        await trio.lowlevel.wait_readable(self._fd)
        if self._pair is None:
            os.eventfd_read(self._fd)
        else:  # pragma: no cover - non-Linux
            self._pair[0].recv(64)

    def close(self) -> None:
        trio.lowlevel.notify_closing(self._fd)
        self.close_fd()


_WAKE: Final = object()


class _HandOffSelector(selectors.DefaultSelector):
    """The loop's selector, extended with the Trio -> loop hand-off.

    Submitted calls wait in :attr:`LoopThread._pending`. The Trio side rings this
    selector's eventfd only while the loop sleeps (:attr:`sleeping`); every ``select``
    returns through :meth:`LoopThread._start_pending`, so a submitted call starts in the
    same loop iteration that noticed it, without a ``call_soon_threadsafe`` handle and its
    extra iteration. No wake-up is lost: ``sleeping`` is set before the pending queue is
    checked, and the Trio side appends before it reads ``sleeping``.
    """

    def __init__(self, bridge: LoopThread) -> None:
        super().__init__()
        self._bridge = bridge
        self._bell = _Doorbell()
        super().register(self._bell.fileno(), selectors.EVENT_READ, _WAKE)
        self.sleeping = False

    def wake(self) -> None:
        """Trio thread."""
        self._bell.ring()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        self.sleeping = True
        try:
            events = super().select(0 if self._bridge._pending else timeout)
        finally:
            self.sleeping = False
        ready = []
        for key, mask in events:
            if key.data is _WAKE:
                self._bell.drain()
            else:
                ready.append((key, mask))
        self._bridge._start_pending()
        return ready

    def close(self) -> None:
        super().unregister(self._bell.fileno())
        self._bell.close_fd()
        super().close()


@final
class _Call(Generic[T]):
    """One coroutine run on the loop thread on behalf of one waiting Trio task."""

    __slots__ = ("_afn", "_args", "_bell", "_bridge", "_cancelled", "_running", "_task", "result")

    def __init__(
        self,
        bridge: LoopThread,
        bell: _Doorbell,
        afn: Callable[..., Coroutine[Any, Any, T]],
        args: tuple[Any, ...],
    ) -> None:
        self._bridge = bridge
        self._bell = bell
        self._afn = afn
        self._args = args
        self._task: asyncio.Task[None] | None = None
        self._cancelled = False
        self._running = False
        self.result: outcome.Outcome[T] | None = None

    async def wait(self) -> None:
        """Trio thread: sleep until the loop side rang this call's doorbell (finished)."""
        await self._bell.wait()

    # Everything below runs on the loop thread.
    def start(self) -> None:
        if self._cancelled:  # cancelled before it was started: never run it
            self._cancelled_unstarted()
            return
        try:
            task = self._bridge.loop.create_task(self._main())
        except BaseException as exc:  # pragma: no cover - loop closing under us
            self.result = outcome.Error(exc)
            self._bell.ring()
            return
        self._task = task
        self._bridge._tasks.add(task)  # a strong reference while it runs

    def cancel(self) -> None:
        self._cancelled = True
        task = self._task
        if task is not None and self.result is None:
            task.cancel()
            if not self._running:
                # Its first step has not run yet: asyncio will throw CancelledError into
                # the unstarted coroutine, so _main's body (and its ring) never runs.
                self._bridge._tasks.discard(task)
                self._cancelled_unstarted()

    def _cancelled_unstarted(self) -> None:
        self.result = outcome.Error(asyncio.CancelledError())
        self._bell.ring()

    async def _main(self) -> None:
        # No done callback: it would cost the loop one more iteration per call.
        self._running = True
        try:
            self.result = outcome.Value(await self._afn(*self._args))
        except BaseException as exc:  # handed to the Trio side, never re-raised here
            self.result = outcome.Error(exc)
        finally:
            self._bridge._tasks.discard(self._task)
            self._bell.ring()


@final
class LoopThread:
    """An asyncio event loop on a dedicated thread, owned by :func:`open_loop_thread`."""

    def __init__(self) -> None:
        # Calls submitted from Trio, started by the selector when the loop wakes.
        self._pending: deque[_Call[Any]] = deque()
        self._selector = _HandOffSelector(self)
        self.loop = asyncio.SelectorEventLoop(self._selector)
        self._tasks: set[asyncio.Task[None]] = set()
        self._bells: list[_Doorbell] = []
        self._closed = False
        # Quiescence (module docstring): Trio thread only.
        self._in_flight = 0
        self._submitted = 0
        self._idle: trio.Event | None = None
        self._barriers: list[Callable[[], Awaitable[None]]] = []

    @property
    def in_flight(self) -> int:
        """Calls submitted and not yet handed back to the Trio side."""
        return self._in_flight

    @property
    def submitted(self) -> int:
        """Calls submitted since the bridge opened (a counter, to tell whether any ran)."""
        return self._submitted

    async def wait_idle(self) -> None:
        """Return once no call is in flight (at once when none is)."""
        while self._in_flight:
            if self._idle is None:
                self._idle = trio.Event()
            await self._idle.wait()

    def add_barrier(self, barrier: Callable[[], Awaitable[None]]) -> Callable[[], None]:
        """Register a barrier (module docstring); returns the function that removes it."""
        self._barriers.append(barrier)

        def remove() -> None:
            if barrier in self._barriers:
                self._barriers.remove(barrier)

        return remove

    @property
    def barriers(self) -> tuple[Callable[[], Awaitable[None]], ...]:
        return tuple(self._barriers)

    def _start_pending(self) -> None:
        pending = self._pending
        while pending:
            pending.popleft().start()

    async def run(self, afn: Callable[[Unpack[Ts]], Coroutine[Any, Any, T]], *args: *Ts) -> T:
        """Run ``afn(*args)`` as an asyncio Task on the loop thread; return its result.

        Raises whatever the coroutine raised. On Trio cancellation the asyncio Task is
        cancelled and awaited before ``trio.Cancelled`` propagates (module docstring).
        Raises ``trio.ClosedResourceError`` when the loop thread is closed or closing.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        call = self.submit(afn, *args)
        try:
            await call.wait()
        except BaseException:
            # Cancelled (or KeyboardInterrupt): stop the asyncio task and wait for it.
            await self.cancel_and_settle(call)
            raise
        return self.result_of(call).unwrap()

    def submit(self, afn: Callable[[Unpack[Ts]], Coroutine[Any, Any, T]], *args: *Ts) -> _Call[T]:
        """Queue ``afn(*args)`` for the loop thread without waiting (no schedule point).

        The caller then owns the call: it waits with :meth:`_Call.wait` (one task at a
        time), and ends it with :meth:`result_of` once it rang, or with
        :meth:`cancel_and_settle`. Raises ``trio.ClosedResourceError`` when closed."""
        if self._closed:
            raise trio.ClosedResourceError("asyncio loop thread closed")
        bell = self._bells.pop() if self._bells else _Doorbell()
        call: _Call[T] = _Call(self, bell, afn, args)
        self._in_flight += 1
        self._submitted += 1
        self._pending.append(call)
        if self._selector.sleeping:
            self._selector.wake()
        return call

    def cancel(self, call: _Call[Any]) -> None:
        """Ask the loop thread to cancel ``call``'s asyncio task (no wait): its doorbell
        rings once the task has finished."""
        self.loop.call_soon_threadsafe(call.cancel)

    async def cancel_and_settle(self, call: _Call[Any]) -> None:
        """Cancel ``call``'s asyncio task and wait, shielded, until it has finished; its
        doorbell goes back to the pool (its outcome is dropped)."""
        self.cancel(call)
        with trio.CancelScope(shield=True):
            await call.wait()
        self._release(call._bell)

    def result_of(self, call: _Call[T]) -> outcome.Outcome[T]:
        """The outcome of a call whose doorbell rang (its doorbell goes back to the pool).
        An asyncio ``CancelledError`` nobody on the Trio side asked for means the loop is
        shutting down: ``trio.ClosedResourceError``."""
        self._release(call._bell)
        result = call.result
        assert result is not None
        if isinstance(result, outcome.Error) and isinstance(result.error, asyncio.CancelledError):
            # Nobody on the Trio side asked for this: the loop is shutting down.
            try:
                raise trio.ClosedResourceError("asyncio loop thread closed") from result.error
            except trio.ClosedResourceError as exc:
                return outcome.Error(exc)
        return result

    def _release(self, bell: _Doorbell) -> None:
        self._in_flight -= 1
        if not self._in_flight and self._idle is not None:
            self._idle.set()
            self._idle = None
        if self._closed:
            bell.close()
        else:
            self._bells.append(bell)

    def _close_bells(self) -> None:
        self._closed = True
        for bell in self._bells:
            bell.close()
        self._bells.clear()


async def _drain(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is still running on the loop, then shut down generators and executor."""
    current = asyncio.current_task(loop)
    tasks = [t for t in asyncio.all_tasks(loop) if t is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await loop.shutdown_asyncgens()
    await loop.shutdown_default_executor()


def _thread_main(loop: asyncio.AbstractEventLoop) -> None:
    try:
        loop.run_forever()
    finally:
        try:
            loop.run_until_complete(_drain(loop))
        finally:
            loop.close()


_LIVE: Final[set[LoopThread]] = set()


def live_loop_threads() -> tuple[LoopThread, ...]:
    """The bridges open in this process (test hook: module docstring)."""
    return tuple(_LIVE)


@asynccontextmanager
async def open_loop_thread(name: str = "zlink-asyncio") -> AsyncIterator[LoopThread]:
    """Start an asyncio loop thread for the body of the block; stop and join it on exit.

    The loop is a plain ``asyncio.SelectorEventLoop`` built here (``asyncio.new_event_loop``
    raises once trio-asyncio is imported). On exit, tasks still on the loop are cancelled
    and awaited, then the thread is joined; exit cannot be cancelled.
    """
    bridge = LoopThread()
    loop = bridge.loop
    thread = threading.Thread(target=_thread_main, args=(loop,), name=name, daemon=True)
    thread.start()
    _LIVE.add(bridge)
    try:
        yield bridge
    finally:
        _LIVE.discard(bridge)
        bridge._closed = True
        with contextlib.suppress(RuntimeError):  # the loop already ended (thread died)
            loop.call_soon_threadsafe(loop.stop)
        await trio.to_thread.run_sync(thread.join)
        bridge._close_bells()
