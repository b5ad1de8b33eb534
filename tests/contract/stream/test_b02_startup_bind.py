"""Spec 02 §14 "Startup and bind" over a real websocket client: B02-01 … B02-05."""

from __future__ import annotations

import attrs
import pytest
import trio
from stream_kit import (
    Record,
    bind,
    connect,
    create,
    relay,
    stream_app,
    stream_cluster,
    stream_config,
)

from zlink_trio import (
    ConfigurationError,
    InvalidOperation,
    MemoryLocationStore,
    MeshConfig,
    ServerConfig,
    Unavailable,
    open_server,
)
from zlink_trio.config import StreamConfig
from zlink_trio.stream import AutoBind
from zlink_trio.testing import CountingStore, TapDirection, WireTap, node_of
from zlink_trio.wire.stream import Bound, Push

SECRET = b"s" * 32


async def test_b02_01_two_meshes_start_and_serve_sessions(autojump_clock: object) -> None:
    """B02-01: several meshes configured is no error (positive control): a server with
    two Object meshes and a STREAM endpoint starts, authenticates a session and binds its
    Actor (EnableActorDispatch takes no MeshName)."""
    rec = Record()
    app = stream_app(rec, 0, autobind=AutoBind.GET_OR_CREATE)
    config = ServerConfig(
        meshes=(MeshConfig(name="one"), MeshConfig(name="two")),
        cluster_secret=SECRET,
        stream=StreamConfig(),
    )
    # Two Object meshes: a create must name its mesh, so bind an Actor created explicitly.
    app_without_autobind = stream_app(rec, 0)
    async with open_server(config, app_without_autobind) as server:
        created = await server.actors.create("alice", "player").in_mesh("two").timeout(10)
        rec.refs["alice"] = created.actor  # type: ignore[union-attr]
        async with connect(server) as client:
            assert await bind(client, "alice") >= 1
            assert isinstance(await client.receive(), Bound)
    del app


async def test_b02_01_duplicate_packet_key_fails_a_stream_server(autojump_clock: object) -> None:
    """B02-01: the same packet key registered twice is a startup configuration error of a
    server with a STREAM endpoint too (nothing listens)."""
    rec = Record()
    app = stream_app(rec, 0)

    @app.on_packet("local")
    async def again(packet: object, payload: bytes) -> None: ...

    with pytest.raises(ConfigurationError, match="registered twice"):
        async with open_server(stream_config(0), app):
            pytest.fail("startup must fail")


async def test_b02_02_one_session_binds_two_actors_each_with_its_own_route(
    clock: object, store: CountingStore
) -> None:
    """B02-02: one session binds two Actors of another node: both are bound, a relay to
    each reaches only that Actor's handler, each command 24 carries that Actor's own
    binding generation, and ending one binding leaves the other's relay path working."""
    rec = Record()
    tap = WireTap()
    async with stream_cluster(2, rec, store=store, hosts=lambda i: i == 1, tap=tap) as cluster:
        session_node, _actor_node = cluster.servers
        await create(session_node, rec, "a")
        await create(session_node, rec, "b")
        async with connect(session_node, "user") as client:
            gen_a = await bind(client, "a")
            gen_b = await bind(client, "b")
            assert gen_a != gen_b
            assert await client.request("bound") == b"a,b"
            tap.clear()
            assert await relay(client, "a", "echo", b"to-a") == b"to-a"
            assert await relay(client, "b", "echo", b"to-b") == b"to-b"
            assert [(h[1], h[3]) for h in rec.handled] == [("a", b"to-a"), ("b", b"to-b")]
            sends = tap.select(
                node=node_of(session_node).identity.node_rid,
                direction=TapDirection.SENT,
                command=24,
            )
            tails = {e.record.actor_id.value: e.record.session.binding_generation for e in sends}
            assert tails == {"a": gen_a, "b": gen_b}
            # Ending one binding (NotifyDisconnected) leaves the other one relaying.
            assert await client.request("notify", b"a") == b"ok"
            assert await client.request("bound") == b"b"
            assert await relay(client, "b", "echo", b"still") == b"still"
            assert rec.handled_by("a", "echo") == [(1, "a", "echo", b"to-a")]


async def test_b02_03_stale_location_bind_is_unavailable_without_a_store_read(
    clock: object, store: CountingStore
) -> None:
    """B02-03: binding an ActorRef whose location is stale (it names a node that does not
    host the Actor) sends ONE command 38 to that location and ends Unavailable (no
    Message Follow route exists); the Location Store is not read at all and no second 38
    goes anywhere (never re-tried against the owner the Store knows)."""
    rec = Record()
    tap = WireTap()
    async with stream_cluster(3, rec, store=store, hosts=lambda i: i == 1, tap=tap) as cluster:
        session_node, actor_node, other = cluster.servers
        real = await create(session_node, rec, "a")
        assert real.node_rid == node_of(actor_node).identity.node_rid
        rec.refs["a"] = attrs.evolve(real, node_rid=node_of(other).identity.node_rid)
        async with connect(session_node, "user") as client:
            tap.clear()
            reads = store.reads
            with pytest.raises(Unavailable):
                await bind(client, "a")
            assert store.reads == reads
            sent = tap.select(node=node_of(session_node).identity.node_rid, command=38)
            assert [e.peer.node_rid for e in sent if e.direction is TapDirection.SENT] == [
                node_of(other).identity.node_rid
            ]
            assert tap.count(command=38, node=node_of(actor_node).identity.node_rid) == 0
            assert await client.request("bound") == b""


