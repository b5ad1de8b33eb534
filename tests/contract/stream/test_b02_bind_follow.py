"""B02-03's Message Follow case (spec 02 §5): a bind whose ActorRef names the node the
Actor moved away from is relayed once per hop over the committed Message Follow route to
the current owner, which admits it; its one terminal comes back to the session owner
through the old owner, and the binding then names the current owner. No Store read.
Without a route (expired, disabled) or during the move's pre-commit seal: Unavailable and
no 38 anywhere else. Real nodes, a real websocket client, ``zlink_trio.testing`` taps."""

from __future__ import annotations

import attrs
import pytest
import trio
from reloc_kit import Moves, moves_cluster, relocate
from stream_kit import Record, bind, connect, create, relay, stream_cluster

from zlink_trio import InvalidOperation, Unavailable
from zlink_trio.client import StreamClient
from zlink_trio.ids import ActorRef, NodeRid, ObjectGeneration
from zlink_trio.testing import (
    CountingStore,
    FaultPlan,
    FlowEvent,
    TapDirection,
    WireTap,
    flow_count,
)
from zlink_trio.wire import BindTail
from zlink_trio.wire.commands import Command
from zlink_trio.wire.stream import Bound, Push

SENT = TapDirection.SENT
RECEIVED = TapDirection.RECEIVED
BIND = Command.BOUND_SESSION_BIND


def _rid(moves: Moves, i: int) -> NodeRid:
    return moves.cluster.servers[i].identity.node_rid


def _bind_terminals(tap: WireTap, node: NodeRid) -> list[BindTail]:
    return [
        e.record.tail
        for e in tap.select(node=node, direction=RECEIVED, command=Command.TERMINAL_REPLY)
        if isinstance(e.record.tail, BindTail)
    ]


async def _ref_of(client: StreamClient, actor: str) -> tuple[str, int]:
    reply = await client.request("ref", actor.encode())
    assert reply is not None
    _mesh, rid_hex, generation = reply.decode().split("|")
    return rid_hex, int(generation)


async def test_b02_03_a_stale_location_bind_follows_once_to_the_current_owner(
    clock: object, store: CountingStore
) -> None:
    """B02-03: the Actor moved from node A to node B; a bind with the pre-move ActorRef
    (naming A) succeeds: the session owner sends ONE 38, to A; exactly one 38 reaches B
    (from A, one hop, naming the original session owner and the same OperationId); one
    terminal comes back to the session owner (from A, naming B); no node reads the
    Store during the bind; the binding names B and relays and pushes go over it."""
    rec = Record()
    tap = WireTap()
    async with moves_cluster(rec, store, tap=tap) as moves:
        old = await create(moves.cluster.servers[0], rec, "a")
        source = moves.index_of(old.node_rid)
        target = moves.other(old)
        await relocate(moves, old, target)
        assert rec.refs["a"] == old  # the caller still holds the pre-move ref
        owner = moves.session_rid()
        source_rid, target_rid = _rid(moves, source), _rid(moves, target)
        async with connect(moves.session_node, "user") as client:
            tap.clear()
            reads, owner_reads = store.reads, moves.owner_store.reads
            generation = await bind(client, "a")
            assert store.reads == reads
            assert moves.owner_store.reads == owner_reads
            sent = tap.select(node=owner, direction=SENT, command=BIND)
            assert [e.peer.node_rid for e in sent if e.peer is not None] == [source_rid]
            arrived = tap.select(direction=RECEIVED, command=BIND)
            assert [e.node for e in arrived] == [source_rid, target_rid]
            followed = arrived[1]
            assert followed.peer is not None and followed.peer.node_rid == source_rid
            assert followed.record.follow_hops == 1
            assert followed.record.session_owner_rid == owner
            assert followed.record.operation_id == sent[0].record.operation_id
            assert followed.record.binding_generation == generation
            terminals = tap.select(node=owner, direction=RECEIVED, command=Command.TERMINAL_REPLY)
            assert [e.peer.node_rid for e in terminals if e.peer is not None] == [source_rid]
            tails = _bind_terminals(tap, owner)
            assert [(t.node_rid, t.binding_generation) for t in tails] == [(target_rid, generation)]
            assert await _ref_of(client, "a") == (target_rid.hex, old.object_generation.value)
            bound = await client.receive()
            assert isinstance(bound, Bound)
            tap.clear()
            assert await relay(client, "a", "echo", b"after") == b"after"
            assert await relay(client, "a", "push_req", b"moved") == b"pushed"
            push = await client.receive()
            assert isinstance(push, Push)
            assert (push.actor_id.value, push.sequence, push.payload) == ("a", generation, b"moved")
            assert [h[0] for h in rec.handled_by("a")] == [target, target]
            relays = tap.select(node=owner, direction=SENT, command=Command.ACTOR_SEND)
            assert {e.peer.node_rid for e in relays if e.peer is not None} == {target_rid}
            assert tap.count(command=BIND) == 0  # nothing bound again
            assert store.reads == reads
        await rec.wait_until(lambda: len(rec.disconnects) == 1)
        assert rec.disconnects[0][:2] == (target, "a")  # the disconnect went to B


