"""Results of Actor Create / GetOrCreate (spec 04 §6.2)."""

from __future__ import annotations

import attrs

from ..ids import ActorRef

__all__ = ["ActorCreateResult", "Created", "Existing", "Rejected"]


@attrs.frozen
class Existing:
    """A Ready incarnation of the same type was there; no factory or callback ran."""

    actor: ActorRef


@attrs.frozen
class Created:
    """A new incarnation was committed Ready; ``reply`` is OnCreateActor's optional reply."""

    actor: ActorRef
    reply: bytes | None = None


@attrs.frozen
class Rejected:
    """The Entry Spot's OnCreateActor refused: nothing was published, capacity returned."""

    reply: bytes | None = None


ActorCreateResult = Existing | Created | Rejected
