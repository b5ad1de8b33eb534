"""Bound sessions through a live relocation of their Actor (spec 02 §8, §14: B02-20 …
B02-26; spec 04 §9 A04-15's move part): a real websocket client on the session owner
(node 2) bound to an Actor that ``server.relocate`` moves between nodes 0 and 1."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from reloc_kit import Moves, moves_cluster, relocate
from stream_kit import SECRET, Record, bind, connect, create, relay, stream_cluster

from zlink_trio import MemoryLocationStore, ZLinkError
from zlink_trio.testing import (
    CountingStore,
    FaultKind,
    FaultPlan,
    FlowEvent,
    TapDirection,
    WireTap,
    flow_count,
)
from zlink_trio.wire.commands import Command
from zlink_trio.wire.enums import BindAction, SealResult
from zlink_trio.wire.stream import Bound, CloseReason, Push
from zlink_trio.wire.tails import SessionRouteAbort, SessionRouteCommit

_MESH_TESTS = str(Path(__file__).resolve().parent.parent / "mesh")
"""Where the contract tests' fake peer (``mesh_kit.fake_peer``) lives."""
SENT = TapDirection.SENT
RECEIVED = TapDirection.RECEIVED


async def test_b02_20_relocation_keeps_the_connection_and_moves_the_route(
    clock: object, store: CountingStore
) -> None:
    """B02-20: the bound Actor moves to another node; the client connection stays up; a
    relay after the commit runs the handler on the target (its 24 goes to the target);
    the binding's Ref names the target node with the same ActorId and ObjectGeneration;
    no OnDisconnectActor; the session owner reads the Store 0 times; another Actor bound
    to the same session keeps its route."""
    rec = Record()
    tap = WireTap()
    async with moves_cluster(rec, store, tap=tap) as moves:
        ref = await create(moves.cluster.servers[0], rec, "a")
        other_ref = await create(moves.cluster.servers[0], rec, "b")
        source = moves.index_of(ref.node_rid)
        target = moves.other(ref)
        async with connect(moves.session_node, "user") as client:
            await bind(client, "a")
            await bind(client, "b")
            assert await relay(client, "a", "echo", b"before") == b"before"
            reads = moves.owner_store.reads
            result = await relocate(moves, ref, target)
            assert result.object_generation == ref.object_generation
            target_rid = moves.cluster.servers[target].identity.node_rid
            owner = moves.session_node.identity.node_rid
            await tap.wait_for(
                node=owner, direction=RECEIVED, command=Command.SESSION_RELOCATION_ROUTE
            )
            tap.clear()
            assert await relay(client, "a", "echo", b"after") == b"after"
            assert [h[0] for h in rec.handled_by("a", "echo")] == [source, target]
            sent = tap.select(node=owner, direction=SENT, command=Command.ACTOR_SEND)
            assert sent and {e.peer.node_rid for e in sent if e.peer is not None} == {target_rid}
            reply = await client.request("ref", b"a")
            assert reply is not None
            _mesh, rid_hex, generation = reply.decode().split("|")
            assert rid_hex == target_rid.hex
            assert int(generation) == ref.object_generation.value
            assert await client.request("ref", b"b") == (
                f"{other_ref.mesh_name.value}|{other_ref.node_rid.hex}|"
                f"{other_ref.object_generation.value}".encode()
            )
            assert await relay(client, "b", "echo", b"b") == b"b"
            assert client.closed is None
            assert rec.disconnects == []
            assert moves.owner_store.reads == reads


def _notes(rec: Record, actor: str = "a") -> list[int]:
    return [int(h[3]) for h in rec.handled_by(actor, "note")]


async def _send_notes(client: Any, numbers: range, actor: str = "a") -> None:
    for i in numbers:
        await client.send("relay", f"{actor}|note|{i}".encode())


def _sent_24(tap: WireTap, moves: Moves, since: Any = None, until: Any = None) -> list[Any]:
    """The 24s to Actor ``a`` the session owner sent strictly after tap event ``since``
    and before ``until`` (in recording order; None: from the start / to the end)."""
    events = tap.events
    start = 0 if since is None else events.index(since) + 1
    end = len(events) if until is None else events.index(until)
    owner = moves.session_rid()
    return [
        e
        for e in events[start:end]
        if e.node == owner
        and e.direction is SENT
        and e.command == Command.ACTOR_SEND
        and e.record.actor_id.value == "a"
    ]


