"""Adversarial review of binding a moving Actor (spec 02 §5, §6, §8; B02-06, B02-20 …
B02-26) through the public surface: a real websocket client, real TCP between nodes and
``zlink_trio.testing`` hooks (a FaultPlan reorders what the spec leaves to the wire)."""

from __future__ import annotations

import pytest
import trio
from reloc_kit import moves_cluster, relocate
from stream_kit import Record, bind, connect, create, relay

from zlink_trio import Unavailable
from zlink_trio.client import StreamClient
from zlink_trio.ids import ActorRef
from zlink_trio.testing import (
    CountingStore,
    FaultPlan,
    FlowEvent,
    TapDirection,
    WireTap,
    flow_count,
)
from zlink_trio.wire.commands import Command
from zlink_trio.wire.stream import Bound, CloseReason, Push

RECEIVED = TapDirection.RECEIVED
BIND = Command.BOUND_SESSION_BIND


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_a_replacement_that_overtakes_the_moves_44_still_replaces(
    clock: object, store: CountingStore
) -> None:
    """B02-06 with B02-20: session 1 is bound to the Actor, which moves to node B; the
    move's 44 (B → session owner) is slow on the wire. Session 2 binds the Actor at B
    meanwhile: B replaces session 1's binding and sends its 51, which overtakes the 44.
    Session 1 is still replaced (its duplicate-connection callback runs once, its relays
    end) and nothing is dropped as a stale control record."""
    rec = Record()
    plan = FaultPlan(seed=11)
    async with moves_cluster(rec, store, fault_plan=plan) as moves:
        ref = await create(moves.cluster.servers[0], rec, "a")
        target = moves.other(ref)
        target_rid = moves.cluster.servers[target].identity.node_rid
        async with connect(moves.session_node, "first") as first:
            await bind(first, "a")
            plan.delay(0.5, command=Command.SESSION_RELOCATION_ROUTE)
            await relocate(moves, ref, target)  # returns on 125: the 44 is still delayed
            rec.refs["a"] = ActorRef(ref.actor_id, ref.object_generation, ref.mesh_name, target_rid)
            async with connect(moves.session_node, "second") as second:
                await bind(second, "a")
                with trio.fail_after(5):
                    await rec.wait_until(lambda: len(rec.replaced) == 1)
                assert rec.replaced[0][2] == "a"
                assert flow_count(moves.session_node, FlowEvent.SESSION_STALE_CONTROL) == 0
                assert await relay(second, "a", "echo", b"2") == b"2"


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_a_close_request_that_overtakes_the_moves_44_still_closes(
    clock: object, store: CountingStore
) -> None:
    """B02-05 with B02-20: the bound Actor moves to node B and the move's 44 is slow on
    the wire; the Actor's first turn on B asks to close its bound session (command 140
    from B, which overtakes the 44). The session owner still closes the connection
    (close requested) once the 44 committed the route, and drops nothing as stale."""
    rec = Record()
    plan = FaultPlan(seed=13)
    async with moves_cluster(rec, store, fault_plan=plan) as moves:
        ref = await create(moves.cluster.servers[0], rec, "a")
        target = moves.other(ref)
        async with connect(moves.session_node, "user") as client:
            await bind(client, "a")
            plan.delay(0.5, command=Command.SESSION_RELOCATION_ROUTE)
            await relocate(moves, ref, target)  # returns on 125: the 44 is still delayed
            server = moves.cluster.servers[target]
            assert await server.actors.request("a", "try_close", b"").timeout(10) == b"ok"
            with trio.fail_after(5):
                closed = await client.wait_closed()
            assert closed.closing is not None
            assert closed.closing.reason is CloseReason.CLOSE_REQUESTED
            assert flow_count(moves.session_node, FlowEvent.SESSION_STALE_CONTROL) == 0


