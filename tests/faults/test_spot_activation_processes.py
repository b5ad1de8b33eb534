"""Cold activation with real processes on a shared PostgreSQL Location Store (spec 06
§4.1.1, S06-15): the target of a cold activation (tests/faults/spot_host.py) is SIGKILLed
between the Reserve and the Ready commit, or between the Ready commit and the first
handler; its restarted process (a new lifecycle) resumes the activation once the dead
lease expired: the first message is handled exactly once and first, and the recovery
root is gone afterwards.

Real time: 1 s leases, every wait event-driven (output lines, the Store history), each
test bounded by fail_after.
"""

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
from process_kit import JsonLinesProcess, pg_schema

from zlink_trio import MeshConfig, ObjectRole, ServerConfig
from zlink_trio.store.api import AuthorityState, LocationStore, ObjectKey
from zlink_trio.testing import open_cluster

pytestmark = [
    pytest.mark.process,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
]

HOST_SCRIPT = pathlib.Path(__file__).with_name("spot_host.py")
ROOT = pathlib.Path(__file__).parents[2]
KEY = ObjectKey.spot("cart-1")


@asynccontextmanager
async def spot_host(
    dsn: str, schema: str, secret: bytes, *, hold: str
) -> AsyncIterator[JsonLinesProcess]:
    command = [
        sys.executable, str(HOST_SCRIPT), "--dsn", dsn, "--schema", schema,
        "--secret-hex", secret.hex(), "--hold", hold,
    ]  # fmt: skip
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


async def sigkill(host: JsonLinesProcess) -> None:
    host.process.send_signal(signal.SIGKILL)
    assert await host.process.wait() == -signal.SIGKILL


def caller_config(secret: bytes, store: LocationStore) -> ServerConfig:
    return ServerConfig(
        node_name="caller",
        meshes=(MeshConfig(name="test", object_role=ObjectRole.CLIENT),),
        cluster_secret=secret,
        location_store=store,
        owner_lease_ttl=1.0,
        owner_lease_renew_interval=0.3,
        descriptor_poll_interval=0.2,
        hello_timeout=1.0,
        reclaim_sweep_interval=3600.0,  # only the restarted host recovers
    )


def handled(host: JsonLinesProcess) -> list[str]:
    return [line["payload"] for line in host.lines if line.get("event") == "handled"]


@pytest.mark.parametrize("window", ["factory", "commit"])
async def test_a_sigkilled_activation_target_handles_the_first_message_once_and_first_after_restart(
    pg_dsn: str, window: str
) -> None:
    """The target is SIGKILLed in ``window`` — its factory running (the row Creating with
    its recovery receipt), or right after its Ready commit applied (the first record not
    restored yet); the first message had been sent as a one-way send with Instance intent
    and is durable in the Relocation Store. The restarted process recovers it: the first
    message is handled exactly once and first (before a follow-up), the dead process
    handled nothing, and the recovery pointer and root are gone afterwards."""
    secret = secrets.token_bytes(32)
    with trio.fail_after(60):
        async with (
            pg_schema(pg_dsn, "zlink_spot_activation") as (schema, store),
            open_cluster(1, store=store, app=None, config=caller_config(secret, store)) as cluster,
        ):
            (caller,) = cluster.servers
            async with spot_host(pg_dsn, schema, secret, hold=window) as victim:
                await cluster.wait_all_admitted()
                await caller.spots.send("cart-1", "note", b"first").instance("cart").timeout(50)
                await victim.wait_line(event=window if window == "factory" else "committed")
                row = await store.read(KEY)
                assert row is not None and row.recovery is not None
                assert row.recovery.replay_cursor == 0
                expected = AuthorityState.CREATING if window == "factory" else AuthorityState.READY
                assert row.state is expected
                root = row.recovery.root
                await sigkill(victim)
                assert handled(victim) == []
            async with spot_host(pg_dsn, schema, secret, hold="none") as restarted:
                await restarted.wait_line(event="handled", payload="first")
                log = await caller.spots.request("cart-1", "log", b"").timeout(20)
                assert log == b"first"  # handled once, and before the follow-up
                assert handled(restarted) == ["first", ""]
                await restarted.wait_line(event="root_deleted", removed=True)
                now = await store.read(KEY)
                assert now is not None and now.state is AuthorityState.READY
                assert now.recovery is None
                assert await store.read_root(root) is None
                if window == "commit":
                    # The Ready incarnation was taken over: same ObjectGeneration.
                    assert now.object_generation == row.object_generation
                restarted.process.send_signal(signal.SIGTERM)
                assert await restarted.process.wait() == 0
