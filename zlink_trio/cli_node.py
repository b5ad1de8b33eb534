"""``zlink-trio node``: run one MeshNode lifecycle (one server) until SIGTERM/SIGINT.

::

    zlink-trio node --mesh world --mesh lobby=client --listen 127.0.0.1:7001 \\
        --secret-hex 00112233445566778899aabbccddeeff --pg-dsn postgresql://... --pg-schema zlink \\
        --app myproject.node:app

``--app MODULE:ATTR`` names the application the node hosts: an :class:`~zlink_trio.App`,
or a callable that takes no argument and returns one (imported once, before the node
starts). Without it the node hosts nothing (a transport-only node).

Flags override a JSON ``--config`` file whose keys are ServerConfig field names
(scalars), plus ``meshes`` (``["world", "lobby=client"]`` or objects with ``name`` and
``object_role``), ``listen`` (``HOST:PORT``), ``secret_hex``, ``pg_dsn``, ``pg_schema``,
``pg_connections``, ``stream_listen`` (``HOST:PORT``) and ``stream`` (an object of
:class:`~zlink_trio.config.StreamConfig` fields: ``host``, ``port``, ``bind_timeout``, ...).
Without ``--pg-dsn`` the node uses a private in-memory Location Store (a single-node demo:
processes cannot share one).

``--stream-listen HOST:PORT`` (key ``stream_listen``) opens the node's STREAM websocket
endpoint for client sessions there (port 0: a free port; it overrides ``host`` and ``port``
of a ``stream`` object); without either the node has none. The ready line then carries
``"stream_port"`` (the bound port), else ``null``.

Standard output carries one JSON object per line: ``{"event": "ready", "rid": ..., "generation":
..., "host": ..., "port": ..., "stream_port": ..., "entry_spot_ids": {mesh: id}}`` once the node is registered
and accepting; with ``--report-peers`` a ``{"event": "peer", "mesh", "rid", "state"}`` line
per peer state transition; ``{"event": "lease_lost", "reason"}`` when the owner lease is
lost (the node is fail-stopped: it exits with status 3 so a supervisor starts a new
lifecycle); ``{"event": "stopping"}`` when SIGTERM/SIGINT starts the drain, and
``{"event": "stopped", "status": ..., "released": n}`` after the exit (``released``: the
authority rows this lifecycle gave back at its stop). SIGTERM/SIGINT is a clean stop:
the drain of ``open_server`` (admission stops, accepted turns and creates/destroys in
progress finish until ``drain_timeout``, every row this lifecycle owns is released, then
the descriptor is removed); a second signal during the drain changes nothing (the drain
is bounded).
Exit status: 0 after SIGTERM/SIGINT, 1 when the node cannot start (Store unreachable,
listen address taken), 2 for a configuration error (``--app`` included), 3 after a lost
lease; every error is one ``zlink-trio node: ...`` line on standard error.
"""

from __future__ import annotations

import argparse
import errno
import json
import signal
import sys
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from .config import MeshConfig, ObjectRole, PostgresStoreConfig, ServerConfig, StreamConfig
from .errors import ConfigurationError, ZLinkError
from .mesh.api import PeerState
from .observe import FlowEvent

if TYPE_CHECKING:
    from .app import App

__all__ = [
    "EXIT_CONFIGURATION",
    "EXIT_LEASE_LOST",
    "EXIT_STARTUP_FAILED",
    "add_node_parser",
    "build_config",
    "load_app",
    "run",
]

EXIT_STARTUP_FAILED: Final = 1
EXIT_CONFIGURATION: Final = 2
EXIT_LEASE_LOST: Final = 3
RELEASED: Final = FlowEvent.RELEASED_AT_STOP

_FLAG_FIELDS: Final = {
    "node_name": "node_name",
    "advertise": "advertise_host",
    "lease_ttl": "owner_lease_ttl",
    "renew_interval": "owner_lease_renew_interval",
    "poll_interval": "descriptor_poll_interval",
    "hello_timeout": "hello_timeout",
    "drain_timeout": "drain_timeout",
}


