"""The router's lease renewal (spec 10 §7.4): one renewer task per held lease, touching
the reservations it keeps alive; the loss path, and giving back a lease lost locally."""

from __future__ import annotations

import logging

import trio

from .closing import Closing
from .events import InterruptReason
from .ids import SessionId
from .lease import HeldLease

__all__ = ["Renewal"]

log = logging.getLogger("zlink_trio.router")


class Renewal(Closing):
    """One renewer per held lease, and the loss path."""

    def _start_renewer(self, session_id: SessionId) -> None:
        held = HeldLease(session_id, trio.current_time())
        self._leases[session_id] = held
        self._nursery.start_soon(self._renew, held)

    async def _renew(self, held: HeldLease) -> None:
        sid = held.session_id
        interval = self._config.lock_extend_interval
        tick = held.acquired_at
        with held.scope:
            while True:
                tick += interval
                # the node watches its own lease: at the local deadline (when the granting
                # call was sent + TTL, never after the store's expiry) the lease is lost
                # here, whatever a hanging or failing backend call is doing
                deadline = self._store.deadline(sid)
                await trio.sleep_until(min(tick, deadline))
                lease = None
                if trio.current_time() < deadline:
                    with trio.move_on_at(deadline):
                        try:
                            lease = await self._store.renew(sid)
                        except Exception:
                            log.warning(
                                "renewal of %s failed; retrying next tick", sid, exc_info=True
                            )
                            continue
                if lease is None or self._store.held(sid) is None:
                    self._lease_lost(held)
                    await self._release_lapsed(sid)
                    return
                with trio.move_on_after(interval):  # a hanging touch cannot stop renewals
                    for cell in held.slot.cells():  # read now, at this tick
                        try:
                            await self._idempotency.touch(cell.key, cell.reserver)
                        except Exception:
                            log.warning("touch of %s failed", cell.key, exc_info=True)

    def _lease_lost(self, held: HeldLease) -> None:
        """The renewer's loss path: must not block. Everything else runs on other tasks:
        the running pass ends its turn (LEASE_LOST) and closes the handle; with no pass, a
        clean-up task closes it."""
        if held.ended is not None:
            return
        held.ended = "lost"
        sid = held.session_id
        if self._leases.get(sid) is held:
            del self._leases[sid]
        self._metrics.emit("on_lease_extend_failed", sid)
        gate = self._passes.get(sid)
        if gate is not None:
            gate.stop = InterruptReason.LEASE_LOST
            if gate.running is not None:
                gate.running.interrupt(InterruptReason.LEASE_LOST)
        else:
            self._nursery.start_soon(self._close_idle, sid)

    async def _release_lapsed(self, session_id: SessionId) -> None:
        """After a loss declared at the local deadline, give the store's copy back with the
        token it held (the store may have extended it: its answer came back late), so the
        session is free for every node now, not at the store's expiry. A stale token is
        refused by the store, so this never frees a lease granted since."""
        with self._cleanup():
            try:
                await self._store.release_lapsed(session_id)
            except Exception:
                log.warning("release of the lapsed lease of %s failed", session_id)
