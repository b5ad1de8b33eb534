"""Repeated application messages at the Actor owner: dropped, never run twice.

Application sends and requests are never re-sent by the framework (spec 04 §5.1, §8.1), so
a second arrival of one command 24 can only be a transport-level repeat (a duplicated or
re-delivered frame). Every remote 24 carries a message id in ``operation_id``, unique per
source node lifecycle (a counter stamped by the sender); the owner keeps, per source
lifecycle, an anti-replay window (the highest id seen and a bitmap of the
:data:`WINDOW` ids below it) and drops an id it has seen.

An id older than the window cannot be told apart from a repeat and is dropped too: for the
sender that is indistinguishable from a frame lost on the wire (a request ends
DeadlineExceeded, a send is lost), which faults may do anyway, whereas running a message
twice is never allowed. Ids are stamped in send order and one connection delivers in
order, so a fresh id falls behind the window only when more than :data:`WINDOW` later
messages of the same source overtook it (a frame held back by a fault plan).
"""

from __future__ import annotations

from typing import Final, final

from ..ids import NodeGeneration, NodeRid

__all__ = ["WINDOW", "IngressDedupe"]

WINDOW: Final = 4096
"""Ids remembered below the highest one, per source lifecycle (a 512-byte bitmap)."""

MAX_SOURCES: Final = 4096
"""Source lifecycles remembered; the oldest is forgotten first (restarted nodes come back
as new lifecycles, so an old one only ever repeats frames already in flight)."""

_MASK: Final = (1 << WINDOW) - 1


@final
class _Window:
    __slots__ = ("bits", "high")

    def __init__(self) -> None:
        self.high = 0
        self.bits = 0  # bit k set: id (high - k) was seen

    def first(self, message_id: int) -> bool:
        high = self.high
        if message_id > high:
            shift = message_id - high
            self.bits = ((self.bits << shift) | 1) & _MASK if shift < WINDOW else 1
            self.high = message_id
            return True
        offset = high - message_id
        if offset >= WINDOW:
            return False
        bit = 1 << offset
        if self.bits & bit:
            return False
        self.bits |= bit
        return True


@final
class IngressDedupe:
    """Per source node lifecycle, which message ids were already accepted."""

    __slots__ = ("_sources", "repeats")

    def __init__(self) -> None:
        self._sources: dict[tuple[NodeRid, NodeGeneration], _Window] = {}
        self.repeats = 0

    def first(self, rid: NodeRid, generation: NodeGeneration, message_id: int) -> bool:
        """True the first time ``message_id`` of that source lifecycle is seen."""
        key = (rid, generation)
        window = self._sources.get(key)
        if window is None:
            if len(self._sources) >= MAX_SOURCES:
                del self._sources[next(iter(self._sources))]
            window = self._sources[key] = _Window()
        if window.first(message_id):
            return True
        self.repeats += 1
        return False
