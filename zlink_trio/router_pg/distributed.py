"""``DeploymentMode.DISTRIBUTED`` from a DSN: the four PostgreSQL SPIs in one call.

``async with open_postgres_spis(dsn, schema=...) as spis:`` opens the router's database
(one loop thread, ``connections`` dedicated connections, migrations applied) and yields
the backends; ``spis.apply(builder)`` returns the builder in DISTRIBUTED mode with every
SPI set (the idempotency store takes the builder config's three TTLs). Or, in one call,
``async with open_distributed_router(builder, dsn) as router:``. The builder still
validates: DISTRIBUTED without a node id fails at build (ConfigurationError).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import final

import attrs
import trio

from ..router.builder import SessionRouterBuilder, open_session_router
from ..router.idempotency import IdempotencyTtls
from ..router.router import SessionRouter
from ..router.values import DeploymentMode
from ._db import RouterDatabase, open_router_database
from .bus import PostgresSessionSignalBus
from .idempotency import PostgresIdempotencyStore
from .inbox import PostgresSessionInbox
from .sessions import PostgresSessionLeaseStore, PostgresSessionRecordStore

__all__ = ["PostgresSpis", "open_distributed_router", "open_postgres_spis"]


@final
@attrs.frozen
class PostgresSpis:
    """The router backends of one database (made by :func:`open_postgres_spis`)."""

    db: RouterDatabase
    records: PostgresSessionRecordStore
    leases: PostgresSessionLeaseStore
    inbox: PostgresSessionInbox
    bus: PostgresSessionSignalBus

    def idempotency(self, ttls: IdempotencyTtls | None = None) -> PostgresIdempotencyStore:
        return PostgresIdempotencyStore(self.db, ttls=ttls)

    def apply(self, builder: SessionRouterBuilder) -> SessionRouterBuilder:
        """``builder`` in DISTRIBUTED mode on these backends."""
        config = builder.config
        ttls = IdempotencyTtls(
            primary=config.idempotency_primary_ttl,
            secondary=config.idempotency_secondary_ttl,
            forward=config.idempotency_forward_ttl,
        )
        return attrs.evolve(
            builder,
            mode=DeploymentMode.DISTRIBUTED,
            record_store=self.records,
            lease_store=self.leases,
            inbox=self.inbox,
            signal_bus=self.bus,
            idempotency_store=self.idempotency(ttls),
        )


@asynccontextmanager
async def open_postgres_spis(
    dsn: str,
    *,
    schema: str = "zlink",
    connections: int = 4,
    listen: bool = True,
    keepalive: float = 5.0,
) -> AsyncIterator[PostgresSpis]:
    """Open the router's PostgreSQL backends for the block (``listen=False``: a bus that
    never hears, see :class:`PostgresSessionSignalBus`)."""
    async with (
        open_router_database(dsn, schema=schema, connections=connections) as db,
        trio.open_nursery() as nursery,
    ):
        bus = PostgresSessionSignalBus(db, listen=listen, keepalive=keepalive)
        await nursery.start(bus.serve)
        try:
            yield PostgresSpis(
                db=db,
                records=PostgresSessionRecordStore(db),
                leases=PostgresSessionLeaseStore(db),
                inbox=PostgresSessionInbox(db),
                bus=bus,
            )
        finally:
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def open_distributed_router(
    builder: SessionRouterBuilder,
    dsn: str,
    *,
    schema: str = "zlink",
    connections: int = 4,
    listen: bool = True,
) -> AsyncIterator[SessionRouter]:
    """Serve a DISTRIBUTED router on PostgreSQL for the block: ``builder`` needs its node
    id and its application; every SPI comes from ``dsn``."""
    async with (
        open_postgres_spis(dsn, schema=schema, connections=connections, listen=listen) as spis,
        open_session_router(spis.apply(builder)) as router,
    ):
        yield router
