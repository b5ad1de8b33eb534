"""`zlink-trio node`'s product face: config keys named like the flags (JSON or TOML),
`--app FILE.py:ATTR`, one-line command-line errors, loud warnings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zlink_trio.cli import build_parser, main
from zlink_trio.cli_node import EXIT_CONFIGURATION, build_config, load_app

SECRET = "00112233445566778899aabbccddeeff"

APP_FILE = """
from zlink_trio import App, RecreateOnRelocation, on_request
from helper_mod import NAME  # a sibling module of this file


class Thing:
    def __init__(self, context):
        self.context = context

    @on_request("ping")
    async def ping(self, payload: bytes) -> bytes:
        return payload


def factory() -> App:
    app = App()
    app.enable_actor_dispatch()
    app.register_actor(NAME, Thing, relocation=RecreateOnRelocation())
    return app
"""


def test_file_keys_are_the_flag_names(tmp_path: Path) -> None:
    path = tmp_path / "node.json"
    path.write_text(
        json.dumps(
            {
                "mesh": ["world", "lobby=client"],
                "secret-hex": SECRET,
                "lease-ttl": 4,
                "renew_interval": 1,
                "advertise": "10.0.0.9",
                "drain_timeout": 2,
                "report-peers": True,
                "app": "zlink_trio:App",
                "lane_capacity": 7,  # a ServerConfig field without a flag
            }
        )
    )
    args = build_parser().parse_args(["node", "--config", str(path), "--lease-ttl", "5"])
    config = build_config(args)
    assert [str(m.name) for m in config.meshes] == ["world", "lobby"]
    assert config.owner_lease_ttl == 5.0  # the flag overrides the file
    assert config.owner_lease_renew_interval == 1.0
    assert config.advertise_host == "10.0.0.9" and config.drain_timeout == 2.0
    assert config.lane_capacity == 7
    assert args.report_peers is True and args.app == "zlink_trio:App"


def test_a_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(f'mesh = ["world"]\nsecret_hex = "{SECRET}"\nnode_name = "edge"\n')
    config = build_config(build_parser().parse_args(["node", "--config", str(path)]))
    assert config.node_name == "edge" and [str(m.name) for m in config.meshes] == ["world"]


def test_app_from_a_file_outside_the_package(tmp_path: Path) -> None:
    (tmp_path / "my_app_file.py").write_text(APP_FILE)
    (tmp_path / "helper_mod.py").write_text('NAME = "thing"\n')
    app = load_app(f"{tmp_path / 'my_app_file.py'}:factory")
    assert {str(t) for t in app.validate().hosted_actor_types} == {"thing"}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("def factory(:\n", "SyntaxError"),
        ("raise RuntimeError('boom')\n", "boom"),
        ("x = 1\n", "has no attribute 'factory'"),
    ],
)
def test_a_broken_app_file_is_one_line(
    content: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "broken_app.py"
    path.write_text(content)
    assert main(["node", "--app", f"{path}:factory"]) == EXIT_CONFIGURATION
    err = capsys.readouterr().err
    assert err.startswith("zlink-trio node: --app") and err.count("\n") == 1, err
    assert expected in err


@pytest.mark.parametrize(
    "argv", [["node", "--bogus"], ["node", "--lease-ttl", "abc"], ["status"], ["nosuch"]]
)
def test_a_command_line_mistake_is_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err and "--help" in err, err


def test_a_node_without_a_shared_store_says_so(tmp_path: Path) -> None:
    """Started for real, SIGINT once ready: the private-store warning is on stderr and the
    stop is clean (exit 0)."""
    command = [
        sys.executable, "-m", "zlink_trio.cli", "node", "--mesh", "world",
        "--secret-hex", SECRET, "--listen", "127.0.0.1:0",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    ) as process:
        assert process.stdout is not None
        ready = json.loads(process.stdout.readline())
        assert ready["event"] == "ready"
        process.send_signal(2)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0
    assert "WARNING: no --pg-dsn" in err and "PRIVATE in-memory" in err
    assert "WARNING: no --app" in err
    assert [json.loads(line)["event"] for line in out.splitlines()] == ["stopping", "stopped"]


def test_metrics_port_serves_prometheus_text() -> None:
    pytest.importorskip("prometheus_client")
    import urllib.request

    command = [
        sys.executable, "-m", "zlink_trio.cli", "node", "--mesh", "world",
        "--secret-hex", SECRET, "--listen", "127.0.0.1:0", "--metrics-port", "0",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    ) as process:
        assert process.stdout is not None
        assert json.loads(process.stdout.readline())["event"] == "ready"
        metrics = json.loads(process.stdout.readline())
        assert metrics["event"] == "metrics"
        with urllib.request.urlopen(metrics["url"], timeout=10) as response:
            text = response.read().decode()
        process.send_signal(2)
        process.communicate(timeout=30)
    assert process.returncode == 0
    assert "zlink_node_up 1.0" in text and 'zlink_peers{state="admitted"} 0.0' in text


def test_a_taken_metrics_port_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("prometheus_client")
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["node", "--mesh", "world", "--secret-hex", SECRET, "--metrics-port", str(port)]
        assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith("zlink-trio node: cannot run") and captured.err.count("\n") == 1
    assert "Traceback" not in captured.err
