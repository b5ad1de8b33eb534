"""``zlink-trio cluster``: N local ``zlink-trio node`` processes sharing one store.

::

    zlink-trio cluster --app myproject/app.py:make_app -n 3 --pg-dsn postgresql://...
    zlink-trio cluster --app myproject/app.py:make_app -n 3 --private-pg
    zlink-trio cluster ... -- --lease-ttl 2 --drain-timeout 3    # more node flags

Each node runs as its own process (``python -m zlink_trio.cli node``) on mesh ``--mesh``
(``world``), ``127.0.0.1`` and a free port, with one cluster secret (``--secret-hex``, or a
fresh random one) and the same PostgreSQL store. ``--private-pg`` starts a throw-away
PostgreSQL cluster (``initdb`` of the machine's PostgreSQL, in a temporary directory,
removed at exit) instead of naming one. Every line a node prints (standard output and
error) is shown prefixed with its name (``node1 | ...``).

SIGINT or SIGTERM stops every node with SIGTERM (their clean drain) and waits for them
(``--stop-timeout``, 30 s; then SIGKILL). Exit status: 0 after a clean stop, 1 when a node
could not start or exited on its own, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import trio

from ..errors import ZLinkError

__all__ = ["add_cluster_parser", "private_postgres", "run"]

ANSI = {"red": 31, "green": 32, "yellow": 33, "blue": 34, "magenta": 35, "cyan": 36}
COLORS = ("cyan", "magenta", "green", "blue", "yellow", "red")


def add_cluster_parser(commands: Any) -> None:
    """Add the ``cluster`` command to the ``zlink-trio`` sub-command parsers."""
    cluster = commands.add_parser("cluster", help="run N local node processes on one store")
    cluster.add_argument("--app", required=True, metavar="MODULE:ATTR", help="the App to host")
    cluster.add_argument("-n", "--nodes", type=int, default=3, help="how many nodes (3)")
    cluster.add_argument("--mesh", default="world", help="the mesh every node joins (world)")
    cluster.add_argument("--secret-hex", help="cluster secret (default: a random one)")
    store = cluster.add_mutually_exclusive_group(required=True)
    store.add_argument("--pg-dsn", metavar="DSN", help="the shared PostgreSQL store")
    store.add_argument(
        "--private-pg", action="store_true", help="start a throw-away PostgreSQL for this run"
    )
    cluster.add_argument("--pg-schema", default="zlink", help="PostgreSQL schema (zlink)")
    cluster.add_argument("--stop-timeout", type=float, default=30.0, metavar="SECONDS")
    cluster.add_argument("node_args", nargs="*", help="more `zlink-trio node` flags after --")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _prepare_private_postgres() -> tuple[Path, Path, list[str]]:
    """PostgreSQL's bin directory, a fresh private root directory, and the command prefix
    that runs as the cluster's owner (``postgres`` when we are root: initdb refuses root)."""
    bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    initdb = str(bins[-1]) if bins else shutil.which("initdb")
    if initdb is None:
        raise RuntimeError("--private-pg needs PostgreSQL's initdb (apt-get install postgresql)")
    root = Path(tempfile.mkdtemp(prefix="zlink-cluster-pg."))
    as_user: list[str] = []
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
        root.chmod(0o755)
        shutil.chown(root, "postgres")
    return Path(initdb).parent, root, as_user


@asynccontextmanager
async def private_postgres(out: TextIO) -> AsyncIterator[str]:
    """A throw-away PostgreSQL cluster (``initdb`` + ``pg_ctl``) for the block; its DSN.

    Raises:
        RuntimeError: PostgreSQL's server binaries are not installed, or it did not start.
    """
    bin_dir, root, as_user = _prepare_private_postgres()
    data, sock, log = root / "data", root / "sock", root / "server.log"
    port = _free_port()
    try:
        for command in (
            [*as_user, "mkdir", "-m", "700", str(data)],
            [*as_user, "mkdir", "-m", "755", str(sock)],
            [*as_user, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres",
             "--auth=trust", "--encoding=UTF8"],
            [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-o",
             f"-h 127.0.0.1 -p {port} -k {sock} -c fsync=off", "start"],
        ):  # fmt: skip
            done = await trio.run_process(command, check=False, capture_stdout=True,
                                          capture_stderr=True, cwd="/")  # fmt: skip
            if done.returncode != 0:
                raise RuntimeError(f"private PostgreSQL: {command[len(as_user)]} failed: "
                                   f"{done.stderr.decode().strip()[-300:]}")  # fmt: skip
        dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        print(f"private PostgreSQL on 127.0.0.1:{port} ({dsn} for status and your own "
              "programs; removed at exit)", file=out, flush=True)  # fmt: skip
        yield dsn
    finally:
        with trio.CancelScope(shield=True):
            stop = [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]
            if (data / "postmaster.pid").exists():
                await trio.run_process(stop, check=False, capture_stdout=True,
                                       capture_stderr=True, cwd="/")  # fmt: skip
            shutil.rmtree(root, ignore_errors=True)