def add_node_parser(commands: Any) -> None:
    """Add the ``node`` command to the ``zlink-trio`` sub-command parsers."""
    node = commands.add_parser("node", help="run one MeshNode until SIGTERM/SIGINT")
    node.add_argument("--config", type=Path, help="JSON file of settings (flags override)")
    node.add_argument("--mesh", action="append", metavar="NAME[=ROLE]", help="repeatable")
    node.add_argument("--listen", metavar="HOST:PORT")
    node.add_argument("--advertise", metavar="HOST", help="host peers dial (default: listen)")
    node.add_argument("--secret-hex", help="cluster secret, hex (at least 16 bytes)")
    node.add_argument("--pg-dsn", help="PostgreSQL Location Store DSN")
    node.add_argument("--pg-schema", help="PostgreSQL schema (default: zlink)")
    node.add_argument("--pg-connections", type=int)
    node.add_argument("--node-name")
    node.add_argument("--lease-ttl", type=float, metavar="SECONDS")
    node.add_argument("--renew-interval", type=float, metavar="SECONDS")
    node.add_argument("--poll-interval", type=float, metavar="SECONDS")
    node.add_argument("--hello-timeout", type=float, metavar="SECONDS")
    node.add_argument("--drain-timeout", type=float, metavar="SECONDS")
    node.add_argument(
        "--stream-listen", metavar="HOST:PORT", help="STREAM websocket endpoint (port 0: any)"
    )
    node.add_argument("--app", metavar="MODULE:ATTR", help="the App to host (or its factory)")
    node.add_argument("--report-peers", action="store_true", help="print peer transitions")
    add_product_flags(node)


def _mesh(spec: object) -> MeshConfig:
    if isinstance(spec, Mapping):
        if "name" not in spec or set(spec) - {"name", "object_role"}:
            raise ConfigurationError(f"mesh {spec!r}: expected keys name and object_role")
        name, role = spec["name"], spec.get("object_role", "server")
    elif isinstance(spec, str):
        name, _, role = spec.partition("=")
    else:
        raise ConfigurationError(f"mesh: expected NAME[=ROLE], got {spec!r}")
    try:
        object_role = ObjectRole(role or "server")
    except ValueError:
        raise ConfigurationError(f"mesh {spec!r}: role must be none, client or server") from None
    return MeshConfig(name=name, object_role=object_role)


def build_config(args: argparse.Namespace) -> ServerConfig:
    """The ServerConfig of a ``node`` command line (file, then flags).

    Raises:
        ConfigurationError: unreadable file, unknown key, bad value.
    """
    settings: dict[str, Any] = {}
    if args.config is not None:
        try:
            loaded = read_config_file(args.config)
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"--config {args.config}: {exc}") from None
        if not isinstance(loaded, dict):
            raise ConfigurationError("--config: expected a JSON object")
        settings.update(file_settings(args, loaded))
    if args.mesh:
        settings["meshes"] = list(args.mesh)
    flags = {
        "listen": args.listen,
        "secret_hex": args.secret_hex,
        "pg_dsn": args.pg_dsn,
        "pg_schema": args.pg_schema,
        "pg_connections": args.pg_connections,
        "stream_listen": args.stream_listen,
    }
    settings.update({key: value for key, value in flags.items() if value is not None})
    for flag, field in _FLAG_FIELDS.items():
        value = getattr(args, flag)
        if value is not None:
            settings[field] = value

    fields: dict[str, Any] = {}
    meshes = settings.pop("meshes", ())
    if not isinstance(meshes, list | tuple):
        raise ConfigurationError(f"meshes: expected a list, got {meshes!r}")
    fields["meshes"] = tuple(_mesh(m) for m in meshes)
    listen = settings.pop("listen", None)
    if listen is not None:
        fields["listen_host"], fields["listen_port"] = _host_port("listen", listen)
    stream = _stream(settings.pop("stream", None), settings.pop("stream_listen", None))
    if stream is not None:
        fields["stream"] = stream
    secret = settings.pop("secret_hex", None)
    if secret is not None:
        if not isinstance(secret, str):
            raise ConfigurationError(f"secret_hex: expected a hex string, got {secret!r}")
        try:
            fields["cluster_secret"] = bytes.fromhex(secret)
        except ValueError:
            raise ConfigurationError("secret_hex: not hex") from None
    dsn = settings.pop("pg_dsn", None)
    schema = settings.pop("pg_schema", None)
    connections = settings.pop("pg_connections", None)
    if dsn is not None:
        pg: dict[str, Any] = {"dsn": dsn}
        if schema is not None:
            pg["schema"] = schema
        if connections is not None:
            pg["connections"] = connections
        fields["location_store"] = PostgresStoreConfig(**pg)
    known = {f.name for f in attrs.fields(ServerConfig)} - {"meshes", "location_store", "router"}
    unknown = set(settings) - known
    if unknown:
        raise ConfigurationError(f"unknown settings: {', '.join(sorted(unknown))}")
    fields.update(settings)
    try:
        return ServerConfig(**fields)
    except TypeError as exc:
        raise ConfigurationError(str(exc)) from None


