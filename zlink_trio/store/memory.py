"""The in-memory Location Store: the embedded default for nodes sharing one process.

Every method is a cancellation point once, on entry, and then runs its whole mutation
synchronously, so each call is atomic and a cancellation on entry changes nothing. Every
:data:`YIELD_EVERY`-th call is also a schedule point (trio's full checkpoint); the others
only raise a pending cancellation, as an in-memory call has nothing to wait for: a
scheduler pass per call was a tenth of an Actor creation's CPU (three Store calls per
create; docs/decisions.md, "The memory store yields every 16th call"). A loop of Store
calls still lets other tasks run. Store time is
``trio.current_time()`` plus a test offset: Trio's ``MockClock`` drives leases and
retention, and so does :meth:`MemoryLocationStore._advance_clock_for_tests`. The store is
meant to live inside one ``trio.run`` (its clock is that run's clock).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar, final

import attrs
import trio

from ..errors import (
    CapacityExceeded,
    DescriptorConflict,
    InvalidOperation,
    NotFound,
    OwnerLeaseExpired,
)
from ..ids import (
    AuthorityOwnerGeneration,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OwnerLeaseGeneration,
    SpotId,
    StableType,
)
from .api import (
    ENTRY_SPOT_TYPE,
    UNCHANGED,
    Applied,
    AuthorityRow,
    AuthorityState,
    CasResult,
    Conflict,
    ContentRef,
    LocationStore,
    Namespace,
    NodeDescriptor,
    NodeLease,
    NodeRecord,
    ObjectKey,
    ObjectKind,
    OperationKey,
    OwnerFence,
    RecoveryPointer,
    RelocationMark,
    Reservation,
    TerminalRecord,
    Unchanged,
)
from .rows import evolve_row
from .validate import (
    check_clock_advance,
    check_expected_version,
    check_grace,
    check_list_limit,
    check_owner_changes,
    check_registration,
    check_retention,
    check_ttl,
)

__all__ = ["YIELD_EVERY", "MemoryLocationStore"]

YIELD_EVERY: Final = 16
"""Every this many calls, a call is also a schedule point (see the module)."""

K = TypeVar("K")
V = TypeVar("V")

_ANY_STATE = frozenset(AuthorityState)
_CREATING = frozenset({AuthorityState.CREATING})
_READY = frozenset({AuthorityState.READY})
_LIVE = frozenset({AuthorityState.READY, AuthorityState.CLOSING})


@attrs.frozen
class _Node:
    """One node's registration: lease row plus its descriptors."""

    node_generation: NodeGeneration
    lease_generation: OwnerLeaseGeneration
    expires_at: float
    capacity: int
    descriptors: tuple[NodeDescriptor, ...]


@attrs.define
class _Usage:
    active: int = 0
    pending: int = 0


_NO_USAGE: Final = _Usage()
"""What a node without active or pending objects uses (read only: never adjusted)."""


@attrs.frozen
class _Timed(Generic[V]):
    value: V
    expires_at: float


@attrs.define
class _Expiring(Generic[K, V]):
    """A map whose entries vanish at their store-time deadline (swept lazily)."""

    _items: dict[K, _Timed[V]] = attrs.field(factory=dict)
    _heap: list[tuple[float, int, K]] = attrs.field(factory=list)
    _seq: int = 0

    def get(self, key: K, now: float) -> _Timed[V] | None:
        item = self._items.get(key)
        return item if item is not None and now < item.expires_at else None

    def put(self, key: K, value: V, expires_at: float, now: float) -> None:
        self.sweep(now)
        self._items[key] = _Timed(value, expires_at)
        if math.isfinite(expires_at):
            self._seq += 1
            heapq.heappush(self._heap, (expires_at, self._seq, key))

    def pop(self, key: K, now: float) -> bool:
        """Remove the entry; True when a live one was there."""
        item = self._items.pop(key, None)
        return item is not None and now < item.expires_at

    def sweep(self, now: float) -> None:
        while self._heap and self._heap[0][0] <= now:
            _, _, key = heapq.heappop(self._heap)
            item = self._items.get(key)
            if item is not None and item.expires_at <= now:
                del self._items[key]


