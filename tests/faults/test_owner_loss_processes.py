"""Owner loss with real processes on a shared PostgreSQL Location Store: a node process
hosting Actors (tests/faults/actor_host.py) is SIGKILLed; once its 1 s lease expired by
the Store's clock, the survivors (three nodes in this process, racing) reclaim each of its
rows exactly once and the ids are Missing again; a restarted process reclaims at startup,
before ``open_server`` returns, what its previous lifecycle left, never a live node's rows.

Real time: short leases, every wait event-driven (output lines, peer transitions, the
Store history), everything bounded by fail_after.
"""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
import trio
from process_kit import pg_schema

from zlink_trio import Created, NotFound, Server, ServerConfig
from zlink_trio.ids import NodeRid
from zlink_trio.store.api import AuthorityState, LocationStore, ObjectKey
from zlink_trio.testing import FlowEvent, RecordingStore, flow_count, node_of, open_cluster

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "contract" / "actors"))
from actor_kit import Recorder, make_app
from owner_loss_kit import NO_SWEEP, create_on, short_leases, wait_gone

pytestmark = [
    pytest.mark.process,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
]

HOST_SCRIPT = pathlib.Path(__file__).with_name("actor_host.py")
ROOT = pathlib.Path(__file__).parents[2]


class HostProcess:
    """One actor_host.py process and its ready line."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.ready: dict[str, Any] = {}

    @property
    def rid(self) -> NodeRid:
        return NodeRid.from_hex(self.ready["rid"])

    async def read_ready(self) -> None:
        assert self.process.stdout is not None
        buffer = b""
        async for chunk in self.process.stdout:
            buffer += chunk
            if b"\n" in buffer:
                line, _ = buffer.split(b"\n", 1)
                self.ready = json.loads(line)
                return
        raise AssertionError(f"the host exited ({self.process.returncode}) before it was ready")


@asynccontextmanager
async def host_process(
    dsn: str, schema: str, secret: bytes, *, actors: int, name: str = "worker"
) -> AsyncIterator[HostProcess]:
    command = [
        sys.executable, str(HOST_SCRIPT), "--dsn", dsn, "--schema", schema,
        "--secret-hex", secret.hex(), "--node-name", name, "--actors", str(actors),
    ]  # fmt: skip
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, env=env)
    host = HostProcess(process)
    try:
        await host.read_ready()
        yield host
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()


async def sigkill(host: HostProcess) -> None:
    host.process.send_signal(signal.SIGKILL)
    assert await host.process.wait() == -signal.SIGKILL


def owner_loss_schema(dsn: str) -> AbstractAsyncContextManager[tuple[str, LocationStore]]:
    return pg_schema(dsn, "zlink_owner_loss")


def survivors_config(secret: bytes, *, sweep: float) -> Any:
    base = short_leases(sweep=sweep)

    def config(index: int) -> ServerConfig:
        from attrs import evolve

        return evolve(base(index), cluster_secret=secret, hello_timeout=1.0)

    return config


async def test_sigkilled_owners_actors_are_reclaimed_once_by_racing_survivors(
    pg_dsn: str,
) -> None:
    """A process hosting five Actors is SIGKILLed. Three survivors race (finds on every
    id from each, plus their background sweeps) once its lease expired: exactly one
    winning reclaim CAS per row (RECLAIMED summed == 5; one applied reclaim per row in
    the Store's history), find is None, request and send are NotFound, get_or_create is
    Created with a new ObjectGeneration, and after a sweep removed the dead registration
    the Store holds no row of the dead lifecycle (its Entry claim included)."""
    secret = secrets.token_bytes(32)
    rec = Recorder()
    with trio.fail_after(40):
        async with owner_loss_schema(pg_dsn) as (schema, store):
            recording = RecordingStore(store)
            async with host_process(pg_dsn, schema, secret, actors=5) as victim:
                dead = victim.rid
                owned = [(a, g) for a, g, owner in victim.ready["actors"] if owner == dead.hex]
                assert len(owned) == 5  # alone when it created them: all on itself
                async with open_cluster(
                    3,
                    store=recording,
                    app=make_app(rec),
                    config=survivors_config(secret, sweep=0.3),
                ) as cluster:
                    survivors = cluster.servers
                    await cluster.wait_all_admitted()
                    for name, generation in owned:
                        ref = await survivors[0].actors.find(name)
                        assert ref is not None and ref.node_rid == dead
                        assert ref.object_generation.value == generation
                    await sigkill(victim)
                    await wait_gone(survivors, dead)

                    found: list[object] = []

                    async def find_all(server: Server) -> None:
                        for name, _ in owned:
                            ref_now = await server.actors.find(name)
                            found.append(ref_now)

                    async with trio.open_nursery() as nursery:
                        for server in survivors:
                            nursery.start_soon(find_all, server)
                    assert found == [None] * 15
                    assert sum(flow_count(s, FlowEvent.RECLAIMED) for s in survivors) == 5
                    history = recording.history
                    for name, _ in owned:
                        key = ObjectKey.actor(name)
                        wins = [m for m in history if m.key == key and m.method == "reclaim"]
                        assert [m.applied for m in wins if m.applied] == [True]
                        assert await store.read(key) is None
                    for server, (name, _) in itertools.product(survivors, owned):
                        with pytest.raises(NotFound):
                            await server.actors.request(name, "echo", b"").timeout(5)
                        with pytest.raises(NotFound):
                            await server.actors.send(name, "note", b"").timeout(5)
                    for name, generation in owned:
                        created = await survivors[2].actors.get_or_create(name, "player")
                        assert isinstance(created, Created)
                        assert created.actor.object_generation.value != generation
                    await recording.wait_for(
                        lambda h: any(
                            m.method == "remove_node" and m.node_rid == dead and m.applied
                            for m in h
                        )
                    )
                    assert await store.scan_owned(dead) == ()
                    assert rec.handled == []


async def test_a_restarted_process_reclaims_its_previous_lifecycle_at_startup(
    pg_dsn: str,
) -> None:
    """A process hosting three Actors is SIGKILLed; a live node (in this process, no
    background sweep) hosts two more. After the lease expired a new process with the same
    node name starts on the same schema: when it reports ready (``open_server`` returned)
    it has reclaimed every row of its previous lifecycle — they are Missing, no row of that
    lifecycle is left — and the live node's rows are untouched; the ids can be created."""
    secret = secrets.token_bytes(32)
    rec = Recorder()
    with trio.fail_after(40):
        async with (
            owner_loss_schema(pg_dsn) as (schema, store),
            host_process(pg_dsn, schema, secret, actors=3) as victim,
        ):
            dead = victim.rid
            async with open_cluster(
                1,
                store=store,
                app=make_app(rec),
                config=survivors_config(secret, sweep=NO_SWEEP),
            ) as cluster:
                (live,) = cluster.servers
                kept = await create_on(live, "k", live.identity.node_rid, 2)
                keys = [ObjectKey.actor(r.actor_id.value) for r in kept]
                before = [await store.read(key) for key in keys]
                mine = [r for r in await store.scan_owned(dead) if r.key.namespace.value == "actor"]
                assert len(mine) >= 3
                await sigkill(victim)
                await wait_gone([live], dead)
                assert len(await store.scan_owned(dead)) == len(mine) + 1  # + Entry claim

                async with host_process(pg_dsn, schema, secret, actors=0) as restarted:
                    assert restarted.rid != dead
                    assert restarted.ready["reclaimed"] == len(mine)
                    assert await store.scan_owned(dead) == ()
                    for row in mine:
                        assert await store.read(row.key) is None
                    after = [await store.read(key) for key in keys]
                    assert after == before
                    assert all(r is not None and r.state is AuthorityState.READY for r in after)
                    assert flow_count(live, FlowEvent.RECLAIMED) == 0
                    for row in mine:
                        created = await live.actors.create(row.key.object_id, "player")
                        assert isinstance(created, Created)
                        assert created.actor.object_generation != row.object_generation
                    restarted.process.send_signal(signal.SIGTERM)
                    assert await restarted.process.wait() == 0
                assert node_of(live).admitting
