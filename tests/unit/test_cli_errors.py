"""A command that cannot run says why in one line on stderr and exits non-zero: a taken
port, an unreachable store, an unknown flag of a subcommand (never a traceback)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from zlink_trio.cli import main

SECRET = "00112233445566778899aabbccddeeff"
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/test"
"""Port 1 on loopback: nothing listens there, so a connect is refused at once."""


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield int(taken.getsockname()[1])


def one_line(err: str, prefix: str) -> None:
    assert err.startswith(prefix) and err.count("\n") == 1, err
    assert "Traceback" not in err


def test_demo_with_a_taken_web_port(taken_port: int, capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--web-port", str(taken_port), "--duration", "1"]) == 1
    err = capfd.readouterr().err
    one_line(err, "zlink-trio demo: cannot run: ")
    assert f"--web-port {taken_port}: cannot listen on 127.0.0.1:{taken_port}" in err


def test_demo_on_an_unreachable_store(capfd: pytest.CaptureFixture[str]) -> None:
    """The store is checked before any node process starts (no line per node)."""
    assert main(["demo", "--store", UNREACHABLE, "--duration", "1"]) == 1
    captured = capfd.readouterr()
    one_line(captured.err, "zlink-trio demo: cannot run: ")
    assert "did not start" not in captured.out


def test_node_on_a_taken_port_names_it(taken_port: int, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "node",
        "--mesh",
        "world",
        "--secret-hex",
        SECRET,
        "--listen",
        f"127.0.0.1:{taken_port}",
    ]
    assert main(argv) == 1
    err = capsys.readouterr().err
    one_line(err, "zlink-trio node: cannot run: ")
    assert f"127.0.0.1:{taken_port}" in err


def test_node_with_an_app_but_no_mesh_says_which_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """(It said "Actor dispatch needs an Object Client or Server role in at least one mesh".)"""
    app = tmp_path / "hello_app.py"
    app.write_text(
        "from zlink_trio import App\n\ndef make_app():\n"
        "    app = App()\n    app.enable_actor_dispatch()\n    return app\n"
    )
    assert main(["node", "--app", f"{app}:make_app", "--secret-hex", SECRET]) == 2
    err = capsys.readouterr().err
    one_line(err, "zlink-trio node: --app needs --mesh NAME")


def test_node_on_an_unreachable_store(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["node", "--mesh", "world", "--secret-hex", SECRET, "--pg-dsn", UNREACHABLE]
    assert main(argv) == 1
    one_line(capsys.readouterr().err, "zlink-trio node: cannot run: ")


def test_cluster_on_an_unreachable_store(capfd: pytest.CaptureFixture[str]) -> None:
    """Checked before any node process starts (not one failure line per node)."""
    assert main(["cluster", "--app", "m:f", "-n", "2", "--pg-dsn", UNREACHABLE]) == 1
    captured = capfd.readouterr()
    one_line(captured.err, "zlink-trio cluster: cannot run: ")
    assert "node1" not in captured.out + captured.err


@pytest.mark.parametrize(
    ("command", "required"),
    [
        ("node", []),
        ("demo", []),
        ("status", ["--store", UNREACHABLE]),
        ("cluster", ["--app", "m:f", "--private-pg"]),
        ("bench", []),
        ("client", ["ws://127.0.0.1:1/"]),
    ],
)
def test_an_unknown_flag_names_its_subcommand(
    command: str, required: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, *required, "--bogus"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    one_line(err, f"zlink-trio {command}: error: ")
    assert "--bogus" in err and f"(see zlink-trio {command} --help)" in err