async def test_b02_21_a_numbered_stream_crosses_the_move_once_and_in_order(
    clock: object, store: CountingStore
) -> None:
    """B02-21: a numbered stream relayed before, during and after the move: every number
    is handled exactly once, in session order; those the client sent while the binding
    was sealed (after the 43, before the 44 — held 0.5 s on the wire) left the session
    owner only after the 44 and before every later one, and all ran on the target; another
    Actor bound to the same session is not held meanwhile."""
    rec = Record()
    tap = WireTap()
    plan = FaultPlan(seed=1)
    plan.delay(0.5, command=Command.SESSION_RELOCATION_ROUTE)
    async with moves_cluster(rec, store, tap=tap, fault_plan=plan) as moves:
        ref = await create(moves.cluster.servers[0], rec, "a")
        await create(moves.cluster.servers[0], rec, "b")
        target = moves.other(ref)
        owner = moves.session_rid()
        async with connect(moves.session_node, "user") as client:
            await bind(client, "a")
            await bind(client, "b")
            await _send_notes(client, range(10))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(relocate, moves, ref, target)
                sealed = await tap.wait_for(
                    node=owner, direction=SENT, command=Command.SESSION_RELOCATION_SEALED
                )
                t43 = sealed[0]
                await _send_notes(client, range(10, 30))
                assert await client.request("local", b"x") == b"local:x"  # 10..29 accepted
                # another Actor of the same session is not sealed: it answers at once
                assert await relay(client, "b", "echo", b"b") == b"b"
                b_answered = trio.current_time()
            route = await tap.wait_for(
                node=owner, direction=RECEIVED, command=Command.SESSION_RELOCATION_ROUTE
            )
            t44 = route[0]
            if clock is not None:
                assert b_answered < t44.time
            await _send_notes(client, range(30, 40))
            await rec.wait_until(lambda: len(_notes(rec)) >= 40)
            assert await relay(client, "a", "echo", b"end") == b"end"
            assert _notes(rec) == list(range(40))
            held = [h for h in rec.handled_by("a", "note") if 10 <= int(h[3]) < 40]
            assert {h[0] for h in held} == {target}
            assert _sent_24(tap, moves, t43, t44) == []  # nothing left during the seal
            after = _sent_24(tap, moves, t44)
            assert len(after) >= 30
            assert client.closed is None


@pytest.mark.parametrize("configured", [None, 1.5])
async def test_b02_22_no_44_within_the_seal_timeout_closes_the_session(
    autojump_clock: object, configured: float | None
) -> None:
    """B02-22: the 44 is dropped on the wire (fault transport): 2,999 ms after the seal
    was installed (its 43 sent) the connection is open, at 3,000 ms (or the configured
    value) it is closed with SEAL_TIMEOUT; the messages held meanwhile never run."""
    rec = Record()
    tap = WireTap()
    plan = FaultPlan(seed=2)
    plan.drop(command=Command.SESSION_RELOCATION_ROUTE)
    expected = 3.0 if configured is None else configured
    store = CountingStore(MemoryLocationStore())
    async with moves_cluster(
        rec, store, tap=tap, fault_plan=plan, seal_timeout=configured
    ) as moves:
        ref = await create(moves.cluster.servers[0], rec, "a")
        async with connect(moves.session_node, "user") as client:
            await bind(client, "a")
            await relocate(moves, ref, moves.other(ref))
            sealed = tap.select(
                node=moves.session_rid(), direction=SENT, command=Command.SESSION_RELOCATION_SEALED
            )
            assert len(sealed) == 1
            t43 = sealed[0].time
            await _send_notes(client, range(5))
            await trio.sleep_until(t43 + expected - 0.001)
            assert client.closed is None
            closed = await client.wait_closed()
            assert trio.current_time() - t43 == pytest.approx(expected)
            assert closed.closing is not None
            assert closed.closing.reason is CloseReason.SEAL_TIMEOUT
            await trio.sleep(10)
            assert _notes(rec) == []
            assert plan.fired(FaultKind.DROP) == 1
            assert flow_count(moves.session_node, FlowEvent.SESSION_SEAL_TIMEOUT) == 1


