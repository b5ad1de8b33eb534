"""Actor relocation with a real target process that is SIGKILLed (spec 02 §8.1, spec 04
§9 A04-07; docs/relocation.md "failure rules"): before the relay-ready reply is accepted
the source stays owner and runs the held messages in order; after it, the move never comes
back to the source (the held messages never run there again) and, with no commit reported
within ``relocation_timeout``, the incarnation is released instead of wedged.

The source node runs in this process; the target is tests/faults/relocation_host.py. Real
time, every wait event-driven (output lines, peer transitions, the wire tap), bounded."""

from __future__ import annotations

import os
import pathlib
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from zlink_trio import MeshName, ServerConfig, Unavailable
from zlink_trio.ids import NodeRid
from zlink_trio.mesh.api import PeerAddress, PeerState
from zlink_trio.store.api import ObjectKey
from zlink_trio.testing import FaultPlan, TapDirection, WireTap, node_of, open_cluster
from zlink_trio.wire.commands import Command

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "contract" / "actors"))
from process_kit import JsonLinesProcess, pg_schema
from relocation_kit import RelocLog, create_on, make_reloc_app

pytestmark = [
    pytest.mark.process,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
]

HOST_SCRIPT = pathlib.Path(__file__).with_name("relocation_host.py")
ROOT = pathlib.Path(__file__).parents[2]


@asynccontextmanager
async def target_process(
    dsn: str, schema: str, secret: bytes, *, block_restore: bool
) -> AsyncIterator[JsonLinesProcess]:
    command = [
        sys.executable, str(HOST_SCRIPT), "--dsn", dsn, "--schema", schema,
        "--secret-hex", secret.hex(),
    ]  # fmt: skip
    if block_restore:
        command.append("--block-restore")
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, env=env)
    host = JsonLinesProcess(process)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(host.pump)
            await host.wait_line(event="ready")
            yield host
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()


def source_config(secret: bytes) -> ServerConfig:
    return ServerConfig(
        node_name="source",
        cluster_secret=secret,
        listen_host="127.0.0.1",
        owner_lease_ttl=1.0,
        owner_lease_renew_interval=0.3,
        descriptor_poll_interval=0.2,
        hello_timeout=1.0,
        reclaim_sweep_interval=3600.0,
        relocation_timeout=3.0,
    )


async def admitted(server: object, rid: NodeRid) -> None:
    node = node_of(server)  # type: ignore[arg-type]
    address = PeerAddress(MeshName("test"), rid)
    while node.peer_state(address) is not PeerState.ADMITTED:
        await node.wait_peer_change(address)


async def not_admitted(server: object, rid: NodeRid) -> None:
    node = node_of(server)  # type: ignore[arg-type]
    address = PeerAddress(MeshName("test"), rid)
    while node.peer_state(address) is PeerState.ADMITTED:
        await node.wait_peer_change(address)


