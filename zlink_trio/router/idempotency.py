"""Values of the idempotency SPI (spec 10 §9.2, §6.3 D).

A reservation is IN_FLIGHT (someone runs it) or DONE (its result answers retries). Its
lifetime depends on its state:

* IN_FLIGHT with a holder: alive while touched; *stale* once
  ``last_touched_at < now - secondary_ttl``. A stale entry stays until a
  ``compare_and_reset`` removes it; ``put_if_absent`` reports it as stale.
* IN_FLIGHT without a holder (handed to the inbox): gone at ``expires_at``
  (release time + forward TTL); never stale (nobody is known to run it).
* DONE: gone at ``expires_at`` (done time + primary TTL).

Holders are :class:`~zlink_trio.router.ids.ReserverId` values, one per attempt.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar, Literal, TypeAlias

import attrs

from ..errors import ConfigurationError
from .ids import IdempotencyKey, ReserverId, SessionId
from .primitives import JsonMap

__all__ = [
    "AlreadyDone",
    "HolderAcquired",
    "HolderRejected",
    "IdempotencyEntry",
    "IdempotencyState",
    "IdempotencyTtls",
    "InFlight",
    "InputConflict",
    "MarkDoneOutcome",
    "MarkRejected",
    "Marked",
    "PutOutcome",
    "Rejection",
    "Reserved",
    "StaleInFlight",
    "TakeoverOutcome",
]


class IdempotencyState(enum.Enum):
    IN_FLIGHT = "IN_FLIGHT"
    DONE = "DONE"


def _positive(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e18:
        raise ConfigurationError(f"{attr.name}: must be a finite number > 0, got {value!r}")


@attrs.frozen(kw_only=True)
class IdempotencyTtls:
    """The store's three TTLs, in seconds (defaults of §11.2)."""

    primary: float = attrs.field(default=86_400.0, validator=_positive)
    secondary: float = attrs.field(default=30.0, validator=_positive)
    forward: float = attrs.field(default=300.0, validator=_positive)


@attrs.frozen(kw_only=True, hash=False)
class IdempotencyEntry:
    key: IdempotencyKey
    input_hash: str
    state: IdempotencyState
    holder_id: ReserverId | None
    created_at: float
    last_touched_at: float
    expires_at: float | None
    """None for a held IN_FLIGHT entry (it goes stale instead of expiring)."""
    result: JsonMap | None = None
    session_id: SessionId | None = None
    """The session the reserving submit was for (what a holder-loss announcement names,
    §6.3 D); None when the reserver did not say."""


@attrs.frozen
class Reserved:
    """§9.2 rows 2 and 6: a new IN_FLIGHT entry held by the caller; run the turn."""

    entry: IdempotencyEntry
    kind: ClassVar[Literal["reserved"]] = "reserved"


@attrs.frozen
class InFlight:
    """Row 3: same input, running (held, or handed to the inbox); attach to it."""

    entry: IdempotencyEntry
    kind: ClassVar[Literal["in_flight"]] = "in_flight"


@attrs.frozen
class AlreadyDone:
    """Row 4: same input, finished; ``entry.result`` is the cached result."""

    entry: IdempotencyEntry
    kind: ClassVar[Literal["done"]] = "done"


@attrs.frozen
class InputConflict:
    """Row 5: the key was used with another input (a client bug, 409)."""

    entry: IdempotencyEntry
    kind: ClassVar[Literal["conflict"]] = "conflict"


@attrs.frozen
class StaleInFlight:
    """Row 7: IN_FLIGHT but untouched past the secondary TTL: ``compare_and_reset(key,
    entry.holder_id)`` and re-enter."""

    entry: IdempotencyEntry
    kind: ClassVar[Literal["stale"]] = "stale"


PutOutcome: TypeAlias = Reserved | InFlight | AlreadyDone | InputConflict | StaleInFlight


class Rejection(enum.Enum):
    """Why the store refused: the entry is someone else's (or gone)."""

    DONE = "DONE"
    HELD = "HELD"
    EXPIRED = "EXPIRED"
    NOT_HOLDER = "NOT_HOLDER"


@attrs.frozen
class HolderAcquired:
    entry: IdempotencyEntry
    kind: ClassVar[Literal["acquired"]] = "acquired"


@attrs.frozen
class HolderRejected:
    reason: Rejection
    kind: ClassVar[Literal["rejected"]] = "rejected"


TakeoverOutcome: TypeAlias = HolderAcquired | HolderRejected


@attrs.frozen
class Marked:
    entry: IdempotencyEntry
    kind: ClassVar[Literal["marked"]] = "marked"


@attrs.frozen
class MarkRejected:
    """The store refused ``mark_done``: DONE already, gone (EXPIRED) or held by another
    attempt (NOT_HOLDER). The cached answer, if any, is unchanged."""

    reason: Rejection
    kind: ClassVar[Literal["rejected"]] = "rejected"


MarkDoneOutcome: TypeAlias = Marked | MarkRejected
