"""A connection's writer lane: the bounded FIFO of encoded frames waiting to be written.

One consumer at a time takes from it (the connection's writer task, or a sender that
self-drains while the writer is idle: :mod:`.connection`); any task puts. It keeps the
contract of the trio memory channel it replaces (``trio.open_memory_channel(capacity)``
as the connection used it): a put without waiting raises ``trio.WouldBlock`` when full;
a waiting put waits for room in FIFO order (a put without waiting never takes room a
waiting put was promised); once :meth:`close_send` was called puts raise
``trio.ClosedResourceError`` and a take of an empty lane raises ``trio.EndOfChannel``;
once :meth:`close_receive` was called puts raise ``trio.BrokenResourceError`` and takes
``trio.ClosedResourceError``. A waiting put is woken by either close and raises.

Why not the channel itself: every cross-node message puts and takes one frame, and a
``send_nowait`` + ``receive_nowait`` pair of trio's channel costs about 0.5 us, a deque's
about 0.1 us (docs/decisions.md, "Writer lane and send timeout").
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar, final

import trio

__all__ = ["WriterLane"]

T = TypeVar("T")


@final
class WriterLane(Generic[T]):
    __slots__ = ("_capacity", "_ended", "_items", "_reserved", "_room", "_taker_closed", "_waiting")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("a writer lane holds at least one item")
        self._items: deque[T] = deque()
        self._capacity = capacity
        self._reserved = 0  # room promised to woken waiting puts that have not run yet
        self._waiting = 0  # puts waiting for room
        self._room = trio.lowlevel.ParkingLot()
        self._ended: type[trio.ClosedResourceError | trio.BrokenResourceError] | None = None
        """What a put raises now (None while open)."""
        self._taker_closed = False

    def put_nowait(self, item: T) -> None:
        """Append ``item``; ``trio.WouldBlock`` when there is no room (see the module)."""
        if (
            self._ended is None
            and not self._waiting
            and len(self._items) + self._reserved < self._capacity
        ):
            self._items.append(item)
            return
        if self._ended is not None:
            raise self._ended("the writer lane is closed")
        raise trio.WouldBlock

    async def put(self, item: T) -> None:
        """Append ``item``, waiting for room (in FIFO order with the other waiting puts)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            self.put_nowait(item)
        except trio.WouldBlock:
            pass
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        self._waiting += 1
        try:
            await self._room.park()
        finally:
            self._waiting -= 1
        # Woken by a take (room was reserved for this put) or by a close.
        self._reserved -= 1
        if self._ended is not None:
            raise self._ended("the writer lane is closed")
        self._items.append(item)

    def take_nowait(self) -> T:
        """The oldest item; ``trio.WouldBlock`` when empty (``trio.EndOfChannel`` once
        :meth:`close_send` was called and nothing is left)."""
        if self._taker_closed:
            raise trio.ClosedResourceError("the writer lane is closed")
        try:
            item = self._items.popleft()
        except IndexError:
            if self._ended is trio.ClosedResourceError:
                raise trio.EndOfChannel from None
            raise trio.WouldBlock from None
        if self._waiting > self._reserved:  # a waiting put gets the room
            self._reserved += 1
            self._room.unpark()
        return item

    def close_send(self) -> None:
        """No more puts (``trio.ClosedResourceError``); takes drain what is left."""
        self._ended = trio.ClosedResourceError  # (over a closed receive side, as trio)
        self._wake_all()

    def close_receive(self) -> None:
        """No more takes: puts raise ``trio.BrokenResourceError``, takes
        ``trio.ClosedResourceError``."""
        self._taker_closed = True
        if self._ended is None:
            self._ended = trio.BrokenResourceError
        self._wake_all()

    def _wake_all(self) -> None:
        woken = self._waiting - self._reserved
        if woken > 0:
            self._reserved += woken
            self._room.unpark_all()
