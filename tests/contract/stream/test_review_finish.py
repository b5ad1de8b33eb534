"""Adversarial review of ``zlink-trio node --stream-listen`` (issue 13): a STREAM
endpoint that cannot be opened (its port taken, its host unresolvable) ends the real node
process with one clear line on stderr and a non-zero status, never a traceback; a
malformed value is a configuration error (status 2)."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest
import trio

import zlink_trio

ROOT = Path(zlink_trio.__file__).resolve().parents[1]


async def _node(*flags: str) -> tuple[int, list[str]]:
    env_path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": env_path}
    with trio.fail_after(60):
        result = await trio.run_process(
            [sys.executable, "-m", "zlink_trio.cli", "node", *flags],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
        )
    return result.returncode, result.stderr.decode().splitlines()


@pytest.mark.process
@pytest.mark.xfail(strict=True, reason="a STREAM endpoint that cannot open gives a traceback")
@pytest.mark.parametrize("how", ["port-in-use", "unresolvable-host"])
async def test_a_stream_endpoint_that_cannot_open_is_one_line_and_a_failure_status(
    how: str,
) -> None:
    """``--stream-listen`` naming a port another socket holds, or a host that does not
    resolve: exit status 1, exactly one stderr line naming the cause, no traceback."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        value = f"127.0.0.1:{port}" if how == "port-in-use" else "no-such-host.invalid:5"
        status, lines = await _node("--stream-listen", value)
    assert status == 1
    assert len(lines) == 1, lines
    assert lines[0].startswith("zlink-trio node: cannot run: ")
    assert "Traceback" not in lines[0]


@pytest.mark.process
@pytest.mark.parametrize("value", ["nonsense", "127.0.0.1:", "127.0.0.1:99999", "h:-1"])
async def test_a_malformed_stream_listen_is_a_configuration_error(value: str) -> None:
    """A malformed ``--stream-listen``: status 2, one stderr line, no traceback."""
    status, lines = await _node("--stream-listen", value)
    assert status == 2
    assert len(lines) == 1 and lines[0].startswith("zlink-trio node: "), lines