async def test_b02_23_a_duplicate_44_changes_nothing(clock: object, store: CountingStore) -> None:
    """B02-23: the 44 commit arrives twice (fault transport duplicates it): the second one
    is a `late_session_route_update` Warning; the binding's route and Ref stay the
    target's; a relay afterwards runs once."""
    rec = Record()
    tap = WireTap()
    plan = FaultPlan(seed=3)
    plan.duplicate(command=Command.SESSION_RELOCATION_ROUTE)
    async with moves_cluster(rec, store, tap=tap, fault_plan=plan) as moves:
        ref = await create(moves.cluster.servers[0], rec, "a")
        target = moves.other(ref)
        target_rid = moves.cluster.servers[target].identity.node_rid
        async with connect(moves.session_node, "user") as client:
            await bind(client, "a")
            await relocate(moves, ref, target)
            await tap.wait_for(
                node=moves.session_rid(),
                direction=RECEIVED,
                command=Command.SESSION_RELOCATION_ROUTE,
                count=2,
            )
            assert await client.request("local", b"x") == b"local:x"
            late = FlowEvent.LATE_SESSION_ROUTE_UPDATE
            assert flow_count(moves.session_node, late) == 1
            reply = await client.request("ref", b"a")
            assert reply is not None and reply.decode().split("|")[1] == target_rid.hex
            assert await relay(client, "a", "echo", b"once") == b"once"
            assert [h[0] for h in rec.handled_by("a", "echo")] == [target]
            assert client.closed is None


async def test_b02_23_a_44_after_the_timeout_is_only_a_warning(autojump_clock: object) -> None:
    """B02-23: a 44 that arrives after SessionRelocationSealTimeout (delayed 4 s on the
    wire) finds no seal: a `late_session_route_update` Warning, no relay, nothing
    reopened (the session was closed by the timeout)."""
    rec = Record()
    tap = WireTap()
    plan = FaultPlan(seed=4)
    plan.delay(4.0, command=Command.SESSION_RELOCATION_ROUTE)
    store = CountingStore(MemoryLocationStore())
    async with moves_cluster(rec, store, tap=tap, fault_plan=plan) as moves:
        ref = await create(moves.cluster.servers[0], rec, "a")
        owner = moves.session_rid()
        async with connect(moves.session_node, "user") as client:
            await bind(client, "a")
            await relocate(moves, ref, moves.other(ref))
            await _send_notes(client, range(3))
            closed = await client.wait_closed()
            assert closed.closing is not None
            assert closed.closing.reason is CloseReason.SEAL_TIMEOUT
            closed_at = trio.current_time()
            late = FlowEvent.LATE_SESSION_ROUTE_UPDATE
            assert flow_count(moves.session_node, late) == 0
            route = await tap.wait_for(
                node=owner, direction=RECEIVED, command=Command.SESSION_RELOCATION_ROUTE
            )
            assert route[0].time > closed_at
            assert await _flow_reaches(moves.session_node, late, 1)
            assert _sent_24(tap, moves) == []
            assert _notes(rec) == []


async def _flow_reaches(server: Any, event: FlowEvent, count: int) -> bool:
    """The 44 is handled by the reader that recorded it: one scheduling pass later."""
    for _ in range(100):
        if flow_count(server, event) >= count:
            return True
        await trio.lowlevel.checkpoint()
    return flow_count(server, event) >= count


