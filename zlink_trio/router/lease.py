"""What a router keeps for each lease it holds (spec 10 §3.2, §7.4): the renewal phase, the
touch slot of the reservations the lease keeps alive, and one terminal latch.

Internal to the router (not exported): the renewer, the drain pass and the end paths share
these objects; nothing here does I/O.
"""

from __future__ import annotations

from typing import Literal, final

import attrs
import trio

from .ids import IdempotencyKey, ReserverId, SessionId

__all__ = ["HeldLease", "Reservation", "TouchSlot"]


@attrs.frozen
class Reservation:
    """One idempotency reservation this node is responsible for: the (key, reserver) pair
    (one attempt's holder name, never the lease holder's node id)."""

    key: IdempotencyKey
    reserver: ReserverId


@final
class TouchSlot:
    """The reservations a held lease keeps alive (§7.4): one cell per reservation, each a
    (key, reserver) pair, read at every renewal tick (never captured at schedule time), so a
    pass can keep its own submit's reservation and a collected message's alive at once."""

    def __init__(self) -> None:
        self._cells: dict[IdempotencyKey, ReserverId] = {}

    def bind(self, reservation: Reservation) -> None:
        self._cells[reservation.key] = reservation.reserver

    def unbind(self, reservation: Reservation) -> None:
        if self._cells.get(reservation.key) == reservation.reserver:
            del self._cells[reservation.key]

    def cells(self) -> tuple[Reservation, ...]:
        return tuple(Reservation(k, r) for k, r in self._cells.items())


@final
class HeldLease:
    """A lease this router holds: its renewer's cancel scope, its touch slot, and one
    terminal latch (``ended``) so racing end paths (yield, loss, release, close) end it
    exactly once."""

    def __init__(self, session_id: SessionId, acquired_at: float) -> None:
        self.session_id = session_id
        self.acquired_at = acquired_at
        """The renewal schedule's phase: ticks at acquired_at + k * extend interval."""
        self.slot = TouchSlot()
        self.scope = trio.CancelScope()
        self.ended: Literal["lost", "returned"] | None = None
