"""Repeated application messages at an object's owner (Actors: command 24; Spots: 39):
dropped, never run twice, and a fresh message is never taken for a repeat.

Application sends and requests are never re-sent by the framework (spec 04 §5.1, §8.1), so
a second arrival of one command 24 can only be a transport-level repeat (a duplicated
frame). Every remote 24 carries a message id in ``operation_id``, unique per source node
lifecycle (one counter of the sender, shared by all its meshes and peers).

The window is kept **per link**: per (mesh, source NodeRid, NodeGeneration), i.e. per
:class:`~zlink_trio.mesh.api.PeerIdentity` of the connection the frame came in on. It
remembers the ids of the last :data:`WINDOW` commands 24 that arrived on that link, in
arrival order, and drops an id that is among them. It never remembers an id it did not
see, so it can never discard a frame it has not seen, however far other frames ran ahead.

Why a window by *arrival*, not by id distance (the earlier design kept the highest id per
source lifecycle and a bitmap of the 4,096 ids below it): the id space is per source
lifecycle, but a source's ids are split over several connections (two meshes between the
same nodes, other peers), so on one connection they are sparse, and a frame held back on
one connection fell "behind the window" when enough ids were spent elsewhere, and was
dropped as a repeat although it had never arrived (issue 9, item 8). No bounded window
over a sparse id space can tell an old fresh id from an old repeat; arrival order can,
because of where repeats come from:

* A repeat of a frame arrives on the connection that carried the original: nothing
  re-sends on another connection (a send is never retried), and the fault plan's
  *duplicate* writes the copy right after the original, in the same write.
* What "per connection" means across a reconnect: successive connections of one link
  carry disjoint frames (a frame is written on exactly one connection; frames held back on
  a connection are lost with it), so the link's window may simply carry over: it then holds
  only ids that really arrived on this link, and a fresh frame on the new connection is
  never among them. Keying by link (what the inbound handler is given) instead of by
  connection object costs nothing and needs no connection handle above the mesh.
* A repeat is therefore caught while fewer than :data:`WINDOW` other 24s of the same link
  arrived after its original; the transport's repeats arrive right after it.
"""

from __future__ import annotations

from collections import deque
from typing import Final, final

from ..mesh.api import PeerIdentity

__all__ = ["MAX_LINKS", "WINDOW", "IngressDedupe"]

WINDOW: Final = 4096
"""Message ids remembered per link: those of its last WINDOW arrivals."""

MAX_LINKS: Final = 1024
"""Links remembered; the oldest is forgotten first (a restarted peer comes back as a new
lifecycle, so an old link only ever repeats frames already in flight)."""


@final
class _Window:
    __slots__ = ("order", "seen")

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.order: deque[int] = deque()


@final
class IngressDedupe:
    """Per link, which message ids arrived recently (see the module docstring)."""

    __slots__ = ("_links",)

    def __init__(self) -> None:
        self._links: dict[PeerIdentity, _Window] = {}

    def first(self, link: PeerIdentity, message_id: int) -> bool:
        """True unless ``message_id`` is among the last WINDOW ids that arrived on ``link``."""
        window = self._links.get(link)
        if window is None:
            if len(self._links) >= MAX_LINKS:
                del self._links[next(iter(self._links))]
            window = self._links[link] = _Window()
        # (_Window.first inlined: once per inbound message)
        seen = window.seen
        if message_id in seen:
            return False
        seen.add(message_id)
        order = window.order
        order.append(message_id)
        if len(order) > WINDOW:
            seen.discard(order.popleft())
        return True
