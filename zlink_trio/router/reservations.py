"""The router's side of an idempotency reservation (spec 10 §6.3 D, F2/F6): reset on
failure, take over a collected message's reservation, hand it back, finish it."""

from __future__ import annotations

import logging

from .core import RouterCore
from .events import TurnResult, TurnSucceeded, turn_result_to_wire
from .idempotency import HolderAcquired, Marked
from .ids import ReserverId, TurnId
from .inbox import InboundMessage
from .lease import HeldLease, Reservation

__all__ = ["Reservations"]

log = logging.getLogger("zlink_trio.router")


class Reservations(RouterCore):
    """The router's side of an idempotency reservation."""

    async def _reset(self, reservation: Reservation) -> None:
        with self._cleanup():
            try:
                await self._idempotency.compare_and_reset(reservation.key, reservation.reserver)
            except Exception:
                log.warning("could not release idempotency key %s", reservation.key)

    async def _take_over(self, message: InboundMessage, held: HeldLease) -> Reservation | None:
        """§6.3 D: before running a collected (or injected) message, take its reservation
        over and bind it to the lease's touch slot. Win or unknown (the store threw): bound,
        and finished after the turn; reject (someone else's: DONE, held, expired): None —
        the message still runs, but writes nothing and binds nothing."""
        key = message.idempotency_key
        if key is None:
            return None
        reservation = Reservation(key, ReserverId.new(self.node_id))
        try:
            outcome = await self._idempotency.acquire_holder(key, reservation.reserver)
        except Exception:
            outcome = None  # unknown: behave like a win for writing and cleanup
        if outcome is None or isinstance(outcome, HolderAcquired):
            held.slot.bind(reservation)
            return reservation
        self._metrics.emit("on_takeover_rejected", key)
        return None

    async def _untake(self, reservation: Reservation, held: HeldLease) -> None:
        """Undo a takeover for a message handed back to the inbox: holderless again, so its
        next collector can take it."""
        held.slot.unbind(reservation)
        try:
            await self._idempotency.release_holder(reservation.key, reservation.reserver)
        except Exception:
            log.warning("could not hand reservation %s back", reservation.key, exc_info=True)

    async def _finish_reservation(
        self, reservation: Reservation, turn_id: TurnId, result: TurnResult
    ) -> bool | None:
        """F6 first half: markDone a success; release the key of a failure so a retry runs.
        Both name this attempt's reserver, so the store refuses them once the reservation is
        someone else's (reset by a sweep and reserved again by a retry): a late write or
        release never clobbers a newer reservation. Answers whether the store took it
        (None: it threw — unknown)."""
        try:
            if isinstance(result, TurnSucceeded):
                marked = await self._idempotency.mark_done(
                    reservation.key, reservation.reserver, turn_result_to_wire(turn_id, result)
                )
                return isinstance(marked, Marked)
            return await self._idempotency.compare_and_reset(reservation.key, reservation.reserver)
        except Exception:
            log.warning("idempotency update of %s failed", reservation.key, exc_info=True)
            return None
