"""``context.timers``: an Actor's framework timers (the Actor adapter of
:mod:`zlink_trio.objects.timers`).

The node's one :class:`~zlink_trio.objects.timers.TimerService` keeps every timer; an Actor
gets its :class:`~zlink_trio.objects.timers.TimerTable` on its first registration (an
Actor without timers holds none). Its ticks are items of its own lane (the tick branch of
:class:`~.hosted.HostedActor`), so they run as its turns, ordered with its messages by
acceptance; the Actor owner suspends its timers when a destroy closes admission and cleans
them up when the destroy is done or the lease is lost (:mod:`.host`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from ..errors import ConfigurationError, InvalidOperation, ShuttingDown
from ..ids import check_text_id
from ..objects.timers import TimerRegistration, TimerTable

if TYPE_CHECKING:
    from .context import ActorContext
    from .hosted import HostedActor

__all__ = ["ActorTimers"]


@final
class ActorTimers:
    """The timers of one Actor: register, cancel and list them.

    Registration and cancellation are valid only inside the Actor's own turns (its
    handlers, timer handlers included): not in its factory (it runs before the Actor is
    hosted), not from another task or another Actor. Each timer ``name`` needs an
    ``@on_timer(name)`` handler on the Actor type; its tick runs that handler as a turn
    of the Actor with the registration's ``payload``.
    """

    __slots__ = ("_context",)

    def __init__(self, context: ActorContext) -> None:
        self._context = context

    def once(self, name: str, delay: float, payload: bytes = b"") -> TimerRegistration:
        """One tick ``delay`` seconds from now (>= 0). Registering a name again replaces
        its registration; a tick of the replaced one that already fired does not run.

        Raises:
            InvalidOperation: not inside one of this Actor's turns.
            ConfigurationError: the Actor type has no ``@on_timer(name)`` handler
                (:class:`~zlink_trio.InvalidId` for a name that is not a text id).
            InvalidArgument: ``delay`` is not finite seconds >= 0, or ``payload`` is not
                bytes of at most 64 KiB.
            CapacityExceeded: the Actor holds 1,024 timers already.
        """
        hosted = self._owner()
        self._check_handler(hosted, name)
        return self._table(hosted).once(name, delay, payload)

    def every(
        self, name: str, period: float, payload: bytes = b"", *, first: float | None = None
    ) -> TimerRegistration:
        """A tick every ``period`` seconds (>= 0.001), the first ``first`` seconds from
        now (default: one period). Due times stay on that grid whatever the handlers take
        (no drift); while a tick has not run, later due times are coalesced into it.

        Raises:
            The errors of :meth:`once`.
        """
        hosted = self._owner()
        self._check_handler(hosted, name)
        return self._table(hosted).every(name, period, payload, first=first)

    def cancel(self, name: str) -> bool:
        """Cancel the timer ``name``: it never ticks again, not even a tick that already
        fired and waits in the Actor's queue. Returns whether it was registered.

        Raises:
            InvalidOperation: not inside one of this Actor's turns.
        """
        hosted = self._owner()
        table = hosted.timers
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
        return f"<ActorTimers of {self._context!r}>"

    # --- internals ------------------------------------------------------------------------

    def _table_or_none(self) -> TimerTable | None:
        hosted = self._context._hosted
        return None if hosted is None else hosted.timers

    def _owner(self) -> HostedActor:
        hosted = self._context._hosted
        if hosted is None:
            raise InvalidOperation(
                "an Actor's timers are registered from its own handlers: the factory runs "
                "before the Actor is hosted"
            )
        lane = hosted.lane
        if lane is None or not lane.in_turn():
            raise InvalidOperation(
                "an Actor's timers are used only inside its own turns (its handlers), "
                "not from another task or Actor"
            )
        return hosted

    @staticmethod
    def _check_handler(hosted: HostedActor, name: str) -> None:
        checked = check_text_id(name, "timer name")
        if checked not in hosted.kind.timer_handlers:
            actor_type = hosted.kind.actor_type
            known = ", ".join(repr(n) for n in sorted(actor_type.timers)) or "none"
            raise ConfigurationError(
                f"actor type {actor_type.stable_type.value!r} has no @on_timer({checked!r}) "
                f"handler (its timer handlers: {known})"
            )

    @staticmethod
    def _table(hosted: HostedActor) -> TimerTable:
        table = hosted.timers
        if table is None:
            service = hosted.kind.timer_service
            if service is None:
                raise ShuttingDown("this node runs no timer service")
            table = hosted.timers = service.open_table(hosted, suspended=not hosted.admitting)
        return table