async def test_b02_03_a_two_hop_chain_is_followed_hop_by_hop(
    clock: object, store: CountingStore
) -> None:
    """B02-03: the Actor moved A → B → C; a bind with the ref naming A reaches C over
    the two committed routes (one 38 per hop: A → B with one hop, B → C with two), one
    terminal reaches the session owner and the binding's relays run on C."""
    rec = Record()
    tap = WireTap()
    async with moves_cluster(rec, store, tap=tap, nodes=4) as moves:
        old = await create(moves.cluster.servers[0], rec, "a")
        first = moves.index_of(old.node_rid)
        second, third = [i for i in range(3) if i != first]
        await relocate(moves, old, second)
        await relocate(moves, attrs.evolve(old, node_rid=_rid(moves, second)), third)
        owner = moves.session_rid()
        async with connect(moves.session_node, "user") as client:
            tap.clear()
            reads = store.reads
            generation = await bind(client, "a")
            assert store.reads == reads
            arrived = tap.select(direction=RECEIVED, command=BIND)
            assert [(e.node, e.record.follow_hops) for e in arrived] == [
                (_rid(moves, first), 0),
                (_rid(moves, second), 1),
                (_rid(moves, third), 2),
            ]
            assert {e.record.session_owner_rid for e in arrived[1:]} == {owner}
            tails = _bind_terminals(tap, owner)
            assert [(t.node_rid, t.binding_generation) for t in tails] == [
                (_rid(moves, third), generation)
            ]
            assert await relay(client, "a", "echo", b"c") == b"c"
            assert [h[0] for h in rec.handled_by("a", "echo")] == [third]


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
@pytest.mark.parametrize("route", ["expired", "disabled"])
async def test_b02_03_without_a_live_follow_route_the_bind_is_unavailable(
    clock: object, store: CountingStore, route: str
) -> None:
    """B02-03: the follow route expired (the MockClock past MessageFollowDuration) or
    was never installed (MessageFollowDuration 0): a bind with the pre-move ref ends
    Unavailable, its one 38 went to the old owner only, no 38 reaches the new owner and
    the Store is not read; a bind with the current ref then succeeds."""
    rec = Record()
    tap = WireTap()
    duration = 0.0 if route == "disabled" else 20.0
    async with moves_cluster(
        rec, store, tap=tap, route_cache_max_age=0.0, message_follow_duration=duration
    ) as moves:
        old = await create(moves.cluster.servers[0], rec, "a")
        target = moves.other(old)
        await relocate(moves, old, target)
        if route == "expired":
            await trio.sleep(20.0)
        owner = moves.session_rid()
        async with connect(moves.session_node, "user") as client:
            tap.clear()
            reads = store.reads
            with pytest.raises(Unavailable):
                await bind(client, "a")
            assert store.reads == reads
            arrived = tap.select(direction=RECEIVED, command=BIND)
            assert [e.node for e in arrived] == [old.node_rid]
            assert tap.count(node=owner, direction=SENT, command=BIND) == 1
            assert await client.request("bound") == b""
            rec.refs["a"] = ActorRef(
                old.actor_id, old.object_generation, old.mesh_name, _rid(moves, target)
            )
            assert await bind(client, "a") >= 1
            assert await relay(client, "a", "echo", b"x") == b"x"