async def test_b02_24_an_explicit_target_failure_returns_held_messages_to_the_source(
    clock: object, store: CountingStore
) -> None:
    """B02-24: the target fails its Restore explicitly (the Actor factory raises there)
    before relay-ready: the source stays owner; the session owner gets a 44 abort
    (one-way: it answers nothing) and the messages held during the seal run once on the
    source, in order, before the later ones; the connection stays open."""
    rec = Record()
    tap = WireTap()
    plan = FaultPlan(seed=5)
    plan.delay(0.5, command=Command.SESSION_RELOCATION_ROUTE)
    async with moves_cluster(rec, store, tap=tap, fault_plan=plan) as moves:
        ref = await create(moves.cluster.servers[0], rec, "a")
        source = moves.index_of(ref.node_rid)
        target = moves.other(ref)
        rec.fail_factory.add(target)
        owner = moves.session_rid()
        async with connect(moves.session_node, "user") as client:
            await bind(client, "a")
            await _send_notes(client, range(5))
            failed: list[BaseException] = []

            async def move() -> None:
                try:
                    await relocate(moves, ref, target)
                except* ZLinkError as group:
                    failed.extend(group.exceptions)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(move)
                await tap.wait_for(
                    node=owner, direction=SENT, command=Command.SESSION_RELOCATION_SEALED
                )
                await _send_notes(client, range(5, 15))
                assert await client.request("local", b"x") == b"local:x"
            assert len(failed) == 1  # the move failed: the source stays owner
            route = await tap.wait_for(
                node=owner, direction=RECEIVED, command=Command.SESSION_RELOCATION_ROUTE
            )
            assert isinstance(route[0].record.action, SessionRouteAbort)
            assert route[0].peer is not None
            assert route[0].peer.node_rid == moves.cluster.servers[source].identity.node_rid
            t44 = route[0]
            await _send_notes(client, range(15, 20))
            await rec.wait_until(lambda: len(_notes(rec)) >= 20)
            assert await relay(client, "a", "echo", b"end") == b"end"
            assert _notes(rec) == list(range(20))
            assert {h[0] for h in rec.handled} == {source}
            events = tap.events
            answered = [
                e
                for e in events[events.index(t44) :]
                if e.node == owner
                and e.direction is SENT
                and e.command in (Command.TERMINAL_REPLY, Command.SESSION_RELOCATION_SEALED)
            ]
            assert answered == []
            assert client.closed is None


async def test_b02_25_a_cas_failure_after_relay_ready_never_reopens_the_source(
    clock: object, store: CountingStore
) -> None:
    """B02-25: the target's owner CAS fails after relay-ready was accepted: no 44 comes,
    no relay goes to the source (or anywhere) after the seal, and the seal timeout closes
    the physical session at SessionRelocationSealTimeout."""
    rec = Record()
    tap = WireTap()
    async with moves_cluster(rec, store, tap=tap, relocation_timeout=4.0) as moves:
        ref = await create(moves.cluster.servers[0], rec, "a")
        target = moves.other(ref)
        moves.cas[target].fail = True
        owner = moves.session_rid()
        async with connect(moves.session_node, "user") as client:
            await bind(client, "a")
            results: list[Any] = []

            async def move() -> None:
                results.append(await relocate(moves, ref, target))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(move)
                sealed = await tap.wait_for(
                    node=owner, direction=SENT, command=Command.SESSION_RELOCATION_SEALED
                )
                t43 = sealed[0]
                await _send_notes(client, range(5))
                closed = await client.wait_closed()
                if clock is not None:
                    assert trio.current_time() - t43.time == pytest.approx(3.0)
                assert closed.closing is not None
                assert closed.closing.reason is CloseReason.SEAL_TIMEOUT
            assert [r.committed for r in results] == [False]
            assert moves.cas[target].failed >= 1
            assert _sent_24(tap, moves, t43) == []
            assert tap.count(node=owner, command=Command.SESSION_RELOCATION_ROUTE) == 0
            assert _notes(rec) == []


async def test_b02_26_wire_43_is_only_the_result_44_is_unanswered_45_never_exchanged(
    clock: object, store: CountingStore
) -> None:
    """B02-26: a wire capture of a relocation: the one 43 carries only the seal result
    (no sequence, no high-water); no reply is correlated to the 44 (it has no
    correlation, and the session owner sends no 20 or 43 after it); no 45 anywhere."""
    rec = Record()
    tap = WireTap()
    async with moves_cluster(rec, store, tap=tap) as moves:
        ref = await create(moves.cluster.servers[0], rec, "a")
        owner = moves.session_rid()
        async with connect(moves.session_node, "user") as client:
            await bind(client, "a")
            await relocate(moves, ref, moves.other(ref))
            route = await tap.wait_for(
                node=owner, direction=RECEIVED, command=Command.SESSION_RELOCATION_ROUTE
            )
            assert await relay(client, "a", "echo", b"x") == b"x"
            sealed = tap.select(
                node=owner, direction=SENT, command=Command.SESSION_RELOCATION_SEALED
            )
            assert len(sealed) == 1
            fields = {f.name for f in attrs.fields(type(sealed[0].record))}
            assert fields == {"correlation", "relocation_id", "result", "failure_code"}
            assert sealed[0].record.result is SealResult.SEALED
            assert len(route) == 1
            assert isinstance(route[0].record.action, SessionRouteCommit)
            assert not hasattr(route[0].record, "correlation")
            events = tap.events
            assert not [
                e
                for e in events[events.index(route[0]) :]
                if e.node == owner
                and e.direction is SENT
                and e.command in (Command.TERMINAL_REPLY, Command.SESSION_RELOCATION_SEALED)
            ]
            assert [e for e in tap.events if e.command == 45] == []
            assert 45 not in {int(c) for c in Command}


