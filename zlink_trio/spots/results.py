"""Results of User Spot Create / GetOrCreate (spec 06 §3.2): the shared result shapes of
:mod:`zlink_trio.objects.results` -- the same Existing / Created / Rejected vocabulary as
Actors (S06-22) -- with the Spot's ref named ``spot``. ``result.ref`` works on Existing and
Created of both kinds; :class:`SpotRejected` is a ``Rejected`` (``isinstance(r,
zlink_trio.Rejected)`` holds) that also names the rejected attempt (spec 06 §3.2: its
SpotRef identifies that attempt and promises no current Ready location)."""

from __future__ import annotations

from typing import TypeAlias

import attrs

from ..ids import SpotRef
from ..objects import results

__all__ = ["SpotCreateResult", "SpotCreated", "SpotExisting", "SpotRejected"]


@attrs.frozen(init=False)
class SpotExisting(results.Existing[SpotRef]):
    """A Ready incarnation of the same type was there; no factory or callback ran, and
    there is no reply."""

    def __init__(self, spot: SpotRef) -> None:
        self.__attrs_init__(spot)

    @property
    def spot(self) -> SpotRef:
        return self.ref

    def __repr__(self) -> str:
        return f"SpotExisting(spot={self.ref!r})"


@attrs.frozen(init=False)
class SpotCreated(results.Created[SpotRef]):
    """A new incarnation was committed Ready; ``reply`` is the create callback's optional
    reply."""

    def __init__(self, spot: SpotRef, reply: bytes | None = None) -> None:
        self.__attrs_init__(spot, reply)

    @property
    def spot(self) -> SpotRef:
        return self.ref

    def __repr__(self) -> str:
        return f"SpotCreated(spot={self.ref!r}, reply={self.reply!r})"


@attrs.frozen(init=False)
class SpotRejected(results.Rejected):
    """The Spot's create callback refused: the reservation and authority were cleaned
    up. ``spot`` names the rejected attempt (never a Ready location); ``reply`` is the
    callback's optional reply."""

    spot: SpotRef = attrs.field(kw_only=True)

    def __init__(self, spot: SpotRef, reply: bytes | None = None) -> None:
        self.__attrs_init__(reply, spot=spot)

    def __repr__(self) -> str:
        return f"SpotRejected(spot={self.spot!r}, reply={self.reply!r})"


SpotCreateResult: TypeAlias = SpotExisting | SpotCreated | SpotRejected
