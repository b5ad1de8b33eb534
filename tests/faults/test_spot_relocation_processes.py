"""Spot relocation with a real target process that is SIGKILLed (spec 06 §8 failure
rules, A04-07 for a Spot; docs/relocation.md "Spots"): before the relay-ready reply is
accepted the source stays owner (the row unchanged, its relocation mark cleared) and runs
the held messages in order; after it, the move never comes back to the source and, with
no commit reported within ``relocation_timeout``, the incarnation is released instead of
wedged.

The source node runs in this process; the target is tests/faults/relocation_host.py (its
Instance Spot type "bag"). Real time, every wait event-driven, bounded."""

from __future__ import annotations

import pathlib
import secrets
import signal
import sys

import pytest
import trio
from test_relocation_processes import admitted, source_config, target_process

from zlink_trio import Unavailable
from zlink_trio.ids import NodeRid, SpotId
from zlink_trio.store.api import ObjectKey
from zlink_trio.testing import FaultPlan, TapDirection, WireTap, open_cluster
from zlink_trio.wire.commands import Command

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "contract" / "actors"))
sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "contract" / "spots"))
from process_kit import pg_schema
from spot_relocation_kit import SpotLog, make_spot_reloc_app

pytestmark = [
    pytest.mark.process,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
]


async def bag_on_source(source: object, store: object, prefix: str) -> str:
    """An Instance Spot "bag" activated on ``source`` (not on the target process), once
    its row has no recovery pointer left."""
    me = source.identity.node_rid  # type: ignore[attr-defined]
    for i in range(64):
        spot = f"{prefix}-{i}"
        await source.spots.request(spot, "add-req", b"first").instance("bag").timeout(10)  # type: ignore[attr-defined]
        ref = await source.spots.find(spot)  # type: ignore[attr-defined]
        if ref is not None and ref.node_rid == me:
            while True:
                row = await store.read(ObjectKey.spot(spot))  # type: ignore[attr-defined]
                if row is not None and row.recovery is None:
                    return spot
                await trio.sleep(0.01)
    raise AssertionError("placement never chose the source")


async def test_a04_07_spot_target_sigkilled_before_relay_ready_the_source_stays_owner(
    pg_dsn: str,
) -> None:
    """A04-07 (a Spot's dead target before acceptance): the target process blocks in the
    Spot's Restore and is SIGKILLed there. relocate raises Unavailable; the Spot is Ready
    on the source, its row names the source with the same AuthorityOwnerGeneration and no
    relocation mark; the messages held during the move run at the source, in arrival
    order, and later ones too; the dead target ran none."""
    secret = secrets.token_bytes(32)
    log = SpotLog()
    with trio.fail_after(60):
        async with (
            pg_schema(pg_dsn, "zlink_sreloc", connections=2) as (schema, store),
            target_process(pg_dsn, schema, secret, block_restore=True) as target,
            open_cluster(
                1,
                store=store,
                app=make_spot_reloc_app(log, "source"),
                config=source_config(secret),
            ) as cluster,
        ):
            (source,) = cluster.servers
            rid = NodeRid.from_hex((await target.wait_line(event="ready"))["rid"])
            await admitted(source, rid)
            spot = await bag_on_source(source, store, "victim")
            await source.spots.send(spot, "add", b"before")
            before = await store.read(ObjectKey.spot(spot))
            assert before is not None
            failure: list[BaseException] = []
            async with trio.open_nursery() as nursery:

                async def move() -> None:
                    try:
                        await source.relocate(SpotId(spot), to=rid)
                    except Unavailable as exc:
                        failure.append(exc)

                nursery.start_soon(move)
                await target.wait_line(event="restoring")
                for i in range(5):
                    await source.spots.send(spot, "add", f"held-{i}".encode())
                target.process.send_signal(signal.SIGKILL)
            assert await target.process.wait() == -signal.SIGKILL
            assert len(failure) == 1
            await source.spots.send(spot, "add", b"after")
            reply = await source.spots.request(spot, "get").timeout(10)
            assert reply.startswith(b"8@source")
            assert log.payloads(spot) == [b"before"] + [f"held-{i}".encode() for i in range(5)] + [
                b"after"
            ]
            row = await store.read(ObjectKey.spot(spot))
            assert row is not None and row.relocation is None
            assert row.owner.node_rid == source.identity.node_rid
            assert row.owner_generation == before.owner_generation
            # (placement may have activated other "bag"s on the target: their "first")
            ran = [line for line in target.lines if line["event"] == "handled"]
            assert {line["payload"] for line in ran} <= {"first"}


async def test_a04_07_spot_target_sigkilled_after_relay_ready_never_returns_to_the_source(
    pg_dsn: str,
) -> None:
    """A04-07 (a Spot's dead target after acceptance): the cutover is held back on the
    wire and the target process SIGKILLed as soon as the source received its relay-ready
    reply, before its cutover fallback could commit. The source never runs the relayed
    messages again, relocate reports no commit, and the incarnation is released (the id
    is Missing, not wedged); nothing is replaced by another target."""
    secret = secrets.token_bytes(32)
    log = SpotLog()
    tap = WireTap()
    plan = FaultPlan(seed=7)
    with trio.fail_after(60):
        async with (
            pg_schema(pg_dsn, "zlink_sreloc", connections=2) as (schema, store),
            target_process(pg_dsn, schema, secret, block_restore=False) as target,
            open_cluster(
                1,
                store=store,
                app=make_spot_reloc_app(log, "source"),
                config=source_config(secret),
                tap=tap,
                fault_plan=plan,
            ) as cluster,
        ):
            (source,) = cluster.servers
            rid = NodeRid.from_hex((await target.wait_line(event="ready"))["rid"])
            await admitted(source, rid)
            spot = await bag_on_source(source, store, "gone")
            for i in range(3):
                await source.spots.send(spot, "add", f"saved-{i}".encode())
            await source.spots.request(spot, "get").timeout(10)
            plan.delay(30.0, command=Command.RELOCATION_CUTOVER)
            results: list[object] = []
            async with trio.open_nursery() as nursery:

                async def move() -> None:
                    results.append(await source.relocate(SpotId(spot), to=rid))

                nursery.start_soon(move)
                await tap.wait_for(
                    node=source.identity.node_rid,
                    direction=TapDirection.RECEIVED,
                    command=Command.RELOCATION_RELAY_READY,
                )
                target.process.send_signal(signal.SIGKILL)
            assert await target.process.wait() == -signal.SIGKILL
            (result,) = results
            assert result.committed is False  # type: ignore[attr-defined]
            assert log.payloads(spot) == [f"saved-{i}".encode() for i in range(3)]
            assert await store.read(ObjectKey.spot(spot)) is None
            assert await source.spots.find(spot) is None