async def test_a04_15_the_move_leaves_the_binding_bound(
    clock: object, store: CountingStore
) -> None:
    """A04-15 (move): relocating the bound Actor leaves the binding bound — the session
    still finds it, the Actor's pushes from its new node arrive through the same binding
    (same replacement sequence), no Bound or Unbound frame is sent again and no
    OnDisconnectActor runs."""
    rec = Record()
    async with moves_cluster(rec, store) as moves:
        ref = await create(moves.cluster.servers[0], rec, "a")
        target = moves.other(ref)
        async with connect(moves.session_node, "user") as client:
            generation = await bind(client, "a")
            bound = await client.receive()
            assert isinstance(bound, Bound)
            await relocate(moves, ref, target)
            assert await relay(client, "a", "push_req", b"moved") == b"pushed"
            push = await client.receive()
            assert isinstance(push, Push)
            assert (push.actor_id.value, push.sequence, push.payload) == ("a", generation, b"moved")
            assert [h[0] for h in rec.handled_by("a", "push_req")] == [target]
            assert await client.request("find", b"a") == b"1"
            assert rec.disconnects == []


async def test_b02_26_an_injected_45_is_not_accepted(autojump_clock: object) -> None:
    """B02-26: a peer that sends command 45 to the session owner has its connection
    closed as a protocol error; nothing of the session changes: the bound client stays
    connected and its relays still run."""
    sys.path.insert(0, _MESH_TESTS)
    from mesh_kit import fake_peer, stats

    from zlink_trio.mesh.frames import pack_frame
    from zlink_trio.mesh.reasons import DropReason

    rec = Record()
    store = CountingStore(MemoryLocationStore())
    async with moves_cluster(rec, store) as moves:
        await create(moves.cluster.servers[0], rec, "a")
        owner = moves.session_node
        async with connect(owner, "user") as client:
            await bind(client, "a")
            async with fake_peer(moves.cluster.store, SECRET, owner) as (io, _):
                await io.write_all(pack_frame(io.sent + 1, bytes([0x81, 0x18, 45])))  # [45]
                with pytest.raises(Exception):  # noqa: B017 - the connection is closed
                    while True:
                        await io.receive_some()
            assert stats(owner).dropped(DropReason.PROTOCOL_ERROR) == 1
            assert await relay(client, "a", "echo", b"still") == b"still"
            assert client.closed is None


