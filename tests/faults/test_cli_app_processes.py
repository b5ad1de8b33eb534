"""`zlink-trio node --app FILE.py:factory` processes on one PostgreSQL host a user's Actor
type from a file outside the package; the Actors on the two nodes call each other; `zlink-trio
status` shows both nodes and the Actors each owns; SIGTERM stops each cleanly (exit 0,
every row released).

Real processes and a real PostgreSQL; every wait is bounded and waits on output lines.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from process_kit import JsonLinesProcess, pg_schema

from zlink_trio import (
    App,
    Created,
    MeshConfig,
    ObjectRole,
    PostgresStoreConfig,
    ServerConfig,
    open_server,
)

pytestmark = [pytest.mark.process, pytest.mark.postgres, pytest.mark.slow]

MESH = "userapp"

USER_APP = '''
"""A user's application: not part of zlink_trio, loaded by `zlink-trio node --app`."""
import os

from zlink_trio import App, RecreateOnRelocation, on_request


class Greeter:
    def __init__(self, context):
        self.context = context

    @on_request("where")
    async def where(self, payload: bytes) -> bytes:
        return str(os.getpid()).encode()

    @on_request("relay")
    async def relay(self, payload: bytes) -> bytes:
        theirs = await self.context.actors.request(payload.decode(), "where").timeout(10)
        return f"{os.getpid()}->{theirs.decode()}".encode()


def make_app() -> App:
    app = App()
    app.enable_actor_dispatch()
    app.register_actor("greeter", Greeter, relocation=RecreateOnRelocation())
    return app
'''


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "zlink_trio.cli", *args]


@asynccontextmanager
async def node_processes(
    command: list[str], count: int, cwd: Path
) -> AsyncIterator[list[JsonLinesProcess]]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started: list[JsonLinesProcess] = []
    async with trio.open_nursery() as nursery:
        try:
            for _ in range(count):
                process = await trio.lowlevel.open_process(
                    command, stdout=subprocess.PIPE, env=env, cwd=cwd
                )
                node = JsonLinesProcess(process)
                started.append(node)
                nursery.start_soon(node.pump)
            yield started
        finally:
            with trio.CancelScope(shield=True):
                for node in started:
                    if node.process.returncode is None:
                        node.process.kill()
                    await node.process.wait()


async def test_two_cli_nodes_host_a_user_actor_from_a_file(pg_dsn: str, tmp_path: Path) -> None:
    app_dir = tmp_path / "myproject"
    app_dir.mkdir()
    (app_dir / "greeter_app.py").write_text(textwrap.dedent(USER_APP))
    work = tmp_path / "elsewhere"  # the nodes' cwd: the app is not importable by name
    work.mkdir()
    secret = secrets.token_hex(32)
    with trio.fail_after(90):
        async with pg_schema(pg_dsn, "zlink_cliapp") as (schema, _store):
            config_file = tmp_path / "node.toml"
            config_file.write_text(
                f'app = "{app_dir / "greeter_app.py"}:make_app"\n'
                f'mesh = ["{MESH}"]\nlisten = "127.0.0.1:0"\nsecret_hex = "{secret}"\n'
                f'pg_dsn = "{pg_dsn}"\npg_schema = "{schema}"\npg_connections = 2\n'
                "lease_ttl = 2.0\nrenew_interval = 0.5\npoll_interval = 0.1\n"
            )
            command = cli("node", "--config", str(config_file))
            async with node_processes(command, 2, work) as nodes:
                ready = [await node.wait_line(event="ready") for node in nodes]
                pid_of = {r["rid"]: node.process.pid for r, node in zip(ready, nodes, strict=True)}
                config = ServerConfig(
                    meshes=(MeshConfig(name=MESH, object_role=ObjectRole.CLIENT),),
                    cluster_secret=bytes.fromhex(secret),
                    location_store=PostgresStoreConfig(dsn=pg_dsn, schema=schema, connections=2),
                    descriptor_poll_interval=0.1,
                )
                caller = App()
                caller.enable_actor_dispatch()
                async with open_server(config, caller) as server:
                    # placement is a weighted random choice: create until both nodes host one
                    placed: dict[str, str] = {}
                    for i in range(64):
                        created = await server.actors.get_or_create(f"g{i}", "greeter").timeout(10)
                        assert isinstance(created, Created)
                        placed.setdefault(created.actor.node_rid.hex, f"g{i}")
                        if len(placed) == 2:
                            break
                    assert set(placed) == set(pid_of), placed
                    (rid_a, on_a), (rid_b, on_b) = placed.items()
                    reply = await server.actors.request(on_a, "relay", on_b.encode()).timeout(10)
                    assert reply == f"{pid_of[rid_a]}->{pid_of[rid_b]}".encode()
                    reply = await server.actors.request(on_b, "relay", on_a.encode()).timeout(10)
                    assert reply == f"{pid_of[rid_b]}->{pid_of[rid_a]}".encode()
                    created_ids = {f"g{j}" for j in range(i + 1)}

                status_cmd = cli("status", "--store", pg_dsn, "--pg-schema", schema)
                shown = await trio.run_process([*status_cmd, "--json"], capture_stdout=True)
                status = json.loads(shown.stdout)
                by_rid = {n["rid"]: n for n in status["nodes"]}
                assert set(by_rid) == set(pid_of)
                assert all(n["live"] and n["actor_types"] == ["greeter"] for n in by_rid.values())
                listed = {a for n in by_rid.values() for a in n["ids"]["actor"]}
                assert listed == created_ids
                assert on_a in by_rid[rid_a]["ids"]["actor"]
                assert on_b in by_rid[rid_b]["ids"]["actor"]
                assert sum(n["counts"]["actor"] for n in by_rid.values()) == len(created_ids)
                table = await trio.run_process(
                    [*status_cmd, "--ids"],
                    capture_stdout=True,
                    env={**os.environ, "COLUMNS": "200"},
                )
                text = table.stdout.decode()
                assert "2 node(s)" in text and on_a in text and on_b in text
                assert all(rid[:12] in text for rid in pid_of)

                for node in nodes:
                    node.process.send_signal(signal.SIGTERM)
                for node, r in zip(nodes, ready, strict=True):
                    stopped = await node.wait_line(event="stopped")
                    assert await node.process.wait() == 0
                    owned = len(by_rid[r["rid"]]["ids"]["actor"])
                    assert stopped == {"event": "stopped", "status": 0, "released": owned}
