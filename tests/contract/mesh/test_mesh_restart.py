"""A replacement lifecycle: new identity at the same endpoint; the old one is rejected."""

from __future__ import annotations

import pytest
import trio
from mesh_kit import MESH, actor_send, address, echoes, fast, per_node, stats, wait_state
from trio.testing import MockClock

from zlink_trio.mesh.api import PeerIdentity, PeerState
from zlink_trio.mesh.frameio import FrameIO
from zlink_trio.mesh.handshake import HandshakeRejected, dial_hello
from zlink_trio.mesh.reasons import DropReason
from zlink_trio.store.api import ObjectKey
from zlink_trio.testing import node_of, open_cluster


async def test_replacement_gets_a_new_identity_and_entry_id_at_the_same_endpoint(
    autojump_clock: MockClock,
) -> None:
    async with open_cluster(2, config=fast()) as cluster:
        await cluster.wait_all_admitted()
        a, old = cluster.servers
        old_entry = node_of(old).entry_spot_id(MESH)
        new = await cluster.restart(1)
        assert new.endpoint == old.endpoint
        assert new.identity.node_rid != old.identity.node_rid
        assert new.identity.node_generation != old.identity.node_generation
        new_entry = node_of(new).entry_spot_id(MESH)
        assert new_entry != old_entry
        assert new_entry.is_reserved_entry_shape
        records = {r.descriptor.node_rid: r for r in await cluster.store.list_nodes(MESH)}
        assert set(records) == {a.identity.node_rid, new.identity.node_rid}
        assert records[new.identity.node_rid].descriptor.entry_spot_id == new_entry
        assert await cluster.store.read(ObjectKey.spot(old_entry.value)) is None
        await cluster.wait_all_admitted()
        await wait_state(a, address(old), PeerState.GONE)


async def test_frames_stamped_with_the_old_generation_are_rejected(
    autojump_clock: MockClock,
) -> None:
    services = echoes(2)
    async with open_cluster(2, config=fast(), services=per_node(services)) as cluster:
        await cluster.wait_all_admitted()
        a, old = cluster.servers
        stale_record = actor_send(old, a, b"from the old lifecycle", request=False)
        new = await cluster.restart(1)
        await cluster.wait_all_admitted()
        before = stats(a).dropped(DropReason.SOURCE_MISMATCH)
        # The replacement's connection carries a record stamped with the old identity.
        await node_of(new).send(address(a), stale_record)
        await node_of(new).send(address(a), actor_send(new, a, b"current", request=False))
        await services[0].wait_received(1)
        assert services[0].payloads() == [b"current"]
        assert stats(a).dropped(DropReason.SOURCE_MISMATCH) == before + 1

        # A hello proving the old identity is refused: its descriptor is gone.
        assert a.endpoint is not None
        io = FrameIO.from_stream(await trio.open_tcp_stream(a.endpoint.host, a.endpoint.port))
        with pytest.raises(HandshakeRejected):
            await dial_hello(
                io,
                secret=cluster.secret,
                local=old.identity,
                expected=PeerIdentity(MESH, a.identity.node_rid, a.identity.node_generation),
            )
        io.close()
        assert stats(a).dropped(DropReason.UNKNOWN_PEER) == 1
        assert services[0].payloads() == [b"current"]


async def test_stale_cleanup_of_an_old_lifecycle_never_removes_the_replacement(
    autojump_clock: MockClock,
) -> None:
    async with open_cluster(2, config=fast()) as cluster:
        await cluster.wait_all_admitted()
        store = cluster.store
        old = cluster.servers[1]
        old_fence = node_of(old).owner_fence(MESH)
        await cluster.kill(1)  # a crash: no cleanup, the lease runs out
        await wait_state(cluster.servers[0], address(old), PeerState.GONE)
        # Expired, or already removed by the survivor's reclaim sweep (a registration that
        # owns no row; its round may fall on this same instant): never live.
        records = {r.descriptor.node_rid: r for r in await store.list_nodes(MESH)}
        assert records[cluster.servers[0].identity.node_rid].live
        stale = records.get(old.identity.node_rid)
        assert stale is None or not stale.live
        new = await cluster.restart(1)
        new_entry = node_of(new).entry_spot_id(MESH)
        # The old lifecycle's cleanup, replayed late, removes nothing of the replacement.
        removed = await store.remove_node(
            old_fence.node_rid, old_fence.node_generation, old_fence.lease_generation
        )
        records = {r.descriptor.node_rid: r for r in await store.list_nodes(MESH)}
        assert new.identity.node_rid in records
        assert records[new.identity.node_rid].live
        claim = await store.read(ObjectKey.spot(new_entry.value))
        assert claim is not None
        assert claim.owner == node_of(new).owner_fence(MESH)
        # (the crashed lifecycle's expired registration, which owned no row, was already
        # removed by the reclaim sweep the restarted node ran before it was handed out)
        assert removed is False
        assert old.identity.node_rid not in records
        await cluster.wait_all_admitted()
