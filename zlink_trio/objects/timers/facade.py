"""``context.timers``: an owner's framework timers as its handlers see them (Actors now,
User and Instance Spots through the same class).

An owner kind implements :class:`TimerOwner` (the :class:`~.table.TickTarget` methods plus
a few read-only facts: its timer table slot, the node's service, its type's timer names,
whether the caller is inside one of its turns); its context's ``timers`` property returns
``Timers(owner)``. The owner gets its :class:`~.table.TimerTable` on its first
registration (an owner without timers holds none).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol, final

from ...errors import ConfigurationError, InvalidOperation, ShuttingDown
from ...ids import check_text_id
from .service import TimerService
from .table import TickTarget, TimerTable
from .values import TimerRegistration

__all__ = ["TimerOwner", "Timers"]


class TimerOwner(TickTarget, Protocol):
    """What :class:`Timers` needs from an owner kind (an Actor's ``HostedActor``, a
    Spot's hosted object)."""

    timers: TimerTable | None
    """Its table, set by :class:`Timers` on the first registration."""

    @property
    def timer_service(self) -> TimerService | None:
        """The node's timer service (None: timers cannot be registered)."""
        ...

    @property
    def timer_names(self) -> Collection[str]:
        """The timer names its type has ``@on_timer`` handlers for."""
        ...

    @property
    def timer_owner_noun(self) -> str:
        """How errors name its type, e.g. ``actor type 'clock'``."""
        ...

    @property
    def admitting(self) -> bool:
        """Whether it admits work now (a table made while it does not starts suspended)."""
        ...

    def in_own_turn(self) -> bool:
        """Whether the calling task runs one of its turns."""
        ...


@final
class Timers:
    """The timers of one owner: register, cancel and list them.

    Registration and cancellation are valid only inside the owner's own turns (its
    handlers, timer handlers included): not in its factory (it runs before the owner is
    hosted), not from another task or another owner. Each timer ``name`` needs an
    ``@on_timer(name)`` handler on the owner's type; its tick runs that handler as a turn
    of the owner with the registration's ``payload``.
    """

    __slots__ = ("_owner",)

    def __init__(self, owner: TimerOwner | None) -> None:
        self._owner = owner

    def once(self, name: str, delay: float, payload: bytes = b"") -> TimerRegistration:
        """One tick ``delay`` seconds from now (>= 0). Registering a name again replaces
        its registration; a tick of the replaced one that already fired does not run.

        Raises:
            InvalidOperation: not inside one of the owner's turns.
            ConfigurationError: the owner's type has no ``@on_timer(name)`` handler
                (:class:`~zlink_trio.InvalidId` for a name that is not a text id).
            InvalidArgument: ``delay`` is not finite seconds >= 0, or ``payload`` is not
                bytes of at most 64 KiB.
            CapacityExceeded: the owner holds 1,024 timers already.
        """
        owner = self._in_turn()
        _check_handler(owner, name)
        return _table(owner).once(name, delay, payload)

    def every(
        self, name: str, period: float, payload: bytes = b"", *, first: float | None = None
    ) -> TimerRegistration:
        """A tick every ``period`` seconds (>= 0.001), the first ``first`` seconds from
        now (default: one period). Due times stay on that grid whatever the handlers take
        (no drift); while a tick has not run, later due times are coalesced into it.

        Raises:
            The errors of :meth:`once`.
        """
        owner = self._in_turn()
        _check_handler(owner, name)
        return _table(owner).every(name, period, payload, first=first)

    def cancel(self, name: str) -> bool:
        """Cancel the timer ``name``: it never ticks again, not even a tick that already
        fired and waits in the owner's queue. Returns whether it was registered.

        Raises:
            InvalidOperation: not inside one of the owner's turns.
        """
        table = self._in_turn().timers
        return table is not None and table.cancel(name)

    def get(self, name: str) -> TimerRegistration | None:
        """The registration ``name``, or None."""
        table = self._table_or_none()
        return None if table is None else table.get(name)

    def registrations(self) -> tuple[TimerRegistration, ...]:
        """Every registration held, in registration order."""
        table = self._table_or_none()
        return () if table is None else table.registrations()

    def __contains__(self, name: object) -> bool:
        table = self._table_or_none()
        return table is not None and name in table

    def __repr__(self) -> str:
        owner = self._owner
        return f"<Timers of {owner.timer_owner_noun if owner is not None else 'a staging owner'}>"

    def _table_or_none(self) -> TimerTable | None:
        owner = self._owner
        return None if owner is None else owner.timers

    def _in_turn(self) -> TimerOwner:
        owner = self._owner
        if owner is None:
            raise InvalidOperation(
                "timers are registered from the owner's own handlers: the factory runs "
                "before it is hosted"
            )
        if not owner.in_own_turn():
            raise InvalidOperation(
                "timers are used only inside their owner's own turns (its handlers), "
                "not from another task or owner"
            )
        return owner


def _check_handler(owner: TimerOwner, name: str) -> None:
    checked = check_text_id(name, "timer name")
    names = owner.timer_names
    if checked not in names:
        known = ", ".join(repr(n) for n in sorted(names)) or "none"
        raise ConfigurationError(
            f"{owner.timer_owner_noun} has no @on_timer({checked!r}) handler "
            f"(its timer handlers: {known})"
        )


def _table(owner: TimerOwner) -> TimerTable:
    table = owner.timers
    if table is None:
        service = owner.timer_service
        if service is None:
            raise ShuttingDown("this node runs no timer service")
        table = owner.timers = service.open_table(owner, suspended=not owner.admitting)
    return table