def _host_port(key: str, value: object) -> tuple[str, int]:
    host, sep, port = str(value).rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigurationError(f"{key}: expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


def _stream(spec: object, listen: object) -> StreamConfig | None:
    """The STREAM endpoint of a ``stream`` object and/or ``stream_listen`` (None: none)."""
    if spec is None and listen is None:
        return None
    fields: dict[str, Any] = {}
    if spec is not None:
        if not isinstance(spec, Mapping):
            raise ConfigurationError(f"stream: expected an object, got {spec!r}")
        known = {f.name for f in attrs.fields(StreamConfig)}
        unknown = set(spec) - known
        if unknown:
            raise ConfigurationError(f"unknown stream settings: {', '.join(sorted(unknown))}")
        fields.update(spec)
    if listen is not None:
        fields["host"], fields["port"] = _host_port("stream_listen", listen)
    try:
        return StreamConfig(**fields)
    except TypeError as exc:
        raise ConfigurationError(f"stream: {exc}") from None


def load_app(spec: str) -> App:
    """The App named by ``MODULE:ATTR``: an App, or a callable returning one.

    Raises:
        ConfigurationError: a malformed spec, a module or attribute that cannot be
            loaded, or something that is not an App.
    """
    from .app import App  # the application layer loads only when a node runs

    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"--app: expected MODULE:ATTR or FILE.py:ATTR, got {spec!r}")
    try:
        found: Any = getattr(import_app_module(module_name), attr)
    except ConfigurationError:
        raise
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"--app {spec}: {exc}") from None
    except Exception as exc:  # the application module itself failed (SyntaxError, ...)
        raise ConfigurationError(f"--app {spec}: importing it raised {exc!r}") from None
    if not isinstance(found, App) and callable(found):
        try:
            found = found()
        except ConfigurationError:
            raise
        except Exception as exc:
            raise ConfigurationError(f"--app {spec}: the factory raised {exc!r}") from None
    if not isinstance(found, App):
        raise ConfigurationError(f"--app {spec}: expected an App, got {type(found).__name__}")
    return found


def _emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


async def _report_peers(node: Any) -> None:
    known: dict[Any, PeerState] = {}
    while True:
        now = dict(node.peers())
        for address in set(known) | set(now):
            state = now.get(address, PeerState.GONE)
            if known.get(address, PeerState.GONE) is not state:
                _emit(
                    "peer", mesh=str(address.mesh_name), rid=address.node_rid.hex, state=state.value
                )
        known = {a: s for a, s in now.items() if s is not PeerState.GONE}
        await node.wait_peers_change()


