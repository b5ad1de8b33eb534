"""Message Follow routes of the Actors that moved away from this node (spec 06 §6, §6.1;
docs/relocation.md): installed when a relocation's relay-ready reply is accepted, each
kept for the MessageFollowDuration configured at that moment (0: none; a later change
applies to later relocations only). In memory only: never a Store read.

The table itself is the id-generic :class:`~zlink_trio.objects.follow.FollowTable` (the
Spot runtime keeps one of SpotIds); this is its ActorId instance."""

from __future__ import annotations

from typing import final

from ..ids import ActorId, OwnerLeaseGeneration
from ..objects.follow import FollowRoute, FollowTable
from ..objects.relocation import RelocationUnit

__all__ = ["FollowRoute", "FollowRoutes"]


@final
class FollowRoutes(FollowTable[ActorId]):
    def install(self, unit: RelocationUnit, lease_generation: OwnerLeaseGeneration) -> None:
        self.install_route(
            unit.actor_id,
            object_generation=unit.object_generation,
            mesh_name=unit.mesh_name,
            source_owner_generation=unit.source_owner_generation,
            target_rid=unit.target_rid,
            target_generation=unit.target_generation,
            lease_generation=lease_generation,
        )
