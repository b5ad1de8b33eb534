"""The store across a real database restart (a private throwaway server, never the shared
one): calls during the outage end typed (Unavailable / StoreOutcomeUnknown), the store
recovers by itself, and recovery_epoch moves once."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator

import pytest
import trio
from pg_kit import applied, ready_actor, register

from zlink_trio.errors import StoreOutcomeUnknown, Unavailable
from zlink_trio.ids import SpotId
from zlink_trio.store.postgres import open_postgres_store
from zlink_trio.testing.postgres import (
    PostgresNotInstalled,
    PrivatePostgres,
    find_postgres_bindir,
    open_private_postgres,
)

pytestmark = [pytest.mark.slow, pytest.mark.process]


@pytest.fixture
async def private_pg() -> AsyncIterator[PrivatePostgres]:
    try:
        find_postgres_bindir()
    except PostgresNotInstalled as exc:
        pytest.skip(str(exc))
    async with open_private_postgres() as pg:
        yield pg


async def test_store_survives_a_database_restart(private_pg: PrivatePostgres) -> None:
    pg = private_pg
    async with open_postgres_store(pg.dsn, connections=2, retry_window=0.5) as store:
        row = await ready_actor(store, await register(store), "phoenix")
        await pg.stop()
        # No server: a read retries for retry_window, then gives up typed; a CAS whose
        # statement could not even be sent is Unavailable, not "unknown".
        with pytest.raises(Unavailable):
            await store.read(row.key)
        with pytest.raises(Unavailable) as caught:
            await store.set_membership(row.key, row.store_version, SpotId("down"))
        assert not isinstance(caught.value, StoreOutcomeUnknown)
        assert store.recovery_epoch == 0
        await pg.start()
        assert await store.read(row.key) == row
        assert store.recovery_epoch == 1
        moved = applied(await store.set_membership(row.key, row.store_version, SpotId("up")))
        assert moved.membership == SpotId("up")
        # a restart while the store is idle: the next calls reconnect transparently
        await pg.restart()
        assert await store.read(row.key) == moved
        assert store.recovery_epoch == 2


async def test_cancel_against_a_frozen_backend_is_bounded_by_cancel_grace(
    private_pg: PrivatePostgres,
) -> None:
    """The backend process is stopped (SIGSTOP): it can acknowledge neither the statement
    nor the cancel request. Cancellation still returns after ``cancel_grace`` (the socket
    is aborted), and the store carries on with a new connection."""
    async with open_postgres_store(
        private_pg.dsn, connections=1, cancel_grace=0.5, retry_window=5.0
    ) as store:
        row = await ready_actor(store, await register(store), "frozen")
        pid = await store._conns.call("fetchval", "SELECT pg_backend_pid()", (), idempotent=True)
        os.kill(pid, signal.SIGSTOP)
        try:
            start = trio.current_time()
            with trio.move_on_after(0.1) as scope:
                await store.set_membership(row.key, row.store_version, SpotId("stuck"))
            assert scope.cancelled_caught
            assert 0.5 <= trio.current_time() - start - 0.1 < 3.0
        finally:
            os.kill(pid, signal.SIGCONT)
        current = await store.read(row.key)
        assert current is not None
        assert current.membership in (None, SpotId("stuck"))  # unknown, but readable
