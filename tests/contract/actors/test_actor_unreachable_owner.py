"""Messages to an Actor whose owner cannot be reached (docs/decisions.md, "Fast failure
and lazy reclaim"; issue 10).

Between an owner's crash and its lease expiry, a request or a send whose owner has no
admitted connection and cannot be dialed ends ``Unavailable`` as soon as the dial fails
(at most ``connect_timeout``, or the call's own deadline when that is sooner), and it is
never sent anywhere. Once the owner's lease expired, the call that finds the owner
unreachable reclaims the row (one fenced CAS) and goes on against the new state: the id
is Missing, so the call ends ``NotFound`` (Actors are not auto-activated by messages),
never StaleRoute for ever.

Node 0 hosts the Actors, node 1 only calls them (it hosts no Actor type). The crash is
``Cluster.kill`` (the sockets close, nobody is told, the descriptor stays until the lease
runs out); tests/faults/test_actor_processes.py does the same with a SIGKILLed process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import pytest
import trio
import trio.testing
from actor_kit import Recorder, client_app, make_app

from zlink_trio import NotFound, ServerConfig, Unavailable
from zlink_trio.actors.results import Created
from zlink_trio.mesh.api import PeerAddress, PeerState
from zlink_trio.store.api import ObjectKey
from zlink_trio.testing import (
    Cluster,
    CountingStore,
    FlowEvent,
    TapDirection,
    WireTap,
    flow_count,
    node_of,
    open_cluster,
)
from zlink_trio.wire.commands import Command

LONG = 30.0
"""The calls' own timeout: far beyond the connect timeout."""


def _config(backend: str) -> ServerConfig:
    # The background sweep never runs during a test: every reclaim seen is the call's own.
    config = ServerConfig(reclaim_sweep_interval=1000.0)
    if backend == "postgres":  # real time: a short lease, so its expiry comes quickly
        config = attrs.evolve(
            config,
            owner_lease_ttl=1.0,
            owner_lease_renew_interval=0.25,
            descriptor_poll_interval=0.1,
        )
    return config


@asynccontextmanager
async def _owner_and_caller(
    store: CountingStore, backend: str, tap: WireTap, **changes: object
) -> AsyncIterator[Cluster]:
    """Node 0 hosts ``cart-0`` (created and called once by node 1, so node 1 has its
    route cached); node 1 is the caller."""
    apps = [make_app(Recorder()), client_app()]
    config = attrs.evolve(_config(backend), **changes)
    async with open_cluster(
        2, store=store, app=lambda i: apps[i], config=config, tap=tap
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[1].actors
        created = await caller.create("cart-0", "player").timeout(LONG)
        assert isinstance(created, Created)
        assert created.actor.node_rid == cluster.servers[0].identity.node_rid
        assert await caller.request("cart-0", "echo", b"warm").timeout(LONG) == b"warm"
        yield cluster


async def _crash_owner(cluster: Cluster) -> PeerAddress:
    """Kill node 0 and wait until node 1 has seen its connection break (CONNECTING: the
    intent stays until the lease expires)."""
    owner = cluster.servers[0]
    (mesh,) = {m.name for m in owner.config.meshes}
    address = PeerAddress(mesh, owner.identity.node_rid)
    await cluster.kill(0)
    node = node_of(cluster.servers[1])
    while node.peer_state(address) is PeerState.ADMITTED:
        await node.wait_peer_change(address)
    assert node.peer_state(address) is PeerState.CONNECTING
    return address


def _sent(tap: WireTap, cluster: Cluster) -> int:
    return tap.count(
        command=Command.ACTOR_SEND,
        node=cluster.servers[1].identity.node_rid,
        direction=TapDirection.SENT,
    )


async def test_calls_to_a_crashed_owner_end_unavailable_when_the_dial_fails(
    clock: object, store: CountingStore, backend: str
) -> None:
    """Issue 10 (fast failure): after node 0 crashes, while its lease is still live, a
    request and a send to its Actor end ``Unavailable`` as soon as node 1's dial to it is
    refused: well before their 30 s deadline, within ``connect_timeout`` (on MockClock:
    at the very instant, the refusal is immediate on loopback), and nothing is sent. A
    second round of calls ends the same way (the route was dropped; the Store row still
    names the live-leased owner), and the row is left alone (no reclaim while the lease
    is live)."""
    tap = WireTap()
    async with _owner_and_caller(store, backend, tap) as cluster:
        caller = cluster.servers[1].actors
        sent = _sent(tap, cluster)
        await _crash_owner(cluster)
        connect_timeout = cluster.configs[1].connect_timeout
        for _ in range(2):  # cached route, then from the Store
            start = trio.current_time()
            with pytest.raises(Unavailable) as request:
                await caller.request("cart-0", "echo", b"lost").timeout(LONG)
            with pytest.raises(Unavailable) as send:
                await caller.send("cart-0", "note", b"lost").timeout(LONG)
            elapsed = trio.current_time() - start
            for failure in (request.value, send.value):
                assert not isinstance(failure, NotFound)
                assert "cannot be reached" in failure.message, (failure, elapsed)
            if backend == "memory":
                assert elapsed == 0.0
            else:
                assert elapsed < connect_timeout
        assert _sent(tap, cluster) == sent  # never sent anywhere
        row = await store.read(ObjectKey.actor("cart-0"))
        assert row is not None and row.owner.node_rid == cluster.servers[0].identity.node_rid
        assert flow_count(cluster.servers[1], FlowEvent.RECLAIMED) == 0


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_an_owner_endpoint_that_never_answers_is_given_up_at_connect_timeout(
    clock: object, store: CountingStore
) -> None:
    """Issue 10 (fast failure, the bound): node 0 crashed and something else now listens
    on its port, accepting TCP connections but never answering the hello (the dial hangs
    until ``hello_timeout``, 5 s). A request with a 30 s timeout ends ``Unavailable``
    exactly at ``connect_timeout`` (2 s); a request whose own timeout (0.5 s) or whose
    caller's deadline (0.7 s) is sooner ends there instead (Unavailable, resp. the
    caller's own scope); nothing is sent."""
    tap = WireTap()
    async with _owner_and_caller(store, "memory", tap) as cluster:
        caller = cluster.servers[1].actors
        port = cluster.servers[0].endpoint
        assert port is not None
        sent = _sent(tap, cluster)
        await _crash_owner(cluster)
        listeners = await trio.open_tcp_listeners(port.port, host="127.0.0.1")
        accepted: list[trio.SocketStream] = []

        async def hold(stream: trio.SocketStream) -> None:
            accepted.append(stream)
            await trio.sleep_forever()

        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, hold, listeners)
            connect_timeout = cluster.configs[1].connect_timeout
            assert connect_timeout < cluster.configs[1].hello_timeout
            start = trio.current_time()
            with pytest.raises(Unavailable) as failure:
                await caller.request("cart-0", "echo", b"lost").timeout(LONG)
            assert trio.current_time() == start + connect_timeout
            assert "cannot be reached" in failure.value.message
            start = trio.current_time()
            with pytest.raises(Unavailable):
                await caller.request("cart-0", "echo", b"lost").timeout(0.5)
            assert trio.current_time() == start + 0.5
            start = trio.current_time()
            with trio.move_on_after(0.7) as scope:
                await caller.request("cart-0", "echo", b"lost").timeout(LONG)
            assert scope.cancelled_caught
            assert trio.current_time() == start + 0.7
            assert accepted  # the dials did reach the endpoint
            nursery.cancel_scope.cancel()
        assert _sent(tap, cluster) == sent


