"""Message Follow routes of the objects that moved away from this node, for any id type
(spec 06 §6, §6.1; docs/relocation.md): installed when a relocation's relay-ready reply
is accepted, each kept for the MessageFollowDuration configured at that moment (0: none;
a later change applies to later relocations only). In memory only: never a Store read.

The Actor runtime keeps one table keyed by ActorId (``actors/follow.py``), the Spot
runtime one keyed by SpotId (``spots/relocation.py``)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

import attrs
import trio

from ..ids import (
    AuthorityOwnerGeneration,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OwnerLeaseGeneration,
)
from ..routing.route_cache import Route

__all__ = ["FollowRoute", "FollowTable"]

K = TypeVar("K", bound=Hashable)

_MAX_ROUTES = 65536
"""Routes kept at most (the oldest is dropped first): a bound on memory, not on traffic."""


@attrs.frozen(slots=True)
class FollowRoute(Generic[K]):
    """A committed route from this (previous) owner to the current one."""

    object_id: K
    object_generation: ObjectGeneration
    mesh_name: MeshName
    source_owner_generation: AuthorityOwnerGeneration
    target_owner_generation: AuthorityOwnerGeneration
    target_rid: NodeRid
    target_generation: NodeGeneration
    target_lease_generation: OwnerLeaseGeneration
    expires_at: float

    @property
    def actor_id(self) -> K:
        """The moved object's id (the name the Actor runtime reads it by)."""
        return self.object_id


class FollowTable(Generic[K]):
    """The follow routes of one id type."""

    def __init__(self, duration: float) -> None:
        self.duration = duration
        """MessageFollowDuration for routes installed from now on (seconds; 0: none)."""
        self._routes: dict[K, FollowRoute[K]] = {}
        self.followed = 0

    def install_route(
        self,
        object_id: K,
        *,
        object_generation: ObjectGeneration,
        mesh_name: MeshName,
        source_owner_generation: AuthorityOwnerGeneration,
        target_rid: NodeRid,
        target_generation: NodeGeneration,
        lease_generation: OwnerLeaseGeneration,
    ) -> None:
        """The route of ``object_id`` to its new owner (AuthorityOwnerGeneration
        ``source_owner_generation + 1`` there), for MessageFollowDuration from now."""
        if self.duration <= 0:
            return
        routes = self._routes
        routes.pop(object_id, None)
        routes[object_id] = FollowRoute(
            object_id=object_id,
            object_generation=object_generation,
            mesh_name=mesh_name,
            source_owner_generation=source_owner_generation,
            target_owner_generation=AuthorityOwnerGeneration(source_owner_generation.value + 1),
            target_rid=target_rid,
            target_generation=target_generation,
            target_lease_generation=lease_generation,
            expires_at=trio.current_time() + self.duration,
        )
        while len(routes) > _MAX_ROUTES:
            del routes[next(iter(routes))]

    def lookup(self, object_id: K) -> FollowRoute[K] | None:
        """The unexpired route of ``object_id`` (an expired one is forgotten)."""
        route = self._routes.get(object_id)
        if route is None:
            return None
        if trio.current_time() >= route.expires_at:
            del self._routes[object_id]
            return None
        return route

    def route(self, object_id: K) -> Route | None:
        """The follow route as a routing route (for a local caller's delivery)."""
        follow = self.lookup(object_id)
        if follow is None:
            return None
        self.followed += 1
        return Route(
            mesh_name=follow.mesh_name,
            node_rid=follow.target_rid,
            node_generation=follow.target_generation,
            lease_generation=follow.target_lease_generation,
            object_generation=follow.object_generation,
            owner_generation=follow.target_owner_generation,
            store_version=0,
        )

    def forget(self, object_id: K) -> None:
        """The object is hosted here again (it moved back): its old route is void."""
        self._routes.pop(object_id, None)
