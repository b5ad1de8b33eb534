"""Bind is a durable operation (spec 04 §8.1): the bind parts of A04-22 and A04-24."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from stream_kit import (
    Record,
    bind,
    blackout,
    connect,
    create,
    relay,
    stream_cluster,
    stream_config,
)

from zlink_trio import DeadlineExceeded, Unavailable
from zlink_trio.testing import CountingStore, FaultPlan, TapDirection, WireTap, node_of
from zlink_trio.wire import Command


def _bind_ops(tap: WireTap, sender: object) -> list[object]:
    return [
        e.record.operation_id
        for e in tap.select(node=sender, direction=TapDirection.SENT, command=38)  # type: ignore[arg-type]
    ]


async def test_a04_22_a_bind_is_replayed_under_one_operation_id(
    clock: object, store: CountingStore
) -> None:
    """A04-22 (bind): a bind whose terminal was lost (the connection broke right at it)
    is replayed by the session owner under the SAME OperationId and gets its original
    terminal (the binding generation the owner registered once; no replacement of
    itself); an application request relayed under the same fault is sent exactly once
    and ends DeadlineExceeded."""
    rec = Record()
    plan = FaultPlan(seed=22)
    tap = WireTap()
    async with stream_cluster(
        2, rec, store=store, hosts=lambda i: i == 1, fault_plan=plan, tap=tap
    ) as cluster:
        session_node, actor_node = cluster.servers
        s_rid = node_of(session_node).identity.node_rid
        a_rid = node_of(actor_node).identity.node_rid
        await create(session_node, rec, "a")
        async with connect(session_node, "user") as client:
            tap.clear()
            lost = plan.cut(command=Command.TERMINAL_REPLY, sender=a_rid, count=1)
            generation = await bind(client, "a")
            assert lost.fired == 1
            ops = _bind_ops(tap, s_rid)
            assert len(ops) >= 2 and len(set(ops)) == 1
            assert tap.count(command=51) == 0
            assert await relay(client, "a", "echo", b"bound") == b"bound"
            assert client.bound[next(iter(client.bound))].sequence == generation
            # An application request under the same fault: one send, never replayed.
            await cluster.wait_all_admitted()
            tap.clear()
            plan.cut(command=Command.TERMINAL_REPLY, sender=a_rid, count=1)
            with pytest.raises(DeadlineExceeded):
                await client.request("relay", b"a|echo|once", timeout_ms=3000)
            assert tap.count(node=s_rid, direction=TapDirection.SENT, command=24) == 1
            assert [h[3] for h in rec.handled_by("a", "echo")] == [b"bound", b"once"]


async def test_a04_22_a_bind_waits_out_a_missing_route(clock: object, store: CountingStore) -> None:
    """A04-22 (bind): with no admitted connection to the Actor's owner (a transport
    blackout), the bind waits, and once the transport is back it completes under its one
    OperationId."""
    rec = Record()
    plan = FaultPlan(seed=221)
    tap = WireTap()
    async with stream_cluster(
        2, rec, store=store, hosts=lambda i: i == 1, fault_plan=plan, tap=tap
    ) as cluster:
        session_node, actor_node = cluster.servers
        s_rid = node_of(session_node).identity.node_rid
        await create(session_node, rec, "a")
        async with connect(session_node, "user") as client:
            await blackout(cluster, plan, 0, 1)
            tap.clear()
            results: list[int] = []
            async with trio.open_nursery() as nursery:

                async def binding() -> None:
                    results.append(await bind(client, "a"))

                nursery.start_soon(binding)
                await trio.sleep(2)
                assert results == []
                plan.heal(s_rid, node_of(actor_node).identity.node_rid)
            assert len(results) == 1
            ops = _bind_ops(tap, s_rid)
            assert len(ops) >= 1 and len(set(ops)) == 1
            assert await relay(client, "a", "echo", b"after") == b"after"


async def test_a04_24_a_bind_ends_unavailable_when_the_owner_lifecycle_ends(
    clock: object, store: CountingStore
) -> None:
    """A04-24 (bind): a bind replaying toward an owner that cannot be reached ends
    Unavailable well before its deadline once that owner's lifecycle ends (its connection
    intent removed, no admitted peer left); a transport break alone did not end it."""
    rec = Record()
    plan = FaultPlan(seed=24)
    async with stream_cluster(
        2,
        rec,
        store=store,
        hosts=lambda i: i == 1,
        fault_plan=plan,
        config=lambda i: stream_config(i, host=i == 1, bind_timeout=600.0),
    ) as cluster:
        session_node = cluster.servers[0]
        await create(session_node, rec, "a")
        async with connect(session_node, "user") as client:
            await blackout(cluster, plan, 0, 1)
            outcome: list[BaseException] = []
            start = trio.current_time()
            async with trio.open_nursery() as nursery:

                async def binding() -> None:
                    try:
                        await bind(client, "a")
                    except Unavailable as exc:
                        outcome.append(exc)

                nursery.start_soon(binding)
                await trio.sleep(3)
                assert outcome == []  # the blackout alone does not end it
                await cluster.stop(1)
            assert len(outcome) == 1
            assert trio.current_time() - start < 60