async def test_a_rebind_during_the_seal_is_unavailable_and_the_binding_moves(
    clock: object, store: CountingStore
) -> None:
    """B02-03 / B02-21: session 1 is bound; the move is held in its seal (its 121 to the
    target stalled). A second session binding the Actor then ends Unavailable (the seal
    is pre-commit) and changes nothing: once the move commits, session 1's binding is
    still the one, on the target; the second session's bind afterwards, with the same
    (now stale) ref, follows to the target and replaces session 1's."""
    rec = Record()
    tap = WireTap()
    plan = FaultPlan(seed=17)
    async with moves_cluster(rec, store, tap=tap, fault_plan=plan) as moves:
        ref = await create(moves.cluster.servers[0], rec, "a")
        target = moves.other(ref)
        target_rid = moves.cluster.servers[target].identity.node_rid
        async with connect(moves.session_node, "first") as first:
            await bind(first, "a")
            stall = plan.stall(command=Command.RELOCATION_RESTORE, to=target_rid)
            async with connect(moves.session_node, "second") as second:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(relocate, moves, ref, target)
                    await stall.wait_fired()
                    with pytest.raises(Unavailable):
                        await bind(second, "a")
                    assert tap.count(node=target_rid, direction=RECEIVED, command=BIND) == 0
                    stall.release()
                await tap.wait_for(
                    node=moves.session_rid(),
                    direction=RECEIVED,
                    command=Command.SESSION_RELOCATION_ROUTE,
                )
                assert await relay(first, "a", "echo", b"1") == b"1"
                assert [h[0] for h in rec.handled_by("a", "echo")] == [target]
                assert await client_bound(second) == b""
                await bind(second, "a")
                with trio.fail_after(5):
                    await rec.wait_until(lambda: len(rec.replaced) == 1)
                assert await relay(second, "a", "echo", b"2") == b"2"
                assert tap.count(node=target_rid, direction=RECEIVED, command=BIND) == 1


async def client_bound(client: StreamClient) -> bytes | None:
    return await client.request("bound")


async def _ref_of(client: StreamClient, actor: str) -> str:
    reply = await client.request("ref", actor.encode())
    assert reply is not None
    return reply.decode().split("|")[1]


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_a_move_right_after_a_followed_bind_seals_the_new_binding(
    clock: object, store: CountingStore
) -> None:
    """B02-03 with B02-20: the Actor moved A → B; a bind with the pre-move ref follows
    to B, whose terminal comes back through A (slow on the wire). B registered the
    binding, and B moves the Actor back to A at once: its 42 reaches the session owner
    before the bind's terminal. The move still seals that binding and commits (it is
    not refused for a bind the session owner has not seen complete yet): the binding
    ends on A and its relays and pushes run there."""
    rec = Record()
    tap = WireTap()
    plan = FaultPlan(seed=19)
    async with moves_cluster(rec, store, tap=tap, fault_plan=plan) as moves:
        old = await create(moves.cluster.servers[0], rec, "a")
        source, target = moves.index_of(old.node_rid), moves.other(old)
        await relocate(moves, old, target)
        source_rid = moves.cluster.servers[source].identity.node_rid
        target_rid = moves.cluster.servers[target].identity.node_rid
        owner = moves.session_rid()
        plan.delay(1.0, command=Command.TERMINAL_REPLY, sender=source_rid, to=owner)
        moved: list[object] = []
        async with connect(moves.session_node, "user") as client:
            tap.clear()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(bind, client, "a")
                await tap.wait_for(
                    node=target_rid,
                    direction=TapDirection.SENT,
                    command=Command.TERMINAL_REPLY,
                    peer=source_rid,
                )
                here = ActorRef(old.actor_id, old.object_generation, old.mesh_name, target_rid)
                moved.append(await relocate(moves, here, source))
            with trio.fail_after(5):
                await tap.wait_for(
                    node=owner, direction=RECEIVED, command=Command.SESSION_RELOCATION_ROUTE
                )
            assert await relay(client, "a", "echo", b"back") == b"back"
            assert [h[0] for h in rec.handled_by("a", "echo")] == [source]
            assert await relay(client, "a", "push_req", b"there") == b"pushed"
            frames = [await client.receive(), await client.receive()]
            assert [type(f) for f in frames] == [Bound, Push]
            assert await _ref_of(client, "a") == source_rid.hex
