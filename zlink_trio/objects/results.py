"""Result shapes of Create / GetOrCreate, generic over the object kind's ref (spec 04 §6.2,
spec 06 §3.2): Existing, Created or Rejected. A kind's public results subclass these (the
Actor's :class:`~zlink_trio.actors.results.Created` names its ref ``actor``)."""

from __future__ import annotations

from typing import Generic, TypeAlias, TypeVar

import attrs

__all__ = ["CreateResult", "Created", "Existing", "Rejected"]

RefT = TypeVar("RefT")


@attrs.frozen
class Existing(Generic[RefT]):
    """A Ready incarnation of the same type was there; no factory or callback ran."""

    ref: RefT


@attrs.frozen
class Created(Generic[RefT]):
    """A new incarnation was committed Ready; ``reply`` is the create callback's optional
    reply."""

    ref: RefT
    reply: bytes | None = None


@attrs.frozen
class Rejected:
    """The create callback refused: nothing was published, capacity returned."""

    reply: bytes | None = None


CreateResult: TypeAlias = Existing[RefT] | Created[RefT] | Rejected
