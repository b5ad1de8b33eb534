"""Deadlines of Actor and Spot requests on their fast paths: one timer task ends every waiting
request on time.

A request whose route is cached (an Actor on this node, or an admitted owner elsewhere)
waits on one object: a local :data:`~zlink_trio.objects.sinks.LocalReply` slot or the mesh's pending reply.
A cancel scope per request would cost more than anything else the request does (trio's
``CancelScope`` enter + exit measured ~5 µs here: a fifth of a local ask, a tenth of a
cross-node one), so each runtime (Actors, Spots) runs ONE timer task for all of them: a heap of
(deadline, waiter), a cancel scope whose deadline is the earliest entry, and at each
deadline the waiters still waiting fail with DeadlineExceeded, at that very instant (exact
under a MockClock). A waiter marks its entry settled when its wait ends however it ended
(reply, error, cancellation); settled entries are skipped and compacted away, so the heap
holds about the requests in flight, not every request of the last deadline span. When
the runtime stops, waiting requests fail with ShuttingDown instead of outliving it.

Only the wait for the reply is timed here; everything that may block before it (a Store
read, a connection being made, a full writer lane) stays on the general path under the
operation's own cancel scope. See docs/decisions.md, "Actor runtime performance".
"""

from __future__ import annotations

import heapq
from typing import Final, TypeAlias, final

import trio

from ..engine.oneshot import OneShot
from ..errors import DeadlineExceeded, ShuttingDown
from ..mesh.api import PendingReply
from ..wire.payloads import TypedPayload

__all__ = ["ReplyDeadlines", "Waiter"]

Waiter: TypeAlias = OneShot[bytes | TypedPayload | None] | PendingReply
"""What a request waits on: ended by ``fail(error)`` / ``expire(error)`` at its deadline."""

_COMPACT_MIN: Final = 64
"""Heap entries tolerated before a compaction of settled ones is considered."""


def _end(waiter: Waiter, error: BaseException) -> None:
    if type(waiter) is OneShot:
        waiter.fail(error)
    else:
        waiter.expire(error)


@final
class ReplyDeadlines:
    __slots__ = ("_closed", "_heap", "_serial", "_timer", "_waiting", "_wake")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int]] = []  # (deadline, serial), settled ones too
        self._waiting: dict[int, Waiter] = {}  # serial -> waiter, until settled or ended
        self._serial = 0
        self._timer: trio.CancelScope | None = None
        self._wake: trio.Event | None = None
        self._closed = False

    def __len__(self) -> int:
        """Requests waiting."""
        return len(self._waiting)

    def watch(self, waiter: Waiter, deadline: float) -> int:
        """End ``waiter`` with DeadlineExceeded at ``deadline`` unless :meth:`settled`
        is called with the returned ticket first."""
        self._serial += 1
        serial = self._serial
        if self._closed:
            _end(waiter, ShuttingDown("the Actor runtime is stopping"))
            return serial
        heap = self._heap
        earliest = not heap or deadline < heap[0][0]
        heapq.heappush(heap, (deadline, serial))
        self._waiting[serial] = waiter
        if earliest:
            timer = self._timer
            if timer is not None:
                timer.deadline = deadline
            elif self._wake is not None:
                self._wake.set()
        return serial

    def settled(self, ticket: int) -> None:
        """The wait of ``ticket`` ended (the waiter calls this however it ended)."""
        waiting = self._waiting
        if waiting.pop(ticket, None) is None:
            return
        heap = self._heap
        if len(heap) >= _COMPACT_MIN and len(heap) > 2 * len(waiting):
            self._heap = [entry for entry in heap if entry[1] in waiting]
            heapq.heapify(self._heap)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The timer task (runs in the Actor runtime's nursery until it is cancelled)."""
        task_status.started()
        waiting = self._waiting
        try:
            while True:
                if not self._heap:
                    self._wake = wake = trio.Event()
                    await wake.wait()
                    self._wake = None
                    continue
                with trio.CancelScope(deadline=self._heap[0][0]) as timer:
                    self._timer = timer
                    await trio.sleep_forever()
                self._timer = None
                now = trio.current_time()
                heap = self._heap
                while heap and heap[0][0] <= now:
                    waiter = waiting.pop(heapq.heappop(heap)[1], None)
                    if waiter is not None:
                        _end(waiter, DeadlineExceeded("no reply before the request's deadline"))
        finally:
            self._closed = True
            self._timer = None
            self._heap.clear()
            ended = list(waiting.values())
            waiting.clear()
            for waiter in ended:
                _end(waiter, ShuttingDown("the Actor runtime stopped before the reply"))