async def test_a_call_that_finds_the_owner_lease_expired_reclaims_the_row(
    clock: object, store: CountingStore, backend: str
) -> None:
    """Issue 10 (lazy reclaim on the messaging path): once node 0's lease expired (node 1
    sees it GONE), a request to its Actor reclaims the row itself (one fenced CAS, counted
    once as RECLAIMED on node 1; the background sweep is off) and ends ``NotFound``: the
    id is Missing, and Actors are not auto-activated by messages. Later calls (request
    and send) end NotFound from the Store, the row and the dead lifecycle's capacity are
    gone, and ``find`` sees nothing. Never StaleRoute."""
    tap = WireTap()
    async with _owner_and_caller(store, backend, tap) as cluster:
        caller = cluster.servers[1].actors
        address = await _crash_owner(cluster)
        node = node_of(cluster.servers[1])
        with trio.fail_after(60):
            while node.peer_state(address) is not PeerState.GONE:
                await node.wait_peer_change(address)
        sent = _sent(tap, cluster)
        with pytest.raises(NotFound):
            await caller.request("cart-0", "echo", b"after").timeout(LONG)
        assert flow_count(cluster.servers[1], FlowEvent.RECLAIMED) == 1
        assert await store.read(ObjectKey.actor("cart-0")) is None
        with pytest.raises(NotFound):
            await caller.request("cart-0", "echo", b"again").timeout(LONG)
        with pytest.raises(NotFound):
            await caller.send("cart-0", "note", b"again").timeout(LONG)
        assert await caller.find("cart-0") is None
        assert flow_count(cluster.servers[1], FlowEvent.RECLAIMED) == 1
        assert _sent(tap, cluster) == sent
        dead = [
            r
            for r in await store.list_nodes()
            if r.descriptor.node_rid == cluster.servers[0].identity.node_rid
        ]
        assert [(r.active, r.pending) for r in dead] == [(0, 0)]


@pytest.mark.parametrize("backend", ["memory"])  # virtual time: MockClock only
async def test_a_dial_failure_after_the_lease_expired_reclaims_before_the_watcher_notices(
    clock: object, store: CountingStore
) -> None:
    """Issue 10 (lazy reclaim): node 1's descriptor watcher polls only every 1000 s, so it
    still has node 0 CONNECTING long after node 0's lease expired. A request then finds
    the owner unreachable (the dial is refused), reads the owner's lease in the Store
    (expired), reclaims the row and ends NotFound at once."""
    tap = WireTap()
    async with _owner_and_caller(store, "memory", tap, descriptor_poll_interval=1000.0) as cluster:
        caller = cluster.servers[1].actors
        address = await _crash_owner(cluster)
        await trio.sleep(cluster.configs[0].owner_lease_ttl + 1.0)
        assert node_of(cluster.servers[1]).peer_state(address) is PeerState.CONNECTING
        start = trio.current_time()
        with pytest.raises(NotFound):
            await caller.request("cart-0", "echo", b"after").timeout(LONG)
        assert trio.current_time() == start
        assert flow_count(cluster.servers[1], FlowEvent.RECLAIMED) == 1
        assert await store.read(ObjectKey.actor("cart-0")) is None
