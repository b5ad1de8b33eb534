"""Python values <-> PostgreSQL columns of the Location Store (see migrations/0001_init.sql).

Text ids travel as their UTF-8 bytes (``bytea``), enums as their ``value`` strings,
OperationIds as 16 big-endian bytes. Decoding runs on the Trio side; the small caches keep
repeated values (owners, types, meshes) from being re-validated on every row.

Rows are decoded with the ids' trusted constructors (``_trusted``, no second validation):
every value in the database was validated by ``store/api.py`` before it was written, and
the columns' types and CHECK constraints hold the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

from ..config import ObjectRole
from ..ids import (
    AuthorityOwnerGeneration,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OperationId,
    OwnerLeaseGeneration,
    SpotId,
    StableType,
)
from .api import (
    Applied,
    AuthorityRow,
    AuthorityState,
    CasResult,
    Conflict,
    ContentRef,
    Endpoint,
    Namespace,
    NodeDescriptor,
    NodeRecord,
    ObjectKey,
    ObjectKind,
    OperationKey,
    OwnerFence,
    RecoveryPointer,
    RelocationMark,
    Reservation,
)

__all__ = [
    "decode_cas",
    "decode_cas_none",
    "decode_node_record",
    "decode_row",
    "descriptor_arg",
    "fence_args",
    "key_args",
    "operation_args",
    "recovery_args",
    "relocation_args",
    "reservation_args",
]

K = TypeVar("K")
V = TypeVar("V")

_CACHE_LIMIT: Final = 4096


_NAMESPACES: Final = {n.value: n for n in Namespace}
_KINDS: Final = {k.value: k for k in ObjectKind}
_STATES: Final = {s.value: s for s in AuthorityState}
_ROLES: Final = {r.value: r for r in ObjectRole}


class _Cache(dict[K, V]):
    """Memo of immutable decoded values; emptied when it grows past its limit."""

    def get_or(self, key: K, make: Callable[[K], V]) -> V:
        try:
            return self[key]
        except KeyError:
            if len(self) >= _CACHE_LIMIT:
                self.clear()
            value = self[key] = make(key)
            return value


_types: _Cache[bytes, StableType] = _Cache()
_meshes: _Cache[bytes, MeshName] = _Cache()
_rids: _Cache[bytes, NodeRid] = _Cache()
_fences: _Cache[tuple[bytes, bytes, int, int], OwnerFence] = _Cache()


def _stable_type(raw: bytes) -> StableType:
    return _types.get_or(raw, lambda b: StableType._trusted(b.decode("utf-8")))


def _mesh(raw: bytes) -> MeshName:
    return _meshes.get_or(raw, lambda b: MeshName._trusted(b.decode("utf-8")))


def _rid(raw: bytes) -> NodeRid:
    return _rids.get_or(raw, NodeRid._trusted)


def _fence(mesh: bytes, rid: bytes, node_generation: int, lease_generation: int) -> OwnerFence:
    return _fences.get_or(
        (mesh, rid, node_generation, lease_generation),
        lambda k: OwnerFence(
            _mesh(k[0]),
            _rid(k[1]),
            NodeGeneration._trusted(k[2]),
            OwnerLeaseGeneration._trusted(k[3]),
        ),
    )


_NEW: Final = object.__new__


def _slot_setter(cls: type[Any], name: str) -> Callable[[Any, Any], None]:
    """The setter of slot ``name`` of a frozen slots class (what its ``__init__`` uses)."""
    setter: Callable[[Any, Any], None] = cls.__dict__[name].__set__
    return setter


def _key(namespace: str, object_id: bytes) -> ObjectKey:
    """A stored key (validated when it was written): no second validation."""
    return ObjectKey._trusted(_NAMESPACES[namespace], object_id.decode("utf-8"))


# ----- encoding ------------------------------------------------------------------------------
def key_args(key: ObjectKey) -> tuple[str, bytes]:
    return key.namespace.value, key.object_id.encode("utf-8")


def fence_args(fence: OwnerFence) -> tuple[bytes, bytes, int, int]:
    return (
        fence.mesh_name.value.encode("utf-8"),
        fence.node_rid.value,
        fence.node_generation.value,
        fence.lease_generation.value,
    )


def operation_args(key: OperationKey | None) -> tuple[bytes | None, int | None, bytes | None]:
    if key is None:
        return None, None, None
    return key.source_rid.value, key.source_generation.value, key.operation_id.to_bytes()


def recovery_args(pointer: RecoveryPointer | None) -> tuple[bytes | None, int | None, int | None]:
    if pointer is None:
        return None, None, None
    return pointer.root.sha256, pointer.root.size, pointer.replay_cursor


def relocation_args(mark: RelocationMark | None) -> tuple[Any, ...]:
    if mark is None:
        return None, None, None, None, None, None
    return (mark.relocation_id.to_bytes(), *fence_args(mark.target), mark.sealed)


def reservation_args(r: Reservation) -> tuple[Any, ...]:
    content = r.content
    return (
        *key_args(r.key),
        r.kind.value,
        r.stable_type.value.encode("utf-8"),
        *fence_args(r.owner),
        None if r.membership is None else r.membership.value.encode("utf-8"),
        None if content is None else content.sha256,
        None if content is None else content.size,
        *operation_args(r.operation),
        *recovery_args(r.recovery),
        r.attempt_ttl,
    )


def _types_arg(types: frozenset[StableType]) -> list[bytes]:
    return sorted(t.value.encode("utf-8") for t in types)


def descriptor_arg(d: NodeDescriptor) -> tuple[Any, ...]:
    """One ``descriptor_in`` composite value."""
    return (
        d.mesh_name.value.encode("utf-8"),
        d.endpoint.host,
        d.endpoint.port,
        d.object_role.value,
        _types_arg(d.actor_types),
        _types_arg(d.spot_types),
        _types_arg(d.instance_types),
        float(d.placement_weight),
        d.entry_spot_id.value.encode("utf-8"),
    )


# ----- decoding ------------------------------------------------------------------------------
def decode_row(r: Sequence[Any], o: int = 0, key: ObjectKey | None = None) -> AuthorityRow:
    """An ``authority`` row starting at column ``o`` (1 in an ``outcome`` row); ``key``,
    when the caller has it, is used instead of decoding the key columns again."""
    membership, pending, op_rid, recovery, relocation = (
        r[o + 12],
        r[o + 13],
        r[o + 15],
        r[o + 18],
        r[o + 21],
    )
    return AuthorityRow(
        key=_key(r[o], r[o + 1]) if key is None else key,
        kind=_KINDS[r[o + 2]],
        stable_type=_stable_type(r[o + 3]),
        state=_STATES[r[o + 4]],
        store_version=r[o + 5],
        object_generation=ObjectGeneration._trusted(r[o + 6]),
        owner_generation=AuthorityOwnerGeneration._trusted(r[o + 7]),
        owner=_fence(r[o + 8], r[o + 9], r[o + 10], r[o + 11]),
        membership=None if membership is None else SpotId._trusted(membership.decode("utf-8")),
        pending_content=None if pending is None else ContentRef(pending, r[o + 14]),
        operation=None
        if op_rid is None
        else OperationKey(
            _rid(op_rid),
            NodeGeneration._trusted(r[o + 16]),
            OperationId._trusted(int.from_bytes(r[o + 17], "big")),
        ),
        recovery=None
        if recovery is None
        else _recovery(ContentRef(recovery, r[o + 19]), r[o + 20]),
        relocation=None
        if relocation is None
        else RelocationMark(
            OperationId._trusted(int.from_bytes(relocation, "big")),
            _fence(r[o + 22], r[o + 23], r[o + 24], r[o + 25]),
            bool(r[o + 26]),
        ),
        attempt_expires_at=r[o + 27],
    )


_RECOVERY_ROOT: Final = _slot_setter(RecoveryPointer, "root")
_RECOVERY_CURSOR: Final = _slot_setter(RecoveryPointer, "replay_cursor")


def _recovery(root: ContentRef, cursor: int) -> RecoveryPointer:
    pointer: RecoveryPointer = _NEW(RecoveryPointer)
    _RECOVERY_ROOT(pointer, root)
    _RECOVERY_CURSOR(pointer, cursor)
    return pointer


def decode_cas(r: Sequence[Any], key: ObjectKey | None = None) -> CasResult[AuthorityRow]:
    """An ``outcome`` row: status 0 = Applied(row), 1 = Conflict(current or None)."""
    row = None if r[2] is None else decode_row(r, 1, key)
    if r[0] == 0:
        assert row is not None
        return Applied(row)
    return Conflict(row)


def decode_cas_none(r: Sequence[Any]) -> CasResult[None]:
    """An ``outcome`` row of a deletion: Applied(None) or Conflict(current or None)."""
    if r[0] == 0:
        return Applied(None)
    return Conflict(None if r[2] is None else decode_row(r, 1))


def decode_node_record(r: Sequence[Any]) -> NodeRecord:
    """A ``list_nodes`` row (descriptor columns, then lease and counters)."""
    descriptor = NodeDescriptor(
        mesh_name=_mesh(r[0]),
        node_rid=_rid(r[1]),
        node_generation=NodeGeneration(r[2]),
        endpoint=Endpoint(r[3], r[4]),
        object_role=_ROLES[r[5]],
        actor_types=frozenset(_stable_type(t) for t in r[6]),
        spot_types=frozenset(_stable_type(t) for t in r[7]),
        instance_types=frozenset(_stable_type(t) for t in r[8]),
        placement_weight=r[9],
        entry_spot_id=SpotId(r[10].decode("utf-8")),
    )
    return NodeRecord(
        descriptor=descriptor,
        lease_generation=OwnerLeaseGeneration(r[11]),
        lease_expires_at=r[12],
        live=r[13],
        capacity=r[14],
        active=r[15],
        pending=r[16],
    )
