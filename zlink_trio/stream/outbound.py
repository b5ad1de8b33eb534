"""The outbound side of one STREAM connection: two bounded queues and one writer task.

Control frames (pongs, error frames, the closing notice) are written before application
frames (replies, pushes): keep-alive is never queued behind application work (spec 02
§5). Producers never wait: a frame is queued or refused at once, so a client that does not
read can stall nothing but itself — when a queue is full the connection is closed as a slow
consumer (the caller decides; :meth:`Outbound.put` says so). The writer task writes to
the websocket, with one exception:

Direct write (a connection's reader, :meth:`Outbound.write_here`): while the reader
dispatches a frame it *corks* the queue (what is queued meanwhile does not wake the writer);
if the writer was idle and frames were queued (an inline Actor turn's push or reply), the
reader then writes them itself, in queue order (control first), instead of handing them to
the writer — one task wake fewer per round trip. The writer stays parked meanwhile, so one
task writes at a time and the order is the writer's. If a send has to wait for the socket
(the client reads slowly), the reader hands its reading over before it waits (``on_block``),
so keep-alive and control work go on while it finishes that send; the writer then takes
over. A direct write is shielded from the reader's cancellation (a frame is never cut in
the middle); :meth:`Outbound.abort` cancels it when the connection's tasks stop.
"""

from __future__ import annotations

import types
from collections import deque
from collections.abc import Callable, Generator
from typing import Any, Final, Protocol, final

import trio

from ..engine.inline import SCHEDULE_POINT

__all__ = ["Outbound", "Sink"]

_CONTROL_SLACK: Final = 64
"""Control frames a connection may hold beyond its application bound (pongs, errors)."""

_DIRECT_FRAMES: Final = 16
"""At most this many frames per direct write; the writer writes the rest."""


class Sink(Protocol):
    async def send_message(self, message: bytes | str) -> None: ...


@final
class Outbound:
    """Queued frames of one connection (already encoded)."""

    __slots__ = (
        "_app",
        "_bound",
        "_closed",
        "_control",
        "_corked",
        "_direct",
        "_drained",
        "_task",
        "written",
    )

    def __init__(self, bound: int) -> None:
        self._bound = bound
        self._control: deque[bytes | str] = deque()
        self._app: deque[bytes | str] = deque()
        self._task: trio.lowlevel.Task | None = None
        self._closed = False
        self._drained: trio.Event | None = None
        self._corked = 0
        """Corks in place (a reader dispatching, a direct write): no writer wake-up."""
        self._direct: trio.CancelScope | None = None
        """The scope of the direct write in progress."""
        self.written = 0
        """Frames written so far."""

    @property
    def pending(self) -> int:
        return len(self._control) + len(self._app)

    def put(self, frame: bytes | str) -> bool:
        """Queue an application frame; False when the queue is full or closed (nothing
        queued: the caller closes the connection as a slow consumer)."""
        if self._closed or len(self._app) >= self._bound:
            return False
        self._app.append(frame)
        if not self._corked:  # (``_wake``'s own test first: no call while corked)
            self._wake()
        return True

    def put_control(self, frame: bytes | str) -> bool:
        """Queue a control frame (written first); False when even the control slack is
        used up (the client does not read)."""
        if self._closed or len(self._control) >= _CONTROL_SLACK:
            return False
        self._control.append(frame)
        self._wake()
        return True

    def close(self) -> None:
        """Accept nothing more; the writer still writes what is queued."""
        self._closed = True
        self._wake()

    async def wait_drained(self) -> None:
        """Wait until everything queued was written (bounded by the caller)."""
        if not self._control and not self._app:
            await trio.lowlevel.checkpoint()
            return
        if self._drained is None:
            self._drained = trio.Event()
        await self._drained.wait()

    # --- direct write ---------------------------------------------------------------------
    def cork(self) -> None:
        """Frames queued from now on do not wake the writer until :meth:`uncork` (or a
        direct write) hands them on."""
        self._corked += 1

    def uncork(self) -> None:
        self._corked -= 1
        if not self._corked and (self._control or self._app or self._closed):
            self._wake()

    @property
    def writable_here(self) -> bool:
        """Whether the corking caller (the only cork) may write what is queued itself:
        frames wait and the writer is idle (parked, writing nothing)."""
        return self._corked == 1 and self._task is not None and bool(self._control or self._app)

    @types.coroutine
    def write_here(
        self,
        sink: Sink,
        on_block: Callable[[], object],
        scope: trio.CancelScope | None = None,
    ) -> Generator[Any, Any, None]:
        """Write what is queued (up to :data:`_DIRECT_FRAMES`, control first) in the
        calling task, which holds the only cork (:attr:`writable_here`); uncorks at the end
        (the writer then writes the rest). ``on_block()`` is called before a send first
        waits for the socket; after that send no other frame is written here.

        ``scope``: the caller's own innermost cancel scope, which nothing but
        :meth:`abort` cancels while this runs (the connection's reader defers its own
        stop until the write ended: :class:`~.reader.StreamReader`) — no scope of its own
        to enter and leave per write. None: the write runs in a shielded scope of its own.

        A generator-based coroutine that drives each ``send_message`` itself
        (:func:`~zlink_trio.engine.inline.watch_first_block`, inlined): one coroutine
        layer for every resume of a send, not two.
        """
        if scope is None:
            with trio.CancelScope(shield=True) as shielded:  # noqa: ASYNC100 (yield from awaits)
                yield from self.write_here(sink, on_block, shielded)
            return
        control, app = self._control, self._app
        self._direct = scope
        try:
            for _ in range(_DIRECT_FRAMES):
                if control:
                    frame = control.popleft()
                elif app:
                    frame = app.popleft()
                else:
                    break
                send = sink.send_message(frame)
                watching = True
                sent: Any = None
                thrown: BaseException | None = None
                while True:
                    try:
                        trap = send.send(sent) if thrown is None else send.throw(thrown)
                    except StopIteration:
                        break
                    if watching and trap is not SCHEDULE_POINT:
                        watching = False  # the send waits for the socket
                        on_block()
                    sent, thrown = None, None
                    try:
                        sent = yield trap
                    except GeneratorExit:
                        send.close()
                        raise
                    except BaseException as exc:  # Cancelled (abort): the send decides
                        thrown = exc
                self.written += 1
                if not watching:
                    break
        finally:
            self._direct = None
            self.uncork()

    def abort(self) -> None:
        """The connection's tasks stop: cancel a direct write in progress."""
        direct = self._direct
        if direct is not None:
            direct.cancel(reason="zlink_trio STREAM connection closed")

    def _wake(self) -> None:
        if self._corked:
            return
        task, self._task = self._task, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    async def run(self, sink: Sink) -> None:
        """The writer: until cancelled (or closed and drained), write control frames
        first, then application frames, in their queue order."""
        control, app = self._control, self._app
        while True:
            if control:
                frame = control.popleft()
            elif app:
                frame = app.popleft()
            else:
                drained, self._drained = self._drained, None
                if drained is not None:
                    drained.set()
                if self._closed:
                    await trio.lowlevel.checkpoint()
                    return
                self._task = trio.lowlevel.current_task()

                def abort(_: object) -> trio.lowlevel.Abort:
                    self._task = None
                    return trio.lowlevel.Abort.SUCCEEDED

                await trio.lowlevel.wait_task_rescheduled(abort)
                continue
            await sink.send_message(frame)
            self.written += 1
