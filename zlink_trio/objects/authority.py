"""Reads of authority rows, each one teaching the positive route cache (spec 04 §5.1).

Every read of an object's authority row made by a runtime (messaging resolve,
Create/GetOrCreate, Find, Destroy on both sides, creation attempts) goes through
:meth:`Authority.read`, so no read leaves the cache behind what it showed:

* a Ready row is cached (an older StoreVersion never replaces a newer cached one, and a
  larger StoreVersion than the cached route's drops that route first);
* Missing, Creating or Closing drops the cached route (they are never cached: no negative
  caching).

A successful destroy drops the entry (:meth:`Authority.forget`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import trio

from ..routing.route_cache import Route, RouteCache
from ..store.api import AuthorityRow, AuthorityState, LocationStore, ObjectKey

__all__ = ["Authority", "route_of"]

IdT = TypeVar("IdT")


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
        kind=row.kind,
        stable_type=row.stable_type,
    )


class Authority(Generic[IdT]):
    """The one place an object kind's authority rows are read (see the module
    docstring); ``key`` maps the kind's id to its Location Store key."""

    __slots__ = ("_cache", "_key", "_store")

    def __init__(
        self, store: LocationStore, cache: RouteCache[IdT], key: Callable[[IdT], ObjectKey]
    ) -> None:
        self._store = store
        self._cache = cache
        self._key = key

    @property
    def cache(self) -> RouteCache[IdT]:
        return self._cache

    def key(self, object_id: IdT) -> ObjectKey:
        """The Location Store key of ``object_id``."""
        return self._key(object_id)

    async def read(self, object_id: IdT) -> AuthorityRow | None:
        """The authority row of ``object_id`` (None: Missing); the cache learns from it."""
        store = self._store
        epoch = store.recovery_epoch
        read_at = trio.current_time()
        row = await store.read(self._key(object_id))
        self.observe(object_id, row, epoch, read_at)
        return row

    async def resolve(self, object_id: IdT) -> tuple[AuthorityRow | None, Route | None]:
        """Like :meth:`read`, plus the route of a Ready row (None otherwise)."""
        store = self._store
        epoch = store.recovery_epoch
        read_at = trio.current_time()
        row = await store.read(self._key(object_id))
        return row, self.observe(object_id, row, epoch, read_at)

    def observe(
        self, object_id: IdT, row: AuthorityRow | None, epoch: int, read_at: float
    ) -> Route | None:
        """Apply what a read begun at ``read_at`` under recovery ``epoch`` showed."""
        cache = self._cache
        if row is None or row.state is not AuthorityState.READY:
            cache.invalidate(object_id)
            return None
        route = route_of(row)
        cache.observe_version(object_id, row.store_version)
        cache.put(object_id, route, epoch, read_at=read_at)
        return route

    def forget(self, object_id: IdT) -> None:
        """Drop the cached route of ``object_id`` (e.g. its incarnation was destroyed)."""
        self._cache.invalidate(object_id)
