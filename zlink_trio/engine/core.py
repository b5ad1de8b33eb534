"""The I/O-free core of one lane: bounded queues, admission and next-item selection.

No trio here: the trio driver (:mod:`.lane`, :mod:`.engine`) wraps a :class:`LaneCore` and
decides *when* turns run; the core decides *what* is admitted and *which* item runs next.
Hypothesis drives it directly (``tests/property/test_engine_stateful.py``).

Rules (spec 04 §3–§4, spec 02 §8/§11):

* Two bounded queues, lifecycle and application, each in acceptance order, never
  reordered. A full queue admits nothing (:attr:`Admission.FULL`); a rejected item enters
  no queue.
* Lifecycle runs first, but not absolutely: after ``lifecycle_burst`` consecutive
  lifecycle items taken while application work was waiting, one application item runs
  (the yield debt), so neither queue starves.
* A relocation-sealed Spot lane holds application ingress in a hold queue and runs no
  application item (the pending ones belong to the relocation's capture); lifecycle work
  still runs. :meth:`LaneCore.unseal` puts the held items behind the pending ones, in
  arrival order; :meth:`LaneCore.take_held` hands both to the relocation. Held items count
  against the application bound (no relocation-specific cap exists, spec 02 §8.1).
* A Spot lane awaiting the return of a lent turn admits work but yields no item.
* A session lane whose connection closed drops its pending application items (returned to
  the caller for reporting) and rejects application ingress; lifecycle work still runs.
* A closed (retired) lane drops everything and admits nothing.

Queues are ``None`` while empty, so an idle lane costs only its slots.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Hashable, Iterable
from typing import Final, Generic, TypeVar, final

import attrs

from ..errors import ConfigurationError, InvalidOperation
from . import lanes
from .lanes import (
    ActorDeliveryLane,
    AwaitingReturn,
    ConnectionClosed,
    LanePolicy,
    Open,
    RelocationSealed,
    SessionLane,
    SpotLane,
)

__all__ = ["NOTHING", "Admission", "Handover", "LaneCore", "LaneLimits", "Nothing"]

T = TypeVar("T")


class Admission(enum.Enum):
    """What admission did with a submitted item."""

    ACCEPTED = "accepted"
    """Queued; it will run in a turn of this lane."""
    HELD = "held"
    """The Spot lane is relocation-sealed: kept in the hold queue, not run here."""
    FULL = "full"
    """The queue is at its bound; the item entered no queue."""
    CONNECTION_CLOSED = "connection_closed"
    """Application ingress on a session lane whose connection closed; not queued."""
    LANE_CLOSED = "lane_closed"
    """The lane was closed; not queued."""


class Nothing(enum.Enum):
    """Type of :data:`NOTHING`, the "no item to run" marker (items may be ``None``)."""

    NOTHING = "nothing"


NOTHING: Final = Nothing.NOTHING


def _positive(_inst: object, attr: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigurationError(f"{attr.name}: must be a positive int, got {value!r}")


@attrs.frozen
class LaneLimits:
    """Bounds shared by the lanes of one engine."""

    capacity: int = attrs.field(validator=_positive)
    """Bound of each queue (lifecycle, and application including held items)."""
    lifecycle_burst: int = attrs.field(validator=_positive)
    """Max consecutive lifecycle items while application work waits."""


@attrs.frozen
class Handover(Generic[T]):
    """Application work a sealed Spot lane hands to its relocation."""

    pending: tuple[T, ...]
    """Accepted before the seal and not run, in acceptance order (the captured queue)."""
    held: tuple[T, ...]
    """Arrived during the seal, in arrival order (relayed after ``pending``)."""


class _Mode(enum.IntEnum):
    """What the current policy (plus "closed") means for admission and selection."""

    OPEN = 0  # admit all, run all
    SEALED = 1  # hold application ingress, run lifecycle only
    LENT = 2  # admit all, run nothing
    CONNECTION_CLOSED = 3  # reject application ingress, run lifecycle only
    CLOSED = 4  # admit nothing, run nothing


_OPEN: Final = _Mode.OPEN
_SEALED: Final = _Mode.SEALED
_LENT: Final = _Mode.LENT
_CONNECTION_CLOSED: Final = _Mode.CONNECTION_CLOSED
_CLOSED: Final = _Mode.CLOSED

_ACCEPTED: Final = Admission.ACCEPTED
_HELD: Final = Admission.HELD
_FULL: Final = Admission.FULL


def _mode_of(policy: LanePolicy) -> _Mode:
    if isinstance(policy, ActorDeliveryLane):
        return _OPEN
    state = policy.state
    if isinstance(state, Open):
        return _OPEN
    if isinstance(state, RelocationSealed):
        return _SEALED
    if isinstance(state, AwaitingReturn):
        return _LENT
    if isinstance(state, ConnectionClosed):
        return _CONNECTION_CLOSED
    raise InvalidOperation(f"not a lane policy: {policy!r}")  # pragma: no cover


@final
class LaneCore(Generic[T]):
    """Queues, policy and yield-debt counter of one lane. Not thread-safe, no I/O."""

    __slots__ = ("_app", "_held", "_life", "_limits", "_mode", "_policy", "_streak")

    def __init__(self, policy: LanePolicy, limits: LaneLimits) -> None:
        self._policy: LanePolicy = policy
        self._mode: _Mode = _mode_of(policy)
        self._limits = limits
        self._life: deque[T] | None = None
        self._app: deque[T] | None = None
        self._held: deque[T] | None = None
        self._streak = 0

    # --- queries ------------------------------------------------------------------------

    @property
    def policy(self) -> LanePolicy:
        return self._policy

    @property
    def limits(self) -> LaneLimits:
        return self._limits

    @property
    def closed(self) -> bool:
        return self._mode is _CLOSED

    @property
    def lifecycle_count(self) -> int:
        return 0 if self._life is None else len(self._life)

    @property
    def application_count(self) -> int:
        return 0 if self._app is None else len(self._app)

    @property
    def held_count(self) -> int:
        return 0 if self._held is None else len(self._held)

    @property
    def lifecycle_streak(self) -> int:
        """Consecutive lifecycle items taken while application work was waiting."""
        return self._streak

    def empty_and_open(self) -> bool:
        """Nothing queued or held and the lane runs application work (an item admitted now
        would be the next one to run)."""
        return (
            self._mode is _OPEN and self._life is None and self._app is None and self._held is None
        )

    def runnable(self) -> bool:
        """Whether :meth:`next_item` would return an item now."""
        mode = self._mode
        if mode is _OPEN:
            return self._life is not None or self._app is not None
        if mode is _SEALED or mode is _CONNECTION_CLOSED:
            return self._life is not None
        return False

    def has_space(self, lifecycle: bool) -> bool:
        """Whether admission of one more item of that kind would not be FULL."""
        cap = self._limits.capacity
        if lifecycle:
            return self.lifecycle_count < cap
        return self.application_count + self.held_count < cap

    # --- admission ------------------------------------------------------------------------

    def admit(self, item: T, lifecycle: bool = False) -> Admission:
        """Admit ``item`` to the lifecycle or application queue (or the hold queue)."""
        mode = self._mode
        if mode is _CLOSED:
            return Admission.LANE_CLOSED
        if lifecycle:
            q = self._life
            if q is None:
                self._life = deque((item,))
                return _ACCEPTED
            if len(q) >= self._limits.capacity:
                return _FULL
            q.append(item)
            return _ACCEPTED
        if mode is _SEALED:
            if self.application_count + self.held_count >= self._limits.capacity:
                return _FULL
            if self._held is None:
                self._held = deque((item,))
            else:
                self._held.append(item)
            return _HELD
        if mode is _CONNECTION_CLOSED:
            return Admission.CONNECTION_CLOSED
        q = self._app
        if q is None:
            self._app = deque((item,))
            return _ACCEPTED
        if len(q) >= self._limits.capacity:
            return _FULL
        q.append(item)
        return _ACCEPTED

    def extend_application(self, items: Iterable[T]) -> None:
        """Append application items another queue accepted already (a relocation's merge
        into the target's queue): in order, never cut by the capacity — they count
        against it from now on. Only on an open lane (else ValueError)."""
        if self._mode is not _OPEN:
            raise ValueError("only an open lane takes merged items")
        if self._app is None:
            self._app = deque(items)
            if not self._app:
                self._app = None
        else:
            self._app.extend(items)

    # --- selection ------------------------------------------------------------------------

    def next_item(self) -> T | Nothing:
        """Take the item the next turn runs, or :data:`NOTHING`.

        Lifecycle first; but once ``lifecycle_burst`` lifecycle items ran in a row while
        application work waited, the next item is an application item (yield debt).
        """
        mode = self._mode
        if mode is _OPEN:
            app = self._app
        elif mode is _SEALED or mode is _CONNECTION_CLOSED:
            app = None
        else:
            return NOTHING
        life = self._life
        if life is not None:
            if app is not None:
                if self._streak >= self._limits.lifecycle_burst:
                    self._streak = 0
                    item = app.popleft()
                    if not app:
                        self._app = None
                    return item
                self._streak += 1
            else:
                self._streak = 0
            item = life.popleft()
            if not life:
                self._life = None
            return item
        if app is not None:
            self._streak = 0
            item = app.popleft()
            if not app:
                self._app = None
            return item
        return NOTHING

    # --- policy transitions ---------------------------------------------------------------

    def _spot(self) -> SpotLane:
        policy = self._policy
        if not isinstance(policy, SpotLane):
            raise InvalidOperation(f"not a Spot lane: {policy!r}")
        self._check_open()
        return policy

    def _check_open(self) -> None:
        if self._mode is _CLOSED:
            raise InvalidOperation("the lane is closed")

    def _set_policy(self, policy: LanePolicy) -> None:
        self._policy = policy
        self._mode = _mode_of(policy)

    def seal(self, relocation_id: Hashable) -> None:
        """Seal the Spot lane for a relocation (see :func:`.lanes.seal`)."""
        self._set_policy(lanes.seal(self._spot(), relocation_id))

    def unseal(self, relocation_id: Hashable) -> None:
        """Lift the matching seal; held items go behind the pending ones, in arrival order."""
        self._set_policy(lanes.unseal(self._spot(), relocation_id))
        held, self._held = self._held, None
        if held is not None:
            if self._app is None:
                self._app = held
            else:
                self._app.extend(held)

    def take_held(self) -> Handover[T]:
        """Hand the sealed lane's application work (pending, then held) to the relocation.

        The lane stays sealed; later ingress is held again until the next take or unseal.
        """
        policy = self._spot()
        if not isinstance(policy.state, RelocationSealed):
            raise InvalidOperation(f"take_held on a lane that is not sealed: {policy!r}")
        pending = () if self._app is None else tuple(self._app)
        held = () if self._held is None else tuple(self._held)
        self._app = self._held = None
        return Handover(pending, held)

    def lend_turn(self) -> None:
        """The Spot lane lent its turn: no item is selected until :meth:`return_turn`."""
        self._set_policy(lanes.lend_turn(self._spot()))

    def return_turn(self) -> None:
        self._set_policy(lanes.return_turn(self._spot()))

    def close_connection(self) -> tuple[T, ...]:
        """Mark the session lane's connection closed; returns the dropped application items
        (acceptance order) so the owner can fail their replies. Idempotent, and a no-op on
        a closed lane."""
        policy = self._policy
        if not isinstance(policy, SessionLane):
            raise InvalidOperation(f"not a session lane: {policy!r}")
        if self._mode is _CLOSED:
            return ()  # a closed lane has nothing left to drop; closing twice is harmless
        self._set_policy(lanes.close_connection(policy))
        dropped = () if self._app is None else tuple(self._app)
        self._app = None
        return dropped

    def close(self) -> tuple[T, ...]:
        """Retire the lane: admit nothing more, drop everything not run (lifecycle, then
        application, then held). Idempotent; the policy keeps its last value."""
        self._mode = _CLOSED
        dropped: list[T] = []
        for q in (self._life, self._app, self._held):
            if q is not None:
                dropped.extend(q)
        self._life = self._app = self._held = None
        self._streak = 0
        return tuple(dropped)