async def test_a_disconnect_during_the_seal_is_notified_where_the_44_says(
    clock: object, store: CountingStore
) -> None:
    """Spec 02 §9: a physical disconnect says nothing about the relocation's outcome. The
    client closes while its binding is sealed (the 44 is delayed 0.5 s on the wire): the
    move still commits and the binding's disconnect notification (38 DISCONNECT) goes
    once, after the 44, to the TARGET — never to the source; no late-update warning; its
    OnDisconnectActor runs once, on the target."""
    rec = Record()
    tap = WireTap()
    plan = FaultPlan(seed=6)
    plan.delay(0.5, command=Command.SESSION_RELOCATION_ROUTE)
    async with moves_cluster(rec, store, tap=tap, fault_plan=plan) as moves:
        ref = await create(moves.cluster.servers[0], rec, "a")
        target = moves.other(ref)
        owner = moves.session_rid()
        async with connect(moves.session_node, "user") as client:
            await bind(client, "a")
            await relocate(moves, ref, target)
            await client.aclose()

        def disconnects() -> list[Any]:
            return [
                e
                for e in tap.select(node=owner, direction=SENT, command=Command.BOUND_SESSION_BIND)
                if e.record.action is BindAction.DISCONNECT
            ]

        with trio.fail_after(30):
            while not disconnects():
                await tap.wait_for(
                    node=owner, direction=SENT, command=Command.BOUND_SESSION_BIND, count=2
                )
        route = tap.select(node=owner, direction=RECEIVED, command=Command.SESSION_RELOCATION_ROUTE)
        assert len(route) == 1 and isinstance(route[0].record.action, SessionRouteCommit)
        events = tap.events
        sent = disconnects()
        assert len(sent) == 1
        assert events.index(sent[0]) > events.index(route[0])
        assert sent[0].peer is not None
        assert sent[0].peer.node_rid == moves.cluster.servers[target].identity.node_rid
        late = FlowEvent.LATE_SESSION_ROUTE_UPDATE
        assert flow_count(moves.session_node, late) == 0
        with trio.fail_after(30):
            await rec.wait_until(lambda: len(rec.disconnects) >= 1)
        assert [(d[0], d[1]) for d in rec.disconnects] == [(target, "a")]
        await trio.sleep(5)
        assert len(rec.disconnects) == 1


@pytest.mark.parametrize("session_on", ["source", "target"])
async def test_b02_21_the_session_owner_on_the_source_or_the_target_node(
    clock: object, store: CountingStore, session_on: str
) -> None:
    """B02-20/B02-21 with the session owner on one of the two Actor nodes (42/43/44 handed
    over in-process on that side): a numbered stream across the move is handled once, in
    order; after the move relays run on the target; pushes still arrive; the connection
    stays."""
    rec = Record()
    plan = FaultPlan(seed=7)
    plan.delay(0.5, command=Command.RELOCATION_CUTOVER)  # widens the sealed window
    async with stream_cluster(2, rec, store=store, fault_plan=plan) as cluster:
        ref = await create(cluster.servers[0], rec, "a")
        source = 0 if ref.node_rid == cluster.servers[0].identity.node_rid else 1
        target = 1 - source
        session = cluster.servers[source if session_on == "source" else target]
        async with connect(session, "user") as client:
            generation = await bind(client, "a")
            await _send_notes(client, range(10))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    partial(
                        cluster.servers[source].relocate,
                        ref.actor_id,
                        to=cluster.servers[target].identity.node_rid,
                    )
                )
                for i in range(10, 40):
                    await client.send("relay", f"a|note|{i}".encode())
                    await trio.sleep(0.02)
            await _send_notes(client, range(40, 50))
            await rec.wait_until(lambda: len(_notes(rec)) >= 50)
            assert _notes(rec) == list(range(50))
            assert rec.handled_by("a", "note")[-1][0] == target
            assert await relay(client, "a", "push_req", b"p") == b"pushed"
            while True:
                event = await client.receive()
                if isinstance(event, Push):
                    break
            assert event.sequence == generation
            assert [h[0] for h in rec.handled_by("a", "push_req")] == [target]
            assert client.closed is None
            assert rec.disconnects == []