async def serve(
    config: ServerConfig,
    *,
    report_peers: bool = False,
    app: App | None = None,
    metrics: tuple[str, int] | None = None,
) -> int:
    """Run the node until SIGTERM/SIGINT (0) or a lost lease (3)."""
    from .server import open_server, runtime_of  # the server stack loads only when a node runs

    status = 0
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with open_server(config, app) as server:
            node = runtime_of(server).node
            endpoint = server.endpoint
            metrics_listeners = await bind_metrics(metrics)
            _emit(
                "ready",
                rid=server.identity.node_rid.hex,
                generation=server.identity.node_generation.value,
                host=None if endpoint is None else endpoint.host,
                port=None if endpoint is None else endpoint.port,
                stream_port=None if config.stream is None else server.stream.port,
                entry_spot_ids={
                    str(m.name): node.entry_spot_id(m.name).value for m in config.meshes
                },
            )
            warn_loudly(config, app)
            async with trio.open_nursery() as nursery:

                async def lease_watch() -> None:
                    nonlocal status
                    lost = await server.wait_lease_lost()
                    _emit("lease_lost", reason=lost.reason)
                    status = EXIT_LEASE_LOST
                    nursery.cancel_scope.cancel()

                if report_peers:
                    nursery.start_soon(_report_peers, node)
                if metrics_listeners is not None:
                    await start_metrics(nursery, server, metrics_listeners)
                nursery.start_soon(lease_watch)
                async for _ in signals:
                    _emit("stopping")
                    break
                nursery.cancel_scope.cancel()
    _emit("stopped", status=status, released=runtime_of(server).flow.count(RELEASED))
    return status


def run(args: argparse.Namespace) -> int:
    """The ``node`` command."""
    try:
        config = build_config(args)
        app = None if args.app is None else load_app(args.app)
        if app is not None and not config.meshes:
            raise ConfigurationError(
                "--app needs --mesh NAME: the app's Actors and Spots live in a mesh, and "
                "every node of a cluster joins the same one (e.g. --mesh world)"
            )
    except ConfigurationError as exc:
        print(f"zlink-trio node: {exc.message}", file=sys.stderr)
        return EXIT_CONFIGURATION
    metrics = None
    try:
        metrics = metrics_address(args)
        return trio.run(
            lambda: serve(config, report_peers=args.report_peers, app=app, metrics=metrics)
        )
    except ConfigurationError as exc:
        print(f"zlink-trio node: {exc.message}", file=sys.stderr)
        return EXIT_CONFIGURATION
    except (ZLinkError, OSError) as exc:  # e.g. the Store is unreachable, the port is taken
        taken = _taken(exc, config, metrics)
        print(f"zlink-trio node: cannot run: {exc}{taken}", file=sys.stderr)
        return EXIT_STARTUP_FAILED


def _taken(exc: BaseException, config: ServerConfig, metrics: tuple[str, int] | None) -> str:
    """For a taken port: which addresses this node binds (the OS error names none)."""
    if not isinstance(exc, OSError) or exc.errno != errno.EADDRINUSE:
        return ""
    binds = [f"--listen {config.listen_host}:{config.listen_port}"]
    if config.stream is not None:
        binds.append(f"--stream-listen {config.stream.host}:{config.stream.port}")
    if metrics is not None:
        binds.append(f"--metrics-port {metrics[0]}:{metrics[1]}")
    return f" (this node binds {', '.join(binds)}; port 0 takes a free one)"


# --- the product face (issue 18): config file keys named like the flags, --app FILE.py,
# loud warnings. Kept below the original code so other edits of this file merge easily.

_COMMAND_KEYS: Final = ("app", "report_peers")
"""Config file keys that are command options, not ServerConfig fields."""


def add_product_flags(node: argparse.ArgumentParser) -> None:
    """Options of ``zlink-trio node`` added by the product face."""
    node.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics on http://127.0.0.1:PORT/metrics (the metrics extra)",
    )
    node.add_argument("--metrics-host", metavar="HOST", help="metrics bind host (127.0.0.1)")


