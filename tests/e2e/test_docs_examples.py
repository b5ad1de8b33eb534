"""The examples of docs/getting-started.md and docs/embedding.md run as written: each
``# file: NAME`` block is written to a fresh directory and run there as a user would."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.process]

DOCS = Path(__file__).parents[2] / "docs"
BLOCK = re.compile(r"```python\n# file: (\S+)\n(.*?)```", re.S)


def write_files(doc: str, where: Path) -> list[str]:
    names = []
    for name, body in BLOCK.findall((DOCS / doc).read_text()):
        (where / name).write_text(body)
        names.append(name)
    return names


def env() -> dict[str, str]:
    root = str(Path(__file__).parents[2])
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": root}


def test_getting_started_first_actor(tmp_path: Path) -> None:
    assert write_files("getting-started.md", tmp_path) == ["hello_app.py", "try_it.py"]
    assert "python try_it.py" in (DOCS / "getting-started.md").read_text()
    done = subprocess.run(
        [sys.executable, "try_it.py"], cwd=tmp_path, capture_output=True, text=True,
        timeout=60, env=env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first.startswith("hello world (#1, from pid ")
    assert second.startswith("hello again (#2, from pid ")


def test_embedding_server_health_and_sigterm(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client")
    assert write_files("embedding.md", tmp_path) == ["embedded_server.py"]
    with subprocess.Popen(
        [sys.executable, "embedded_server.py"], cwd=tmp_path, stdout=subprocess.PIPE,
        text=True, env=env(),
    ) as process:  # fmt: skip
        try:
            assert process.stdout is not None
            ready = json.loads(process.stdout.readline())
            assert ready["event"] == "ready"
            with urllib.request.urlopen(ready["health"], timeout=10) as response:
                assert response.status == 200 and response.read() == b"ok\n"
            with urllib.request.urlopen(ready["metrics"], timeout=10) as response:
                assert b"zlink_node_up 1.0" in response.read()
            process.send_signal(signal.SIGTERM)
            rest = [json.loads(line) for line in process.stdout]
            assert process.wait(timeout=30) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert [line["event"] for line in rest] == ["stopping", "stopped"]
    assert rest[0]["signal"] == signal.SIGTERM