async def _pump(stream: Any, name: str, color: str, out: TextIO) -> None:
    buffer = b""
    async for chunk in stream:
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            _print(out, name, color, line.decode(errors="replace"))
    if buffer:
        _print(out, name, color, buffer.decode(errors="replace"))


def _print(out: TextIO, name: str, color: str, line: str) -> None:
    if out.isatty():
        print(f"\x1b[{ANSI[color]}m{name} |\x1b[0m {line}", file=out)
    else:
        print(f"{name} | {line}", file=out)
    out.flush()


def node_command(args: argparse.Namespace, dsn: str, secret: str) -> list[str]:
    return [
        sys.executable, "-m", "zlink_trio.cli", "node", "--app", args.app,
        "--mesh", args.mesh, "--listen", "127.0.0.1:0", "--secret-hex", secret,
        "--pg-dsn", dsn, "--pg-schema", args.pg_schema, "--pg-connections", "2", "--report-peers",
        *args.node_args,
    ]  # fmt: skip


async def _run_nodes(args: argparse.Namespace, dsn: str, out: TextIO) -> int:
    secret = args.secret_hex or secrets.token_hex(32)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    status = 0
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            processes: list[trio.Process] = []

            async def watch(process: trio.Process, name: str) -> None:
                nonlocal status
                code = await process.wait()
                if not stopping.is_set():
                    _print(out, "cluster", "red", f"{name} exited on its own (status {code})")
                    status = 1
                    stopping.set()

            stopping = trio.Event()
            for i in range(args.nodes):
                name, color = f"node{i + 1}", COLORS[i % len(COLORS)]
                process = await trio.lowlevel.open_process(
                    [*node_command(args, dsn, secret), "--node-name", name],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=env,
                    start_new_session=True,  # a terminal's Ctrl-C reaches the nodes through us
                )
                processes.append(process)
                nursery.start_soon(_pump, process.stdout, name, color, out)
                nursery.start_soon(_pump, process.stderr, name, color, out)
                nursery.start_soon(watch, process, name)
            _print(out, "cluster", "yellow", f"{args.nodes} nodes starting; Ctrl-C stops them")

            async def on_signal() -> None:
                async for _ in signals:
                    stopping.set()
                    return

            nursery.start_soon(on_signal)
            await stopping.wait()
            _print(out, "cluster", "yellow", "stopping every node (SIGTERM)")
            for process in processes:
                if process.returncode is None:
                    process.send_signal(signal.SIGTERM)
            with trio.move_on_after(args.stop_timeout) as waited:
                for process in processes:
                    await process.wait()
            if waited.cancelled_caught:
                _print(out, "cluster", "red", "a node did not stop in time: SIGKILL")
                for process in processes:
                    if process.returncode is None:
                        process.kill()
                status = 1
            for process in processes:
                await process.wait()
            nursery.cancel_scope.cancel()
    return status


async def _main(args: argparse.Namespace, out: TextIO) -> int:
    if args.private_pg:
        async with private_postgres(out) as dsn:
            return await _run_nodes(args, dsn, out)
    from ..store.postgres import migrate_schema

    await migrate_schema(args.pg_dsn, args.pg_schema)  # unreachable: one line, not one per node
    return await _run_nodes(args, args.pg_dsn, out)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """The ``cluster`` command."""
    out = out if out is not None else sys.stdout
    if args.nodes < 1:
        print("zlink-trio cluster: -n must be at least 1", file=sys.stderr)
        return 2
    try:
        return trio.run(_main, args, out)
    except (RuntimeError, OSError, ZLinkError) as exc:
        print(f"zlink-trio cluster: cannot run: {exc}", file=sys.stderr)
        return 1
