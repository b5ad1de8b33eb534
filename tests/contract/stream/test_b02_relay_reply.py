"""Spec 02 §14 "Relay and reply" over a real websocket client: B02-06 … B02-10."""

from __future__ import annotations

import attrs
import pytest
import trio
from stream_kit import Record, bind, connect, create, relay, stream_cluster

from zlink_trio import DeadlineExceeded, MemoryLocationStore
from zlink_trio.client import ConnectionLost
from zlink_trio.testing import (
    CountingStore,
    FaultPlan,
    TapDirection,
    WireTap,
    entry_spot_statistics,
    node_of,
)
from zlink_trio.wire import BindTail, SessionTail
from zlink_trio.wire.stream import Bound, Push

RELAYS = 20


@pytest.mark.parametrize("where", ["local", "remote"])
async def test_b02_06_relay_reads_no_store_and_passes_no_spot_callback(
    clock: object, store: CountingStore, where: str
) -> None:
    """B02-06: after the bind, N relays cause no Location Store read (0 per message),
    reach the Actor handler N times, and never go through a Spot: the Entry Spot runs no
    turn and no OnDisconnectActor for them. Local (the Actor on the session's node) and
    remote (another node) alike."""
    rec = Record()
    remote = where == "remote"
    async with stream_cluster(
        2, rec, store=store, hosts=(lambda i: i == 1) if remote else (lambda i: i == 0)
    ) as cluster:
        session_node = cluster.servers[0]
        actor_node = cluster.servers[1] if remote else session_node
        await create(session_node, rec, "a")
        async with connect(session_node, "user") as client:
            await bind(client, "a")
            spots_before = entry_spot_statistics(actor_node)
            reads = store.reads
            for i in range(RELAYS):
                await client.send("relay", f"a|note|{i}".encode())
            assert await relay(client, "a", "echo", b"last") == b"last"
            await rec.wait_until(lambda: len(rec.handled) == RELAYS + 1)
            assert store.reads == reads
            assert [h[3] for h in rec.handled_by("a", "note")] == [
                str(i).encode() for i in range(RELAYS)
            ]
            assert entry_spot_statistics(actor_node) == spots_before
            assert rec.disconnects == []


async def test_b02_07_cross_node_bind_relay_push_records(
    clock: object, store: CountingStore
) -> None:
    """B02-07: binding, relaying and pushing to an Actor of another node puts exactly one
    38 (and one 20 with its BindTail) on the wire, one 24 per relay carrying the
    bound-session tail (binding generation, session sequence; no binding token), and one
    36 per push."""
    rec = Record()
    tap = WireTap()
    async with stream_cluster(2, rec, store=store, hosts=lambda i: i == 1, tap=tap) as cluster:
        session_node, actor_node = cluster.servers
        s_rid = node_of(session_node).identity.node_rid
        a_rid = node_of(actor_node).identity.node_rid
        await create(session_node, rec, "a")
        async with connect(session_node, "user") as client:
            tap.clear()
            generation = await bind(client, "a")
            assert isinstance(await client.receive(), Bound)
            binds = tap.select(node=s_rid, direction=TapDirection.SENT, command=38)
            assert len(binds) == 1 and binds[0].peer is not None
            assert binds[0].peer.node_rid == a_rid
            terminals = [
                e
                for e in tap.select(node=a_rid, direction=TapDirection.SENT, command=20)
                if isinstance(e.record.tail, BindTail)
            ]
            assert len(terminals) == 1
            assert terminals[0].record.tail.binding_generation == generation
            tap.clear()
            await client.send("relay", b"a|note|one")
            await client.send("relay", b"a|push|two")
            assert await relay(client, "a", "push_req", b"three") == b"pushed"
            pushes = [await client.receive(), await client.receive()]
            assert [p.payload for p in pushes if isinstance(p, Push)] == [b"two", b"three"]
            relays = tap.select(node=s_rid, direction=TapDirection.SENT, command=24)
            assert len(relays) == 3
            tails = [e.record.session for e in relays]
            assert all(isinstance(t, SessionTail) for t in tails)
            assert {t.binding_generation for t in tails} == {generation}
            sequences = [t.session_sequence for t in tails]
            assert sequences == sorted(sequences) and len(set(sequences)) == 3
            assert {f.name for f in attrs.fields(SessionTail)} == {
                "session_owner_rid",
                "session_owner_generation",
                "session_rid",
                "binding_generation",
                "session_sequence",
            }
            assert tap.count(node=a_rid, direction=TapDirection.SENT, command=36) == 2
            assert tap.count(command=38) == 0  # a relay never re-binds


