"""open_server exits cleanly whatever ends its body: nothing keeps running, no socket
stays open, the registration is removed, and one error leaves as itself."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from mesh_kit import (
    MESH,
    actor_send,
    address,
    echoes,
    fast,
    open_fds,
    per_node,
    task_count,
    wait_state,
)
from trio.testing import MockClock

from zlink_trio import open_server
from zlink_trio.config import MeshConfig
from zlink_trio.mesh.api import PeerState
from zlink_trio.store.memory import MemoryLocationStore
from zlink_trio.testing import node_of, open_cluster

SECRET = b"q" * 32


def one_node(store: MemoryLocationStore) -> object:
    return fast(meshes=(MeshConfig(name=MESH),), cluster_secret=SECRET, location_store=store)


class Boom(Exception):
    pass


async def test_body_error_propagates_unwrapped_and_nothing_leaks(
    autojump_clock: MockClock,
) -> None:
    store = MemoryLocationStore()
    async with open_cluster(1, config=fast(), store=store) as cluster:  # a peer to talk to
        await trio.testing.wait_all_tasks_blocked()
        tasks, fds = task_count(), open_fds()
        with pytest.raises(Boom):  # not an ExceptionGroup
            async with open_server(cluster.configs[0]) as server:
                await wait_state(server, address(cluster.servers[0]), PeerState.ADMITTED)
                assert server.statistics().node.peers_admitted == 1
                raise Boom
        await trio.testing.wait_all_tasks_blocked()
        assert task_count() == tasks
        assert open_fds() == fds
        assert len(await store.list_nodes()) == 1


async def test_cancelled_body_exits_cleanly(autojump_clock: MockClock) -> None:
    store = MemoryLocationStore()
    await trio.testing.wait_all_tasks_blocked()
    tasks, fds = task_count(), open_fds()
    with trio.move_on_after(5) as scope:
        async with open_server(one_node(store)):
            await trio.sleep_forever()
    assert scope.cancelled_caught
    await trio.testing.wait_all_tasks_blocked()
    assert task_count() == tasks
    assert open_fds() == fds
    assert await store.list_nodes() == ()


async def test_exit_with_live_peers_and_requests_in_flight(autojump_clock: MockClock) -> None:
    services = echoes(3, auto_reply=False)
    store = MemoryLocationStore()
    await trio.testing.wait_all_tasks_blocked()
    tasks, fds = task_count(), open_fds()
    with trio.fail_after(60):
        async with open_cluster(3, config=fast(), store=store, services=per_node(services)) as c:
            await c.wait_all_admitted()
            a, b, _ = c.servers
            pending = await node_of(a).request(address(b), actor_send(a, b))
            await services[1].wait_received(1)
            assert pending.correlation >= 1
    await trio.testing.wait_all_tasks_blocked()
    assert task_count() == tasks
    assert open_fds() == fds
    assert await store.list_nodes() == ()
