"""The outbound side of one STREAM connection: two bounded queues and one writer task.

Control frames (pongs, error frames, the closing notice) are written before application
frames (replies, pushes): keep-alive is never queued behind application work (spec 02
§5). Producers never wait: a frame is queued or refused at once, so a client that does not
read can stall nothing but itself — when a queue is full the connection is closed as a slow
consumer (the caller decides; :meth:`Outbound.put` says so). The writer is the one task that
writes to the websocket.
"""

from __future__ import annotations

from collections import deque
from typing import Final, Protocol, final

import trio

__all__ = ["Outbound", "Sink"]

_CONTROL_SLACK: Final = 64
"""Control frames a connection may hold beyond its application bound (pongs, errors)."""


class Sink(Protocol):
    async def send_message(self, message: bytes | str) -> None: ...


@final
class Outbound:
    """Queued frames of one connection (already encoded)."""

    __slots__ = ("_app", "_bound", "_closed", "_control", "_drained", "_task", "written")

    def __init__(self, bound: int) -> None:
        self._bound = bound
        self._control: deque[bytes | str] = deque()
        self._app: deque[bytes | str] = deque()
        self._task: trio.lowlevel.Task | None = None
        self._closed = False
        self._drained: trio.Event | None = None
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

    def _wake(self) -> None:
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
