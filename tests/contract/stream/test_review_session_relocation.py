"""Adversarial review of the session side of a live relocation (spec 02 §8, §9): the
session owner going away in the middle of a move, through the public surface only (a real
websocket client, real TCP, ``zlink_trio.testing`` hooks)."""

from __future__ import annotations

import trio
from reloc_kit import moves_cluster, relocate
from stream_kit import Record, bind, connect, create, relay

from zlink_trio.testing import CountingStore, FaultPlan, TapDirection, WireTap
from zlink_trio.wire.commands import Command


async def test_the_session_owner_stopping_mid_relocation_neither_wedges_nor_duplicates(
    clock: object, store: CountingStore
) -> None:
    """Spec 02 §8/§9: the session owner (node 2) installed the seal (43 sent) and then
    stops while the move is between its seal and its restore (121 delayed on the wire):
    the move still commits, the Actor answers on the target afterwards, and its
    OnDisconnectActor runs once in all (never on both nodes, never twice)."""
    rec = Record()
    tap = WireTap()
    plan = FaultPlan(seed=41)
    async with moves_cluster(rec, store, tap=tap, fault_plan=plan) as moves:
        servers = moves.cluster.servers
        ref = await create(servers[0], rec, "a")
        target = moves.other(ref)
        owner = moves.session_rid()
        results: list[object] = []
        async with connect(moves.session_node, "user") as client:
            await bind(client, "a")
            assert await relay(client, "a", "echo", b"before") == b"before"
            plan.delay(2.0, command=Command.RELOCATION_RESTORE)
            async with trio.open_nursery() as nursery:

                async def move() -> None:
                    results.append(await relocate(moves, ref, target))

                nursery.start_soon(move)
                await tap.wait_for(
                    node=owner,
                    direction=TapDirection.SENT,
                    command=Command.SESSION_RELOCATION_SEALED,
                )
                await moves.cluster.stop(len(servers) - 1)
        assert len(results) == 1
        assert results[0].committed  # type: ignore[attr-defined]
        answer = await servers[0].actors.request(ref.actor_id, "echo", b"after").timeout(10)
        assert answer == b"after"
        assert [h[0] for h in rec.handled_by("a", "echo")][-1] == target
        with trio.fail_after(30):
            await rec.wait_until(lambda: len(rec.disconnects) >= 1)
        await trio.sleep(10)
        assert len(rec.disconnects) == 1, rec.disconnects
