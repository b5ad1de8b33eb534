"""What the Location Store publishes about a node: the descriptors peers route by.

Contract tests compare a running node with its published mapping (spec 06 §2.1: the
Entry Spot id a descriptor names is how placement and Entry Spot join reach that node;
nobody parses the id) without reaching into the server's internals.
"""

from __future__ import annotations

from ..errors import NotConfigured
from ..server import Server, runtime_of
from ..store.api import NodeDescriptor

__all__ = ["published_descriptors"]


async def published_descriptors(server: Server) -> tuple[NodeDescriptor, ...]:
    """The descriptors ``server``'s Location Store holds for ``server``'s own node
    lifecycle (its NodeRid and NodeGeneration), one per mesh, ordered by mesh name.
    Empty once that lifecycle's registration is removed.

    Raises:
        NotConfigured: the server runs without a Location Store.
    """
    store = runtime_of(server).store
    if store is None:
        raise NotConfigured("this server has no Location Store")
    identity = server.identity
    records = await store.list_nodes()
    return tuple(
        sorted(
            (
                r.descriptor
                for r in records
                if r.descriptor.node_rid == identity.node_rid
                and r.descriptor.node_generation == identity.node_generation
            ),
            key=lambda d: d.mesh_name,
        )
    )
