"""``StoreWrapper``: a Location Store that hands every call to an inner store through one
overridable hook, the base of the test stores (counting, cut-off, recording)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Final, TypeVar

from ..ids import MeshName, NodeGeneration, NodeRid, OwnerLeaseGeneration, SpotId
from ..store.api import (
    UNCHANGED,
    AuthorityRow,
    CasResult,
    ContentRef,
    LocationStore,
    Namespace,
    NodeDescriptor,
    NodeLease,
    NodeRecord,
    ObjectKey,
    OperationKey,
    OwnerFence,
    RecoveryPointer,
    RelocationMark,
    Reservation,
    TerminalRecord,
    Unchanged,
)

__all__ = ["StoreWrapper", "advance_store_clock"]

T = TypeVar("T")


async def advance_store_clock(store: LocationStore, seconds: float) -> None:
    """Move ``store``'s time forward by ``seconds`` through its test hook.

    Works for any store with ``_advance_clock_for_tests`` (sync or async), including a
    :class:`StoreWrapper` around one. Raises TypeError for a store without the hook.
    """
    hook = getattr(store, "_advance_clock_for_tests", None)
    if hook is None:
        raise TypeError(f"{type(store).__name__} has no _advance_clock_for_tests hook")
    result = hook(seconds)
    if inspect.isawaitable(result):
        await result


class StoreWrapper:
    """A :class:`~zlink_trio.store.api.LocationStore` delegating to ``inner``.

    Every protocol call goes through :meth:`_around` with the method's name and its
    positional arguments (keyword-only ones are left out); subclasses override it to
    count, refuse or record calls. ``recovery_epoch`` is local state, not a call, and
    the store-clock test hook is passed through unchanged."""

    def __init__(self, inner: LocationStore) -> None:
        self._inner: Final = inner

    @property
    def inner(self) -> LocationStore:
        return self._inner

    async def _around(self, method: str, call: Callable[[], Awaitable[T]], *args: object) -> T:
        """Run one call of ``method`` (``call`` runs it on the inner store)."""
        return await call()

    async def _advance_clock_for_tests(self, seconds: float) -> None:
        await advance_store_clock(self._inner, seconds)

    # ----- LocationStore ------------------------------------------------------------------
    @property
    def recovery_epoch(self) -> int:
        return self._inner.recovery_epoch

    async def now(self) -> float:
        return await self._around("now", self._inner.now)

    async def read(self, key: ObjectKey) -> AuthorityRow | None:
        return await self._around("read", lambda: self._inner.read(key), key)

    async def scan_owned(self, node_rid: NodeRid) -> Sequence[AuthorityRow]:
        return await self._around("scan_owned", lambda: self._inner.scan_owned(node_rid), node_rid)

    async def list_rows(
        self, namespace: Namespace, *, after: str | None, limit: int
    ) -> Sequence[AuthorityRow]:
        return await self._around(
            "list_rows", lambda: self._inner.list_rows(namespace, after=after, limit=limit)
        )

    async def reserve(self, reservation: Reservation) -> CasResult[AuthorityRow]:
        return await self._around(
            "reserve", lambda: self._inner.reserve(reservation), reservation.key
        )

    async def commit_ready(
        self,
        key: ObjectKey,
        expected_version: int,
        *,
        terminal: TerminalRecord | None = None,
        retain_for: float = 0.0,
    ) -> CasResult[AuthorityRow]:
        return await self._around(
            "commit_ready",
            lambda: self._inner.commit_ready(
                key, expected_version, terminal=terminal, retain_for=retain_for
            ),
            key,
            expected_version,
        )

    async def abort_creation(
        self,
        key: ObjectKey,
        expected_version: int,
        *,
        terminal: TerminalRecord | None = None,
        retain_for: float = 0.0,
    ) -> CasResult[None]:
        return await self._around(
            "abort_creation",
            lambda: self._inner.abort_creation(
                key, expected_version, terminal=terminal, retain_for=retain_for
            ),
            key,
            expected_version,
        )

    async def change_owner(
        self,
        key: ObjectKey,
        expected_version: int,
        new_owner: OwnerFence,
        *,
        membership: SpotId | Unchanged | None = UNCHANGED,
    ) -> CasResult[AuthorityRow]:
        return await self._around(
            "change_owner",
            lambda: self._inner.change_owner(
                key, expected_version, new_owner, membership=membership
            ),
            key,
            expected_version,
            new_owner,
        )

    async def change_owners(
        self, changes: Sequence[tuple[ObjectKey, int]], new_owner: OwnerFence
    ) -> CasResult[tuple[AuthorityRow, ...]]:
        return await self._around(
            "change_owners",
            lambda: self._inner.change_owners(changes, new_owner),
            changes,
            new_owner,
        )

    async def set_membership(
        self, key: ObjectKey, expected_version: int, membership: SpotId | None
    ) -> CasResult[AuthorityRow]:
        return await self._around(
            "set_membership",
            lambda: self._inner.set_membership(key, expected_version, membership),
            key,
            expected_version,
        )

    async def set_recovery(
        self, key: ObjectKey, expected_version: int, recovery: RecoveryPointer | None
    ) -> CasResult[AuthorityRow]:
        return await self._around(
            "set_recovery",
            lambda: self._inner.set_recovery(key, expected_version, recovery),
            key,
            expected_version,
        )

    async def set_relocation(
        self, key: ObjectKey, expected_version: int, relocation: RelocationMark | None
    ) -> CasResult[AuthorityRow]:
        return await self._around(
            "set_relocation",
            lambda: self._inner.set_relocation(key, expected_version, relocation),
            key,
            expected_version,
        )

    async def begin_closing(self, key: ObjectKey, expected_version: int) -> CasResult[AuthorityRow]:
        return await self._around(
            "begin_closing",
            lambda: self._inner.begin_closing(key, expected_version),
            key,
            expected_version,
        )

    async def release(self, key: ObjectKey, expected_version: int) -> CasResult[None]:
        return await self._around(
            "release", lambda: self._inner.release(key, expected_version), key, expected_version
        )

    async def reclaim(
        self, key: ObjectKey, expected_version: int, owner: OwnerFence, *, grace: float
    ) -> CasResult[None]:
        return await self._around(
            "reclaim",
            lambda: self._inner.reclaim(key, expected_version, owner, grace=grace),
            key,
            expected_version,
            owner,
        )

    async def owner_live(self, owner: OwnerFence) -> bool:
        return await self._around("owner_live", lambda: self._inner.owner_live(owner), owner)

    async def list_reclaimable(self, *, grace: float, limit: int) -> Sequence[AuthorityRow]:
        return await self._around(
            "list_reclaimable", lambda: self._inner.list_reclaimable(grace=grace, limit=limit)
        )

    async def register_node(
        self,
        node_rid: NodeRid,
        node_generation: NodeGeneration,
        descriptors: Sequence[NodeDescriptor],
        *,
        capacity: int,
        lease_ttl: float,
    ) -> NodeLease:
        return await self._around(
            "register_node",
            lambda: self._inner.register_node(
                node_rid, node_generation, descriptors, capacity=capacity, lease_ttl=lease_ttl
            ),
            node_rid,
            node_generation,
        )

    async def renew_lease(
        self, node_rid: NodeRid, lease_generation: OwnerLeaseGeneration, lease_ttl: float
    ) -> NodeLease:
        return await self._around(
            "renew_lease",
            lambda: self._inner.renew_lease(node_rid, lease_generation, lease_ttl),
            node_rid,
            lease_generation,
        )

    async def remove_node(
        self,
        node_rid: NodeRid,
        node_generation: NodeGeneration,
        lease_generation: OwnerLeaseGeneration,
    ) -> bool:
        return await self._around(
            "remove_node",
            lambda: self._inner.remove_node(node_rid, node_generation, lease_generation),
            node_rid,
            node_generation,
            lease_generation,
        )

    async def list_nodes(self, mesh_name: MeshName | None = None) -> Sequence[NodeRecord]:
        return await self._around("list_nodes", lambda: self._inner.list_nodes(mesh_name))

    async def record_terminal(self, record: TerminalRecord, *, retain_for: float) -> TerminalRecord:
        return await self._around(
            "record_terminal", lambda: self._inner.record_terminal(record, retain_for=retain_for)
        )

    async def read_terminal(self, key: OperationKey) -> TerminalRecord | None:
        return await self._around("read_terminal", lambda: self._inner.read_terminal(key))

    async def put_root(self, data: bytes, *, retain_for: float | None = None) -> ContentRef:
        return await self._around(
            "put_root", lambda: self._inner.put_root(data, retain_for=retain_for)
        )

    async def read_root(self, ref: ContentRef) -> bytes | None:
        return await self._around("read_root", lambda: self._inner.read_root(ref))

    async def delete_root(self, ref: ContentRef) -> bool:
        return await self._around("delete_root", lambda: self._inner.delete_root(ref))


if TYPE_CHECKING:

    def _implements_protocol(store: StoreWrapper) -> LocationStore:
        return store
