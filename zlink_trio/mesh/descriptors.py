"""What one lifecycle publishes: one NodeDescriptor per configured mesh."""

from __future__ import annotations

from collections.abc import Mapping

from ..config import ServerConfig
from ..errors import ConfigurationError
from ..ids import MeshName, NodeGeneration, NodeRid, SpotId, StableType
from ..store.api import Endpoint, NodeDescriptor

__all__ = ["WILDCARD_HOSTS", "advertised_host", "build_descriptors"]

WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "*"})


def advertised_host(config: ServerConfig) -> str:
    """``advertise_host``, else ``listen_host``; a wildcard listen address needs an
    explicit advertise host (peers cannot dial 0.0.0.0)."""
    if config.advertise_host:
        return config.advertise_host
    if config.listen_host in WILDCARD_HOSTS:
        raise ConfigurationError(
            f"listen_host {config.listen_host!r} is a wildcard: set advertise_host to an "
            "address peers can dial"
        )
    return config.listen_host


def build_descriptors(
    config: ServerConfig,
    actor_types: frozenset[StableType],
    rid: NodeRid,
    generation: NodeGeneration,
    endpoint: Endpoint,
    entry_ids: Mapping[MeshName, SpotId],
    spot_types: frozenset[StableType] = frozenset(),
    instance_types: frozenset[StableType] = frozenset(),
) -> list[NodeDescriptor]:
    """One descriptor per mesh. ``actor_types``, ``spot_types`` (User Spot types) and
    ``instance_types`` (Instance Spot types) -- the registered types, given by the
    composition root as plain values -- are published only where the role is SERVER (the
    Store's ``reserve`` checks them per mesh, placement reads them)."""
    return [
        NodeDescriptor(
            mesh_name=mesh.name,
            node_rid=rid,
            node_generation=generation,
            endpoint=endpoint,
            object_role=mesh.object_role,
            actor_types=actor_types if mesh.object_role.can_host else frozenset(),
            spot_types=spot_types if mesh.object_role.can_host else frozenset(),
            instance_types=instance_types if mesh.object_role.can_host else frozenset(),
            placement_weight=config.placement_weight,
            entry_spot_id=entry_ids[mesh.name],
        )
        for mesh in config.meshes
    ]
