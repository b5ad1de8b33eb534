"""The examples of docs/getting-started.md and docs/embedding.md run as written: each
``# file: NAME`` block is written to a fresh directory and run there as a user would; the
examples of docs/api.md run in order as one session (its fragments are checked)."""

from __future__ import annotations

import ast
import builtins
import inspect
import json
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import types
import urllib.request
from pathlib import Path

import pytest
import trio

from zlink_trio.store.postgres import drop_schema

pytestmark = [pytest.mark.e2e, pytest.mark.process]

DOCS = Path(__file__).parents[2] / "docs"
BLOCK = re.compile(r"```python\n# file: (\S+)\n(.*?)```", re.S)


def write_files(doc: str, where: Path) -> list[str]:
    names = []
    for name, body in BLOCK.findall((DOCS / doc).read_text()):
        (where / name).write_text(body)
        names.append(name)
    return names


def sh_command(doc: str, starts: str) -> list[str]:
    """The words of the ``sh`` block line of ``doc`` that starts with ``starts`` (with its
    ``\\`` continuation lines)."""
    for block in re.findall(r"```sh\n(.*?)```", (DOCS / doc).read_text(), re.S):
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            if line.startswith(starts):
                return shlex.split(line)
    raise AssertionError(f"{doc} has no command starting {starts!r}")


DOC_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def env() -> dict[str, str]:
    root = str(Path(__file__).parents[2])
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": root}


def test_getting_started_first_actor(tmp_path: Path) -> None:
    assert write_files("getting-started.md", tmp_path) == [
        "hello_app.py",
        "try_it.py",
        "call_it.py",
    ]
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


@pytest.mark.postgres
def test_getting_started_two_nodes_call_each_other(tmp_path: Path, pg_dsn: str) -> None:
    """Step 3 as written: the `zlink-trio cluster` command of the page hosts hello_app.py on
    two node processes; call_it.py creates Actors until both nodes host one and one calls
    the other; the page's `zlink-trio status` shows both nodes and the Actors. Only the DSN
    (the test's server) and a private schema are changed."""
    write_files("getting-started.md", tmp_path)
    schema = f"zlink_docs_{secrets.token_hex(4)}"
    call_it = (tmp_path / "call_it.py").read_text()
    assert f'DSN = "{DOC_DSN}"' in call_it and "PostgresStoreConfig(dsn=DSN)" in call_it
    (tmp_path / "call_it.py").write_text(
        call_it.replace(DOC_DSN, pg_dsn).replace(
            "PostgresStoreConfig(dsn=DSN)", f"PostgresStoreConfig(dsn=DSN, schema={schema!r})"
        )
    )
    words = sh_command("getting-started.md", "zlink-trio cluster")
    assert DOC_DSN in words
    cluster = [pg_dsn if w == DOC_DSN else w for w in words[1:]] + ["--pg-schema", schema]
    command = [sys.executable, "-m", "zlink_trio.cli", *cluster]
    with subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=env(),
    ) as process:  # fmt: skip
        try:
            assert process.stdout is not None
            ready: set[str] = set()
            for line in process.stdout:  # bounded by the test timeout
                if '"event": "ready"' in line:
                    ready.add(line.split(" | ")[0])
                if len(ready) == 2:
                    break
            assert ready == {"node1", "node2"}
            called = subprocess.run(
                [sys.executable, "call_it.py"], cwd=tmp_path, capture_output=True, text=True,
                timeout=120, env=env(),
            )  # fmt: skip
            assert called.returncode == 0, called.stderr
            placed, hello, relay = called.stdout.splitlines()
            found = re.fullmatch(r"user0 lives on node (\w+), (user\d+) on node (\w+)", placed)
            assert found is not None and found.group(1) != found.group(3), placed
            assert hello.startswith("hello world (#1, from pid ")
            assert relay.startswith(f"{found.group(2)} called user0: hello a friend (#2, from pid ")
            status_words = sh_command("getting-started.md", "zlink-trio status")
            status = [pg_dsn if w == DOC_DSN else w for w in status_words[1:]]
            shown = subprocess.run(
                [sys.executable, "-m", "zlink_trio.cli", *status, "--pg-schema", schema, "--json"],
                capture_output=True, text=True, timeout=60, env=env(),
            )  # fmt: skip
            assert shown.returncode == 0, shown.stderr
            nodes = json.loads(shown.stdout)["nodes"]
            assert len(nodes) == 2 and all(n["actor_types"] == ["greeter"] for n in nodes)
            hosted = {a for n in nodes for a in n["ids"]["actor"]}
            assert {"user0", found.group(2)} <= hosted
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=60) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            trio.run(drop_schema, pg_dsn, schema)


API_BLOCK = re.compile(r"```python\n(.*?)```", re.S)
FRAGMENT = re.compile(r"# fragment: (.*) (?:is|are) the caller's\.?\n")
"""A fragment's first line: ``# fragment: server, other_server are the caller's`` names what
it takes from a running program; a fragment is checked (it compiles, every other name it
uses is defined by the blocks before it) but not run."""


def free_names(tree: ast.AST) -> set[str]:
    """Names a block reads that it never binds (imports, assignments, defs, parameters)."""
    bound: set[str] = set()
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return read - bound


def test_every_api_md_example_runs_or_is_a_checked_fragment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/api.md's examples run in order as one session (later blocks use what earlier
    ones defined, like a reader does; a block with a top-level ``await`` or ``async with``
    runs in its own ``trio.run``). A fragment names what it takes from a running program on
    its first line; every other name it uses must be defined by the blocks before it."""
    pytest.importorskip("prometheus_client")
    namespace: dict[str, object] = {"__name__": "api_md"}
    ran = fragments = 0
    for i, block in enumerate(API_BLOCK.findall((DOCS / "api.md").read_text())):
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        tree = compile(block, f"docs/api.md block {i}", "exec", ast.PyCF_ONLY_AST | flags)
        declared = FRAGMENT.match(block)
        unknown = free_names(tree) - set(namespace) - set(dir(builtins))
        if declared:
            unknown -= {name.strip() for name in declared.group(1).split(",")}
            assert not unknown, f"block {i} uses undefined {sorted(unknown)}"
            fragments += 1
            continue
        assert not unknown, f"block {i} uses undefined {sorted(unknown)}"
        code = compile(tree, f"docs/api.md block {i}", "exec", flags)
        if code.co_flags & inspect.CO_COROUTINE:

            async def run_block(code: types.CodeType = code) -> None:
                await eval(code, namespace)

            trio.run(run_block)
        else:
            exec(code, namespace)
        ran += 1
    assert ran >= 6 and fragments <= 3, (ran, fragments)
    assert "b'10'" in capsys.readouterr().out  # the first example's main() printed the score