def read_config_file(path: Path) -> object:
    """The settings of a ``--config`` file: TOML when its name ends in ``.toml``, else JSON."""
    text = path.read_text()
    if path.suffix == ".toml":
        import tomllib

        return tomllib.loads(text)
    return json.loads(text)


def file_settings(args: argparse.Namespace, loaded: Mapping[str, Any]) -> dict[str, Any]:
    """The ServerConfig settings of a config file, its keys named like the flags.

    A key is a flag's name without the dashes, ``-`` or ``_`` between words
    (``lease_ttl`` = ``--lease-ttl``, ``mesh`` = ``--mesh``); a ServerConfig field name is
    accepted too (every tunable, also those without a flag). The command options ``app``,
    ``report_peers``, ``metrics_port`` and ``metrics_host`` are set on ``args`` unless
    the command line gave them (flags override the file).
    """
    settings: dict[str, Any] = {}
    for raw_key, value in loaded.items():
        key = str(raw_key).replace("-", "_")
        if key in (*_COMMAND_KEYS, "metrics_port", "metrics_host"):
            if getattr(args, key, None) in (None, False):
                setattr(args, key, value)
            continue
        if key == "mesh":
            key = "meshes"
        if key == "config":
            raise ConfigurationError("--config: a config file cannot name another one")
        settings[_FLAG_FIELDS.get(key, key)] = value
    if args.app is not None and not isinstance(args.app, str):
        raise ConfigurationError(f"app: expected MODULE:ATTR, got {args.app!r}")
    return settings


def import_app_module(name: str) -> Any:
    """The module of an ``--app`` spec: a file (``path/to/file.py``: loaded under its stem,
    its directory first on ``sys.path`` so it can import its siblings) or an importable
    module name."""
    import importlib.util
    import os

    if not (name.endswith(".py") or "/" in name or os.sep in name):
        return importlib.import_module(name)
    path = Path(name).expanduser().resolve()
    if not path.is_file():
        raise ConfigurationError(f"--app {name}: no such file")
    module_name = path.stem
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ConfigurationError(f"--app {name}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def warn_loudly(config: ServerConfig, app: App | None) -> None:
    """One ``WARNING`` line on standard error per setting a newcomer would regret (once the
    node is ready: a node that cannot start prints only its one error line)."""
    from .config import MemoryStoreConfig

    def warn(text: str) -> None:
        print(f"zlink-trio node: WARNING: {text}", file=sys.stderr, flush=True)

    if not config.meshes:
        warn("no --mesh: this node joins no mesh, so no other node can reach it")
    if isinstance(config.location_store, MemoryStoreConfig) and config.meshes:
        warn(
            "no --pg-dsn: this node has a PRIVATE in-memory Location Store; nodes in other "
            "processes can never join it (give every node the same --pg-dsn)"
        )
    if app is None:
        warn("no --app: this node hosts no Actor or Spot type")


def metrics_address(args: argparse.Namespace) -> tuple[str, int] | None:
    """``(host, port)`` of ``--metrics-port`` (None without it).

    Raises:
        ConfigurationError: a bad port, or the ``metrics`` extra is not installed.
    """
    port = getattr(args, "metrics_port", None)
    if port is None:
        return None
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigurationError(f"--metrics-port: expected a port number, got {port!r}")
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ConfigurationError(
            "--metrics-port needs the metrics extra: pip install 'zlink-trio[metrics]'"
        ) from None
    return (args.metrics_host or "127.0.0.1", port)


async def bind_metrics(address: tuple[str, int] | None) -> list[trio.SocketListener] | None:
    """The metrics listeners, bound before the node reports ready (a taken port is the
    node's one startup error line)."""
    if address is None:
        return None
    return await trio.open_tcp_listeners(address[1], host=address[0])


async def start_metrics(
    nursery: trio.Nursery, server: Any, listeners: list[trio.SocketListener]
) -> None:
    from .metrics import serve_metrics

    endpoint = await nursery.start(partial(serve_metrics, server, listeners=listeners))
    _emit("metrics", url=f"http://{endpoint.host}:{endpoint.port}/metrics")
