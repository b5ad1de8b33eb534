"""Timer values: what a registration is, what a tick carries, what a relocation moves.

All frozen attrs records of plain values (str, int, float, bytes, an enum), so the
relocation issue can put them in its payload as they are (spec 06 §8: "timer logical
registration·pending tick은 relocation payload에 포함"). Times in a
:class:`TimersSnapshot` are relative (seconds from the capture), never a node's clock.
"""

from __future__ import annotations

import enum
import math
from typing import Final

import attrs

from ...errors import CapacityExceeded, InvalidArgument
from ...ids import check_text_id

__all__ = [
    "MAX_TIMERS_PER_OWNER",
    "MAX_TIMER_PAYLOAD",
    "MIN_TIMER_PERIOD",
    "TimerKind",
    "TimerRegistration",
    "TimerState",
    "TimerStatistics",
    "TimerTick",
    "TimersSnapshot",
    "check_delay",
    "check_name",
    "check_payload",
    "check_period",
    "check_room",
]

MAX_TIMERS_PER_OWNER: Final = 1024
"""Registrations one owner (an Actor, a Spot) may hold at once; one more is
CapacityExceeded (docs/decisions.md, "Framework timers")."""
MAX_TIMER_PAYLOAD: Final = 64 * 1024
"""Bytes of one registration's payload (kept in memory and moved by a relocation)."""
MIN_TIMER_PERIOD: Final = 0.001
"""The shortest period of a periodic timer, in seconds (1 ms)."""


class TimerKind(enum.Enum):
    """One tick, or a tick every period."""

    ONE_SHOT = "one_shot"
    PERIODIC = "periodic"


@attrs.frozen
class TimerRegistration:
    """One logical registration, as ``once`` / ``every`` recorded it."""

    name: str
    """Unique per owner: registering the name again replaces the registration."""
    kind: TimerKind
    period: float | None
    """Seconds between the due times of two ticks (PERIODIC); None for ONE_SHOT."""
    payload: bytes
    """Handed to the timer's handler on every tick."""
    serial: int
    """Issued by the owner's table, unique within the owner incarnation: a tick of another
    serial belongs to a cancelled or replaced registration and never runs."""


@attrs.frozen
class TimerTick:
    """One tick on its way to a turn of the owner's lane (a lane item, ordered with the
    owner's messages by lane acceptance)."""

    name: str
    serial: int


@attrs.frozen
class TimerState:
    """One registration in a :class:`TimersSnapshot`."""

    registration: TimerRegistration
    remaining: float
    """Seconds from the capture to its next due time (0 when already due). A ONE_SHOT
    whose tick already fired has no due time left: ``remaining`` is 0 and
    ``tick_pending`` is True."""
    tick_pending: bool
    """A tick of it fired and has not run yet (it is in the owner's lane, or in
    :attr:`TimersSnapshot.backlog`): a PERIODIC one coalesces further due times into it."""


@attrs.frozen
class TimersSnapshot:
    """The framework timer state of one owner, to move with it (relocation)."""

    timers: tuple[TimerState, ...]
    backlog: tuple[TimerTick, ...]
    """Ticks that fired and were not yet admitted to the owner's lane (a full lane, or the
    owner suspended), in firing order; ticks already in the lane travel with the lane's
    own pending items."""
    next_serial: int
    """The serial the next registration gets (so a restored table never reuses one)."""


@attrs.frozen
class TimerStatistics:
    """A snapshot of a node's timer service (no owner id anywhere)."""

    owners: int
    """Owners (Actors, Spots) that hold a registration or a waiting tick."""
    registered: int
    """Registrations held."""
    backlog: int
    """Ticks fired and waiting for their owner's lane (full, or the owner suspended)."""
    fired: int
    """Ticks admitted to an owner's lane so far."""
    coalesced: int
    """Due times of periodic timers folded into a tick that had not run yet (or skipped
    because the service fell behind by whole periods)."""
    stale: int
    """Ticks that reached their owner's turn after their registration was cancelled,
    replaced or closed: they did not run."""
    dropped: int
    """Ticks that could not be delivered at all (the owner's lane closed or retired)."""
    sealed: bool
    """The node stopped admitting: no tick fires any more."""


def check_name(name: object) -> str:
    """A timer name: a text id (UTF-8, 1..255 bytes). Raises InvalidId (a
    ConfigurationError and a ValueError, as for packet names)."""
    return check_text_id(name, "timer name")


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{what}: expected seconds (int or float), got {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds):
        raise InvalidArgument(f"{what}: must be finite, got {value!r}")
    return seconds


def check_delay(delay: object) -> float:
    """A one-shot delay or a first delay: finite seconds >= 0. Raises InvalidArgument."""
    seconds = _seconds(delay, "timer delay")
    if seconds < 0:
        raise InvalidArgument(f"timer delay: must be >= 0, got {delay!r}")
    return seconds


def check_period(period: object) -> float:
    """A period: finite seconds >= :data:`MIN_TIMER_PERIOD`. Raises InvalidArgument."""
    seconds = _seconds(period, "timer period")
    if seconds < MIN_TIMER_PERIOD:
        raise InvalidArgument(f"timer period: must be >= {MIN_TIMER_PERIOD} s, got {period!r}")
    return seconds


def check_payload(payload: object) -> bytes:
    """A payload: bytes-like of at most :data:`MAX_TIMER_PAYLOAD`. Raises InvalidArgument."""
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise InvalidArgument(f"timer payload: expected bytes, got {type(payload).__name__}")
    data = bytes(payload)
    if len(data) > MAX_TIMER_PAYLOAD:
        raise InvalidArgument(f"timer payload: {len(data)} bytes, the limit is {MAX_TIMER_PAYLOAD}")
    return data


def check_room(count: int) -> None:
    """Raises CapacityExceeded when an owner already holds the most registrations."""
    if count >= MAX_TIMERS_PER_OWNER:
        raise CapacityExceeded(
            f"an owner holds at most {MAX_TIMERS_PER_OWNER} timers; cancel one first"
        )
