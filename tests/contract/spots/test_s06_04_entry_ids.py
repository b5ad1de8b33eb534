"""S06-04: Entry Spot ids of real nodes (spec 06 §2.1), on both stores.

Through ``open_cluster`` (real TCP, the backend's real Location Store): a node's Entry
Spot id has the reserved shape and does not contain its MeshNode RID in any encoding; a
replacement lifecycle (graceful restart or crash, same store, same name and endpoint) gets
a new RID *and* a new Entry Spot id; the Store's descriptor publishes exactly the id the
node's Entry Spot runs under, and a create placed on that node runs its approval in that
Entry Spot and joins the Actor to it (routing follows the published mapping).
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

from zlink_trio import App, Created, NodeRid, RecreateOnRelocation, SpotId, on_request
from zlink_trio.testing import (
    Cluster,
    CountingStore,
    entry_spot_statistics,
    open_cluster,
    published_descriptors,
)

HOST, CALLER = 0, 1


def hosting_app() -> App:
    """Hosts type "member"; its ``spot`` request answers the Actor's Spot membership."""
    app = App()
    app.enable_actor_dispatch()

    class Member:
        def __init__(self, context: Any) -> None:
            self.context = context

        @on_request("spot")
        async def spot(self, payload: bytes) -> bytes:
            spot_id = self.context.spot_id
            return b"" if spot_id is None else spot_id.value.encode()

    app.register_actor("member", Member, relocation=RecreateOnRelocation())
    return app


def caller_app() -> App:
    app = App()
    app.enable_actor_dispatch()
    return app


def apps(index: int) -> App:
    return hosting_app() if index == HOST else caller_app()


def rid_encodings(rid: NodeRid) -> set[str]:
    """The RID written every way an id builder might: hex (both cases), base64 (standard
    and URL-safe, padded and not), base32, base16, its UUID form, its decimal integer, the
    raw bytes read as Latin-1, and each 8-byte half in hex."""
    raw = rid.value
    b64 = base64.b64encode(raw).decode()
    url = base64.urlsafe_b64encode(raw).decode()
    forms = {
        rid.hex,
        rid.hex.upper(),
        str(rid),
        b64,
        b64.rstrip("="),
        url,
        url.rstrip("="),
        base64.b32encode(raw).decode(),
        base64.b32encode(raw).decode().rstrip("=").lower(),
        base64.b16encode(raw).decode(),
        str(uuid.UUID(bytes=raw)),
        uuid.UUID(bytes=raw).hex,
        str(int.from_bytes(raw, "big")),
        raw.decode("latin-1"),
        raw[:8].hex(),
        raw[8:].hex(),
    }
    return {f for f in forms if f}


def assert_no_rid_in(entry_id: str, rid: NodeRid) -> None:
    assert SpotId.parse(entry_id).is_reserved_entry_shape, entry_id
    folded = entry_id.lower()
    for form in rid_encodings(rid):
        assert form not in entry_id and form.lower() not in folded, (form, entry_id)
    tail = uuid.UUID(entry_id.rsplit("-entry-", 1)[1])
    assert tail.version == 4 and tail.bytes != rid.value  # a separate v4 UUID


async def entry_id_of(cluster: Cluster, index: int) -> str:
    """The node's Entry Spot id as the node runs it, checked against what the Store
    publishes for that node lifecycle (one mesh, one descriptor, the same id)."""
    server = cluster.servers[index]
    (spot,) = entry_spot_statistics(server)
    (descriptor,) = await published_descriptors(server)
    assert descriptor.node_rid == server.identity.node_rid
    assert descriptor.entry_spot_id.value == spot.spot_id
    assert descriptor.mesh_name.value == spot.mesh_name
    return spot.spot_id


async def create_routes_to_published_entry(cluster: Cluster, actor_id: str) -> None:
    """A create issued on the caller node is placed on the host (the only node hosting
    the type), runs one approval in the Entry Spot the host's descriptor names, and the
    Actor's membership is that published id."""
    host = cluster.servers[HOST]
    published = await entry_id_of(cluster, HOST)
    (before,) = entry_spot_statistics(host)
    created = await cluster.servers[CALLER].actors.create(actor_id, "member").timeout(30)
    assert isinstance(created, Created)
    assert created.actor.node_rid == host.identity.node_rid
    (after,) = entry_spot_statistics(host)
    assert after.spot_id == published
    assert after.lifecycle_turns == before.lifecycle_turns + 1
    membership = await cluster.servers[CALLER].actors.request(actor_id, "spot", b"")
    assert membership == published.encode()


async def test_s06_04_entry_id_has_no_rid_and_routing_follows_the_mapping(
    clock: object, store: CountingStore
) -> None:
    async with open_cluster(2, store=store, app=apps) as cluster:
        await cluster.wait_all_admitted()
        ids = [await entry_id_of(cluster, i) for i in range(len(cluster))]
        for index, entry_id in enumerate(ids):
            rid = cluster.servers[index].identity.node_rid
            assert_no_rid_in(entry_id, rid)
            for other in cluster.servers:  # nor any other node's RID
                assert_no_rid_in(entry_id, other.identity.node_rid)
        assert len(set(ids)) == 2
        await create_routes_to_published_entry(cluster, "m1")


async def test_s06_04_a_replacement_lifecycle_gets_a_new_entry_id(
    clock: object, store: CountingStore
) -> None:
    async with open_cluster(2, store=store, app=apps) as cluster:
        await cluster.wait_all_admitted()
        seen_ids = {await entry_id_of(cluster, HOST)}
        seen_rids = {cluster.servers[HOST].identity.node_rid}
        old = cluster.servers[HOST]
        # graceful restart: same store, same node name, same endpoint
        new = await cluster.restart(HOST)
        assert new.config.node_name == old.config.node_name
        assert new.endpoint == old.endpoint
        assert await published_descriptors(old) == ()  # the old lifecycle's claim is gone
        await cluster.wait_all_admitted()
        await create_routes_to_published_entry(cluster, "m-restarted")
        seen_ids.add(await entry_id_of(cluster, HOST))
        seen_rids.add(new.identity.node_rid)
        # crash (no deregistration: the old descriptor and its Entry claim stay until the
        # lease ends), then a replacement on the same store under the same name
        await cluster.kill(HOST)
        replacement = await cluster.start(HOST)
        assert replacement.config.node_name == new.config.node_name
        (still_claimed,) = await published_descriptors(new)
        replacement_id = await entry_id_of(cluster, HOST)
        assert still_claimed.entry_spot_id.value != replacement_id
        seen_ids.add(replacement_id)
        seen_rids.add(replacement.identity.node_rid)
        assert len(seen_ids) == 3 and len(seen_rids) == 3
        for entry_id in seen_ids:
            for rid in seen_rids:
                assert_no_rid_in(entry_id, rid)
