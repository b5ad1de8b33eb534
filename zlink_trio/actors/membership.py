"""The values of Spot membership: what a Join's completion callback and the Spot's
membership callbacks receive (docs/decisions.md, "Membership").

* :class:`JoinCompletion` — the one result of a deferred Join, given to the Actor type's
  ``@on_join_complete`` method as a lifecycle turn of the Actor's lane (the activation
  that hosts the Actor afterwards: the new one on the target after a cross-node Join);
* :class:`JoinEvent` — what a User Spot's JOIN (Approve / Reject) and JOINED callbacks get;
* :class:`LeaveEvent` — what the Spot the Actor leaves gets in its LEAVE callback.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import attrs

from ..errors import ZLinkError
from ..ids import ActorId, ObjectGeneration, OperationId, SpotId, StableType

__all__ = [
    "JOIN_COMPLETE_MARK",
    "JoinCompletion",
    "JoinEvent",
    "JoinOutcome",
    "LeaveEvent",
    "declared_join_complete",
    "on_join_complete",
]

JOIN_COMPLETE_MARK: Final = "__zlink_join_complete__"

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


class JoinOutcome(enum.Enum):
    """How a Join ended."""

    ACCEPTED = "accepted"
    """The Actor is in the target Spot (or already was: no change, no Spot callback)."""
    REJECTED = "rejected"
    """The target Spot's JOIN callback rejected it: nothing changed."""
    FAILED = "failed"
    """It did not happen (``error`` says why): nothing changed, unless the error is an
    unknown outcome the framework settled (it then says so)."""


@attrs.frozen
class JoinCompletion:
    """The result of one deferred Join, delivered exactly once."""

    operation_id: OperationId
    """What ``defer()`` returned."""
    target: SpotId | None
    """The Spot the Join asked for (``join_entry_spot()``: the Entry Spot it resolved to;
    None when it failed before resolving)."""
    outcome: JoinOutcome
    spot_id: SpotId | None
    """The Actor's Spot now."""
    reply: bytes | None = None
    """The target Spot's optional JOIN reply (Approve / Reject)."""
    error: ZLinkError | None = None
    """FAILED only: the typed failure."""

    @property
    def accepted(self) -> bool:
        return self.outcome is JoinOutcome.ACCEPTED


@attrs.frozen
class JoinEvent:
    """A User Spot's JOIN / JOINED callback argument: who joins, from where, with what.
    ``actor`` is the Actor's application object on the Spot's node (a fresh one made by
    the target factory for a cross-node Join)."""

    actor_id: ActorId
    object_generation: ObjectGeneration
    stable_type: StableType
    from_spot_id: SpotId | None
    request: bytes
    operation_id: OperationId
    actor: Any = attrs.field(eq=False, repr=False)


@attrs.frozen
class LeaveEvent:
    """The LEAVE callback argument of the Spot an Actor left (after the commit)."""

    actor_id: ActorId
    object_generation: ObjectGeneration
    stable_type: StableType
    to_spot_id: SpotId
    operation_id: OperationId


def on_join_complete(fn: F) -> F:
    """Mark ``async def method(self, completion: JoinCompletion) -> None`` as the Actor
    type's Join completion callback (at most one per type)."""
    setattr(fn, JOIN_COMPLETE_MARK, True)
    return fn


def declared_join_complete(cls: type) -> list[str]:
    """Names of the methods of ``cls`` (MRO order, overrides first) marked
    :func:`on_join_complete`."""
    found: list[str] = []
    seen: set[str] = set()
    for klass in cls.__mro__:
        for name, value in vars(klass).items():
            if name in seen:
                continue
            seen.add(name)
            if getattr(value, JOIN_COMPLETE_MARK, False):
                found.append(name)
    return found


def is_async_function(fn: object) -> bool:
    return inspect.iscoroutinefunction(fn)
