"""Helpers of the PostgreSQL store unit tests: an admin connection usable from Trio, and
tiny builders (the contract suite's store_kit lives in another test folder)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from zlink_trio.config import ObjectRole
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid, StableType, new_entry_spot_id
from zlink_trio.store._aiobridge import LoopThread, open_loop_thread
from zlink_trio.store.api import (
    Applied,
    AuthorityRow,
    CasResult,
    Endpoint,
    LocationStore,
    NodeDescriptor,
    ObjectKey,
    ObjectKind,
    OwnerFence,
    Reservation,
)

MESH = MeshName("world")
ACTOR_TYPE = StableType("player")


def new_schema() -> str:
    return f"zlink_unit_{uuid.uuid4().hex[:16]}"


class Admin:
    """One plain asyncpg connection (outside any store), driven from Trio."""

    def __init__(self, bridge: LoopThread, conn: Any) -> None:
        self._bridge = bridge
        self.conn = conn

    async def execute(self, sql: str, *args: object) -> Any:
        return await self._bridge.run(self.conn.execute, sql, *args)

    async def fetchval(self, sql: str, *args: object) -> Any:
        return await self._bridge.run(self.conn.fetchval, sql, *args)

    async def fetch(self, sql: str, *args: object) -> Any:
        return await self._bridge.run(self.conn.fetch, sql, *args)

    async def store_backends(self, schema: str) -> list[int]:
        """PIDs of the store's own connections (see postgres.application_name)."""
        rows = await self.fetch(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1 ORDER BY pid",
            f"zlink_trio/{schema}"[:63],
        )
        return [r[0] for r in rows]

    async def busy_store_backends(self, schema: str) -> list[int]:
        """PIDs of the store's connections that are in a statement or a transaction (not
        idle, nor still starting up: a connect the caller gave up leaves a backend that
        ends at once). The store keeps an idle Trio-native connection for a lone CAS."""
        rows = await self.fetch(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1"
            " AND state <> 'idle' ORDER BY pid",
            f"zlink_trio/{schema}"[:63],
        )
        return [r[0] for r in rows]


@asynccontextmanager
async def open_admin(dsn: str) -> AsyncIterator[Admin]:
    async with open_loop_thread(name="test-admin") as bridge:
        conn = await bridge.run(asyncpg.connect, dsn)
        try:
            yield Admin(bridge, conn)
        finally:
            await bridge.run(conn.close)


async def register(store: LocationStore, capacity: int = 100) -> OwnerFence:
    rid, generation = NodeRid.new(), NodeGeneration.new()
    descriptor = NodeDescriptor(
        mesh_name=MESH,
        node_rid=rid,
        node_generation=generation,
        endpoint=Endpoint("127.0.0.1", 7000),
        object_role=ObjectRole.SERVER,
        actor_types=frozenset({ACTOR_TYPE}),
        spot_types=frozenset(),
        instance_types=frozenset(),
        placement_weight=1.0,
        entry_spot_id=new_entry_spot_id("node"),
    )
    lease = await store.register_node(
        rid, generation, [descriptor], capacity=capacity, lease_ttl=60
    )
    return OwnerFence(MESH, rid, generation, lease.lease_generation)


def applied(result: CasResult[AuthorityRow]) -> AuthorityRow:
    assert isinstance(result, Applied), result
    return result.row


async def ready_actor(store: LocationStore, owner: OwnerFence, actor_id: str) -> AuthorityRow:
    reservation = Reservation(ObjectKey.actor(actor_id), ObjectKind.ACTOR, ACTOR_TYPE, owner)
    row = applied(await store.reserve(reservation))
    return applied(await store.commit_ready(row.key, row.store_version))
