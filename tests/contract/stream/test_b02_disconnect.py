"""Spec 02 §14 "Disconnect" over real websocket clients: B02-16 … B02-19, and A04-15 (the
binding and the Spot membership change independently; its non-move part)."""

from __future__ import annotations

import trio
from stream_kit import Record, bind, connect, create, relay, stream_cluster

from zlink_trio import MemoryLocationStore
from zlink_trio.testing import CountingStore, entry_spot_statistics
from zlink_trio.wire.stream import Bound


async def test_b02_16_disconnect_notifies_each_bound_actor_once_all_settled(
    clock: object, store: CountingStore
) -> None:
    """B02-16: cutting a connection with two bound Actors runs OnDisconnectActor exactly
    once at each Actor's current Spot (their Entry Spot), the second one even though the
    first one's callback fails; no authority read of the Store; both bindings are gone
    afterwards (a push is session-not-bound)."""
    rec = Record()
    rec.fail_disconnect = {"a"}
    async with stream_cluster(2, rec, store=store, hosts=lambda i: i == 1) as cluster:
        session_node, actor_node = cluster.servers
        await create(session_node, rec, "a")
        await create(session_node, rec, "b")
        async with connect(session_node, "user") as client:
            await bind(client, "a")
            await bind(client, "b")
            reads = store.count("read")
            connection = client.connection_id
        await rec.wait_until(lambda: len(rec.disconnects) == 2)
        assert sorted(rec.disconnects) == [(1, "a", connection), (1, "b", connection)]
        assert store.count("read") == reads
        for actor in ("a", "b"):
            assert await actor_node.actors.request(actor, "try_push") == b"SessionNotBound"
        await trio.sleep(10)
        assert len(rec.disconnects) == 2


async def test_b02_17_notify_and_physical_disconnect_race_at_most_once(
    autojump_clock: object,
) -> None:
    """B02-17: NotifyDisconnected and the physical disconnect of the same binding race
    (a notify packet, then the socket closes after 0..9 ms, many times over): the Spot
    callback runs at most once per binding identity — here exactly once — every time."""
    rec = Record()
    store = CountingStore(MemoryLocationStore())
    async with stream_cluster(2, rec, store=store, hosts=lambda i: i == 1) as cluster:
        session_node = cluster.servers[0]
        await create(session_node, rec, "a")
        connections = []
        for delay_ms in range(10):
            async with connect(session_node, f"user{delay_ms}") as client:
                await bind(client, "a")
                connections.append(client.connection_id)
                await client.send("notify", b"a")
                await trio.sleep(delay_ms / 1000)
        await rec.wait_until(lambda: len(rec.disconnects) >= len(connections))
        await trio.sleep(10)
        per_connection = [sum(1 for d in rec.disconnects if d[2] == c) for c in connections]
        assert per_connection == [1] * len(connections)


async def test_b02_18_disconnect_destroys_nothing_and_keeps_membership(
    clock: object, store: CountingStore
) -> None:
    """B02-18: after the disconnect notification the Actor is not destroyed (find gives
    the same ActorRef, same ObjectGeneration), its current Spot is unchanged, a direct
    send is still handled, and no other Spot callback ran (one lifecycle turn of its
    Entry Spot: the OnDisconnectActor)."""
    rec = Record()
    async with stream_cluster(2, rec, store=store, hosts=lambda i: i == 1) as cluster:
        session_node, actor_node = cluster.servers
        ref = await create(session_node, rec, "a")
        spot_before = await actor_node.actors.request("a", "whoami")
        (entry_before,) = entry_spot_statistics(actor_node)
        async with connect(session_node, "user") as client:
            await bind(client, "a")
        await rec.wait_until(lambda: len(rec.disconnects) == 1)
        assert await session_node.actors.find("a") == ref
        assert await actor_node.actors.request("a", "whoami") == spot_before
        await session_node.actors.send("a", "note", b"direct")
        await rec.wait_until(lambda: len(rec.handled_by("a", "note")) == 1)
        (entry_after,) = entry_spot_statistics(actor_node)
        assert entry_after.lifecycle_turns == entry_before.lifecycle_turns + 1
        assert entry_after.on_create_actor_calls == entry_before.on_create_actor_calls


async def test_b02_19_reconnect_restores_no_binding(clock: object, store: CountingStore) -> None:
    """B02-19: a client that reconnects gets a new session: its bound set is empty, find
    is null and an Actor push is session-not-bound until the new session binds; the old
    binding is never moved over."""
    rec = Record()
    async with stream_cluster(2, rec, store=store, hosts=lambda i: i == 1) as cluster:
        session_node, actor_node = cluster.servers
        await create(session_node, rec, "a")
        async with connect(session_node, "user") as first:
            await bind(first, "a")
            old_id = first.connection_id
        await rec.wait_until(lambda: len(rec.disconnects) == 1)
        async with connect(session_node, "user") as again:
            assert again.connection_id != old_id
            assert await again.request("bound") == b""
            assert await again.request("find", b"a") == b"0"
            assert await actor_node.actors.request("a", "try_push") == b"SessionNotBound"
            await bind(again, "a")
            assert isinstance(await again.receive(), Bound)
            assert await actor_node.actors.request("a", "try_push", b"hi") == b"ok"


async def test_a04_15_binding_and_membership_change_independently(
    clock: object, store: CountingStore
) -> None:
    """A04-15 (its non-move part): bind, NotifyDisconnected (an unbind) and a physical
    disconnect leave the Actor's current SpotId unchanged; the binding keeps delivering
    pushes and relays whatever the Spot membership (a Join is the membership issue's)."""
    rec = Record()
    async with stream_cluster(2, rec, store=store, hosts=lambda i: i == 1) as cluster:
        session_node, actor_node = cluster.servers
        await create(session_node, rec, "a")
        spot = await actor_node.actors.request("a", "whoami")
        assert spot
        async with connect(session_node, "user") as client:
            await bind(client, "a")
            assert await actor_node.actors.request("a", "whoami") == spot
            assert await relay(client, "a", "echo", b"x") == b"x"
            assert await client.request("notify", b"a") == b"ok"
            assert await actor_node.actors.request("a", "whoami") == spot
            await bind(client, "a")
        await rec.wait_until(lambda: len(rec.disconnects) == 2)
        assert await actor_node.actors.request("a", "whoami") == spot
