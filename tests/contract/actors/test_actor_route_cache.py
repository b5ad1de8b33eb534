"""A04-17, route cache part: a Store recovery event invalidates the positive route cache
(spec 04 §5.1), on both stores.

The recovery event is the store's ``recovery_epoch`` moving: on the memory store through
its ``_simulate_recovery_for_tests()`` hook; on PostgreSQL for real, by terminating the
store's backends (``pg_terminate_backend`` from a separate connection on the test server,
which is not restarted) so the store reconnects and counts one recovery.
"""

from __future__ import annotations

import asyncpg
import pytest
import trio
from actor_kit import Recorder, client_app, make_app

from zlink_trio import Created, ServerConfig
from zlink_trio.store._aiobridge import open_loop_thread
from zlink_trio.store.memory import MemoryLocationStore
from zlink_trio.testing import CountingStore, open_cluster

CONFIG = ServerConfig(route_cache_max_age=25.0, owner_lease_ttl=60.0)
"""Cache entries outlive the test by far: only the recovery event can drop them."""

TERMINATE = (
    "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
    " WHERE application_name = $1"
)


async def _terminate_backends(dsn: str, application_name: str) -> int:
    """Terminate (and wait for) every backend of ``application_name``, from a separate
    connection; returns how many there were."""
    async with open_loop_thread(name="test-terminate") as bridge:
        conn = await bridge.run(asyncpg.connect, dsn)
        try:
            killed: int = await bridge.run(conn.fetchval, TERMINATE, application_name)
        finally:
            await bridge.run(conn.close)
    return killed


async def _recovery_event(store: CountingStore, request: pytest.FixtureRequest) -> None:
    inner = store.inner
    if isinstance(inner, MemoryLocationStore):
        await inner._simulate_recovery_for_tests()
        return
    from zlink_trio.store.postgres import PostgresLocationStore, application_name

    assert isinstance(inner, PostgresLocationStore)
    dsn = request.getfixturevalue("pg_dsn")
    assert await _terminate_backends(dsn, application_name(inner.schema)) >= 1
    # The next Store call (uncounted here) finds its connection gone, reconnects, and
    # ends the outage: that is the recovery event.
    await inner.now()


async def test_a04_17_store_recovery_event_invalidates_positive_routes(
    clock: object, store: CountingStore, request: pytest.FixtureRequest
) -> None:
    """A04-17: the positive route cache is dropped on a Store recovery event: the first
    request after it reads the Store again (one ``read``, one cache invalidation), the
    next one uses the route cached under the new recovery epoch."""
    rec = Recorder()
    apps = [client_app(), make_app(rec)]
    async with open_cluster(2, store=store, app=lambda i: apps[i], config=CONFIG) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        created = await caller.actors.create("cached", "player").timeout(10)
        assert isinstance(created, Created)
        assert await caller.actors.request("cached", "echo", b"1") == b"1"  # resolved, cached
        cached_at = trio.current_time()
        store.reset()
        assert await caller.actors.request("cached", "echo", b"2") == b"2"
        assert store.count("read") == 0  # a cache hit

        stats = caller.statistics().actors
        assert stats is not None
        invalidations = stats.route_cache_invalidations
        epoch = store.recovery_epoch
        await _recovery_event(store, request)
        assert store.recovery_epoch == epoch + 1

        store.reset()
        assert await caller.actors.request("cached", "echo", b"3") == b"3"
        assert store.count("read") == 1  # resolved afresh: the cached route was dropped
        assert trio.current_time() - cached_at < CONFIG.route_cache_max_age  # not its age
        stats = caller.statistics().actors
        assert stats is not None
        assert stats.route_cache_invalidations == invalidations + 1
        store.reset()
        assert await caller.actors.request("cached", "echo", b"4") == b"4"
        assert store.count("read") == 0  # cached again, under the new epoch
        assert [h[3] for h in rec.handled] == [b"1", b"2", b"3", b"4"]
