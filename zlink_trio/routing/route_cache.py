"""Positive route cache for Actor/Spot direct messaging (spec 04 §5.1, spec 06 §6).

Only Ready locations are cached: Missing, Creating and Store failures are never cached
(no negative caching). An entry is used only while BOTH hold: its age is below
``RouteCacheMaxAge`` and the owner lease's local admission deadline has not passed (we bound
it by the owner lease TTL measured from the Store read). An entry is dropped at once on a
stale-route result, when a read shows a larger StoreVersion, and on every Store recovery
event (the store's ``recovery_epoch`` moved). ``max_age == 0`` disables the cache.
"""

from __future__ import annotations

from typing import Final, Generic, TypeVar, final

import attrs

from ..engine.clock import run_clock
from ..ids import (
    AuthorityOwnerGeneration,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OwnerLeaseGeneration as LeaseGen,
    StableType,
)
from ..mesh.api import PeerAddress, peer_address
from ..store.api import ObjectKind

__all__ = ["Route", "RouteCache", "RouteCacheStatistics"]

K = TypeVar("K")

DEFAULT_MAX_ENTRIES: Final = 100_000


def _peer_of(route: Route) -> PeerAddress:
    return peer_address(route.mesh_name, route.node_rid)


@attrs.frozen(slots=True)
class Route:
    """Where a Ready incarnation was found: the owner fence plus the route snapshot."""

    mesh_name: MeshName
    node_rid: NodeRid
    node_generation: NodeGeneration
    lease_generation: LeaseGen
    object_generation: ObjectGeneration
    owner_generation: AuthorityOwnerGeneration
    store_version: int
    kind: ObjectKind | None = None
    """The row's object kind (a Spot call with Instance intent checks it: TypeMismatch)."""
    stable_type: StableType | None = None
    """The row's stable type (likewise)."""
    peer: PeerAddress = attrs.field(
        init=False, eq=False, repr=False, default=attrs.Factory(_peer_of, takes_self=True)
    )
    """The owner's address, made once per route (a call to a cached route looks its
    connection up with it: no address is built or hashed per call)."""


@attrs.frozen
class RouteCacheStatistics:
    entries: int
    hits: int
    misses: int
    invalidations: int


@final
class _Entry:
    __slots__ = ("epoch", "expires_at", "route")

    def __init__(self, route: Route, expires_at: float, epoch: int) -> None:
        self.route = route
        self.expires_at = expires_at
        self.epoch = epoch


@final
class RouteCache(Generic[K]):
    """Bounded map of positive routes, keyed by ActorId or SpotId. When full, the entry
    stored longest ago goes first (insertion order; a hit does not reorder, which keeps a
    hit to one dict lookup: every entry expires within ``max_age`` anyway)."""

    __slots__ = (
        "_entries",
        "_hits",
        "_invalidations",
        "_lease_bound",
        "_max",
        "_max_age",
        "_misses",
        "_now",
    )

    def __init__(
        self, *, max_age: float, lease_bound: float, max_entries: int = DEFAULT_MAX_ENTRIES
    ) -> None:
        self._max_age = max_age
        self._lease_bound = lease_bound
        self._max = max_entries
        self._entries: dict[K, _Entry] = {}
        self._hits = self._misses = self._invalidations = 0
        self._now = run_clock()

    @property
    def enabled(self) -> bool:
        return self._max_age > 0

    def get(self, key: K, epoch: int) -> Route | None:
        """A usable cached route, or None (expired, other recovery epoch, absent)."""
        entry = self._entries.get(key)
        if entry is None:
            self._misses += 1
            return None
        if entry.epoch != epoch or self._now() >= entry.expires_at:
            del self._entries[key]
            self._invalidations += 1
            self._misses += 1
            return None
        self._hits += 1
        return entry.route

    def put(self, key: K, route: Route, epoch: int, *, read_at: float) -> None:
        """Cache a Ready route read at trio time ``read_at`` (before the Store call began).

        An older StoreVersion never replaces a newer cached one.
        """
        if self._max_age <= 0:
            return
        current = self._entries.get(key)
        if current is not None and current.route.store_version > route.store_version:
            return
        expires_at = read_at + min(self._max_age, self._lease_bound)
        entries = self._entries
        if current is not None:
            del entries[key]  # re-inserted last
        entries[key] = _Entry(route, expires_at, epoch)
        while len(entries) > self._max:
            del entries[next(iter(entries))]

    def observe_version(self, key: K, store_version: int) -> None:
        """A read or reply showed ``store_version`` for ``key``: a larger one than the
        cached route's drops the entry."""
        entry = self._entries.get(key)
        if entry is not None and store_version > entry.route.store_version:
            del self._entries[key]
            self._invalidations += 1

    def invalidate(self, key: K, route: Route | None = None) -> None:
        """Drop ``key`` (only if it still holds ``route`` when one is given)."""
        entry = self._entries.get(key)
        if entry is None or (route is not None and entry.route != route):
            return
        del self._entries[key]
        self._invalidations += 1

    def clear(self) -> None:
        self._invalidations += len(self._entries)
        self._entries.clear()

    def statistics(self) -> RouteCacheStatistics:
        return RouteCacheStatistics(
            entries=len(self._entries),
            hits=self._hits,
            misses=self._misses,
            invalidations=self._invalidations,
        )
