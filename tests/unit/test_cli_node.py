"""`zlink-trio node`: flags and a JSON file become one ServerConfig."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from zlink_trio.cli import build_parser, main
from zlink_trio.cli_node import EXIT_CONFIGURATION, EXIT_STARTUP_FAILED, build_config
from zlink_trio.config import ObjectRole, PostgresStoreConfig

SECRET = "00112233445566778899aabbccddeeff"


def parse(*argv: str) -> object:
    return build_config(build_parser().parse_args(["node", *argv]))


def test_flags() -> None:
    config = parse(
        "--mesh", "world", "--mesh", "lobby=client", "--listen", "0.0.0.0:7001",
        "--advertise", "10.0.0.5", "--secret-hex", SECRET, "--pg-dsn", "postgresql://x/y",
        "--pg-schema", "s1", "--node-name", "edge", "--lease-ttl", "2", "--renew-interval",
        "0.5", "--poll-interval", "0.2",
    )  # fmt: skip
    assert [(str(m.name), m.object_role) for m in config.meshes] == [  # type: ignore[attr-defined]
        ("world", ObjectRole.SERVER),
        ("lobby", ObjectRole.CLIENT),
    ]
    assert config.listen_host == "0.0.0.0" and config.listen_port == 7001  # type: ignore[attr-defined]
    assert config.advertise_host == "10.0.0.5"  # type: ignore[attr-defined]
    assert config.cluster_secret == bytes.fromhex(SECRET)  # type: ignore[attr-defined]
    assert config.location_store == PostgresStoreConfig(dsn="postgresql://x/y", schema="s1")  # type: ignore[attr-defined]
    assert config.owner_lease_ttl == 2.0  # type: ignore[attr-defined]
    assert config.descriptor_poll_interval == 0.2  # type: ignore[attr-defined]


def test_json_file_with_flags_overriding(tmp_path: Path) -> None:
    path = tmp_path / "node.json"
    path.write_text(
        json.dumps(
            {
                "meshes": [{"name": "world", "object_role": "client"}],
                "listen": "127.0.0.1:0",
                "secret_hex": SECRET,
                "node_name": "from-file",
                "peer_send_queue": 16,
            }
        )
    )
    config = parse("--config", str(path), "--node-name", "from-flag")
    assert config.node_name == "from-flag"  # type: ignore[attr-defined]
    assert config.peer_send_queue == 16  # type: ignore[attr-defined]
    assert config.meshes[0].object_role is ObjectRole.CLIENT  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "argv",
    [
        ["--mesh", "world"],  # no secret
        ["--mesh", "world=boss", "--secret-hex", SECRET],
        ["--listen", "nope"],
        ["--secret-hex", "zz"],
    ],
)
def test_configuration_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["node", *argv]) == EXIT_CONFIGURATION
    assert "zlink-trio node:" in capsys.readouterr().err


def test_unknown_file_keys_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "node.json"
    path.write_text(json.dumps({"no_such_setting": 1}))
    assert main(["node", "--config", str(path)]) == EXIT_CONFIGURATION


@pytest.mark.parametrize(
    "settings",
    [
        {"meshes": [{"object_role": "client"}], "secret_hex": SECRET},  # no name
        {"meshes": [{"name": "world", "object_role": "boss"}], "secret_hex": SECRET},
        {"meshes": "world", "secret_hex": SECRET},  # not a list
        {"meshes": ["world"], "secret_hex": 5},
        {"listen_port": "80"},
        {"node_name": 5},
    ],
)
def test_bad_file_values_exit_2_with_one_line(
    settings: dict[str, object], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "node.json"
    path.write_text(json.dumps(settings))
    assert main(["node", "--config", str(path)]) == EXIT_CONFIGURATION
    err = capsys.readouterr().err
    assert err.startswith("zlink-trio node: ") and err.count("\n") == 1, err


def test_a_startup_failure_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    # the listen port is taken: the node cannot start; a clean error, not a traceback
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["node", "--mesh", "world", "--secret-hex", SECRET, "--listen", f"127.0.0.1:{port}"]
        assert main(argv) == EXIT_STARTUP_FAILED
    captured = capsys.readouterr()
    assert captured.err.startswith("zlink-trio node: ") and captured.err.count("\n") == 1
    assert "Traceback" not in captured.err and captured.out == ""


def test_an_unusable_listen_host_is_one_line_and_exit_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # a listen host the resolver refuses (a label over 63 characters: idna raises
    # UnicodeError, a ValueError): the node cannot start; a clean error, not a traceback
    host = "a" * 70 + ".example"
    argv = ["node", "--mesh", "world", "--secret-hex", SECRET, "--listen", f"{host}:0"]
    assert main(argv) == EXIT_STARTUP_FAILED
    captured = capsys.readouterr()
    assert captured.err.startswith("zlink-trio node: ") and captured.err.count("\n") == 1
    assert "Traceback" not in captured.err and captured.out == ""


def test_app_is_an_app_or_a_factory_of_one() -> None:
    from zlink_trio import App
    from zlink_trio.cli_node import load_app

    assert isinstance(load_app("zlink_trio:App"), App)  # a callable returning an App
    assert parse("--app", "zlink_trio:App", "--drain-timeout", "3").drain_timeout == 3.0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "spec",
    [
        "no-colon",
        ":app",
        "zlink_trio:",
        "no_such_module_xyz:app",
        "zlink_trio:no_such",
        "json:dumps",
    ],
)
def test_a_bad_app_exits_2_with_one_line(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--app`` must name an App (or a callable returning one): anything else is one
    configuration error line and exit 2, before the node starts."""
    assert main(["node", "--app", spec]) == EXIT_CONFIGURATION
    err = capsys.readouterr().err
    assert err.startswith("zlink-trio node: --app") and err.count("\n") == 1, err


def test_stream_endpoint_from_a_flag_or_the_file(tmp_path: Path) -> None:
    """``--stream-listen HOST:PORT`` (file key ``stream_listen``) opens the STREAM
    endpoint; a ``stream`` object in the file sets StreamConfig fields; the flag
    overrides the file's host and port; without either there is none."""
    from zlink_trio.config import StreamConfig

    assert parse("--secret-hex", SECRET).stream is None  # type: ignore[attr-defined]
    config = parse("--stream-listen", "0.0.0.0:7443")
    assert config.stream == StreamConfig(host="0.0.0.0", port=7443)  # type: ignore[attr-defined]
    path = tmp_path / "node.json"
    path.write_text(json.dumps({"stream": {"host": "10.0.0.1", "port": 9000, "bind_timeout": 3}}))
    from_file = parse("--config", str(path))
    assert from_file.stream == StreamConfig(host="10.0.0.1", port=9000, bind_timeout=3)  # type: ignore[attr-defined]
    both = parse("--config", str(path), "--stream-listen", "127.0.0.1:0")
    assert both.stream == StreamConfig(host="127.0.0.1", port=0, bind_timeout=3)  # type: ignore[attr-defined]
    path.write_text(json.dumps({"stream_listen": "127.0.0.1:7444"}))
    assert parse("--config", str(path)).stream == StreamConfig(port=7444)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "settings",
    [
        {"stream": {"port": 1, "colour": "red"}},
        {"stream": "127.0.0.1:1"},
        {"stream_listen": "no-port"},
        {"stream": {"port": 70000}},
    ],
)
def test_bad_stream_settings_are_configuration_errors(
    tmp_path: Path, settings: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "node.json"
    path.write_text(json.dumps(settings))
    assert main(["node", "--config", str(path)]) == EXIT_CONFIGURATION
    assert capsys.readouterr().err.startswith("zlink-trio node: ")