async def test_b02_03_a_bind_during_the_pre_commit_seal_is_unavailable(
    clock: object, store: CountingStore
) -> None:
    """B02-03: while the move is sealed at the source (its 121 to the target held back)
    a bind with the current ref ends Unavailable at the source and no 38 goes to the
    target; once the move committed, the same (now stale) ref binds through the follow
    route."""
    rec = Record()
    tap = WireTap()
    plan = FaultPlan(seed=3)
    async with moves_cluster(
        rec, store, tap=tap, fault_plan=plan, relocation_timeout=60.0
    ) as moves:
        old = await create(moves.cluster.servers[0], rec, "a")
        target = moves.other(old)
        target_rid = _rid(moves, target)
        stall = plan.stall(command=Command.RELOCATION_RESTORE, to=target_rid)
        async with connect(moves.session_node, "user") as client:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(relocate, moves, old, target)
                await stall.wait_fired()
                tap.clear()
                with pytest.raises(Unavailable):
                    await bind(client, "a")
                arrived = tap.select(direction=RECEIVED, command=BIND)
                assert [e.node for e in arrived] == [old.node_rid]
                stall.release()
            assert await client.request("bound") == b""
            tap.clear()
            generation = await bind(client, "a")
            assert [e.node for e in tap.select(direction=RECEIVED, command=BIND)] == [
                old.node_rid,
                target_rid,
            ]
            assert generation >= 1
            assert await relay(client, "a", "echo", b"y") == b"y"
            assert [h[0] for h in rec.handled_by("a", "echo")] == [target]


async def test_b02_03_follow_from_and_to_the_session_owners_own_node(
    clock: object, store: CountingStore
) -> None:
    """B02-03: two hosting nodes, each a session owner. The Actor moved from A to B. A
    session on A binds the pre-move ref: A's own bind is relayed in-process to B (one 38,
    A → B) and the binding works (relay, push). A session on B binds it too: its 38 goes
    to A and comes back to B (the binding is local to B: relay, push), and the first
    session's binding is replaced."""
    rec = Record()
    tap = WireTap()
    async with stream_cluster(2, rec, store=store, tap=tap) as cluster:
        old = await create(cluster.servers[0], rec, "a")
        servers = cluster.servers
        source = 0 if servers[0].identity.node_rid == old.node_rid else 1
        target = 1 - source
        source_rid = servers[source].identity.node_rid
        target_rid = servers[target].identity.node_rid
        await servers[source].relocate(old.actor_id, to=target_rid)
        async with connect(servers[source], "first") as first:
            tap.clear()
            reads = store.reads
            generation = await bind(first, "a")
            assert store.reads == reads
            arrived = tap.select(direction=RECEIVED, command=BIND)
            assert [(e.node, e.record.follow_hops) for e in arrived] == [(target_rid, 1)]
            assert await _ref_of(first, "a") == (target_rid.hex, old.object_generation.value)
            assert isinstance(await first.receive(), Bound)
            assert await relay(first, "a", "push_req", b"one") == b"pushed"
            push = await first.receive()
            assert isinstance(push, Push)
            assert (push.sequence, push.payload) == (generation, b"one")
            async with connect(servers[target], "second") as second:
                tap.clear()
                generation2 = await bind(second, "a")
                arrived = tap.select(direction=RECEIVED, command=BIND)
                assert [(e.node, e.record.follow_hops) for e in arrived] == [
                    (source_rid, 0),
                    (target_rid, 1),
                ]
                assert isinstance(await second.receive(), Bound)
                assert await relay(second, "a", "push_req", b"two") == b"pushed"
                push = await second.receive()
                assert isinstance(push, Push)
                assert (push.sequence, push.payload) == (generation2, b"two")
                await rec.wait_until(lambda: len(rec.replaced) == 1)
                assert [h[0] for h in rec.handled_by("a")] == [target, target]


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_b02_03_a_push_right_after_a_followed_bind_is_not_lost(
    clock: object, store: CountingStore
) -> None:
    """B02-03 with spec 02 §5 linearization point 1: once the current owner registered a
    followed bind, a push of the Actor's next turn reaches the session, even though the
    bind's terminal comes back through the old owner (held back here) and the push goes
    straight from the current owner to the session owner: the client gets Bound, then
    the push, and no push is rejected."""
    rec = Record()
    tap = WireTap()
    plan = FaultPlan(seed=7)
    async with moves_cluster(rec, store, tap=tap, fault_plan=plan) as moves:
        old = await create(moves.cluster.servers[0], rec, "a")
        source, target = moves.index_of(old.node_rid), moves.other(old)
        await relocate(moves, old, target)
        source_rid, target_rid = _rid(moves, source), _rid(moves, target)
        owner = moves.session_rid()
        plan.delay(1.0, command=Command.TERMINAL_REPLY, sender=source_rid, to=owner)
        rec.gate = trio.Event()
        pushed: list[bytes | None] = []
        generation: list[int] = []
        async with connect(moves.session_node, "user") as client:
            async with trio.open_nursery() as nursery:

                async def push_later() -> None:
                    server = moves.cluster.servers[target]
                    reply = await server.actors.request("a", "slow_push", b"early").timeout(10)
                    pushed.append(reply)

                async def bind_it() -> None:
                    generation.append(await bind(client, "a"))

                nursery.start_soon(push_later)
                await rec.wait_until(lambda: len(rec.handled_by("a", "slow_push")) == 1)
                tap.clear()
                nursery.start_soon(bind_it)
                await tap.wait_for(
                    node=target_rid, direction=SENT, command=Command.TERMINAL_REPLY, peer=source_rid
                )
                rec.gate.set()  # the Actor's next turn pushes: the binding is registered
            assert pushed == [b"ok"]
            frames: list[object] = []
            with trio.move_on_after(5):
                while len(frames) < 2:
                    frames.append(await client.receive())
            assert [type(f) for f in frames] == [Bound, Push]
            push = frames[1]
            assert isinstance(push, Push)
            assert (push.sequence, push.payload) == (generation[0], b"early")
            assert flow_count(moves.session_node, FlowEvent.SESSION_PUSH_REJECTED) == 0


