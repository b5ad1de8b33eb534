"""`zlink-trio cluster`: N node processes on one store, one prefixed log stream per node;
SIGTERM stops them all cleanly. Real processes, a real PostgreSQL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from process_kit import pg_schema

pytestmark = [pytest.mark.process, pytest.mark.postgres, pytest.mark.slow]

APP = """
from zlink_trio import App, RecreateOnRelocation, on_request


class Echo:
    def __init__(self, context):
        self.context = context

    @on_request("echo")
    async def echo(self, payload: bytes) -> bytes:
        return payload


def make_app() -> App:
    app = App()
    app.enable_actor_dispatch()
    app.register_actor("echo", Echo, relocation=RecreateOnRelocation())
    return app
"""


class Lines:
    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self.changed = trio.Event()

    async def pump(self) -> None:
        assert self.process.stdout is not None
        buffer = b""
        async for chunk in self.process.stdout:
            buffer += chunk
            *done, buffer = buffer.split(b"\n")
            self.lines.extend(line.decode() for line in done)
            self.changed.set()
            self.changed = trio.Event()

    async def wait_for(self, prefix: str, text: str) -> str:
        while True:
            for line in self.lines:
                if line.startswith(prefix) and text in line:
                    return line
            assert self.process.returncode is None, self.lines
            await self.changed.wait()


async def test_cluster_runs_n_prefixed_nodes_on_one_store(pg_dsn: str, tmp_path: Path) -> None:
    (tmp_path / "echo_app.py").write_text(APP)
    with trio.fail_after(90):
        async with pg_schema(pg_dsn, "zlink_cluster") as (schema, store):
            command = [
                sys.executable, "-m", "zlink_trio.cli", "cluster",
                "--app", f"{tmp_path / 'echo_app.py'}:make_app", "-n", "3",
                "--pg-dsn", pg_dsn, "--pg-schema", schema,
                "--", "--lease-ttl", "2", "--renew-interval", "0.5", "--poll-interval", "0.1",
            ]  # fmt: skip
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, env=env)
            try:
                output = Lines(process)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(output.pump)
                    rid_of = {}
                    for name in ("node1", "node2", "node3"):
                        line = await output.wait_for(f"{name} | ", '"event": "ready"')
                        rid_of[name] = json.loads(line.split(" | ", 1)[1])["rid"]
                    rids = set(rid_of.values())
                    # each node reports both others admitted: they met through the store
                    for name, own in rid_of.items():
                        for rid in rids - {own}:
                            await output.wait_for(f"{name} | ", f'"{rid}", "state": "admitted"')
                    records = await store.list_nodes()
                    assert {r.descriptor.node_rid.hex for r in records if r.live} == rids
                    process.send_signal(signal.SIGTERM)
                    assert await process.wait() == 0
                for name in ("node1", "node2", "node3"):
                    await output.wait_for(f"{name} | ", '"event": "stopped", "status": 0')
                assert not [r for r in await store.list_nodes() if r.live]
            finally:
                with trio.CancelScope(shield=True):
                    if process.returncode is None:
                        process.kill()
                    await process.wait()


def test_cluster_without_a_shared_store_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "zlink_trio.cli", "cluster", "--app", "x:y", "-n", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--pg-dsn" in done.stderr, done.stderr


@pytest.mark.skipif(
    not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")), reason="no PostgreSQL initdb"
)
async def test_cluster_with_a_private_postgres(tmp_path: Path) -> None:
    (tmp_path / "echo_app.py").write_text(APP)
    command = [
        sys.executable, "-m", "zlink_trio.cli", "cluster",
        "--app", f"{tmp_path / 'echo_app.py'}:make_app", "-n", "2", "--private-pg",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with trio.fail_after(90):
        process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, env=env)
        try:
            output = Lines(process)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(output.pump)
                line = await output.wait_for("private PostgreSQL on ", "removed at exit")
                for name in ("node1", "node2"):
                    await output.wait_for(f"{name} | ", '"event": "ready"')
                process.send_signal(signal.SIGTERM)
                assert await process.wait() == 0
            port = int(line.split(":")[1].split(" ")[0])
            with pytest.raises(OSError):  # the private server is gone with the command
                await trio.open_tcp_stream("127.0.0.1", port)
        finally:
            with trio.CancelScope(shield=True):
                if process.returncode is None:
                    process.kill()
                await process.wait()
