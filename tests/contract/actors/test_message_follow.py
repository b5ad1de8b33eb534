"""Message Follow after a live relocation (spec 06 §6, §6.1; docs/relocation.md): the
previous owner forwards what arrives on the old route to the current owner over the
committed route only — no Store read, no handler on the way, the original operation id,
payload and reply route kept, at most ``message_follow_max_hops`` (≤ 8) hops."""

from __future__ import annotations

import pytest
import trio
from relocation_kit import RelocLog, create_on, make_reloc_app

from zlink_trio import ServerConfig, Unavailable
from zlink_trio.testing import CountingStore, TapDirection, WireTap, open_cluster
from zlink_trio.wire.commands import Command


def _apps(log: RelocLog):  # type: ignore[no-untyped-def]
    return lambda i: make_reloc_app(log, f"node{i}")


async def test_s06_18_follow_reads_no_store_and_keeps_the_operation_id(
    clock: object, store: CountingStore
) -> None:
    """S06-18: after a move node 0 → node 1, a caller on node 2 whose route cache still
    names node 0 reaches node 1 through node 0's follow route: the Location Store is read
    0 times for the whole call, the same message id (operation id) that node 0 received
    arrives at node 1, one terminal comes back to the caller, and node 0 runs no
    handler."""
    log = RelocLog()
    tap = WireTap()
    async with open_cluster(3, store=store, app=_apps(log), tap=tap) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await create_on(c, cluster.servers, 0, "follow", "counter")
        assert await c.actors.request(actor, "get", b"").timeout(10) == b"0@node0"
        await a.relocate(actor, to=b.identity.node_rid)
        store.reset()
        tap.clear()
        assert await c.actors.request(actor, "get", b"x").timeout(10) == b"0@node1"
        assert store.reads == 0 and store.writes == 0
        (at_a,) = tap.select(
            node=a.identity.node_rid, direction=TapDirection.RECEIVED, command=Command.ACTOR_SEND
        )
        (at_b,) = tap.select(
            node=b.identity.node_rid, direction=TapDirection.RECEIVED, command=Command.ACTOR_SEND
        )
        assert at_a.record.operation_id == at_b.record.operation_id is not None
        assert at_b.record.payload == b"x" and at_b.record.follow_hops == 1
        replies = tap.select(
            node=c.identity.node_rid,
            direction=TapDirection.RECEIVED,
            command=Command.TERMINAL_REPLY,
        )
        assert len(replies) == 1
        assert [n for x, p, _, n in log.handled if x == actor and p == "get"] == [
            "node0",
            "node1",
        ]


async def test_s06_18_a_burst_held_during_the_move_is_all_delivered(
    clock: object, store: CountingStore
) -> None:
    """S06-18: a burst sent while the source is sealed — more than a lane's capacity
    would take at once on top of the saved work — is held, relayed and run, every message
    once and in order; no relocation-specific cap cuts it."""
    log = RelocLog()

    def config(i: int) -> ServerConfig:
        return ServerConfig(lane_capacity=64)

    async with open_cluster(2, store=store, app=_apps(log), config=config) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "burst", "counter")
        log.gate = trio.Event()
        log.restore_gate = trio.Event()
        async with trio.open_nursery() as nursery:

            async def hold() -> None:
                await a.actors.request(actor, "hold", b"").timeout(60)

            async def move() -> None:
                await a.relocate(actor, to=b.identity.node_rid)

            nursery.start_soon(hold)
            await log.entered.wait()
            for i in range(40):  # saved work
                await a.actors.send(actor, "add", f"s{i}".encode())
            nursery.start_soon(move)
            log.gate.set()
            await log.restore_entered.wait()
            for i in range(20):  # held ingress (the lane bound: 64 with the saved work)
                await a.actors.send(actor, "add", f"h{i}".encode())
            log.restore_gate.set()
        expected = [f"s{i}".encode() for i in range(40)] + [f"h{i}".encode() for i in range(20)]
        await log.wait_for(lambda: len(log.payloads(actor)) == 60)
        # Saved work that ran before the seal turn (if any) ran on node 0, in order too.
        assert log.payloads(actor) == expected
        assert await a.actors.request(actor, "get", b"").timeout(10) == b"61@node1"


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
async def test_s06_18_a_chain_longer_than_the_hop_bound_is_unavailable(
    clock: object, store: CountingStore
) -> None:
    """S06-18: with the hop bound set to 1, a caller whose route names the first owner of
    a twice-moved Actor (node 0 → node 1 → node 2) is followed once (node 0 → node 1) and
    then refused Unavailable at node 1 (the next hop would exceed the bound); nothing runs.
    A caller with a one-hop stale route still gets through."""
    log = RelocLog()

    def config(i: int) -> ServerConfig:
        return ServerConfig(message_follow_max_hops=1)

    async with open_cluster(4, store=store, app=_apps(log), config=config) as cluster:
        await cluster.wait_all_admitted()
        a, b, c, d = cluster.servers
        actor = await create_on(d, cluster.servers, 0, "chain", "counter")
        assert await d.actors.request(actor, "get", b"").timeout(10) == b"0@node0"
        await a.relocate(actor, to=b.identity.node_rid)
        await b.relocate(actor, to=c.identity.node_rid)
        with pytest.raises(Unavailable):
            await d.actors.request(actor, "get", b"too-far").timeout(10)
        assert [n for x, p, _, n in log.handled if x == actor and p == "get"] == ["node0"]
        # Node 1's own callers follow one hop (local → node 2): within the bound.
        assert await b.actors.request(actor, "get", b"").timeout(10) == b"0@node2"


async def test_s06_18_follow_disabled_or_expired_is_unavailable(
    clock: object, store: CountingStore
) -> None:
    """S06-18: with MessageFollowDuration 0 no follow route is installed: a caller whose
    route names the previous owner gets Unavailable (a stale route, never re-sent); the
    next call resolves afresh and reaches the new owner."""
    log = RelocLog()

    def config(i: int) -> ServerConfig:
        return ServerConfig(message_follow_duration=0.0, route_cache_max_age=15.0)

    async with open_cluster(3, store=store, app=_apps(log), config=config) as cluster:
        await cluster.wait_all_admitted()
        a, b, c = cluster.servers
        actor = await create_on(c, cluster.servers, 0, "nofollow", "counter")
        assert await c.actors.request(actor, "get", b"").timeout(10) == b"0@node0"
        await a.relocate(actor, to=b.identity.node_rid)
        with pytest.raises(Unavailable):
            await c.actors.request(actor, "get", b"").timeout(10)
        assert await c.actors.request(actor, "get", b"").timeout(10) == b"0@node1"
