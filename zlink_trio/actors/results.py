"""Results of Actor Create / GetOrCreate (spec 04 §6.2): the shared result shapes
(:mod:`zlink_trio.objects.results`) with the Actor's ref named ``actor``."""

from __future__ import annotations

from typing import TypeAlias

import attrs

from ..ids import ActorRef
from ..objects import results

__all__ = ["ActorCreateResult", "Created", "Existing", "Rejected"]


@attrs.frozen(init=False)
class Existing(results.Existing[ActorRef]):
    """A Ready incarnation of the same type was there; no factory or callback ran."""

    def __init__(self, actor: ActorRef) -> None:
        self.__attrs_init__(actor)

    @property
    def actor(self) -> ActorRef:
        return self.ref

    def __repr__(self) -> str:
        return f"Existing(actor={self.ref!r})"


@attrs.frozen(init=False)
class Created(results.Created[ActorRef]):
    """A new incarnation was committed Ready; ``reply`` is OnCreateActor's optional reply."""

    def __init__(self, actor: ActorRef, reply: bytes | None = None) -> None:
        self.__attrs_init__(actor, reply)

    @property
    def actor(self) -> ActorRef:
        return self.ref

    def __repr__(self) -> str:
        return f"Created(actor={self.ref!r}, reply={self.reply!r})"


Rejected = results.Rejected
"""The Entry Spot's OnCreateActor refused: nothing was published, capacity returned."""

ActorCreateResult: TypeAlias = Existing | Created | Rejected