async def test_relocation_commands_from_a_peer_that_does_not_own_the_actor_change_nothing(
    autojump_clock: object,
) -> None:
    """Bad input: an admitted peer that is not the bound Actor's owner sends a 42 naming
    the client's real binding (answered 43 REJECTED, no seal: the connection outlives the
    seal timeout) and a 44 commit routing it to itself (`late_session_route_update`, the
    route and Ref unchanged); the client's relays still run where they did."""
    sys.path.insert(0, _MESH_TESTS)
    from mesh_kit import fake_peer

    from zlink_trio.ids import OperationId
    from zlink_trio.mesh.frames import pack_frame
    from zlink_trio.wire import encode
    from zlink_trio.wire.peer import PeerPing, PeerPong
    from zlink_trio.wire.records import (
        SessionRelocationRoute,
        SessionRelocationSeal,
        SessionRelocationSealed,
    )

    rec = Record()
    store = CountingStore(MemoryLocationStore())
    async with moves_cluster(rec, store) as moves:
        ref = await create(moves.cluster.servers[0], rec, "a")
        owner = moves.session_node
        async with connect(owner, "user") as client:
            generation = await bind(client, "a")
            before = await client.request("ref", b"a")
            async with fake_peer(moves.cluster.store, SECRET, owner) as (io, me):

                async def write(record: Any) -> None:
                    io.sent += 1
                    await io.write_all(pack_frame(io.sent, encode(record)))

                seal = SessionRelocationSeal(
                    correlation=7,
                    relocation_id=OperationId(77),
                    actor_id=ref.actor_id,
                    object_generation=ref.object_generation,
                    session_rid=client.connection_id,
                    binding_generation=generation,
                )
                await write(seal)
                while True:
                    answer = await io.read_record()
                    if isinstance(answer, PeerPing):
                        await write(PeerPong(token=answer.token))
                        continue
                    break
                assert isinstance(answer, SessionRelocationSealed)
                assert answer.correlation == 7 and answer.result is SealResult.REJECTED
                commit = _commit_to(ref, me, client.connection_id, generation, owner)
                await write(SessionRelocationRoute(action=commit))
                await write(PeerPing(token=9))
                while True:
                    answer = await io.read_record()
                    if isinstance(answer, PeerPong):
                        break
                late = FlowEvent.LATE_SESSION_ROUTE_UPDATE
                assert flow_count(owner, late) == 1
            await trio.sleep(5)  # past any seal timeout
            assert client.closed is None
            assert await client.request("ref", b"a") == before
            assert await relay(client, "a", "echo", b"still") == b"still"
            assert [h[0] for h in rec.handled_by("a", "echo")] == [moves.index_of(ref.node_rid)]


def _commit_to(ref: Any, me: Any, session_rid: bytes, generation: int, owner: Any) -> Any:
    from zlink_trio.ids import AuthorityOwnerGeneration, OperationId, OwnerLeaseGeneration

    return SessionRouteCommit(
        relocation_id=OperationId(77),
        actor_id=ref.actor_id,
        object_generation=ref.object_generation,
        target_mesh=ref.mesh_name,
        target_rid=me.node_rid,
        target_node_generation=me.node_generation,
        authority_owner_generation=AuthorityOwnerGeneration(99),
        owner_lease_generation=OwnerLeaseGeneration(1),
        session_owner_rid=owner.identity.node_rid,
        session_owner_generation=owner.identity.node_generation,
        session_rid=session_rid,
        binding_generation=generation,
    )


async def test_b02_21_a_held_request_keeps_its_own_deadline(autojump_clock: object) -> None:
    """B02-21 (spec 02 §8.1: held messages keep their own deadline): a request relayed
    while the binding is sealed, with a 500 ms deadline, is answered DeadlineExceeded at
    exactly 500 ms although the 44 comes 2 s later, and its handler never runs; a held
    request with a longer deadline runs on the target after the 44."""
    rec = Record()
    tap = WireTap()
    plan = FaultPlan(seed=8)
    plan.delay(2.0, command=Command.SESSION_RELOCATION_ROUTE)
    store = CountingStore(MemoryLocationStore())
    async with moves_cluster(rec, store, tap=tap, fault_plan=plan) as moves:
        ref = await create(moves.cluster.servers[0], rec, "a")
        target = moves.other(ref)
        owner = moves.session_rid()
        async with connect(moves.session_node, "user") as client:
            await bind(client, "a")
            answers: dict[str, object] = {}

            async def ask(name: str, timeout_ms: int) -> None:
                started = trio.current_time()
                try:
                    answers[name] = await client.request(
                        "relay", f"a|echo|{name}".encode(), timeout_ms=timeout_ms
                    )
                except ZLinkError as exc:
                    answers[name] = (type(exc).__name__, trio.current_time() - started)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(relocate, moves, ref, target)
                await tap.wait_for(
                    node=owner, direction=SENT, command=Command.SESSION_RELOCATION_SEALED
                )
                nursery.start_soon(ask, "short", 500)
                nursery.start_soon(ask, "long", 10_000)
            assert answers["short"] == ("DeadlineExceeded", pytest.approx(0.5))
            assert answers["long"] == b"long"
            assert [(h[0], h[3]) for h in rec.handled_by("a", "echo")] == [(target, b"long")]
