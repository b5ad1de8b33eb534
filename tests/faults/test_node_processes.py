"""`zlink-trio node` processes on a shared PostgreSQL Location Store: one is SIGKILLed;
the survivors see the link break (CONNECTING), then the peer GONE once its lease expired
and their descriptor watchers dropped the intent; the Store shows the expired lease.

Real processes, so real time: short leases (TTL 1 s), everything bounded by fail_after,
and the test waits on the nodes' output lines, never on fixed sleeps.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from process_kit import JsonLinesProcess

from zlink_trio.ids import MeshName
from zlink_trio.store.postgres import drop_schema, open_postgres_store

pytestmark = [pytest.mark.process, pytest.mark.postgres, pytest.mark.slow]

MESH = "faults"
LEASE_TTL = 1.0


class Node(JsonLinesProcess):
    """One `zlink-trio node` process and the JSON lines it printed."""

    def __init__(self, process: trio.Process) -> None:
        super().__init__(process)
        self.ready: dict[str, Any] = {}

    @property
    def rid(self) -> str:
        return str(self.ready["rid"])

    def peer_states(self, rid: str, since: int = 0) -> list[str]:
        return [line["state"] for line in self.lines[since:] if line.get("rid") == rid]


@asynccontextmanager
async def nodes(dsn: str, schema: str, count: int) -> AsyncIterator[list[Node]]:
    secret = secrets.token_hex(32)
    command = [
        sys.executable, "-m", "zlink_trio.cli", "node",
        "--mesh", MESH, "--listen", "127.0.0.1:0", "--secret-hex", secret,
        "--pg-dsn", dsn, "--pg-schema", schema, "--pg-connections", "2",
        "--lease-ttl", str(LEASE_TTL), "--renew-interval", "0.25",
        "--poll-interval", "0.1", "--hello-timeout", "1", "--report-peers",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started: list[Node] = []
    async with trio.open_nursery() as nursery:
        try:
            for _ in range(count):
                process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, env=env)
                node = Node(process)
                started.append(node)
                nursery.start_soon(node.pump)
            for node in started:
                node.ready = await node.wait_line(event="ready")
            yield started
        finally:
            with trio.CancelScope(shield=True):
                for node in started:
                    if node.process.returncode is None:
                        node.process.kill()
                    await node.process.wait()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
async def test_sigkilled_node_is_seen_gone_by_the_survivors(pg_dsn: str) -> None:
    schema = f"zlink_faults_{uuid.uuid4().hex[:12]}"
    try:
        with trio.fail_after(60):
            async with open_postgres_store(pg_dsn, schema=schema, connections=2) as store:
                async with nodes(pg_dsn, schema, 3) as (victim, *survivors):
                    for node in (victim, *survivors):
                        for other in (victim, *survivors):
                            if other is not node:
                                await node.wait_line(event="peer", rid=other.rid, state="admitted")
                    records = await store.list_nodes(MeshName(MESH))
                    assert len(records) == 3 and all(r.live for r in records)
                    held = {r.descriptor.node_rid.hex: r for r in records}[victim.rid]

                    marks = [len(node.lines) for node in survivors]
                    for node in survivors:
                        assert node.peer_states(victim.rid)[-1] == "admitted"
                    victim.process.send_signal(signal.SIGKILL)
                    assert await victim.process.wait() == -signal.SIGKILL

                    # GONE only once the lease expired: when the first survivor reports the
                    # victim GONE, the Store already shows the victim's lease run out (a
                    # node that declared GONE on the broken link would be caught here:
                    # the lease outlives the kill by up to LEASE_TTL).
                    async with trio.open_nursery() as first:
                        for node in survivors:

                            async def gone(node: Node = node) -> None:
                                await node.wait_line(event="peer", rid=victim.rid, state="gone")
                                first.cancel_scope.cancel()

                            first.start_soon(gone)
                    by_rid = {r.descriptor.node_rid.hex: r for r in await store.list_nodes()}
                    assert not by_rid[victim.rid].live, "GONE reported before the lease expired"

                    for node, mark in zip(survivors, marks, strict=True):
                        await node.wait_line(event="peer", rid=victim.rid, state="gone")
                        # the link broke (CONNECTING: the intent stays), then the lease
                        # expired and the watcher dropped the intent (GONE)
                        assert node.peer_states(victim.rid, mark) == ["connecting", "gone"]
                    by_rid = {r.descriptor.node_rid.hex: r for r in await store.list_nodes()}
                    expired = by_rid[victim.rid]
                    # the lease ran out by itself: same lease generation, never moved back,
                    # the descriptor still there (nobody removed it or took it over)
                    assert not expired.live
                    assert expired.lease_generation == held.lease_generation
                    assert expired.lease_expires_at >= held.lease_expires_at
                    assert all(by_rid[node.rid].live for node in survivors)
                    for a in survivors:
                        for b in survivors:
                            if a is not b:
                                assert a.peer_states(b.rid)[-1] == "admitted"

                    for node in survivors:
                        node.process.send_signal(signal.SIGTERM)
                    for node in survivors:
                        assert await node.process.wait() == 0
                        await node.wait_line(event="stopped", status=0)
                remaining = await store.list_nodes()
                # graceful exits removed their descriptors; the killed one only expired
                assert [r.descriptor.node_rid.hex for r in remaining] == [victim.rid]
                assert not remaining[0].live
    finally:
        with trio.CancelScope(shield=True):
            await drop_schema(pg_dsn, schema)
