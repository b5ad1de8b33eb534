"""The Entry Spot's OnCreateActor decision: approve or reject a staging Actor.

These are the Entry Spot's lifecycle vocabulary (the Spot role owns the approval turn); the
Actor owner builds the event and hands it to the Entry Spot.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from ..ids import ActorId, ObjectGeneration, SpotId, StableType

__all__ = ["ActorCreateEvent", "Approve", "CreateDecision", "OnCreateActor", "Reject"]


@attrs.frozen
class Approve:
    """Publish the staging Actor as Ready; ``reply`` goes back in the Created result."""

    reply: bytes | None = None


@attrs.frozen
class Reject:
    """Discard the staging Actor (never findable, never messaged, no capacity used)."""

    reply: bytes | None = None


CreateDecision = Approve | Reject


@attrs.frozen
class ActorCreateEvent:
    """What the Entry Spot's OnCreateActor sees about one creation attempt."""

    actor_id: ActorId
    stable_type: StableType
    object_generation: ObjectGeneration
    entry_spot_id: SpotId
    request: bytes | None
    actor: Any
    """The staging Actor instance (not yet reachable by anyone)."""


OnCreateActor = Callable[[ActorCreateEvent], Awaitable[CreateDecision]]
