"""S06-10: Spot direct calls by SpotId only (spec 06 §5), on two and three nodes, both stores.

The start method takes a SpotId and a typed payload; the ObjectGeneration of the resolve
is a route snapshot only (a Spot closed and created again on the same owner handles the
message); a stale route is an error with exactly one command 39 on the wire and no resend;
a send completes at admission while the handler (or the factory of a cold activation) is
still blocked; a request is terminal once within one deadline and never resubmitted.
"""

from __future__ import annotations

import inspect
import math

import pytest
import trio
from call_kit import Recorder, client_app, client_config, server_config, spot_app

from zlink_trio import (
    App,
    DeadlineExceeded,
    InvalidId,
    NotFound,
    RecreateOnRelocation,
    ServerConfig,
    Unavailable,
    on_request,
)
from zlink_trio.store.api import ObjectKey
from zlink_trio.testing import (
    CountingStore,
    RecordingStore,
    TapDirection,
    WireTap,
    node_of,
    open_cluster,
)
from zlink_trio.wire.commands import Command
from zlink_trio.wire.tails import ColdActivation, ReadyFence

SPOT_DIRECT = int(Command.SPOT_DIRECT_ROUTE)


def three_apps(rec: Recorder) -> object:
    """Node 0 calls only; nodes 1 and 2 host; "cart" is hosted only on node 1 (so every
    activation lands there), "room" everywhere that hosts."""

    def app(index: int) -> object:
        if index == 0:
            return client_app()
        types = ("cart",) if index == 1 else ()
        return spot_app(rec, f"n{index}", instance_types=types)

    return app


def three_configs(index: int) -> ServerConfig:
    return client_config() if index == 0 else server_config()


async def test_s06_10_the_start_method_takes_a_spot_id_and_a_payload_only(
    clock: object, store: CountingStore
) -> None:
    """S06-10: ``send``/``request`` take (spot_id, packet, payload) — no owner, mesh,
    node or SpotRef parameter — and reach the Spot from every node by its id alone; a
    SpotRef is not a message target (InvalidId)."""
    rec = Recorder()
    async with open_cluster(3, store=store, app=three_apps(rec), config=three_configs) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        for method in (caller.spots.send, caller.spots.request):
            assert list(inspect.signature(method).parameters) == ["spot_id", "packet", "payload"]
        assert await caller.spots.request("c1", "add", b"a").instance("cart") == b"1"
        for server in cluster.servers:
            assert await server.spots.request("c1", "whoami") == f"n1:{rec.handled[0][1]}".encode()
        ref = await caller.spots.find("c1")
        assert ref is not None
        with pytest.raises(InvalidId):
            caller.spots.request(ref, "whoami")  # type: ignore[arg-type]


async def test_s06_10_close_then_recreate_on_the_same_owner_reaches_the_current_spot(
    clock: object, store: CountingStore
) -> None:
    """S06-10: after the caller cached the route of incarnation g1, the Spot closes and a
    new incarnation g2 is created on the SAME owner; the caller's next call (still on the
    cached route, no Store read: its ObjectGeneration g1 travels as a snapshot only) is
    handled by g2."""
    rec = Recorder()
    recording = RecordingStore(store)
    counting = CountingStore(recording)
    long = {"route_cache_max_age": 25.0, "owner_lease_ttl": 60.0}
    configs = [
        client_config(location_store=counting, **long),
        server_config(**long),
        server_config(**long),
    ]
    tap = WireTap()
    async with open_cluster(
        3, store=recording, app=three_apps(rec), config=lambda i: configs[i], tap=tap
    ) as cluster:
        await cluster.wait_all_admitted()
        caller, _, other = cluster.servers
        assert await caller.spots.request("c1", "add", b"a").instance("cart") == b"1"
        g1 = rec.handled[0][1]
        assert await caller.spots.request("c1", "whoami") == f"n1:{g1}".encode()  # cached
        assert await caller.spots.request("c1", "close") == b"closing"
        key = ObjectKey.spot("c1")
        await recording.wait_for(
            lambda h: any(c.method == "release" and c.key == key and c.applied for c in h)
        )
        # Another node activates the id again: the only host (node 1, the same owner)
        # makes incarnation g2.
        assert await other.spots.request("c1", "add", b"b").instance("cart") == b"1"
        g2 = rec.handled[-1][1]
        assert g2 > g1
        counting.reset()
        tap.clear()
        reply = await caller.spots.request("c1", "whoami")
        assert reply == f"n1:{g2}".encode()
        assert counting.count("read") == 0  # the cached route (snapshot g1) was used
        sent = tap.select(
            node=node_of(caller).identity.node_rid, direction=TapDirection.SENT, command=SPOT_DIRECT
        )
        assert len(sent) == 1
        route = sent[0].record.route
        assert isinstance(route, ReadyFence) and route.object_generation.value == g1