def _registered_types(descriptor: NodeDescriptor, kind: ObjectKind) -> frozenset[StableType]:
    if kind is ObjectKind.ACTOR:
        return descriptor.actor_types
    if kind is ObjectKind.USER_SPOT:
        return descriptor.spot_types
    if kind is ObjectKind.INSTANCE_SPOT:
        return descriptor.instance_types
    return frozenset()


@final
class MemoryLocationStore:
    """:class:`~zlink_trio.store.api.LocationStore` in plain Python state.

    Share one instance between every node of a process (``ServerConfig.location_store``).
    """

    def __init__(self) -> None:
        self._clock_offset = 0.0
        self._streak = 0  # calls since the last schedule point
        self._recovery_epoch = 0
        self._last_version = 0
        self._last_object_generation = 0
        self._last_lease_generation = 0
        self._rows: dict[ObjectKey, AuthorityRow] = {}
        self._nodes: dict[NodeRid, _Node] = {}
        self._usage: dict[NodeRid, _Usage] = {}
        self._terminals: _Expiring[OperationKey, TerminalRecord] = _Expiring()
        self._roots: _Expiring[bytes, bytes] = _Expiring()

    # ----- clock, sequences, test hooks ---------------------------------------------------
    @property
    def recovery_epoch(self) -> int:
        return self._recovery_epoch

    async def _enter(self) -> None:
        """The entry of every call: a cancellation point; a schedule point every
        :data:`YIELD_EVERY` calls (see the module)."""
        self._streak += 1
        if self._streak >= YIELD_EVERY:
            self._streak = 0
            await trio.lowlevel.checkpoint()
        else:
            await trio.lowlevel.checkpoint_if_cancelled()

    def _now(self) -> float:
        return trio.current_time() + self._clock_offset

    async def now(self) -> float:
        await self._enter()
        return self._now()

    async def _advance_clock_for_tests(self, seconds: float) -> None:
        """Move store time forward by ``seconds`` (test hook)."""
        step = check_clock_advance(seconds)
        await self._enter()
        self._clock_offset += step

    async def _simulate_recovery_for_tests(self) -> None:
        """Pretend the store recovered from an outage: ``recovery_epoch`` + 1 (test hook)."""
        await self._enter()
        self._recovery_epoch += 1

    def _next_version(self) -> int:
        self._last_version += 1
        return self._last_version

    def _next_object_generation(self) -> ObjectGeneration:
        self._last_object_generation += 1
        return ObjectGeneration(self._last_object_generation)

    def _next_lease_generation(self) -> OwnerLeaseGeneration:
        self._last_lease_generation += 1
        return OwnerLeaseGeneration(self._last_lease_generation)

    # ----- fences and capacity ------------------------------------------------------------
    def _fence_current(self, fence: OwnerFence, now: float) -> bool:
        node = self._nodes.get(fence.node_rid)
        return (
            node is not None
            and node.node_generation == fence.node_generation
            and node.lease_generation == fence.lease_generation
            and now < node.expires_at
        )

    def _require_lease(self, fence: OwnerFence) -> _Node:
        node = self._nodes.get(fence.node_rid)
        if node is None or not self._fence_current(fence, self._now()):
            raise OwnerLeaseExpired(f"owner lease of node {fence.node_rid} is not current")
        return node

    def _require_room(self, rid: NodeRid, node: _Node) -> None:
        usage = self._usage.get(rid, _NO_USAGE)
        if usage.active + usage.pending >= node.capacity:
            raise CapacityExceeded(f"node {rid} is at capacity {node.capacity}")

    def _adjust(self, rid: NodeRid, *, active: int = 0, pending: int = 0) -> None:
        usage = self._usage.get(rid)
        if usage is None:
            usage = self._usage[rid] = _Usage()
        usage.active += active
        usage.pending += pending
        if usage.active == 0 and usage.pending == 0:
            del self._usage[rid]

    # ----- authority rows -----------------------------------------------------------------
    async def read(self, key: ObjectKey) -> AuthorityRow | None:
        await self._enter()
        return self._rows.get(key)

    async def scan_owned(self, node_rid: NodeRid) -> Sequence[AuthorityRow]:
        await self._enter()
        rows = (row for row in self._rows.values() if row.owner.node_rid == node_rid)
        return tuple(sorted(rows, key=lambda r: (r.key.namespace.value, r.key.object_id)))

    async def list_rows(
        self, namespace: Namespace, *, after: str | None, limit: int
    ) -> Sequence[AuthorityRow]:
        check_list_limit(limit)
        await self._enter()
        rows = [
            row
            for key, row in self._rows.items()
            if key.namespace is namespace and (after is None or key.object_id > after)
        ]
        return tuple(heapq.nsmallest(limit, rows, key=lambda r: r.key.object_id))

    def _precondition(
        self, key: ObjectKey, expected_version: int, states: frozenset[AuthorityState]
    ) -> AuthorityRow | Conflict:
        check_expected_version(expected_version)
        row = self._rows.get(key)
        if row is None:
            return Conflict(None)
        if row.kind is ObjectKind.ENTRY_SPOT:
            raise InvalidOperation("Entry Spot claims change only through node registration")
        if row.store_version != expected_version or row.state not in states:
            return Conflict(row)
        return row

    def _put(self, row: AuthorityRow, **changes: Any) -> Applied[AuthorityRow]:
        """Store ``row`` with ``changes`` under the next store version."""
        row = evolve_row(row, store_version=self._next_version(), **changes)
        self._rows[row.key] = row
        return Applied(row)

    async def reserve(self, reservation: Reservation) -> CasResult[AuthorityRow]:
        await self._enter()
        owner = reservation.owner
        node = self._require_lease(owner)
        current = self._rows.get(reservation.key)
        if current is not None:
            return Conflict(current)
        descriptor = next((d for d in node.descriptors if d.mesh_name == owner.mesh_name), None)
        if descriptor is None:
            raise NotFound(f"node {owner.node_rid} publishes no descriptor in {owner.mesh_name}")
        if reservation.stable_type not in _registered_types(descriptor, reservation.kind):
            raise NotFound(
                f"node {owner.node_rid} does not register {reservation.kind.value} type "
                f"{reservation.stable_type} in {owner.mesh_name}"
            )
        self._require_room(owner.node_rid, node)
        row = AuthorityRow(
            key=reservation.key,
            kind=reservation.kind,
            stable_type=reservation.stable_type,
            state=AuthorityState.CREATING,
            store_version=self._next_version(),
            object_generation=self._next_object_generation(),
            owner_generation=AuthorityOwnerGeneration(1),
            owner=owner,
            membership=reservation.membership,
            pending_content=reservation.content,
            operation=reservation.operation,
            recovery=reservation.recovery,
            attempt_expires_at=None
            if reservation.attempt_ttl is None
            else self._now() + reservation.attempt_ttl,
        )
        self._rows[row.key] = row
        self._adjust(owner.node_rid, pending=1)
        return Applied(row)

    def _record_terminal(
        self, record: TerminalRecord, retain_for: float, since: float | None = None
    ) -> TerminalRecord:
        """Keep ``record`` until ``since`` (store time; default now) + ``retain_for``."""
        expires_in = check_retention(retain_for)
        now = self._now()
        existing = self._terminals.get(record.key, now)
        if existing is not None:
            return existing.value
        base = now if since is None else since
        self._terminals.put(record.key, record, base + expires_in, now)
        return record

    async def commit_ready(
        self,
        key: ObjectKey,
        expected_version: int,
        *,
        terminal: TerminalRecord | None = None,
        retain_for: float = 0.0,
    ) -> CasResult[AuthorityRow]:
        check_retention(retain_for)
        await self._enter()
        row = self._precondition(key, expected_version, _CREATING)
        if isinstance(row, Conflict):
            return row
        self._require_lease(row.owner)
        if terminal is not None:
            self._record_terminal(terminal, retain_for, row.attempt_expires_at)
        self._adjust(row.owner.node_rid, active=1, pending=-1)
        return self._put(
            row,
            state=AuthorityState.READY,
            pending_content=None,
            operation=None,
            attempt_expires_at=None,
        )

    async def abort_creation(
        self,
        key: ObjectKey,
        expected_version: int,
        *,
        terminal: TerminalRecord | None = None,
        retain_for: float = 0.0,
    ) -> CasResult[None]:
        check_retention(retain_for)
        await self._enter()
        row = self._precondition(key, expected_version, _CREATING)
        if isinstance(row, Conflict):
            return row
        if terminal is not None:
            self._record_terminal(terminal, retain_for, row.attempt_expires_at)
        del self._rows[key]
        self._adjust(row.owner.node_rid, pending=-1)
        return Applied(None)

    def _reclaimable(self, row: AuthorityRow, now: float, grace: float) -> bool:
        if not self._fence_current(row.owner, now):
            return True
        return (
            row.state is AuthorityState.CREATING
            and row.attempt_expires_at is not None
            and now >= row.attempt_expires_at + grace
        )

    async def reclaim(
        self, key: ObjectKey, expected_version: int, owner: OwnerFence, *, grace: float
    ) -> CasResult[None]:
        grace = check_grace(grace)
        await self._enter()
        row = self._precondition(key, expected_version, _ANY_STATE)
        if isinstance(row, Conflict):
            return row
        if row.owner != owner or not self._reclaimable(row, self._now(), grace):
            return Conflict(row)
        del self._rows[key]
        if row.state is AuthorityState.CREATING:
            self._adjust(row.owner.node_rid, pending=-1)
        else:
            self._adjust(row.owner.node_rid, active=-1)
        return Applied(None)

    async def owner_live(self, owner: OwnerFence) -> bool:
        await self._enter()
        return self._fence_current(owner, self._now())

    async def list_reclaimable(self, *, grace: float, limit: int) -> Sequence[AuthorityRow]:
        grace = check_grace(grace)
        check_list_limit(limit)
        await self._enter()
        now = self._now()
        rows = [
            row
            for row in self._rows.values()
            if row.kind is not ObjectKind.ENTRY_SPOT and self._reclaimable(row, now, grace)
        ]
        return tuple(
            heapq.nsmallest(limit, rows, key=lambda r: (r.key.namespace.value, r.key.object_id))
        )

    async def change_owner(
        self,
        key: ObjectKey,
        expected_version: int,
        new_owner: OwnerFence,
        *,
        membership: SpotId | Unchanged | None = UNCHANGED,
    ) -> CasResult[AuthorityRow]:
        await self._enter()
        row = self._precondition(key, expected_version, _READY)
        if isinstance(row, Conflict):
            return row
        node = self._require_lease(new_owner)
        old_rid, new_rid = row.owner.node_rid, new_owner.node_rid
        if new_rid != old_rid:
            self._require_room(new_rid, node)
            self._adjust(old_rid, active=-1)
            self._adjust(new_rid, active=1)
        owner_generation = row.owner_generation.next()
        if membership is UNCHANGED:
            return self._put(
                row, owner=new_owner, owner_generation=owner_generation, relocation=None
            )
        return self._put(
            row,
            owner=new_owner,
            owner_generation=owner_generation,
            relocation=None,
            membership=membership,
        )

    async def change_owners(
        self, changes: Sequence[tuple[ObjectKey, int]], new_owner: OwnerFence
    ) -> CasResult[tuple[AuthorityRow, ...]]:
        batch = check_owner_changes(changes)
        await self._enter()
        rows: list[AuthorityRow] = []
        for key, expected_version in batch:  # the first failed precondition, in order
            row = self._precondition(key, expected_version, _READY)
            if isinstance(row, Conflict):
                return row
            rows.append(row)
        node = self._require_lease(new_owner)
        new_rid = new_owner.node_rid
        arriving = sum(1 for row in rows if row.owner.node_rid != new_rid)
        if arriving:
            usage = self._usage.get(new_rid, _Usage())
            if usage.active + usage.pending + arriving > node.capacity:
                raise CapacityExceeded(f"node {new_rid} is at capacity {node.capacity}")
        # Nothing raises past this point: the batch is one atomic step.
        moved: list[AuthorityRow] = []
        for row in rows:
            if row.owner.node_rid != new_rid:
                self._adjust(row.owner.node_rid, active=-1)
                self._adjust(new_rid, active=1)
            moved.append(
                self._put(
                    row,
                    owner=new_owner,
                    owner_generation=row.owner_generation.next(),
                    relocation=None,
                ).row
            )
        return Applied(tuple(moved))

    async def set_membership(
        self, key: ObjectKey, expected_version: int, membership: SpotId | None
    ) -> CasResult[AuthorityRow]:
        await self._enter()
        row = self._precondition(key, expected_version, _ANY_STATE)
        return row if isinstance(row, Conflict) else self._put(row, membership=membership)

    async def set_recovery(
        self, key: ObjectKey, expected_version: int, recovery: RecoveryPointer | None
    ) -> CasResult[AuthorityRow]:
        await self._enter()
        row = self._precondition(key, expected_version, _ANY_STATE)
        return row if isinstance(row, Conflict) else self._put(row, recovery=recovery)

    async def set_relocation(
        self, key: ObjectKey, expected_version: int, relocation: RelocationMark | None
    ) -> CasResult[AuthorityRow]:
        await self._enter()
        row = self._precondition(key, expected_version, _ANY_STATE)
        return row if isinstance(row, Conflict) else self._put(row, relocation=relocation)

    async def begin_closing(self, key: ObjectKey, expected_version: int) -> CasResult[AuthorityRow]:
        await self._enter()
        row = self._precondition(key, expected_version, _READY)
        if isinstance(row, Conflict):
            return row
        return self._put(row, state=AuthorityState.CLOSING)

    async def release(self, key: ObjectKey, expected_version: int) -> CasResult[None]:
        await self._enter()
        row = self._precondition(key, expected_version, _LIVE)
        if isinstance(row, Conflict):
            return row
        del self._rows[key]
        self._adjust(row.owner.node_rid, active=-1)
        return Applied(None)

    # ----- nodes, descriptors, leases -----------------------------------------------------
    def _claim_live(self, row: AuthorityRow, now: float) -> bool:
        """An Entry claim is active while the registration it names is current."""
        return self._fence_current(row.owner, now)

    def _registration_conflicts(
        self, node_rid: NodeRid, descriptors: tuple[NodeDescriptor, ...], now: float
    ) -> list[ObjectKey]:
        """Raise DescriptorConflict at the first active claim; return the expired Entry
        claim rows the registration replaces."""
        old = self._nodes.get(node_rid)
        if old is not None and now < old.expires_at:
            mesh = descriptors[0].mesh_name if descriptors else None
            raise DescriptorConflict(f"descriptor ({mesh}, {node_rid}) is held by a live lease")
        replaced: list[ObjectKey] = []
        for descriptor in descriptors:  # distinct meshes and ids: check_registration
            key = ObjectKey.spot(descriptor.entry_spot_id.value)
            row = self._rows.get(key)
            if row is None:
                continue
            if row.kind is not ObjectKind.ENTRY_SPOT or self._claim_live(row, now):
                raise DescriptorConflict(
                    f"Entry Spot id {key.object_id} is held by a live {row.kind.value} row"
                )
            replaced.append(key)
        return replaced

    def _drop_claim(self, key: ObjectKey) -> None:
        """Delete an Entry claim row and unlink the descriptor that published it."""
        row = self._rows.pop(key, None)
        if row is None:
            return
        holder = self._nodes.get(row.owner.node_rid)
        if holder is not None:
            kept = tuple(d for d in holder.descriptors if d.entry_spot_id.value != key.object_id)
            self._nodes[row.owner.node_rid] = attrs.evolve(holder, descriptors=kept)

    async def register_node(
        self,
        node_rid: NodeRid,
        node_generation: NodeGeneration,
        descriptors: Sequence[NodeDescriptor],
        *,
        capacity: int,
        lease_ttl: float,
    ) -> NodeLease:
        batch = check_registration(
            node_rid, node_generation, descriptors, capacity=capacity, lease_ttl=lease_ttl
        )
        await self._enter()
        now = self._now()
        replaced = self._registration_conflicts(node_rid, batch, now)
        # Nothing raises past this point: the registration is one atomic step.
        old = self._nodes.pop(node_rid, None)
        if old is not None:
            for descriptor in old.descriptors:
                key = ObjectKey.spot(descriptor.entry_spot_id.value)
                row = self._rows.get(key)
                if (
                    row is not None
                    and row.kind is ObjectKind.ENTRY_SPOT
                    and row.owner.node_rid == node_rid
                ):
                    del self._rows[key]
        for key in replaced:
            self._drop_claim(key)
        lease_generation = self._next_lease_generation()
        node = _Node(node_generation, lease_generation, now + lease_ttl, capacity, batch)
        self._nodes[node_rid] = node
        for descriptor in batch:
            owner = OwnerFence(descriptor.mesh_name, node_rid, node_generation, lease_generation)
            row = AuthorityRow(
                key=ObjectKey.spot(descriptor.entry_spot_id.value),
                kind=ObjectKind.ENTRY_SPOT,
                stable_type=ENTRY_SPOT_TYPE,
                state=AuthorityState.READY,
                store_version=self._next_version(),
                object_generation=self._next_object_generation(),
                owner_generation=AuthorityOwnerGeneration(1),
                owner=owner,
            )
            self._rows[row.key] = row
        return NodeLease(node_rid, node_generation, lease_generation, node.expires_at)

    async def renew_lease(
        self, node_rid: NodeRid, lease_generation: OwnerLeaseGeneration, lease_ttl: float
    ) -> NodeLease:
        check_ttl(lease_ttl)
        await self._enter()
        now = self._now()
        node = self._nodes.get(node_rid)
        if node is None or node.lease_generation != lease_generation or now >= node.expires_at:
            raise OwnerLeaseExpired(f"lease {lease_generation.value} of {node_rid} is gone")
        node = attrs.evolve(node, expires_at=now + lease_ttl)
        self._nodes[node_rid] = node
        return NodeLease(node_rid, node.node_generation, lease_generation, node.expires_at)

    async def remove_node(
        self,
        node_rid: NodeRid,
        node_generation: NodeGeneration,
        lease_generation: OwnerLeaseGeneration,
    ) -> bool:
        await self._enter()
        node = self._nodes.get(node_rid)
        if (
            node is None
            or node.node_generation != node_generation
            or node.lease_generation != lease_generation
        ):
            return False
        del self._nodes[node_rid]
        for descriptor in node.descriptors:
            key = ObjectKey.spot(descriptor.entry_spot_id.value)
            row = self._rows.get(key)
            if (
                row is not None
                and row.kind is ObjectKind.ENTRY_SPOT
                and row.owner.node_rid == node_rid
                and row.owner.lease_generation == lease_generation
            ):
                del self._rows[key]
        return True

    async def list_nodes(self, mesh_name: MeshName | None = None) -> Sequence[NodeRecord]:
        await self._enter()
        now = self._now()
        records: list[NodeRecord] = []
        for rid, node in self._nodes.items():
            usage = self._usage.get(rid, _NO_USAGE)
            records.extend(
                NodeRecord(
                    descriptor=descriptor,
                    lease_generation=node.lease_generation,
                    lease_expires_at=node.expires_at,
                    live=now < node.expires_at,
                    capacity=node.capacity,
                    active=usage.active,
                    pending=usage.pending,
                )
                for descriptor in node.descriptors
                if mesh_name is None or descriptor.mesh_name == mesh_name
            )
        records.sort(key=lambda r: (r.descriptor.mesh_name, r.descriptor.node_rid))
        return tuple(records)

    # ----- durable operation terminals --------------------------------------------------------
    async def record_terminal(self, record: TerminalRecord, *, retain_for: float) -> TerminalRecord:
        check_retention(retain_for)
        await self._enter()
        return self._record_terminal(record, retain_for)

    async def read_terminal(self, key: OperationKey) -> TerminalRecord | None:
        await self._enter()
        item = self._terminals.get(key, self._now())
        return None if item is None else item.value

    # ----- Relocation Store (immutable roots) ---------------------------------------------------
    async def put_root(self, data: bytes, *, retain_for: float | None = None) -> ContentRef:
        expires_in = check_retention(retain_for)
        content = bytes(data)
        ref = ContentRef.of(content)
        await self._enter()
        now = self._now()
        expires_at = now + expires_in
        existing = self._roots.get(ref.sha256, now)
        if existing is not None and existing.expires_at >= expires_at:
            return ref
        self._roots.put(ref.sha256, content, expires_at, now)
        return ref

    async def read_root(self, ref: ContentRef) -> bytes | None:
        await self._enter()
        item = self._roots.get(ref.sha256, self._now())
        if item is None or not ref.matches(item.value):
            return None
        return item.value

    async def delete_root(self, ref: ContentRef) -> bool:
        await self._enter()
        return self._roots.pop(ref.sha256, self._now())


if TYPE_CHECKING:

    def _implements_protocol(store: MemoryLocationStore) -> LocationStore:
        return store
