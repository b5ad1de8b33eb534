"""Actors hosted by a ``zlink-trio node`` process (``--app process_app:app``) on a shared
PostgreSQL Location Store, called by a server in this test's Trio run (issue 10):

* the owner process is SIGKILLed: while its lease is live, calls to its Actor end
  ``Unavailable`` as soon as the dial fails (not at their deadline); once the lease
  expired, a call reclaims the row and ends ``NotFound``;
* the owner process gets SIGTERM or SIGINT: its drain releases every row it owns before
  its descriptor goes, so the caller sees the ids Missing at once (``find`` → None,
  ``request`` → NotFound) and a new host gets ``Created``.

Real processes, so real time: short leases, everything bounded by ``fail_after``, and the
test waits on the node's output lines and on peer-state transitions, never on sleeps.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from process_app import app as cart_app
from process_kit import JsonLinesProcess, pg_schema

import zlink_trio
from zlink_trio import (
    App,
    MeshConfig,
    NotFound,
    PostgresStoreConfig,
    ServerConfig,
    Unavailable,
    open_server,
)
from zlink_trio.actors.results import Created
from zlink_trio.ids import NodeRid
from zlink_trio.mesh.api import PeerAddress, PeerState
from zlink_trio.server import Server
from zlink_trio.store.api import LocationStore, ObjectKey, ObjectKind
from zlink_trio.testing import FlowEvent, flow_count, node_of

pytestmark = [
    pytest.mark.process,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
]

MESH = "carts"
HERE = Path(__file__).parent
ROOT = Path(zlink_trio.__file__).resolve().parents[1]
"""The tree whose zlink_trio this run imports: the node processes import the same one."""
LEASE_TTL = 2.0
IDS = ("cart-0", "cart-1", "cart-2")


class Node(JsonLinesProcess):
    """One ``zlink-trio node`` process and the JSON lines it printed."""


@asynccontextmanager
async def owner_process(dsn: str, schema: str, secret: str) -> AsyncIterator[Node]:
    """A ``zlink-trio node`` hosting the ``cart`` Actor type, ready."""
    command = [
        sys.executable, "-m", "zlink_trio.cli", "node",
        "--mesh", MESH, "--listen", "127.0.0.1:0", "--secret-hex", secret,
        "--pg-dsn", dsn, "--pg-schema", schema, "--pg-connections", "2",
        "--lease-ttl", str(LEASE_TTL), "--renew-interval", "0.25",
        "--poll-interval", "0.1", "--hello-timeout", "1", "--drain-timeout", "5",
        "--app", "process_app:app",
    ]  # fmt: skip
    path = os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, env=env)
    node = Node(process)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(node.pump)
            await node.wait_line(event="ready")
            yield node
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()


def server_config(dsn: str, schema: str, secret: str, **changes: Any) -> ServerConfig:
    return ServerConfig(
        meshes=(MeshConfig(name=MESH),),
        cluster_secret=bytes.fromhex(secret),
        location_store=PostgresStoreConfig(dsn=dsn, schema=schema, connections=2),
        listen_host="127.0.0.1",
        owner_lease_ttl=LEASE_TTL,
        owner_lease_renew_interval=0.25,
        descriptor_poll_interval=0.1,
        hello_timeout=1.0,
        **changes,
    )


def caller_app() -> App:
    application = App()
    application.enable_actor_dispatch()  # a caller: it hosts no Actor type
    return application


async def wait_state(server: Server, rid: str, wanted: PeerState) -> None:
    node = node_of(server)
    address = PeerAddress(zlink_trio.MeshName(MESH), NodeRid.from_hex(rid))
    while node.peer_state(address) is not wanted:
        await node.wait_peer_change(address)


async def wait_not_admitted(server: Server, rid: str) -> None:
    node = node_of(server)
    address = PeerAddress(zlink_trio.MeshName(MESH), NodeRid.from_hex(rid))
    while node.peer_state(address) is PeerState.ADMITTED:
        await node.wait_peer_change(address)


def schema_store(dsn: str) -> AbstractAsyncContextManager[tuple[str, LocationStore]]:
    return pg_schema(dsn, "zlink_carts", connections=2)


async def test_calls_to_a_sigkilled_owner_fail_fast_then_reclaim(pg_dsn: str) -> None:
    """Issue 10 (fast failure, lazy reclaim; real processes): the process hosting
    ``cart-0`` is SIGKILLed. While its lease is live, a request and a send from the
    caller end ``Unavailable`` within ``connect_timeout`` (2 s), far from their 60 s
    deadline: the dial to the dead process is refused. Once the lease expired (the caller
    sees the owner GONE), a request reclaims the row itself (RECLAIMED, the sweep is off)
    and ends ``NotFound``; the Store has no row of the dead lifecycle."""
    secret = secrets.token_hex(32)
    with trio.fail_after(60):
        async with (
            schema_store(pg_dsn) as (schema, store),
            owner_process(pg_dsn, schema, secret) as owner,
        ):
            rid = str(owner.lines[0]["rid"])
            config = server_config(pg_dsn, schema, secret, reclaim_sweep_interval=1000.0)
            async with open_server(config, caller_app()) as caller:
                await wait_state(caller, rid, PeerState.ADMITTED)
                created = await caller.actors.create("cart-0", "cart").timeout(30)
                assert isinstance(created, Created) and created.actor.node_rid.hex == rid
                assert await caller.actors.request("cart-0", "echo", b"x").timeout(30) == b"x"

                owner.process.send_signal(signal.SIGKILL)
                assert await owner.process.wait() == -signal.SIGKILL
                await wait_not_admitted(caller, rid)
                start = trio.current_time()
                with pytest.raises(Unavailable) as request:
                    await caller.actors.request("cart-0", "echo", b"y").timeout(60)
                with pytest.raises(Unavailable) as send:
                    await caller.actors.send("cart-0", "note", b"y").timeout(60)
                assert trio.current_time() - start < caller.config.connect_timeout
                for failure in (request.value, send.value):
                    assert not isinstance(failure, NotFound)
                    assert "cannot be reached" in failure.message, failure

                await wait_state(caller, rid, PeerState.GONE)  # the lease ran out
                with pytest.raises(NotFound):
                    await caller.actors.request("cart-0", "echo", b"z").timeout(60)
                assert flow_count(caller, FlowEvent.RECLAIMED) == 1
                assert await store.read(ObjectKey.actor("cart-0")) is None
                left = await store.scan_owned(NodeRid.from_hex(rid))
                assert [r.kind for r in left] == [ObjectKind.ENTRY_SPOT]  # its claim only


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signalled_node_releases_its_rows_before_it_goes(pg_dsn: str, signum: int) -> None:
    """Issue 10 (graceful drain; real process): the process hosting three Actors gets
    SIGTERM (or SIGINT). Its drain releases each row (``stopped`` reports released=3)
    before the descriptor goes; it exits 0. At once, without any lease running out, the
    Store holds no row of that lifecycle and the caller sees every id Missing: ``find``
    → None, ``request`` → NotFound. A new host then gets ``Created``."""
    secret = secrets.token_hex(32)
    with trio.fail_after(60):
        async with schema_store(pg_dsn) as (schema, store):
            config = server_config(pg_dsn, schema, secret)
            async with owner_process(pg_dsn, schema, secret) as owner:
                rid = str(owner.lines[0]["rid"])
                async with open_server(config, caller_app()) as caller:
                    await wait_state(caller, rid, PeerState.ADMITTED)
                    for actor_id in IDS:
                        created = await caller.actors.create(actor_id, "cart").timeout(30)
                        assert isinstance(created, Created)
                        assert created.actor.node_rid.hex == rid
                    owned = await store.scan_owned(NodeRid.from_hex(rid))
                    assert sorted(r.key.object_id for r in owned if r.key.object_id in IDS) == [
                        *IDS
                    ]

                    owner.process.send_signal(signum)
                    assert await owner.process.wait() == 0
                    await owner.wait_line(event="stopping")
                    stopped = await owner.wait_line(event="stopped")
                    assert stopped == {"event": "stopped", "status": 0, "released": 3}
                    assert list(await store.scan_owned(NodeRid.from_hex(rid))) == []
                    for actor_id in IDS:
                        assert await store.read(ObjectKey.actor(actor_id)) is None
                        assert await caller.actors.find(actor_id) is None
                        with pytest.raises(NotFound):
                            await caller.actors.request(actor_id, "echo", b"y").timeout(30)
                    assert flow_count(caller, FlowEvent.RECLAIMED) == 0  # nothing was left

                    async with open_server(config, cart_app()) as host:
                        again = await caller.actors.get_or_create("cart-0", "cart").timeout(30)
                        assert isinstance(again, Created)
                        assert again.actor.node_rid == host.identity.node_rid
