"""Owner lease loss: the node stops admitting, closes its links, updates nothing, and
stays fail-stopped (a new lifecycle must replace it)."""

from __future__ import annotations

import trio
import trio.testing
from mesh_kit import (
    MESH,
    FlakyStore,
    actor_send,
    address,
    echoes,
    fast,
    per_node,
    stats,
    wait_state,
)
from trio.testing import MockClock

from zlink_trio.errors import ErrorKind
from zlink_trio.mesh.api import PeerState
from zlink_trio.mesh.lease import LeaseExpired, LeaseHeld
from zlink_trio.mesh.reasons import CloseReason, DropReason
from zlink_trio.mesh.stats import NodePhase
from zlink_trio.store.memory import MemoryLocationStore
from zlink_trio.testing import (
    CountingStore,
    TapDirection,
    WireTap,
    advance_store_clock,
    node_of,
    open_cluster,
)
from zlink_trio.wire import Command, TerminalResult


async def test_renewals_keep_the_lease(autojump_clock: MockClock) -> None:
    with trio.fail_after(120):
        async with open_cluster(2, config=fast()) as cluster:
            await cluster.wait_all_admitted()
            await trio.sleep(60)  # twenty renew intervals of virtual time
            for server in cluster.servers:
                s = stats(server)
                assert isinstance(s.lease, LeaseHeld)
                assert s.lease_renewals >= 19
                assert s.admitting
            await cluster.wait_all_admitted()


async def test_store_refusing_the_renewal_stops_admission(autojump_clock: MockClock) -> None:
    store = CountingStore(MemoryLocationStore())
    with trio.fail_after(120):
        async with open_cluster(2, config=fast(), store=store) as cluster:
            await cluster.wait_all_admitted()
            a, b = cluster.servers
            assert node_of(a).admitting and node_of(b).admitting
            await advance_store_clock(store, cluster.configs[0].owner_lease_ttl + 1)
            lost = await a.wait_lease_lost()
            await b.wait_lease_lost()
            assert "refused" in lost.reason
            store.reset()
            for server in (a, b):
                s = stats(server)
                assert not node_of(server).admitting
                assert s.phase is NodePhase.EXPIRED
                assert isinstance(s.lease, LeaseExpired)
                assert s.peers_admitted == 0 and s.peers_connecting == 0
                assert node_of(server).peers() == {}
            await trio.sleep(60)
            # Fail-stopped: no renewal, no re-registration, no location update.
            assert {m: n for m, n in store.calls.items() if m not in {"list_nodes"}} == {}
            assert not node_of(a).admitting


async def test_failing_renewals_expire_at_the_local_deadline(autojump_clock: MockClock) -> None:
    store = FlakyStore(MemoryLocationStore())
    with trio.fail_after(120):
        async with open_cluster(2, config=fast(), store=store) as cluster:
            await cluster.wait_all_admitted()
            a, b = cluster.servers
            held = stats(b).lease
            assert isinstance(held, LeaseHeld)
            store.fail_renewals_of.add(b.identity.node_rid)
            start = trio.current_time()
            lost = await b.wait_lease_lost()
            deadline = held.local_deadline + 3.0  # the last success may be one interval on
            assert lost.at <= deadline
            assert lost.at - start <= cluster.configs[1].owner_lease_ttl
            assert "deadline" in lost.reason
            assert stats(b).lease_renew_failures >= 2
            # The peer sees the link break first (a blip), then, once the Store lease
            # runs out and its watcher drops the intent, GONE.
            await wait_state(a, address(b), PeerState.GONE)
            assert stats(a).peers_admitted == 0
            records = {r.descriptor.node_rid: r for r in await store.list_nodes(MESH)}
            # Expired, or already removed: a's reclaim sweep removes an expired
            # registration that owns no row, and its round may fall on this same instant.
            gone = records.get(b.identity.node_rid)
            assert gone is None or not gone.live
            await trio.testing.wait_all_tasks_blocked()  # b's link teardown has run
            assert stats(b).closed(CloseReason.LEASE_LOST) == 1
            assert node_of(a).admitting


async def test_a_node_that_is_not_admitting_refuses_inbound_requests(
    autojump_clock: MockClock,
) -> None:
    services = echoes(2)
    tap = WireTap()
    async with open_cluster(2, config=fast(), services=per_node(services), tap=tap) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        node_of(b)._phase = NodePhase.CLOSING  # white-box: the drain window of an exit
        pending = await node_of(a).request(address(b), actor_send(a, b))
        reply = await pending.wait()
        assert reply.terminal_result is TerminalResult.FAILED
        assert reply.failure_code is ErrorKind.UNAVAILABLE
        await node_of(a).send(address(b), actor_send(a, b, request=False))
        await node_of(a).send(address(b), actor_send(a, b, b"x", request=False))
        await tap.wait_for(
            count=3,
            node=b.identity.node_rid,
            direction=TapDirection.RECEIVED,
            command=Command.ACTOR_SEND,
        )
        assert stats(b).dropped(DropReason.NOT_ADMITTING) >= 3  # (+ a late duplicate hello)
        assert services[1].received == []
        node_of(b)._phase = NodePhase.RUNNING
