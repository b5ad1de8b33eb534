"""A route's owner address is the very object its connection is keyed by: looking the
connection up per call is then an identity check, not the generated ``__eq__`` of the
address and its ids (issue 11)."""

from __future__ import annotations

import os

from zlink_trio.ids import (
    AuthorityOwnerGeneration,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OwnerLeaseGeneration,
)
from zlink_trio.mesh.api import PeerAddress, PeerIdentity, peer_address
from zlink_trio.routing.route_cache import Route


def _route(mesh: str, rid: bytes) -> Route:
    return Route(
        mesh_name=MeshName(mesh),
        node_rid=NodeRid(rid),
        node_generation=NodeGeneration(1),
        lease_generation=OwnerLeaseGeneration(1),
        object_generation=ObjectGeneration(1),
        owner_generation=AuthorityOwnerGeneration(1),
        store_version=1,
    )


def test_a_route_and_its_owners_connection_share_one_address_object() -> None:
    rid = os.urandom(16)
    identity = PeerIdentity(MeshName("m"), NodeRid(bytes(rid)), NodeGeneration(3))
    route = _route("m", bytes(rid))
    assert route.peer is identity.address
    assert _route("m", bytes(rid)).peer is route.peer


def test_addresses_of_different_peers_stay_apart_and_equal_to_fresh_ones() -> None:
    rid, other = os.urandom(16), os.urandom(16)
    address = peer_address(MeshName("m"), NodeRid(rid))
    assert address == PeerAddress(MeshName("m"), NodeRid(rid))
    assert peer_address(MeshName("n"), NodeRid(rid)) != address
    assert peer_address(MeshName("m"), NodeRid(other)) != address
    assert peer_address(MeshName("n"), NodeRid(rid)).mesh_name == MeshName("n")
