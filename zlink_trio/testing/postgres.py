"""A private, throwaway PostgreSQL cluster for fault tests (restart the database under a
running store without touching any shared server).

``async with open_private_postgres() as pg:`` runs ``initdb`` into a temporary folder,
starts the server on a free loopback port with ``pg_ctl`` and yields a
:class:`PrivatePostgres` (``dsn``, ``stop()``, ``start()``, ``restart()``); on exit the
server is stopped and the folder removed. Run as root, every server command runs as the
``postgres`` user through ``runuser`` (initdb refuses root). Binaries are looked up in
``ZLINK_PG_BINDIR``, then ``/usr/lib/postgresql/*/bin``, then ``PATH``;
:class:`PostgresNotInstalled` is raised when there are none, so a test can skip.

The server trades durability for speed (``fsync=off``): it exists for one test.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import final

import trio

__all__ = [
    "PostgresNotInstalled",
    "PrivatePostgres",
    "find_postgres_bindir",
    "open_private_postgres",
]


class PostgresNotInstalled(RuntimeError):
    """No PostgreSQL server binaries (initdb, pg_ctl) were found."""


def find_postgres_bindir() -> Path:
    candidates = [os.environ.get("ZLINK_PG_BINDIR", "")]
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(str(Path(initdb).parent))
    for candidate in candidates:
        if (
            candidate
            and (Path(candidate) / "initdb").exists()
            and (Path(candidate) / "pg_ctl").exists()
        ):
            return Path(candidate)
    raise PostgresNotInstalled("no initdb/pg_ctl found (set ZLINK_PG_BINDIR)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@final
class PrivatePostgres:
    """One private cluster, owned by :func:`open_private_postgres`."""

    def __init__(self, bindir: Path, root: Path, port: int) -> None:
        self.bindir = bindir
        self.root = root
        self.data_dir = root / "data"
        self.port = port
        self.dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        self.running = False

    def _command(self, tool: str, *args: str) -> list[str]:
        command = [str(self.bindir / tool), *args]
        if os.geteuid() == 0:
            return ["runuser", "-u", "postgres", "--", *command]
        return command

    async def _run(self, tool: str, *args: str) -> None:
        result = await trio.run_process(
            self._command(tool, *args), capture_stdout=True, capture_stderr=True, check=False
        )
        if result.returncode != 0:
            output = (result.stdout + result.stderr).decode(errors="replace")
            raise RuntimeError(f"{tool} failed ({result.returncode}): {output}")

    async def _initdb(self) -> None:
        self.data_dir.mkdir(mode=0o700)
        if os.geteuid() == 0:
            for path in (self.root, self.data_dir):
                shutil.chown(path, "postgres", "postgres")
        await self._run(
            "initdb",
            *("-D", str(self.data_dir), "-U", "postgres", "--auth=trust"),
            *("--encoding=UTF8", "--locale=C.UTF-8", "--no-sync"),
        )

    async def start(self) -> None:
        """Start the server (same port, same data) and wait until it accepts connections."""
        options = (
            f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off"
            " -c synchronous_commit=off -c full_page_writes=off -c max_connections=40"
        )
        # Marked running before pg_ctl returns: a start that is cancelled or fails once
        # the postmaster was spawned still leaves a server for stop() to shut down.
        self.running = True
        await self._run(
            "pg_ctl",
            *("-D", str(self.data_dir), "-l", str(self.root / "server.log")),
            *("-w", "-t", "60", "-o", options, "start"),
        )

    async def stop(self) -> None:
        """Fast shutdown: clients are disconnected, the server is down when this returns."""
        if self.running:
            await self._run("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop")
            self.running = False

    async def _shutdown(self) -> None:
        """Cleanup: stop whatever server runs on the data folder (a start or stop that
        was cancelled half-way included); never leaves a postmaster behind."""
        pid_file = self.data_dir / "postmaster.pid"
        if not (self.running or pid_file.exists()):
            return
        try:
            await self._run("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop")
        except RuntimeError:
            if not pid_file.exists():  # nothing was running (a start that failed early)
                self.running = False
                return
            await self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
        self.running = False

    async def restart(self) -> None:
        await self.stop()
        await self.start()


@asynccontextmanager
async def open_private_postgres() -> AsyncIterator[PrivatePostgres]:
    """Start a throwaway cluster for the body of the block; stop and delete it on exit."""
    bindir = find_postgres_bindir()
    root = Path(tempfile.mkdtemp(prefix="zlink-pg-"))
    pg = PrivatePostgres(bindir, root, _free_port())
    try:
        await pg._initdb()
        await pg.start()
        yield pg
    finally:
        with trio.CancelScope(shield=True):
            try:
                await pg._shutdown()
            finally:
                await trio.to_thread.run_sync(shutil.rmtree, root, True)