async def test_b02_04_bind_of_another_generation_is_invalid_operation(
    clock: object, store: CountingStore
) -> None:
    """B02-04: bind and bind_or_get with the ActorRef of a destroyed incarnation, the id
    re-created since (another ObjectGeneration), both end InvalidOperation; the current
    incarnation's ref binds."""
    rec = Record()
    async with stream_cluster(2, rec, store=store, hosts=lambda i: i == 1) as cluster:
        session_node = cluster.servers[0]
        old = await create(session_node, rec, "a")
        assert await session_node.actors.destroy(old)
        new = await create(session_node, rec, "a")
        assert new.object_generation != old.object_generation
        rec.refs["old"] = old
        async with connect(session_node, "user") as client:
            with pytest.raises(InvalidOperation):
                await client.request("bind", b"old")
            with pytest.raises(InvalidOperation):
                await client.request("bind_or_get", b"old")
            assert await client.request("bound") == b""
            assert await bind(client, "a") >= 1
            # Get returns only this session's binding of the same generation.
            first = await client.request("bind_or_get", b"a")
            assert first == await client.request("bind_or_get", b"a")
            with pytest.raises(InvalidOperation):
                await client.request("bind_or_get", b"old")


async def test_b02_05_push_and_close_need_a_binding(clock: object, store: CountingStore) -> None:
    """B02-05: an Actor's push and close without a current binding end InvalidOperation
    (session-not-bound); after a bind the identical calls succeed: the client receives
    the push, then the connection closes."""
    rec = Record()
    async with stream_cluster(2, rec, store=store, hosts=lambda i: i == 1) as cluster:
        session_node = cluster.servers[0]
        await create(session_node, rec, "a")
        actors = session_node.actors
        assert await actors.request("a", "try_push", b"early") == b"SessionNotBound"
        assert await actors.request("a", "try_close") == b"SessionNotBound"
        async with connect(session_node, "user") as client:
            assert await actors.request("a", "try_push", b"early") == b"SessionNotBound"
            await bind(client, "a")
            assert isinstance(await client.receive(), Bound)
            assert await actors.request("a", "try_push", b"now") == b"ok"
            event = await client.receive()
            assert isinstance(event, Push) and event.payload == b"now"
            assert await actors.request("a", "try_close") == b"ok"
            closed = await client.wait_closed()
            assert closed.closing is not None and closed.code == 1000


async def test_b02_05_session_not_bound_is_an_invalid_operation(autojump_clock: object) -> None:
    """B02-05: the session-not-bound error is an InvalidOperation (its public kind)."""
    from zlink_trio import SessionNotBound

    assert issubclass(SessionNotBound, InvalidOperation)
    rec = Record()
    async with open_server(stream_config(0), stream_app(rec, 0)) as server:
        await create(server, rec, "solo")
        with pytest.raises(InvalidOperation):
            await server.actors.request("solo", "push_req", b"x")
        with trio.fail_after(5):
            async with connect(server, "solo") as client:
                await bind(client, "solo")
                assert await server.actors.request("solo", "push_req", b"x") == b"pushed"


async def test_b02_04_a_stale_lease_copy_is_no_admission_input(autojump_clock: object) -> None:
    """B02-04 (the harness injects it, white-box): a caller-side route projection whose
    only difference is a stale OwnerLeaseGeneration still binds — the lease copy travels
    in the 38 envelope but the owner admits on ObjectGeneration, NodeGeneration and
    AuthorityOwnerGeneration only."""
    from zlink_trio.routing.route_cache import Route
    from zlink_trio.server import runtime_of
    from zlink_trio.store.api import ObjectKey

    rec = Record()
    tap = WireTap()
    store = CountingStore(MemoryLocationStore())
    async with stream_cluster(2, rec, store=store, hosts=lambda i: i == 1, tap=tap) as cluster:
        session_node, _actor_node = cluster.servers
        ref = await create(session_node, rec, "a")
        row = await store.read(ObjectKey.actor("a"))
        assert row is not None
        stale = row.owner.lease_generation.value + 1000
        runtime = runtime_of(session_node)
        assert runtime.actors is not None and runtime.store is not None
        route = Route(
            mesh_name=ref.mesh_name,
            node_rid=ref.node_rid,
            node_generation=row.owner.node_generation,
            lease_generation=type(row.owner.lease_generation)(stale),
            object_generation=ref.object_generation,
            owner_generation=row.owner_generation,
            store_version=row.store_version + 1,
        )
        runtime.actors.messenger.cache.put(
            ref.actor_id, route, runtime.store.recovery_epoch, read_at=trio.current_time()
        )
        async with connect(session_node, "user") as client:
            tap.clear()
            assert await bind(client, "a") >= 1
            (sent,) = [
                e.record
                for e in tap.select(
                    node=node_of(session_node).identity.node_rid,
                    direction=TapDirection.SENT,
                    command=38,
                )
            ]
            assert sent.owner_lease_generation.value == stale
            assert sent.authority_owner_generation == row.owner_generation
            assert await relay(client, "a", "echo", b"ok") == b"ok"
