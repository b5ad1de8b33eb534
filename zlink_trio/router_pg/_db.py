"""One PostgreSQL database shared by the four router backends, on the Location Store's bridge.

:func:`open_router_database` starts one asyncio loop thread (:mod:`zlink_trio.store._aiobridge`),
applies the packaged migrations (the router's tables are migration 0004, beside the
Location Store's, :mod:`zlink_trio.store._pgmigrate`), and opens ``connections`` dedicated
connections (:class:`~zlink_trio.store._pgconn.PgConnections`: the cancel-safe statement
path, reconnect and retry rules of the Location Store). Every backend method is ONE
statement through :meth:`RouterDatabase.call`.

Time: every TTL is computed by the database (``router_now()``, migration 0004). Values
that carry a time back to the router (lease and entry expiries, touch times) are
translated into the caller's Trio clock by one offset measured when the database opened
(``base = db_now - trio_now``): ``local = db_time - base``. The router only ever compares
them with its own local deadlines (``SessionStore.deadline`` takes the earlier one), so
the error of that measurement (one round trip) only makes it trust a lease a little less.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final, NoReturn, final

import trio

from ..errors import NotFound, Unavailable, ZLinkError
from ..router.errors import FencingRejected
from ..store._aiobridge import LoopThread
from ..store._pgadmin import open_schema_connections
from ..store._pgconn import Method, PgConnections
from ..store._pgmigrate import quote_schema

__all__ = ["RouterDatabase", "open_router_database"]

_TYPED: Final[dict[str, type[ZLinkError]]] = {"ZL101": FencingRejected, "ZL003": NotFound}


def raise_typed(exc: Exception) -> NoReturn:
    """A server-reported error as the router's typed errors (else Unavailable)."""
    sqlstate = getattr(exc, "sqlstate", None)
    message = getattr(exc, "message", str(exc))
    typed = _TYPED.get(sqlstate or "")
    if typed is not None:
        raise typed(message) from None
    raise Unavailable(f"PostgreSQL router backend error {sqlstate}: {message}") from exc


@final
class RouterDatabase:
    """The schema's connections and clock translation (made by :func:`open_router_database`)."""

    def __init__(self, conns: PgConnections, bridge: LoopThread, dsn: str, schema: str) -> None:
        self._conns = conns
        self.bridge: Final = bridge
        self.dsn: Final = dsn
        self.schema: Final = schema
        self.q: Final = quote_schema(schema)
        """The quoted schema name, for statements."""
        self._base = 0.0

    async def call(
        self, method: Method, sql: str, *args: object, idempotent: bool, mutation: bool = True
    ) -> Any:
        """Run one statement; server-reported errors become typed (module docstring)."""
        try:
            return await self._conns.call(
                method, sql, args, idempotent=idempotent, mutation=mutation
            )
        except ZLinkError:
            raise
        except Exception as exc:
            if hasattr(exc, "sqlstate"):
                raise_typed(exc)
            raise

    async def read(self, method: Method, sql: str, *args: object) -> Any:
        return await self.call(method, sql, *args, idempotent=True, mutation=False)

    # ----- the clock -----------------------------------------------------------------------
    def local(self, db_time: float) -> float:
        """A database time in this process's Trio clock."""
        return db_time - self._base

    def database_time(self, local_time: float) -> float:
        """A time in this process's Trio clock on the database clock (inverse of :meth:`local`)."""
        return local_time + self._base

    async def db_now(self) -> float:
        return float(await self.read("fetchval", f"SELECT {self.q}.router_now()"))

    async def measure_clock(self) -> None:
        """(Re)measure the offset between the database clock and Trio's."""
        sent = trio.current_time()
        now = await self.db_now()
        self._base = now - (sent + trio.current_time()) / 2

    async def freeze_clock_for_tests(self) -> None:
        """Test hook: stop the router's database clock at the caller's Trio time (so the
        offset is exactly 0); it then moves only by :meth:`advance_clock_for_tests`."""
        at = trio.current_time()
        await self.call(
            "execute", f"UPDATE {self.q}.router_clock SET frozen_at = $1", at, idempotent=True
        )
        self._base = 0.0

    async def advance_clock_for_tests(self, seconds: float) -> None:
        """Test hook: move a frozen router database clock by ``seconds``."""
        if not seconds >= 0:
            raise ValueError(f"seconds must be >= 0, got {seconds!r}")
        done = await self.call(
            "fetchval",
            f"UPDATE {self.q}.router_clock SET frozen_at = frozen_at + $1"
            " WHERE frozen_at IS NOT NULL RETURNING true",
            float(seconds),
            idempotent=False,
        )
        if not done:
            raise RuntimeError("the router's database clock is not frozen")


@asynccontextmanager
async def open_router_database(
    dsn: str,
    *,
    schema: str = "zlink",
    connections: int = 4,
    migrate: bool = True,
    cancel_grace: float = 2.0,
    retry_window: float = 5.0,
) -> AsyncIterator[RouterDatabase]:
    """Open the router's database for the block (arguments as for
    :func:`zlink_trio.store.postgres.open_postgres_store`). Raises Unavailable (no server)
    or ConfigurationError (bad schema name, schema not migrated with ``migrate=False``)."""
    async with open_schema_connections(
        dsn,
        schema,
        connections,
        migrate=migrate,
        cancel_grace=cancel_grace,
        retry_window=retry_window,
        thread_name=f"zlink-pg-router-{schema}",
    ) as (bridge, conns):
        db = RouterDatabase(conns, bridge, dsn, schema)
        await db.measure_clock()
        yield db


def utf8(value: str) -> bytes:
    return value.encode("utf-8")


def text_of(raw: bytes | None) -> str | None:
    return None if raw is None else bytes(raw).decode("utf-8")
