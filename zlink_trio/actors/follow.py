"""Message Follow routes of the Actors that moved away from this node (spec 06 §6, §6.1;
docs/relocation.md): installed when a relocation's relay-ready reply is accepted, each
kept for the MessageFollowDuration configured at that moment (0: none; a later change
applies to later relocations only). In memory only: never a Store read."""

from __future__ import annotations

from typing import final

import attrs
import trio

from ..ids import (
    ActorId,
    AuthorityOwnerGeneration,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OwnerLeaseGeneration,
)
from ..objects.relocation import RelocationUnit
from ..routing.route_cache import Route

__all__ = ["FollowRoute", "FollowRoutes"]

_MAX_ROUTES = 65536
"""Routes kept at most (the oldest is dropped first): a bound on memory, not on traffic."""


@attrs.frozen(slots=True)
class FollowRoute:
    """A committed route from this (previous) owner to the current one."""

    actor_id: ActorId
    object_generation: ObjectGeneration
    mesh_name: MeshName
    source_owner_generation: AuthorityOwnerGeneration
    target_owner_generation: AuthorityOwnerGeneration
    target_rid: NodeRid
    target_generation: NodeGeneration
    target_lease_generation: OwnerLeaseGeneration
    expires_at: float


@final
class FollowRoutes:
    def __init__(self, duration: float) -> None:
        self.duration = duration
        """MessageFollowDuration for routes installed from now on (seconds; 0: none)."""
        self._routes: dict[ActorId, FollowRoute] = {}
        self.followed = 0

    def install(self, unit: RelocationUnit, lease_generation: OwnerLeaseGeneration) -> None:
        if self.duration <= 0:
            return
        routes = self._routes
        routes.pop(unit.actor_id, None)
        routes[unit.actor_id] = FollowRoute(
            actor_id=unit.actor_id,
            object_generation=unit.object_generation,
            mesh_name=unit.mesh_name,
            source_owner_generation=unit.source_owner_generation,
            target_owner_generation=unit.target_owner_generation,
            target_rid=unit.target_rid,
            target_generation=unit.target_generation,
            target_lease_generation=lease_generation,
            expires_at=trio.current_time() + self.duration,
        )
        while len(routes) > _MAX_ROUTES:
            del routes[next(iter(routes))]

    def lookup(self, actor_id: ActorId) -> FollowRoute | None:
        """The unexpired route of ``actor_id`` (an expired one is forgotten)."""
        route = self._routes.get(actor_id)
        if route is None:
            return None
        if trio.current_time() >= route.expires_at:
            del self._routes[actor_id]
            return None
        return route

    def route(self, actor_id: ActorId) -> Route | None:
        """The follow route as a routing route (for a local caller's delivery)."""
        follow = self.lookup(actor_id)
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

    def forget(self, actor_id: ActorId) -> None:
        """The Actor is hosted here again (it moved back): its old route is void."""
        self._routes.pop(actor_id, None)