async def test_b02_08_reply_completes_the_request_exactly_once(
    clock: object, store: CountingStore
) -> None:
    """B02-08: the Actor handler's reply completes the client's request correlation
    exactly once, even when the transport repeats the reply frame (a duplicated command
    20 from the Actor's node): the client gets one Reply per request, nothing more."""
    rec = Record()
    plan = FaultPlan(seed=8)
    async with stream_cluster(
        2, rec, store=store, hosts=lambda i: i == 1, fault_plan=plan
    ) as cluster:
        session_node, actor_node = cluster.servers
        await create(session_node, rec, "a")
        async with connect(session_node, "user") as client:
            await bind(client, "a")
            plan.duplicate(command=20, sender=node_of(actor_node).identity.node_rid)
            answers = [await relay(client, "a", "echo", str(i).encode()) for i in range(5)]
            assert answers == [str(i).encode() for i in range(5)]
            assert await client.request("local", b"x") == b"local:x"
            assert client.received["Reply"] == 1 + 5 + 1  # the bind, the relays, local
            assert client.received["ErrorFrame"] == 0


async def test_b02_09_a_timed_out_request_is_never_resent(autojump_clock: object) -> None:
    """B02-09: a relayed request whose deadline passes after it was submitted ends
    DeadlineExceeded exactly at its deadline (MockClock) and is never sent again: one 24
    on the wire, no authority read of the Store (the background lease and descriptor
    upkeep keeps reading), and no handler on any other node (the third node could host
    the type) ran it."""
    rec = Record()
    rec.gate = trio.Event()
    tap = WireTap()
    store = CountingStore(MemoryLocationStore())
    async with stream_cluster(3, rec, store=store, hosts=lambda i: i != 0, tap=tap) as cluster:
        session_node = cluster.servers[0]
        s_rid = node_of(session_node).identity.node_rid
        ref = await create(session_node, rec, "a")
        owner = [i for i, s in enumerate(cluster.servers) if s.identity.node_rid == ref.node_rid]
        async with connect(session_node, "user") as client:
            await bind(client, "a")
            tap.clear()
            reads = store.count("read")
            start = trio.current_time()
            with pytest.raises(DeadlineExceeded):
                await client.request("relay", b"a|slow|x", timeout_ms=1500)
            assert trio.current_time() - start == pytest.approx(1.5)
            await trio.sleep(10)  # nothing is re-sent later either
            assert tap.count(node=s_rid, direction=TapDirection.SENT, command=24) == 1
            assert store.count("read") == reads
            assert {h[0] for h in rec.handled} == set(owner)
            # cancellation: the client goes away with a request in flight
            async with connect(session_node, "user2") as other:
                await other.request("bind", b"a")
                tap.clear()
                with trio.move_on_after(0.5):
                    await other.request("relay", b"a|slow|y")
            await trio.sleep(10)
            assert tap.count(node=s_rid, direction=TapDirection.SENT, command=24) == 1
            rec.gate.set()


async def test_b02_10_a_reply_after_close_never_reaches_a_new_session(
    clock: object, store: CountingStore
) -> None:
    """B02-10: session 1 relays a request, then closes; session 2 (same client identity,
    a new bind) relays its own request with the SAME correlation number; when the delayed
    Actor replies arrive, session 1's reply goes nowhere and session 2 gets exactly its
    own reply."""
    rec = Record()
    rec.gate = trio.Event()
    tap = WireTap()
    async with stream_cluster(2, rec, store=store, hosts=lambda i: i == 1, tap=tap) as cluster:
        session_node, actor_node = cluster.servers
        a_rid = node_of(actor_node).identity.node_rid
        await create(session_node, rec, "a")
        async with trio.open_nursery() as nursery:
            first_answer: list[object] = []

            async def first_session() -> None:
                async with connect(session_node, "user") as one:
                    await bind(one, "a")  # correlation 1
                    try:
                        await one.request("relay", b"a|slow|one")  # correlation 2
                    except ConnectionLost as exc:
                        first_answer.append(exc)

            cancel = trio.CancelScope()

            async def run_first() -> None:
                with cancel:
                    await first_session()

            nursery.start_soon(run_first)
            await rec.wait_until(lambda: len(rec.handled_by("a", "slow")) == 1)
            cancel.cancel()  # the client closes the connection with its request in flight
        async with connect(session_node, "user") as two:
            await bind(two, "a")  # correlation 1
            async with trio.open_nursery() as nursery:
                answers: list[bytes | None] = []

                async def ask() -> None:
                    answers.append(await two.request("relay", b"a|slow|two"))  # correlation 2

                nursery.start_soon(ask)
                # Both requests are queued at the Actor (the first one still running).
                await tap.wait_for(count=2, node=a_rid, direction=TapDirection.RECEIVED, command=24)
                rec.gate.set()
            assert answers == [b"slow:two"]
            assert two.received["Reply"] == 2  # the bind and its own relay
