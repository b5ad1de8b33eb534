"""The router's handle cache paths (spec 10 §5.2, §6.3 B): opening a session's handle,
LRU eviction, and the idle sweeper."""

from __future__ import annotations

import logging

import trio

from .application import LiveSession, OpenRequest
from .closing import Closing
from .core import RouterState
from .ids import SessionId
from .values import LiveSessionOptions, OpenAttributes, Priority, SubmitRequest
from .work import Pass

__all__ = ["Handles"]

log = logging.getLogger("zlink_trio.router")


class Handles(Closing):
    """Opening, evicting and sweeping session handles."""

    async def _ensure_open(
        self,
        session_id: SessionId,
        gate: Pass,
        request: SubmitRequest,
        options: LiveSessionOptions,
        attributes: OpenAttributes,
    ) -> LiveSession | None:
        """The session's handle, opened on a miss. None when the pass was stopped while the
        opener ran, or gave the gate up (a release that stopped waiting for it): the late
        handle is closed here, never cached for a session this pass no longer runs."""
        handle = self._cache.get(session_id)
        if handle is not None:
            self._metrics.emit("on_cache_hit", session_id)
            return handle
        self._metrics.emit("on_cache_miss", session_id)
        handle = await self._opener.open(
            OpenRequest(
                session_id=session_id,
                agent_ref=request.agent_ref,
                context_discriminator=request.context_discriminator,
                options=options,
                open_attributes=attributes,
            )
        )
        held = self._leases.get(session_id)
        if (
            self._passes.get(session_id) is not gate
            or gate.stop is not None
            or held is None
            or held.ended is not None
            or session_id in self._cache
        ):
            with trio.CancelScope(shield=True):  # the close is bounded itself
                await self._close(session_id, handle)
            current = self._cache.get(session_id)
            if current is not None and self._passes.get(session_id) is gate and not gate.stop:
                return current  # (defensive: the gate makes this unreachable)
            return None
        for evicted_id, evicted in self._cache.put(session_id, handle):
            self._evict_lru(evicted_id, evicted)
        return handle

    def _evict_lru(self, session_id: SessionId, handle: LiveSession) -> None:
        """The LRU bound pushed a handle out (it has left the map already: the bound is the
        heap limit). A session whose gate is held — a turn runs on that handle (pinned), or
        a pass or release is between steps — closes it when the gate is given up, and the
        pass ends after its turn; an idle one closes now. Either way the session ends here:
        the lease is returned after the close, inside the gate."""
        self._metrics.emit("on_evicted", session_id, "lru")
        gate = self._passes.get(session_id)
        if gate is not None and gate.evicted is None:
            gate.evicted = handle
        elif gate is not None:
            self._nursery.start_soon(self._close, session_id, handle)
        else:
            self._nursery.start_soon(self._end_evicted, session_id, handle)

    async def _end_evicted(self, session_id: SessionId, handle: LiveSession) -> None:
        await self._close(session_id, handle)
        async with self._idle_gate(session_id) as gate:
            if gate is not None and session_id not in self._cache:
                await self._return_lease(session_id)

    async def _sweep_idle(self) -> None:
        """The cache sweeper (§4.1, §6.3 B), its own task: every ``cache_sweep_interval``,
        close each handle idle past ``idle_ttl`` (strictly) whose session runs no turn here
        (the pin prevents idle eviction), then return its lease. No signal: other nodes
        decide by their own measure."""
        interval = self._config.cache_sweep_interval
        tick = trio.current_time()
        while self._state is RouterState.ACCEPTING:
            tick += interval
            await trio.sleep_until(tick)
            expired = [s for s in self._cache.idle(self._config.idle_ttl) if s not in self._passes]
            if expired:
                async with trio.open_nursery() as sweep:
                    for session_id in expired:
                        sweep.start_soon(self._evict_idle, session_id)

    async def _evict_idle(self, session_id: SessionId) -> None:
        async with self._idle_gate(session_id) as gate:
            if gate is None or session_id not in self._cache.idle(self._config.idle_ttl):
                return
            self._metrics.emit("on_evicted", session_id, "idle")
            await self._close_handle(session_id)
            await self._return_lease(session_id)
        # a submit meanwhile was forwarded and its doorbell, heard while the gate was held,
        # dropped: ring again now that the gate is free (as a hand-off does)
        with self._cleanup():
            if self._accepting() and await self._pending(session_id):
                await self._ring(session_id, Priority.LATER)