async def test_a04_07_target_sigkilled_before_relay_ready_the_source_stays_owner(
    pg_dsn: str,
) -> None:
    """A04-07 (a dead target before acceptance): the target process blocks in Restore and
    is SIGKILLed there. relocate raises Unavailable; the row still names the source with
    the same AuthorityOwnerGeneration; the messages held during the move run at the
    source, in arrival order, and later ones too; the dead target ran none."""
    secret = secrets.token_bytes(32)
    log = RelocLog()
    with trio.fail_after(60):
        async with (
            pg_schema(pg_dsn, "zlink_reloc", connections=2) as (schema, store),
            target_process(pg_dsn, schema, secret, block_restore=True) as target,
            open_cluster(
                1, store=store, app=make_reloc_app(log, "source"), config=source_config(secret)
            ) as cluster,
        ):
            (source,) = cluster.servers
            rid = NodeRid.from_hex((await target.wait_line(event="ready"))["rid"])
            await admitted(source, rid)
            actor = await create_on(source, cluster.servers, 0, "victim", "counter")
            await source.actors.send(actor, "add", b"before")
            before = await store.read(ObjectKey.actor(actor))
            assert before is not None
            failure: list[BaseException] = []
            async with trio.open_nursery() as nursery:

                async def move() -> None:
                    try:
                        await source.relocate(actor, to=rid)
                    except Unavailable as exc:
                        failure.append(exc)

                nursery.start_soon(move)
                await target.wait_line(event="restoring")
                for i in range(5):
                    await source.actors.send(actor, "add", f"held-{i}".encode())
                target.process.send_signal(signal.SIGKILL)
            assert await target.process.wait() == -signal.SIGKILL
            assert len(failure) == 1
            await source.actors.send(actor, "add", b"after")
            assert await source.actors.request(actor, "get", b"").timeout(10) == b"7@source"
            assert log.payloads(actor) == [b"before"] + [f"held-{i}".encode() for i in range(5)] + [
                b"after"
            ]
            row = await store.read(ObjectKey.actor(actor))
            assert row is not None
            assert row.owner.node_rid == source.identity.node_rid
            assert row.owner_generation == before.owner_generation
            assert not [line for line in target.lines if line["event"] == "handled"]


async def test_a04_07_target_sigkilled_after_relay_ready_never_returns_to_the_source(
    pg_dsn: str,
) -> None:
    """A04-07 (a dead target after acceptance): the cutover is held back on the wire, the
    target process is SIGKILLed as soon as the source received its relay-ready reply (122)
    and before its 1,000 ms cutover fallback could commit. The source never runs the
    relayed messages again, relocate reports no commit, and the incarnation is released
    (the id is Missing, not wedged on a source that no longer hosts it); nothing is
    replaced by another target. A message sent at the source once it has seen the target
    gone (before the release) follows the move and ends Unavailable, sent nowhere."""
    secret = secrets.token_bytes(32)
    log = RelocLog()
    tap = WireTap()
    plan = FaultPlan(seed=7)
    with trio.fail_after(60):
        async with (
            pg_schema(pg_dsn, "zlink_reloc", connections=2) as (schema, store),
            target_process(pg_dsn, schema, secret, block_restore=False) as target,
            open_cluster(
                1,
                store=store,
                app=make_reloc_app(log, "source"),
                config=source_config(secret),
                tap=tap,
                fault_plan=plan,
            ) as cluster,
        ):
            (source,) = cluster.servers
            rid = NodeRid.from_hex((await target.wait_line(event="ready"))["rid"])
            await admitted(source, rid)
            actor = await create_on(source, cluster.servers, 0, "gone", "counter")
            for i in range(3):
                await source.actors.send(actor, "add", f"saved-{i}".encode())
            await source.actors.request(actor, "get", b"").timeout(10)
            plan.delay(30.0, command=Command.RELOCATION_CUTOVER)
            results: list[object] = []
            async with trio.open_nursery() as nursery:

                async def move() -> None:
                    results.append(await source.relocate(actor, to=rid))

                nursery.start_soon(move)
                await tap.wait_for(
                    node=source.identity.node_rid,
                    direction=TapDirection.RECEIVED,
                    command=Command.RELOCATION_RELAY_READY,
                )
                target.process.send_signal(signal.SIGKILL)
                assert await target.process.wait() == -signal.SIGKILL
                await not_admitted(source, rid)
                # The source follows the accepted move to its dead target: nothing is
                # sent, nothing runs here, and the call says the object is unavailable
                # (not a stale route: the Store still names this node's incarnation).
                for i in range(3):
                    with pytest.raises(Unavailable, match="move to another node"):
                        await source.actors.send(actor, "add", f"late-{i}".encode())
            (result,) = results
            assert result.committed is False  # type: ignore[attr-defined]
            assert log.payloads(actor) == [f"saved-{i}".encode() for i in range(3)]
            assert await store.read(ObjectKey.actor(actor)) is None
            assert await source.actors.find(actor) is None
