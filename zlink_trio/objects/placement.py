"""Mesh selection and placement of a new object (spec 04 §6.3, spec 06 §3–§4).

Mesh: InMesh if given (a mesh this node has no Object role in → NotFound); else the one
Object-role mesh (none → NotConfigured, several → InvalidOperation).
Target: live descriptors of that mesh, checked in the spec's order — Object Server role,
stable type registered for the object's kind (``actor_types``, ``spot_types`` or
``instance_types``, as the Store's ``reserve`` checks), active+pending capacity left —
then a weighted random choice by node-wide placement weight. The caller never names a
node.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from ..config import ServerConfig
from ..errors import CapacityExceeded, InvalidOperation, NotConfigured, NotFound
from ..ids import MeshName, StableType
from ..store.api import NodeDescriptor, NodeRecord, ObjectKind
from .kind import noun

__all__ = ["choose_instance_type", "choose_mesh", "choose_node", "hosted_types"]


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


def hosted_types(descriptor: NodeDescriptor, kind: ObjectKind) -> frozenset[StableType]:
    """The stable types of ``kind`` that ``descriptor``'s node registers."""
    if kind is ObjectKind.ACTOR:
        return descriptor.actor_types
    if kind is ObjectKind.USER_SPOT:
        return descriptor.spot_types
    if kind is ObjectKind.INSTANCE_SPOT:
        return descriptor.instance_types
    return frozenset()  # Entry Spots are claimed by registration, never placed


def choose_node(
    nodes: Sequence[NodeRecord],
    stable_type: StableType,
    *,
    kind: ObjectKind = ObjectKind.ACTOR,
    rng: random.Random | None = None,
    exclude: frozenset[bytes] = frozenset(),
) -> NodeRecord:
    """Pick the target among ``nodes`` (one mesh's records) for a new ``kind`` object."""
    servers = [n for n in nodes if n.live and n.descriptor.object_role.can_host]
    typed = [n for n in servers if stable_type in hosted_types(n.descriptor, kind)]
    name = noun(kind)
    if not typed:
        raise NotFound(f"no live node hosts {name} type {stable_type.value!r}")
    free = [
        n
        for n in typed
        if n.active + n.pending < n.capacity and n.descriptor.node_rid.value not in exclude
    ]
    if not free:
        raise CapacityExceeded(f"no capacity left for {name} type {stable_type.value!r}")
    if len(free) == 1:
        return free[0]
    weights = [n.descriptor.placement_weight for n in free]
    return (rng or random).choices(free, weights=weights, k=1)[0]


def choose_instance_type(
    nodes: Sequence[NodeRecord], mesh: MeshName, stable_type: StableType | None
) -> StableType:
    """The Instance Spot type a cold activation in ``mesh`` (``nodes``: its records)
    uses: ``stable_type`` when given (whether a node hosts it is :func:`choose_node`'s
    check), else the one distinct Instance type the mesh's live Object Server descriptors
    publish (spec 06 §4.1 step 6: the same type on several nodes counts once). None →
    NotFound; several → InvalidOperation (name the type)."""
    if stable_type is not None:
        return stable_type
    types: set[StableType] = set()
    for n in nodes:
        if n.live and n.descriptor.object_role.can_host:
            types.update(n.descriptor.instance_types)
    if not types:
        raise NotFound(f"no live node of mesh {mesh.value!r} hosts an instance spot type")
    if len(types) > 1:
        names = ", ".join(sorted(repr(t.value) for t in types))
        raise InvalidOperation(
            f"mesh {mesh.value!r} hosts {len(types)} instance spot types ({names}); "
            "name one with instance(stable_type)"
        )
    return next(iter(types))
