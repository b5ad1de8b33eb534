"""The Actor authority: the shared :class:`~zlink_trio.objects.authority.Authority` keyed by
ActorId (every Actor authority read goes through it, see that module)."""

from __future__ import annotations

from typing import final

from ..ids import ActorId
from ..objects.authority import Authority as ObjectAuthority
from ..routing.route_cache import RouteCache
from ..store.api import LocationStore, Namespace, ObjectKey

__all__ = ["Authority", "actor_key"]


def actor_key(actor_id: ActorId) -> ObjectKey:
    """The Location Store key of ``actor_id``."""
    return ObjectKey._trusted(Namespace.ACTOR, actor_id.value)  # validated as an ActorId


@final
class Authority(ObjectAuthority[ActorId]):
    """Actor authority rows, read through the Actor route cache."""

    __slots__ = ()

    def __init__(self, store: LocationStore, cache: RouteCache[ActorId]) -> None:
        super().__init__(store, cache, actor_key)