async def test_s06_10_a_stale_route_ends_with_one_39_on_the_wire_and_no_resend(
    clock: object, store: CountingStore
) -> None:
    """S06-10: the caller's cached owner no longer hosts the Spot (it closed): the call
    ends Unavailable (a stale route) after exactly ONE command 39; it is not re-sent to a
    fresh owner; the next call resolves afresh (NotFound: nothing was re-created)."""
    rec = Recorder()
    recording = RecordingStore(store)
    tap = WireTap()
    long = {"route_cache_max_age": 25.0, "owner_lease_ttl": 60.0}
    async with open_cluster(
        2,
        store=recording,
        app=lambda i: client_app() if i == 0 else spot_app(rec, f"n{i}"),
        config=lambda i: client_config(**long) if i == 0 else server_config(**long),
        tap=tap,
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        key = ObjectKey.spot("c1")
        assert await caller.spots.request("c1", "add", b"a").instance("cart") == b"1"
        assert await caller.spots.request("c1", "close") == b"closing"
        await recording.wait_for(
            lambda h: any(c.method == "release" and c.key == key and c.applied for c in h)
        )
        tap.clear()
        me = node_of(caller).identity.node_rid
        with pytest.raises(Unavailable):
            await caller.spots.request("c1", "whoami").timeout(5)
        assert tap.count(node=me, direction=TapDirection.SENT, command=SPOT_DIRECT) == 1
        with pytest.raises(NotFound):
            await caller.spots.request("c1", "whoami").timeout(5)
        assert tap.count(node=me, direction=TapDirection.SENT, command=SPOT_DIRECT) == 1
        assert rec.of("c1") == [("add", b"a"), ("close", b"")]


async def test_s06_10_a_send_completes_at_admission_while_the_handler_is_blocked(
    clock: object, store: CountingStore
) -> None:
    """S06-10: a one-way send returns once admitted while the Spot's handler is blocked;
    with cold activation, once the envelope was accepted by the target's transport while
    the factory still runs (the Spot is not Ready yet)."""
    rec = Recorder(gate=trio.Event(), factory_gate=trio.Event())
    async with open_cluster(
        2,
        store=store,
        app=lambda i: client_app() if i == 0 else spot_app(rec, "n1", slow_factory=True),
        config=lambda i: client_config() if i == 0 else server_config(),
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        with trio.fail_after(10):
            await caller.spots.send("c1", "note", b"first").instance("cart")
        await rec.factory_entered.wait()
        assert await caller.spots.find("c1") is None  # not Ready: the factory is blocked
        assert rec.handled == []
        assert rec.factory_gate is not None
        rec.factory_gate.set()
        await rec.wait_handled(1)
        with trio.fail_after(10):
            await caller.spots.send("c1", "block", b"b")
        await rec.entered.wait()
        with trio.fail_after(10):
            await caller.spots.send("c1", "note", b"after")  # admitted behind the block
        assert [p for _, p in rec.of("c1")] == [b"first", b"b"]
        assert rec.gate is not None
        rec.gate.set()
        await rec.wait_handled(3)
        assert [p for _, p in rec.of("c1")] == [b"first", b"b", b"after"]


async def test_s06_10_a_request_is_terminal_once_within_one_deadline(
    clock: object, store: CountingStore, backend: str
) -> None:
    """S06-10: one deadline covers resolve, cold activation, dispatch and reply: a
    factory that never finishes ends the request DeadlineExceeded at submit + timeout
    (exactly, on the virtual clock); a handler that blocks past the deadline likewise; a
    request its caller's scope cancels just ends (its handler, queued, never starts after
    that deadline); none is sent again (one 39 each), the blocked handler ran exactly
    once."""
    rec = Recorder(gate=trio.Event(), factory_gate=trio.Event())
    tap = WireTap()
    async with open_cluster(
        2,
        store=store,
        app=lambda i: client_app() if i == 0 else spot_app(rec, "n1", slow_factory=True),
        config=lambda i: client_config() if i == 0 else server_config(),
        tap=tap,
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        me = node_of(caller).identity.node_rid
        start = trio.current_time()
        with pytest.raises(DeadlineExceeded):
            await caller.spots.request("c1", "add", b"a").instance("cart").timeout(2)
        if backend == "memory":
            assert trio.current_time() == start + 2
        assert tap.count(node=me, direction=TapDirection.SENT, command=SPOT_DIRECT) == 1
        assert await caller.spots.find("c1") is None  # the activation was given up
        assert rec.factory_gate is not None
        rec.factory_gate.set()
        assert await caller.spots.request("c1", "add", b"b").instance("cart").timeout(10) == b"1"
        tap.clear()
        start = trio.current_time()
        with pytest.raises(DeadlineExceeded):
            await caller.spots.request("c1", "block", b"x").timeout(1)
        if backend == "memory":
            assert trio.current_time() == start + 1
        with trio.move_on_after(0.5) as cancelled:  # the caller's own scope cancels it
            await caller.spots.request("c1", "block", b"y").timeout(10)
        assert cancelled.cancelled_caught
        assert rec.gate is not None
        rec.gate.set()
        assert await caller.spots.request("c1", "add", b"c").timeout(10) == b"2"
        assert tap.count(node=me, direction=TapDirection.SENT, command=SPOT_DIRECT) == 3
        # "x" ran once; "y" (queued behind it) passed its deadline — the caller's scope's,
        # which travelled — before its turn: never run, never re-sent.
        assert [p for k, p in rec.of("c1") if k == "block"] == [b"x"]
        stats = cluster.servers[1].statistics().spots
        assert stats is not None
        assert sum(t.expired for t in stats.types) == 1
        assert not math.isnan(start)


async def test_s06_10_actor_and_spot_handlers_call_spots_by_id(
    clock: object, store: CountingStore
) -> None:
    """S06-10 / spec 04 §3.1: an Actor handler reads Spot state only through an explicit
    Spot request (``context.spots``), which runs on the Spot's turn; a Spot handler calls
    another Spot the same way, and its cold-activation envelope names it as the source
    Spot."""
    rec = Recorder()
    tap = WireTap()

    class Player:
        def __init__(self, context: object) -> None:
            self.context = context

        @on_request("visit")
        async def visit(self, payload: bytes) -> bytes:
            spots = self.context.spots  # type: ignore[attr-defined]
            reply = await spots.request("c1", "add", payload).instance("cart").timeout(10)
            assert reply is not None
            return bytes(reply)

    def app(index: int) -> App:
        if index == 0:
            actor_app = App()
            actor_app.enable_actor_dispatch()
            actor_app.register_actor("player", Player, relocation=RecreateOnRelocation())
            return actor_app
        return spot_app(rec, f"n{index}", instance_types=("cart",) if index == 1 else ("bag",))

    async with open_cluster(
        3, store=store, app=app, config=lambda i: server_config(), tap=tap
    ) as cluster:
        await cluster.wait_all_admitted()
        actors_node = cluster.servers[0]
        await actors_node.actors.create("p1", "player")
        assert await actors_node.actors.request("p1", "visit", b"from-actor") == b"1"
        assert rec.of("c1") == [("add", b"from-actor")]
        # A Spot handler (on node 1) cold-activates a "bag" Spot (hosted by node 2 only).
        assert await actors_node.spots.request("b1", "add", b"x").instance("bag") == b"1"
        tap.clear()
        reply = await actors_node.spots.request("c1", "relay", b"b1")
        generation = rec.handled[-1][1]
        assert rec.handled[-1][:4] == ("b1", generation, "n2", "whoami")
        assert reply == f"n2:{generation}".encode()
        relayed = tap.select(
            node=node_of(cluster.servers[1]).identity.node_rid,
            direction=TapDirection.SENT,
            command=SPOT_DIRECT,
        )
        assert [e.record.packet_name for e in relayed] == ["whoami"]
        # A Spot handler's cold-activation envelope names its Spot as the source.
        tap.clear()
        reply = await actors_node.spots.request("c1", "activate", b"b2")
        assert reply is not None and reply.startswith(b"n2:")
        [envelope] = [
            e.record
            for e in tap.select(
                node=node_of(cluster.servers[1]).identity.node_rid,
                direction=TapDirection.SENT,
                command=SPOT_DIRECT,
            )
            if isinstance(e.record.route, ColdActivation)
        ]
        assert envelope.source_spot_id is not None and envelope.source_spot_id.value == "c1"
        assert envelope.route.spot_id.value == "b2"
