"""``zlink-trio node --stream-listen HOST:PORT`` opens the node's STREAM endpoint: a real
websocket client (``zlink_trio.client``) talks to a session of a real node process, whose
ready line names the bound STREAM port; the same key in a ``--config`` file does it too.
One node on its private in-memory Store (no PostgreSQL needed)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from process_kit import JsonLinesProcess

import zlink_trio
from zlink_trio.client import open_stream_client

pytestmark = [pytest.mark.process]

HERE = Path(__file__).parent
ROOT = Path(zlink_trio.__file__).resolve().parents[1]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("how", ["flag", "config-file"])
async def test_a_node_process_serves_stream_sessions(how: str, tmp_path: Path) -> None:
    secret = secrets.token_hex(32)
    command = [
        sys.executable, "-m", "zlink_trio.cli", "node",
        "--mesh", "faults", "--listen", "127.0.0.1:0", "--secret-hex", secret,
        "--app", "process_app:stream_app",
    ]  # fmt: skip
    if how == "flag":
        command += ["--stream-listen", "127.0.0.1:0"]
    else:
        path = tmp_path / "node.json"
        path.write_text(json.dumps({"stream_listen": "127.0.0.1:0", "stream": {"bind_timeout": 3}}))
        command += ["--config", str(path)]
    env_path = os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": env_path}
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, env=env)
    node = JsonLinesProcess(process)
    try:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(node.pump)
                ready = await node.wait_line(event="ready")
                port = ready["stream_port"]
                assert isinstance(port, int) and port > 0 and port != ready["port"]
                url = f"ws://127.0.0.1:{port}/"
                async with open_stream_client(url, b"alice") as client:
                    assert await client.request("echo", b"hi") == b"echo:hi"
                process.send_signal(signal.SIGTERM)
                await node.wait_line(event="stopped", status=0)
                assert await process.wait() == 0
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()
