"""Location Store test helpers: a call-counting wrapper and the store clock hook.

``CountingStore`` is how contract tests observe "Store reads counted" and "Store mutation
count stays 0": wrap the store a node uses, ``reset()``, act, then read ``reads`` and
``writes``. ``advance_store_clock`` moves *store* time (leases, terminal and root
retention) on any store implementing the ``_advance_clock_for_tests`` hook.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, final

from ..ids import MeshName, NodeGeneration, NodeRid, OwnerLeaseGeneration, SpotId
from ..store.api import (
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
)

__all__ = [
    "STORE_READ_METHODS",
    "STORE_WRITE_METHODS",
    "CountingStore",
    "advance_store_clock",
]

STORE_READ_METHODS: Final = frozenset(
    {
        "now",
        "read",
        "scan_owned",
        "list_rows",
        "list_nodes",
        "owner_live",
        "list_reclaimable",
        "read_terminal",
        "read_root",
    }
)
"""Protocol methods counted as reads (each is one Store round trip)."""

STORE_WRITE_METHODS: Final = frozenset(
    {
        "reserve",
        "commit_ready",
        "abort_creation",
        "change_owner",
        "set_membership",
        "set_recovery",
        "set_relocation",
        "begin_closing",
        "release",
        "reclaim",
        "register_node",
        "renew_lease",
        "remove_node",
        "record_terminal",
        "put_root",
        "delete_root",
    }
)
"""Protocol methods counted as writes (mutation attempts, won, lost or raised)."""


async def advance_store_clock(store: LocationStore, seconds: float) -> None:
    """Move ``store``'s time forward by ``seconds`` through its test hook.

    Works for any store with ``_advance_clock_for_tests`` (sync or async), including a
    :class:`CountingStore` around one. Raises TypeError for a store without the hook.
    """
    hook = getattr(store, "_advance_clock_for_tests", None)
    if hook is None:
        raise TypeError(f"{type(store).__name__} has no _advance_clock_for_tests hook")
    result = hook(seconds)
    if inspect.isawaitable(result):
        await result


@final
class CountingStore:
    """A :class:`~zlink_trio.store.api.LocationStore` that delegates every call to
    ``inner`` and counts it per method, before the call runs (failed calls count too).
    ``recovery_epoch`` is local state, not a call, and is not counted."""

    def __init__(self, inner: LocationStore) -> None:
        self._inner: Final = inner
        self._calls: Counter[str] = Counter()

    @property
    def inner(self) -> LocationStore:
        return self._inner

    @property
    def calls(self) -> Mapping[str, int]:
        """A read-only snapshot of the per-method counts (methods never called absent)."""
        return MappingProxyType(dict(self._calls))

    def count(self, method: str) -> int:
        return self._calls[method]

    @property
    def reads(self) -> int:
        return sum(n for name, n in self._calls.items() if name in STORE_READ_METHODS)

    @property
    def writes(self) -> int:
        return sum(n for name, n in self._calls.items() if name in STORE_WRITE_METHODS)

    def reset(self) -> None:
        self._calls.clear()

    async def _advance_clock_for_tests(self, seconds: float) -> None:
        await advance_store_clock(self._inner, seconds)

    # ----- LocationStore ------------------------------------------------------------------
    @property
    def recovery_epoch(self) -> int:
        return self._inner.recovery_epoch

    async def now(self) -> float:
        self._calls["now"] += 1
        return await self._inner.now()

    async def read(self, key: ObjectKey) -> AuthorityRow | None:
        self._calls["read"] += 1
        return await self._inner.read(key)

    async def scan_owned(self, node_rid: NodeRid) -> Sequence[AuthorityRow]:
        self._calls["scan_owned"] += 1
        return await self._inner.scan_owned(node_rid)

    async def list_rows(
        self, namespace: Namespace, *, after: str | None, limit: int
    ) -> Sequence[AuthorityRow]:
        self._calls["list_rows"] += 1
        return await self._inner.list_rows(namespace, after=after, limit=limit)

    async def reserve(self, reservation: Reservation) -> CasResult[AuthorityRow]:
        self._calls["reserve"] += 1
        return await self._inner.reserve(reservation)

    async def commit_ready(
        self,
        key: ObjectKey,
        expected_version: int,
        *,
        terminal: TerminalRecord | None = None,
        retain_for: float = 0.0,
    ) -> CasResult[AuthorityRow]:
        self._calls["commit_ready"] += 1
        return await self._inner.commit_ready(
            key, expected_version, terminal=terminal, retain_for=retain_for
        )

    async def abort_creation(
        self,
        key: ObjectKey,
        expected_version: int,
        *,
        terminal: TerminalRecord | None = None,
        retain_for: float = 0.0,
    ) -> CasResult[None]:
        self._calls["abort_creation"] += 1
        return await self._inner.abort_creation(
            key, expected_version, terminal=terminal, retain_for=retain_for
        )

    async def change_owner(
        self, key: ObjectKey, expected_version: int, new_owner: OwnerFence
    ) -> CasResult[AuthorityRow]:
        self._calls["change_owner"] += 1
        return await self._inner.change_owner(key, expected_version, new_owner)

    async def set_membership(
        self, key: ObjectKey, expected_version: int, membership: SpotId | None
    ) -> CasResult[AuthorityRow]:
        self._calls["set_membership"] += 1
        return await self._inner.set_membership(key, expected_version, membership)

    async def set_recovery(
        self, key: ObjectKey, expected_version: int, recovery: RecoveryPointer | None
    ) -> CasResult[AuthorityRow]:
        self._calls["set_recovery"] += 1
        return await self._inner.set_recovery(key, expected_version, recovery)

    async def set_relocation(
        self, key: ObjectKey, expected_version: int, relocation: RelocationMark | None
    ) -> CasResult[AuthorityRow]:
        self._calls["set_relocation"] += 1
        return await self._inner.set_relocation(key, expected_version, relocation)

    async def begin_closing(self, key: ObjectKey, expected_version: int) -> CasResult[AuthorityRow]:
        self._calls["begin_closing"] += 1
        return await self._inner.begin_closing(key, expected_version)

    async def release(self, key: ObjectKey, expected_version: int) -> CasResult[None]:
        self._calls["release"] += 1
        return await self._inner.release(key, expected_version)

    async def reclaim(
        self, key: ObjectKey, expected_version: int, owner: OwnerFence, *, grace: float
    ) -> CasResult[None]:
        self._calls["reclaim"] += 1
        return await self._inner.reclaim(key, expected_version, owner, grace=grace)

    async def owner_live(self, owner: OwnerFence) -> bool:
        self._calls["owner_live"] += 1
        return await self._inner.owner_live(owner)

    async def list_reclaimable(self, *, grace: float, limit: int) -> Sequence[AuthorityRow]:
        self._calls["list_reclaimable"] += 1
        return await self._inner.list_reclaimable(grace=grace, limit=limit)

    async def register_node(
        self,
        node_rid: NodeRid,
        node_generation: NodeGeneration,
        descriptors: Sequence[NodeDescriptor],
        *,
        capacity: int,
        lease_ttl: float,
    ) -> NodeLease:
        self._calls["register_node"] += 1
        return await self._inner.register_node(
            node_rid, node_generation, descriptors, capacity=capacity, lease_ttl=lease_ttl
        )

    async def renew_lease(
        self, node_rid: NodeRid, lease_generation: OwnerLeaseGeneration, lease_ttl: float
    ) -> NodeLease:
        self._calls["renew_lease"] += 1
        return await self._inner.renew_lease(node_rid, lease_generation, lease_ttl)

    async def remove_node(
        self,
        node_rid: NodeRid,
        node_generation: NodeGeneration,
        lease_generation: OwnerLeaseGeneration,
    ) -> bool:
        self._calls["remove_node"] += 1
        return await self._inner.remove_node(node_rid, node_generation, lease_generation)

    async def list_nodes(self, mesh_name: MeshName | None = None) -> Sequence[NodeRecord]:
        self._calls["list_nodes"] += 1
        return await self._inner.list_nodes(mesh_name)

    async def record_terminal(self, record: TerminalRecord, *, retain_for: float) -> TerminalRecord:
        self._calls["record_terminal"] += 1
        return await self._inner.record_terminal(record, retain_for=retain_for)

    async def read_terminal(self, key: OperationKey) -> TerminalRecord | None:
        self._calls["read_terminal"] += 1
        return await self._inner.read_terminal(key)

    async def put_root(self, data: bytes, *, retain_for: float | None = None) -> ContentRef:
        self._calls["put_root"] += 1
        return await self._inner.put_root(data, retain_for=retain_for)

    async def read_root(self, ref: ContentRef) -> bytes | None:
        self._calls["read_root"] += 1
        return await self._inner.read_root(ref)

    async def delete_root(self, ref: ContentRef) -> bool:
        self._calls["delete_root"] += 1
        return await self._inner.delete_root(ref)


if TYPE_CHECKING:

    def _implements_protocol(store: CountingStore) -> LocationStore:
        return store
