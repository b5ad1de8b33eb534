"""PeerState: CONNECTING is a blip (intent, no connection), GONE is for good (no intent,
no connection); wait_peer_change wakes on every transition."""

from __future__ import annotations

import trio
import trio.testing
from mesh_kit import actor_send, address, fast, stats
from trio.testing import MockClock

from zlink_trio.mesh.api import PeerState
from zlink_trio.testing import FaultPlan, node_of, open_cluster
from zlink_trio.wire import Command


async def transitions(node: object, peer: object, into: list[PeerState], stop: PeerState) -> None:
    while True:
        state = await node.wait_peer_change(peer)  # type: ignore[attr-defined]
        into.append(state)
        if state is stop:
            return


async def test_cut_is_connecting_then_admitted_again(autojump_clock: MockClock) -> None:
    plan = FaultPlan()
    with trio.fail_after(60):
        async with open_cluster(2, config=fast(), fault_plan=plan) as c:
            await c.wait_all_admitted()
            a, b = c.servers
            seen: list[PeerState] = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(transitions, node_of(a), address(b), seen, PeerState.ADMITTED)
                await trio.testing.wait_all_tasks_blocked()
                plan.cut(command=Command.ACTOR_SEND)
                await node_of(a).send(address(b), actor_send(a, b, request=False))
            assert seen == [PeerState.CONNECTING, PeerState.ADMITTED]
            assert node_of(a).peers() == {address(b): PeerState.ADMITTED}


async def test_graceful_stop_is_gone(autojump_clock: MockClock) -> None:
    with trio.fail_after(60):
        async with open_cluster(3, config=fast()) as c:
            await c.wait_all_admitted()
            a, b, _ = c.servers
            seen: list[PeerState] = []
            waiters: list[PeerState] = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(transitions, node_of(a), address(b), seen, PeerState.GONE)
                nursery.start_soon(transitions, node_of(a), address(b), waiters, PeerState.GONE)
                await trio.testing.wait_all_tasks_blocked()
                await c.stop(1)
            # goodbye -> the link goes down; the descriptor is already gone and the goodbye
            # made the watcher look at once -> GONE without waiting a poll (the two can
            # land in one step: ADMITTED -> GONE).
            for observed in (seen, waiters):
                assert observed in ([PeerState.CONNECTING, PeerState.GONE], [PeerState.GONE])
            assert trio.current_time() < c.configs[0].descriptor_poll_interval
            assert address(b) not in node_of(a).peers()
            assert stats(a).peers_admitted == 1


async def test_crash_is_connecting_until_the_lease_expires_then_gone(
    autojump_clock: MockClock,
) -> None:
    with trio.fail_after(60):
        # No reclaim sweep: it may remove the expired registration (it owns no row) in the
        # same virtual instant as the watcher sees it expire; the test reads it afterwards.
        async with open_cluster(2, config=fast(reclaim_sweep_interval=1000.0)) as c:
            await c.wait_all_admitted()
            a, b = c.servers
            ttl = c.configs[1].owner_lease_ttl
            seen: list[PeerState] = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(transitions, node_of(a), address(b), seen, PeerState.GONE)
                await trio.testing.wait_all_tasks_blocked()
                crashed_at = trio.current_time()
                await c.kill(1)
            assert seen == [PeerState.CONNECTING, PeerState.GONE]
            # GONE only once the Store lease ran out and a's watcher dropped the intent.
            waited = trio.current_time() - crashed_at
            assert ttl - c.configs[1].owner_lease_renew_interval <= waited
            assert waited <= ttl + c.configs[0].descriptor_poll_interval
            records = await c.store.list_nodes()
            # expired, or already removed by a's reclaim sweep (b owned no row)
            assert [r.live for r in records if r.descriptor.node_rid == b.identity.node_rid] in (
                [False],
                [],
            )
