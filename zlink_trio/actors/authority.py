"""Reads of Actor authority rows, each one teaching the positive route cache (spec 04 §5.1).

Every read of an Actor's authority row made by the Actor runtime (messaging resolve,
Create/GetOrCreate, Find, Destroy on both sides, creation attempts) goes through
:meth:`Authority.read`, so no read leaves the cache behind what it showed:

* a Ready row is cached (an older StoreVersion never replaces a newer cached one, and a
  larger StoreVersion than the cached route's drops that route first);
* Missing, Creating or Closing drops the cached route (they are never cached: no negative
  caching).

A successful destroy drops the entry (:meth:`Authority.forget`).
"""

from __future__ import annotations

from typing import final

import trio

from ..ids import ActorId
from ..routing.route_cache import Route, RouteCache
from ..store.api import AuthorityRow, AuthorityState, LocationStore, ObjectKey

__all__ = ["Authority", "route_of"]


def route_of(row: AuthorityRow) -> Route:
    """The route snapshot of a Ready row."""
    owner = row.owner
    return Route(
        mesh_name=owner.mesh_name,
        node_rid=owner.node_rid,
        node_generation=owner.node_generation,
        lease_generation=owner.lease_generation,
        object_generation=row.object_generation,
        owner_generation=row.owner_generation,
        store_version=row.store_version,
    )


@final
class Authority:
    """The one place an Actor authority row is read (see the module docstring)."""

    __slots__ = ("_cache", "_store")

    def __init__(self, store: LocationStore, cache: RouteCache[ActorId]) -> None:
        self._store = store
        self._cache = cache

    @property
    def cache(self) -> RouteCache[ActorId]:
        return self._cache

    async def read(self, actor_id: ActorId) -> AuthorityRow | None:
        """The authority row of ``actor_id`` (None: Missing); the cache learns from it."""
        store = self._store
        epoch = store.recovery_epoch
        read_at = trio.current_time()
        row = await store.read(ObjectKey.actor(actor_id.value))
        self.observe(actor_id, row, epoch, read_at)
        return row

    async def resolve(self, actor_id: ActorId) -> tuple[AuthorityRow | None, Route | None]:
        """Like :meth:`read`, plus the route of a Ready row (None otherwise)."""
        store = self._store
        epoch = store.recovery_epoch
        read_at = trio.current_time()
        row = await store.read(ObjectKey.actor(actor_id.value))
        return row, self.observe(actor_id, row, epoch, read_at)

    def observe(
        self, actor_id: ActorId, row: AuthorityRow | None, epoch: int, read_at: float
    ) -> Route | None:
        """Apply what a read begun at ``read_at`` under recovery ``epoch`` showed."""
        cache = self._cache
        if row is None or row.state is not AuthorityState.READY:
            cache.invalidate(actor_id)
            return None
        route = route_of(row)
        cache.observe_version(actor_id, row.store_version)
        cache.put(actor_id, route, epoch, read_at=read_at)
        return route

    def forget(self, actor_id: ActorId) -> None:
        """Drop the cached route of ``actor_id`` (e.g. its incarnation was destroyed)."""
        self._cache.invalidate(actor_id)
