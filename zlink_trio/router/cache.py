"""The node's open handles (spec 10 §5.2, §6.2, §6.3 B): keyed by SessionId alone, bounded
twice — by ``max_cached_sessions`` (LRU, the heap bound) and by the idle TTL (the router's
cache sweeper asks :meth:`HandleCache.idle`).

This is the map only; the pin rules live in the router, which knows which sessions run a
turn: an idle-expired session that runs a turn is not evicted (the pin prevents eviction);
an LRU-evicted one leaves the map at once and is closed when its turn ends (the pin only
delays the close). Internal to the router.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import final

import attrs
import trio

from .application import LiveSession
from .ids import SessionId

__all__ = ["HandleCache"]


@attrs.define
class _Entry:
    handle: LiveSession
    last_activity: float


@final
class HandleCache:
    """Least recently used first. ``get`` and ``touch`` count as activity."""

    def __init__(self, max_entries: int, *, clock: Callable[[], float] = trio.current_time):
        self._max = max_entries
        self._clock = clock
        self._entries: OrderedDict[SessionId, _Entry] = OrderedDict()

    def get(self, session_id: SessionId) -> LiveSession | None:
        entry = self._entries.get(session_id)
        if entry is None:
            return None
        self._entries.move_to_end(session_id)
        entry.last_activity = self._clock()
        return entry.handle

    def peek(self, session_id: SessionId) -> LiveSession | None:
        entry = self._entries.get(session_id)
        return None if entry is None else entry.handle

    def touch(self, session_id: SessionId) -> None:
        entry = self._entries.get(session_id)
        if entry is not None:
            entry.last_activity = self._clock()

    def put(
        self, session_id: SessionId, handle: LiveSession
    ) -> list[tuple[SessionId, LiveSession]]:
        """Add the session's handle as the most recent; answers the entries the LRU bound
        pushed out, least recent first. Never replaces another handle silently (it would
        stay open, unreachable): the caller closes and drops the old one first, else
        ValueError."""
        current = self._entries.get(session_id)
        if current is not None and current.handle is not handle:
            raise ValueError(f"{session_id} already has an open handle; close it first")
        self._entries[session_id] = _Entry(handle, self._clock())
        self._entries.move_to_end(session_id)
        evicted: list[tuple[SessionId, LiveSession]] = []
        while len(self._entries) > self._max:
            sid, entry = self._entries.popitem(last=False)
            evicted.append((sid, entry.handle))
        return evicted

    def drop(self, session_id: SessionId, handle: LiveSession | None = None) -> None:
        """Remove the entry (only if it still is ``handle``, when given)."""
        entry = self._entries.get(session_id)
        if entry is not None and (handle is None or entry.handle is handle):
            del self._entries[session_id]

    def idle(self, ttl: float) -> list[SessionId]:
        """Sessions whose last activity + ``ttl`` is before now (strictly: an entry survives
        at exactly last activity + ttl)."""
        now = self._clock()
        return [s for s, e in self._entries.items() if e.last_activity + ttl < now]

    def sessions(self) -> list[SessionId]:
        return list(self._entries)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._entries

    def __len__(self) -> int:
        return len(self._entries)
