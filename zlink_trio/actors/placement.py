"""Mesh selection and placement of a new Actor (spec 04 §6.3).

Mesh: InMesh if given (a mesh this node has no Object role in → NotFound); else the one
Object-role mesh (none → NotConfigured, several → InvalidOperation).
Target: live descriptors of that mesh, checked in the spec's order — Object Server role,
stable type registered, active+pending capacity left — then a weighted random choice by
node-wide placement weight. The caller never names a node.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from ..config import ServerConfig
from ..errors import CapacityExceeded, InvalidOperation, NotConfigured, NotFound
from ..ids import MeshName, StableType
from ..store.api import NodeRecord

__all__ = ["choose_mesh", "choose_node"]


def choose_mesh(config: ServerConfig, in_mesh: MeshName | None) -> MeshName:
    meshes = [m.name for m in config.object_meshes()]
    if in_mesh is not None:
        if in_mesh not in meshes:
            raise NotFound(f"mesh {in_mesh.value!r} is not an Object mesh of this node")
        return in_mesh
    if not meshes:
        raise NotConfigured("no mesh with an Object Client or Server role is configured")
    if len(meshes) > 1:
        raise InvalidOperation(
            f"{len(meshes)} Object meshes are configured; choose one with in_mesh()"
        )
    return meshes[0]


def choose_node(
    nodes: Sequence[NodeRecord],
    stable_type: StableType,
    *,
    rng: random.Random | None = None,
    exclude: frozenset[bytes] = frozenset(),
) -> NodeRecord:
    """Pick the target among ``nodes`` (one mesh's records)."""
    servers = [n for n in nodes if n.live and n.descriptor.object_role.can_host]
    typed = [n for n in servers if stable_type in n.descriptor.actor_types]
    if not typed:
        raise NotFound(f"no live node hosts actor type {stable_type.value!r}")
    free = [
        n
        for n in typed
        if n.active + n.pending < n.capacity and n.descriptor.node_rid.value not in exclude
    ]
    if not free:
        raise CapacityExceeded(f"no capacity left for actor type {stable_type.value!r}")
    weights = [n.descriptor.placement_weight for n in free]
    return (rng or random).choices(free, weights=weights, k=1)[0]
