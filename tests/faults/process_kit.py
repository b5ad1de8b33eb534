"""What the process fault tests share: a child process that prints JSON lines, and a
throw-away PostgreSQL schema."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from zlink_trio.store.api import LocationStore
from zlink_trio.store.postgres import drop_schema, open_postgres_store


class JsonLinesProcess:
    """A child process and the JSON lines it printed (``pump`` reads them; run it in a
    nursery for the process's life)."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.lines: list[dict[str, Any]] = []
        self._buffer = b""
        self._changed = trio.Event()

    async def pump(self) -> None:
        assert self.process.stdout is not None
        async for chunk in self.process.stdout:
            self._buffer += chunk
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                self.lines.append(json.loads(line))
                self._wake()
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, trio.Event()
        changed.set()

    def _matching(self, match: dict[str, Any]) -> dict[str, Any] | None:
        for line in self.lines:
            if all(line.get(k) == v for k, v in match.items()):
                return line
        return None

    async def wait_line(self, **match: Any) -> dict[str, Any]:
        """The first line with these fields; AssertionError once the process exited
        without printing one."""
        while True:
            found = self._matching(match)
            if found is not None:
                return found
            if self.process.returncode is not None and not self._buffer:
                await trio.lowlevel.checkpoint()
                found = self._matching(match)
                if found is not None:
                    return found
                raise AssertionError(f"the process exited without printing {match}: {self.lines}")
            await self._changed.wait()


@asynccontextmanager
async def pg_schema(
    dsn: str, prefix: str, *, connections: int = 4
) -> AsyncIterator[tuple[str, LocationStore]]:
    """A fresh schema (``<prefix>_<random>``) and a store on it; dropped afterwards."""
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    try:
        async with open_postgres_store(dsn, schema=schema, connections=connections) as store:
            yield schema, store
    finally:
        with trio.CancelScope(shield=True):
            await drop_schema(dsn, schema)
