"""The router's turn gates and close paths (spec 10 §6.3 A–C): exclusive and idle gates,
stopping a pass, closing a handle (bounded by ``handle_close_timeout``), returning a lease,
purging a session's inbox."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from .application import LiveSession
from .core import RouterCore
from .events import InterruptReason
from .idempotency import HolderAcquired
from .ids import ReserverId, SessionId
from .values import Priority
from .work import Pass, PassEnd

__all__ = ["Closing"]

log = logging.getLogger("zlink_trio.router")


class Closing(RouterCore):
    """Turn gates and the close paths."""

    @asynccontextmanager
    async def _exclusive(self, session_id: SessionId) -> AsyncIterator[Pass]:
        """Hold the session's turn gate (stopping a running pass first), so no turn or
        drain starts here while a release or delete runs."""
        while (running := self._passes.get(session_id)) is not None:
            await self._stop_pass(session_id)
            if self._passes.get(session_id) is running:
                # its turn ignored the interrupt (§6.3 A): force-close — its relay delivers
                # nothing more (its remaining frames are lost, counted) and the subscribers
                # complete at once, before the close steps
                if running.running is not None:
                    running.running.relay.close()
                self._hub.complete(session_id)
                self._end_gate(session_id, running)
        gate = Pass()
        gate.end_by = PassEnd.CALLER
        self._passes[session_id] = gate
        try:
            yield gate
        finally:
            if gate.evicted is not None:
                with trio.CancelScope(shield=True):  # the close is bounded itself
                    await self._close(session_id, gate.evicted)
            self._end_gate(session_id, gate)

    @asynccontextmanager
    async def _idle_gate(self, session_id: SessionId) -> AsyncIterator[Pass | None]:
        """The session's turn gate if it is free (None when a pass or a release holds it),
        for clean-up that must not run beside a turn."""
        if session_id in self._passes:
            yield None
            return
        gate = Pass()
        gate.end_by = PassEnd.CALLER
        self._passes[session_id] = gate
        try:
            yield gate
        finally:
            if gate.evicted is not None:
                with trio.CancelScope(shield=True):  # the close is bounded itself
                    await self._close(session_id, gate.evicted)
            self._end_gate(session_id, gate)

    async def _await_passes_between_turns(self) -> None:
        """A closing router's seal (§6.3 C, docs/decisions.md): the leases are given back
        only once no drain pass is in the router's own steps — a collect in flight, a
        turn's end, handing back what it took. Those are never cancelled (a collect
        removes what it returns: cancelling it could lose messages), only waited for, at
        most ``release_interrupt_timeout``. Only a pass inside the application (a turn that
        ignores SYSTEM_SHUTDOWN) is abandoned."""
        with trio.move_on_after(self._config.release_interrupt_timeout) as bounded:
            while between := [
                gate for gate in self._passes.values() if gate.draining and gate.running is None
            ]:
                await between[0].done.wait()
        if bounded.cancelled_caught:
            log.warning(
                "closing %s: a pass stayed inside a collect or a hand-back for %s s; "
                "giving its lease back anyway",
                self.node_id,
                self._config.release_interrupt_timeout,
            )

    async def _stop_pass(self, session_id: SessionId) -> None:
        gate = self._passes.get(session_id)
        if gate is None:
            return
        gate.stop = InterruptReason.SESSION_RELEASED
        gate.end_by = PassEnd.CALLER
        if gate.running is not None:
            gate.running.interrupt(InterruptReason.SESSION_RELEASED)
        with trio.move_on_after(self._config.release_interrupt_timeout) as waited:
            await gate.done.wait()
        if waited.cancelled_caught:
            log.warning(
                "the turn of %s ignored its interrupt for %s s; closing it anyway "
                "(its remaining frames are lost)",
                session_id,
                self._config.release_interrupt_timeout,
            )

    async def _purge(self, session_id: SessionId) -> None:
        """Purge the session's inbox (§6.3 A, §7.7), and free the reservations of the keyed
        messages purged: nobody will run them, so a retry under the same key must run (not
        attach to an IN_FLIGHT entry until the forward TTL). The messages are taken with an
        atomic collect-everything (the purge that names what it took); a holderless
        reservation is taken over, then reset. Failures are logged: the forward TTL frees
        the key anyway."""
        try:
            purged = await self._inbox.collect(session_id, Priority.LATER)
        except Exception:
            log.warning("collect of %s before its purge failed", session_id, exc_info=True)
            purged = ()
        await self._inbox.purge(session_id)
        for message in purged:
            key = message.idempotency_key
            if key is None:
                continue
            reserver = ReserverId.new(self.node_id)
            with self._cleanup():
                try:
                    taken = await self._idempotency.acquire_holder(key, reserver)
                    if isinstance(taken, HolderAcquired):
                        await self._idempotency.compare_and_reset(key, reserver)
                except Exception:
                    log.warning("could not free key %s of a purged message", key, exc_info=True)

    async def _close_handle(self, session_id: SessionId) -> None:
        """Close the session's cached handle, then drop it from the cache (§6.3 A order)."""
        handle = self._cache.peek(session_id)
        if handle is None:
            return
        await self._close(session_id, handle)
        self._cache.drop(session_id, handle)

    async def _close(self, session_id: SessionId, handle: LiveSession) -> None:
        """``handle.aclose()``, at most ``handle_close_timeout``: an application close that
        never returns is abandoned with a warning (it cannot hold a release or the exit)."""
        if id(handle) in self._closing:
            return
        self._closing.add(id(handle))
        try:
            with trio.move_on_after(self._config.handle_close_timeout) as bounded:
                await handle.aclose()
            if bounded.cancelled_caught:
                log.warning(
                    "closing the handle of %s took over %s s; abandoned",
                    session_id,
                    self._config.handle_close_timeout,
                )
        except Exception:
            log.warning("closing the handle of %s failed", session_id, exc_info=True)
        finally:
            self._closing.discard(id(handle))

    async def _close_idle(self, session_id: SessionId) -> None:
        """Close the handle of a session this node no longer holds (lost lease, a peer's
        EVICT), unless a turn or a release holds its gate (they close it themselves)."""
        async with self._idle_gate(session_id) as gate:
            if gate is not None and session_id not in self._leases:
                await self._close_handle(session_id)

    async def _return_lease(self, session_id: SessionId) -> None:
        held = self._leases.pop(session_id, None)
        if held is None or held.ended is not None:
            return
        held.ended = "returned"
        held.scope.cancel()
        with self._cleanup():
            try:
                await self._store.release(session_id)
            except Exception:
                log.warning("lease release of %s failed (its TTL frees it)", session_id)