async def test_b02_03_a_follow_route_of_another_incarnation_is_invalid_operation(
    clock: object, store: CountingStore
) -> None:
    """B02-03 / B02-04: the old owner's follow route is for the incarnation that moved;
    a bind naming the old owner with another ObjectGeneration of the same ActorId ends
    InvalidOperation there, and no 38 is relayed."""
    rec = Record()
    tap = WireTap()
    async with moves_cluster(rec, store, tap=tap) as moves:
        old = await create(moves.cluster.servers[0], rec, "a")
        target = moves.other(old)
        await relocate(moves, old, target)
        other = ObjectGeneration(old.object_generation.value + 1)
        rec.refs["a"] = attrs.evolve(old, object_generation=other)
        async with connect(moves.session_node, "user") as client:
            tap.clear()
            with pytest.raises(InvalidOperation):
                await bind(client, "a")
            assert [e.node for e in tap.select(direction=RECEIVED, command=BIND)] == [old.node_rid]
            assert await client.request("bound") == b""


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_b02_03_a_chain_longer_than_the_hop_bound_is_unavailable(
    clock: object, store: CountingStore
) -> None:
    """B02-03 with S06-18's hop bound: with message_follow_max_hops 1, a bind naming the
    first owner of an Actor moved A → B → C is relayed once (A → B) and refused there
    Unavailable: no 38 reaches C, nothing is bound."""
    rec = Record()
    tap = WireTap()
    async with moves_cluster(rec, store, tap=tap, nodes=4, message_follow_max_hops=1) as moves:
        old = await create(moves.cluster.servers[0], rec, "a")
        first = moves.index_of(old.node_rid)
        second, third = [i for i in range(3) if i != first]
        await relocate(moves, old, second)
        await relocate(moves, attrs.evolve(old, node_rid=_rid(moves, second)), third)
        async with connect(moves.session_node, "user") as client:
            tap.clear()
            with pytest.raises(Unavailable):
                await bind(client, "a")
            assert [e.node for e in tap.select(direction=RECEIVED, command=BIND)] == [
                _rid(moves, first),
                _rid(moves, second),
            ]
            assert await client.request("bound") == b""
