"""zlink_trio.router_pg: PostgreSQL backends of the SessionRouter's four SPIs (spec 10 §4.1).

A sibling of :mod:`zlink_trio.router` (which imports nothing of the store): it runs on the
PostgreSQL Location Store's cancel-safe asyncpg bridge and keeps its tables in the same
schema, as migration 0004. See docs/router.md, "PostgreSQL".
"""

from ._db import RouterDatabase as RouterDatabase, open_router_database as open_router_database
from .bus import (
    NOTIFY_LIMIT as NOTIFY_LIMIT,
    PgSignalBusStatistics as PgSignalBusStatistics,
    PostgresSessionSignalBus as PostgresSessionSignalBus,
    channel_names as channel_names,
)
from .distributed import (
    PostgresSpis as PostgresSpis,
    open_distributed_router as open_distributed_router,
    open_postgres_spis as open_postgres_spis,
)
from .idempotency import PostgresIdempotencyStore as PostgresIdempotencyStore
from .inbox import PostgresSessionInbox as PostgresSessionInbox
from .sessions import (
    PostgresSessionLeaseStore as PostgresSessionLeaseStore,
    PostgresSessionRecordStore as PostgresSessionRecordStore,
)
