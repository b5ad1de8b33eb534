"""The PostgreSQL Location Store (asyncpg, bridged into Trio).

``async with open_postgres_store(dsn, schema=..., connections=...) as store:`` starts an
asyncio loop thread, applies pending schema migrations (idempotent, safe when several nodes
start at once), opens ``connections`` dedicated connections and yields a
:class:`PostgresLocationStore`. It keeps every rule of :mod:`zlink_trio.store.api`:

* each method is ONE SQL statement (server-side functions for the multi-row mutations,
  plain ``UPDATE``s for field updates), so every mutation is a single transaction and a CAS
  on ``store_version``; a lost CAS returns ``Conflict`` with the current row, read with a
  fresh snapshot inside that transaction (functions) or right after it on the same
  connection (field updates);
* ``store_version``, ObjectGeneration and OwnerLeaseGeneration come from database
  sequences; leases and retention run on database time (``now()``) plus a shared,
  database-stored test offset (:meth:`PostgresLocationStore._advance_clock_for_tests`);
* interruptions (docs/decisions.md, "PostgreSQL store"): a mutation whose connection is
  lost mid-statement raises ``StoreOutcomeUnknown``; a Trio cancellation propagates as
  ``trio.Cancelled`` only after the statement was settled server-side, and the connection
  is discarded. Reads and idempotent writes (``put_root``, ``delete_root``,
  ``record_terminal``, ``renew_lease``) reconnect and retry; a statement that never left the
  client is retried by every method, for at most ``retry_window`` seconds, then
  ``Unavailable``;
* ``recovery_epoch`` increments after every outage, when the first reconnect succeeds.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final, NoReturn, final

import trio

from ..errors import (
    CapacityExceeded,
    DescriptorConflict,
    InvalidOperation,
    NotFound,
    OwnerLeaseExpired,
    Unavailable,
    ZLinkError,
)
from ..ids import MeshName, NodeGeneration, NodeRid, OwnerLeaseGeneration, SpotId
from . import _pgcodec as codec
from ._pgadmin import (
    application_name as application_name,
    drop_schema as drop_schema,
    migrate_schema as migrate_schema,
    open_schema_connections,
    schema_status as schema_status,
)
from ._pgbatch import APPLIED_FULL, APPLIED_SLIM, FALLBACK, FieldBatcher
from ._pgconn import Method, PgConnections, Then
from ._pgmigrate import MigrationStatus
from ._pgsql import FieldCas, Statements
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

__all__ = [
    "MigrationStatus",
    "PostgresLocationStore",
    "application_name",
    "drop_schema",
    "migrate_schema",
    "open_postgres_store",
    "schema_status",
]

_TYPED_ERRORS: Final[dict[str, type[ZLinkError]]] = {
    "ZL001": OwnerLeaseExpired,
    "ZL002": CapacityExceeded,
    "ZL003": NotFound,
    "ZL004": InvalidOperation,
    "ZL005": DescriptorConflict,
}
_UNIQUE_VIOLATION: Final = "23505"
_ROWS_KEPT: Final = 8192
"""Rows the store remembers at their last version seen (see :class:`_Rows`)."""
_ENTRY_CLAIM: Final = "Entry Spot claims change only through node registration"


class _Rows(dict[ObjectKey, AuthorityRow]):
    """The last row this store returned or read per key, so that a field CAS whose caller
    expects exactly that version needs only the new version back from the database: a
    ``store_version`` names one row state for ever (one store-wide sequence, bumped by
    every mutation), so the row at the expected version plus the change IS the new row.
    Bounded (emptied when full); a miss only means the whole row comes back."""

    def at(self, key: ObjectKey, version: int) -> AuthorityRow | None:
        row = self.get(key)
        return row if row is not None and row.store_version == version else None

    def saw(self, key: ObjectKey, row: AuthorityRow | None) -> None:
        if row is None:
            self.pop(key, None)
            return
        if len(self) >= _ROWS_KEPT:
            self.clear()
        self[key] = row

    def cas(self, key: ObjectKey, result: CasResult[Any]) -> None:
        self.saw(key, result.row if isinstance(result, Applied) else result.current)


def _raise_typed(exc: Exception, *, unique_is_conflict: bool = False) -> NoReturn:
    """Translate a server-reported error into the protocol's typed errors."""
    sqlstate = getattr(exc, "sqlstate", None)
    message = getattr(exc, "message", str(exc))
    typed = _TYPED_ERRORS.get(sqlstate or "")
    if typed is None and unique_is_conflict and sqlstate == _UNIQUE_VIOLATION:
        typed = DescriptorConflict  # a concurrent registration claimed it first
    if typed is not None:
        raise typed(message) from None
    raise Unavailable(f"PostgreSQL store error {sqlstate}: {message}") from exc


@final
class PostgresLocationStore:
    """:class:`~zlink_trio.store.api.LocationStore` on PostgreSQL. Made only by
    :func:`open_postgres_store`, which owns its connections and loop thread."""

    def __init__(self, conns: PgConnections, schema: str) -> None:
        self._conns = conns
        self._sql = Statements.for_schema(schema)
        self.schema: Final = schema
        self._next_sweep = -math.inf
        self.sweep_interval = 60.0
        self._rows = _Rows()
        self._batcher = FieldBatcher(conns, self._sql.lost_many)
        membership, recovery, relocation, closing = self._sql.field_cas
        self._membership: Final = membership
        self._recovery: Final = recovery
        self._relocation: Final = relocation
        self._closing: Final = closing

    # ----- plumbing ----------------------------------------------------------------------
    async def _read(self, method: Method, sql: str, *args: object) -> Any:
        try:
            return await self._conns.call(method, sql, args, idempotent=True, mutation=False)
        except ZLinkError:
            raise
        except Exception as exc:
            if hasattr(exc, "sqlstate"):
                _raise_typed(exc)
            raise

    async def _write(
        self,
        method: Method,
        sql: str,
        *args: object,
        idempotent: bool = False,
        unique_is_conflict: bool = False,
        then: Then = None,
    ) -> Any:
        try:
            return await self._conns.call(method, sql, args, idempotent=idempotent, then=then)
        except ZLinkError:
            raise
        except Exception as exc:
            if hasattr(exc, "sqlstate"):
                _raise_typed(exc, unique_is_conflict=unique_is_conflict)
            raise

    async def _maybe_sweep(self) -> None:
        """Delete expired terminals and roots, at most once per ``sweep_interval``."""
        if trio.current_time() >= self._next_sweep:
            self._next_sweep = trio.current_time() + self.sweep_interval
            await self.sweep_expired()

    async def sweep_expired(self) -> int:
        """Delete up to 1,000 expired terminal records and 1,000 expired roots now;
        returns how many rows went. Runs by itself from the mutations that create them."""
        return int(await self._write("fetchval", self._sql.sweep, idempotent=True))

    # ----- clock and test hooks ------------------------------------------------------------
    @property
    def recovery_epoch(self) -> int:
        return self._conns.recovery_epoch

    async def now(self) -> float:
        return float(await self._read("fetchval", self._sql.now))

    async def _advance_clock_for_tests(self, seconds: float) -> None:
        """Move store time forward by ``seconds`` for every client of this schema (the
        offset lives in the database, next to ``now()``). Test hook."""
        step = check_clock_advance(seconds)
        await self._write("execute", self._sql.advance_clock, step)

    # ----- authority rows ------------------------------------------------------------------
    async def read(self, key: ObjectKey) -> AuthorityRow | None:
        record = await self._read("fetchrow", self._sql.read, *codec.key_args(key))
        row = None if record is None else codec.decode_row(record, key=key)
        self._rows.saw(key, row)
        return row

    async def scan_owned(self, node_rid: NodeRid) -> Sequence[AuthorityRow]:
        records = await self._read("fetch", self._sql.scan_owned, node_rid.value)
        return tuple(codec.decode_row(r) for r in records)

    async def list_rows(
        self, namespace: Namespace, *, after: str | None, limit: int
    ) -> Sequence[AuthorityRow]:
        check_list_limit(limit)
        if after is None:
            records = await self._read("fetch", self._sql.list_first, namespace.value, limit)
        else:
            records = await self._read(
                "fetch", self._sql.list_after, namespace.value, after.encode("utf-8"), limit
            )
        return tuple(codec.decode_row(r) for r in records)

    async def reserve(self, reservation: Reservation) -> CasResult[AuthorityRow]:
        args = codec.reservation_args(reservation)
        key = reservation.key
        result = codec.decode_cas(await self._write("fetchrow", self._sql.reserve, *args), key)
        self._rows.cas(key, result)
        return result

    async def commit_ready(
        self,
        key: ObjectKey,
        expected_version: int,
        *,
        terminal: TerminalRecord | None = None,
        retain_for: float = 0.0,
    ) -> CasResult[AuthorityRow]:
        retain = check_retention(retain_for)
        check_expected_version(expected_version)
        if terminal is not None:
            await self._maybe_sweep()
        record = await self._write(
            "fetchrow",
            self._sql.commit_ready,
            *codec.key_args(key),
            expected_version,
            *self._terminal_args(terminal),
            retain,
        )
        result = codec.decode_cas(record, key)
        self._rows.cas(key, result)
        return result

    async def abort_creation(
        self,
        key: ObjectKey,
        expected_version: int,
        *,
        terminal: TerminalRecord | None = None,
        retain_for: float = 0.0,
    ) -> CasResult[None]:
        retain = check_retention(retain_for)
        check_expected_version(expected_version)
        if terminal is not None:
            await self._maybe_sweep()
        record = await self._write(
            "fetchrow",
            self._sql.abort_creation,
            *codec.key_args(key),
            expected_version,
            *self._terminal_args(terminal),
            retain,
        )
        result = codec.decode_cas_none(record)
        self._rows.cas(key, result)
        return result

    @staticmethod
    def _terminal_args(terminal: TerminalRecord | None) -> tuple[object, ...]:
        if terminal is None:
            return None, None, None, None
        return (*codec.operation_args(terminal.key), bytes(terminal.result))

    async def change_owner(
        self,
        key: ObjectKey,
        expected_version: int,
        new_owner: OwnerFence,
        *,
        membership: SpotId | Unchanged | None = UNCHANGED,
    ) -> CasResult[AuthorityRow]:
        check_expected_version(expected_version)
        set_membership = membership is not UNCHANGED
        member = membership.value.encode("utf-8") if isinstance(membership, SpotId) else None
        record = await self._write(
            "fetchrow",
            self._sql.change_owner,
            *codec.key_args(key),
            expected_version,
            *codec.fence_args(new_owner),
            set_membership,
            member,
        )
        result = codec.decode_cas(record, key)
        self._rows.cas(key, result)
        return result

    async def change_owners(
        self, changes: Sequence[tuple[ObjectKey, int]], new_owner: OwnerFence
    ) -> CasResult[tuple[AuthorityRow, ...]]:
        batch = check_owner_changes(changes)
        namespaces: list[str] = []
        ids: list[bytes] = []
        versions: list[int] = []
        for key, version in batch:
            ns, oid = codec.key_args(key)
            namespaces.append(ns)
            ids.append(oid)
            versions.append(version)
        records = await self._write(
            "fetch",
            self._sql.change_owners,
            namespaces,
            ids,
            versions,
            *codec.fence_args(new_owner),
        )
        first = records[0]
        if first[0] != 0:  # one conflict outcome: the first key that did not match
            current = None if first[2] is None else codec.decode_row(first, 1)
            if current is not None:
                self._rows.saw(current.key, current)
            return Conflict(current)
        rows = tuple(
            codec.decode_row(record, 1, key)
            for record, (key, _) in zip(records, batch, strict=True)
        )
        for row in rows:
            self._rows.saw(row.key, row)
        return Applied(rows)

    async def _field_cas(
        self,
        statements: FieldCas,
        key: ObjectKey,
        expected_version: int,
        fields: tuple[object, ...],
        changed: Callable[[AuthorityRow, int], AuthorityRow],
    ) -> CasResult[AuthorityRow]:
        """One field CAS, batched with the concurrent ones (:mod:`._pgbatch`); run alone
        when the batch cannot answer for it. ``changed(row, version)`` is the row after
        the change, rebuilt from the one the caller held at the expected version."""
        version = check_expected_version(expected_version)
        ns, oid = codec.key_args(key)
        held = self._rows.at(key, version)
        try:
            answer = await self._batcher.cas(
                statements, (ns, oid, version, *fields), slim=held is not None
            )
        except ZLinkError:
            raise
        except Exception as exc:  # pragma: no cover - the batcher answers or falls back
            if hasattr(exc, "sqlstate"):
                _raise_typed(exc)
            raise
        if answer is FALLBACK:
            record = await self._write(
                "fetchrow",
                statements.single_full,
                ns,
                oid,
                version,
                *fields,
                then=(self._sql.lost, ns, oid),
            )
            result = codec.decode_cas(record, key)
        else:
            status, value = answer
            if status == APPLIED_SLIM:
                assert held is not None
                result = Applied(changed(held, value))
            elif status == APPLIED_FULL:
                result = Applied(codec.decode_row(value, key=key))
            else:
                current = None if value is None else codec.decode_row(value, key=key)
                if current is not None and current.kind is ObjectKind.ENTRY_SPOT:
                    raise InvalidOperation(_ENTRY_CLAIM)
                result = Conflict(current)
        self._rows.cas(key, result)
        return result

    async def set_membership(
        self, key: ObjectKey, expected_version: int, membership: SpotId | None
    ) -> CasResult[AuthorityRow]:
        value = None if membership is None else membership.value.encode("utf-8")
        return await self._field_cas(
            self._membership,
            key,
            expected_version,
            (value,),
            lambda row, v: evolve_row(row, store_version=v, membership=membership),
        )

    async def set_recovery(
        self, key: ObjectKey, expected_version: int, recovery: RecoveryPointer | None
    ) -> CasResult[AuthorityRow]:
        return await self._field_cas(
            self._recovery,
            key,
            expected_version,
            codec.recovery_args(recovery),
            lambda row, v: evolve_row(row, store_version=v, recovery=recovery),
        )

    async def set_relocation(
        self, key: ObjectKey, expected_version: int, relocation: RelocationMark | None
    ) -> CasResult[AuthorityRow]:
        return await self._field_cas(
            self._relocation,
            key,
            expected_version,
            codec.relocation_args(relocation),
            lambda row, v: evolve_row(row, store_version=v, relocation=relocation),
        )

    async def begin_closing(self, key: ObjectKey, expected_version: int) -> CasResult[AuthorityRow]:
        return await self._field_cas(
            self._closing,
            key,
            expected_version,
            (),
            lambda row, v: evolve_row(row, store_version=v, state=AuthorityState.CLOSING),
        )

    async def release(self, key: ObjectKey, expected_version: int) -> CasResult[None]:
        check_expected_version(expected_version)
        record = await self._write(
            "fetchrow", self._sql.release, *codec.key_args(key), expected_version
        )
        result = codec.decode_cas_none(record)
        self._rows.cas(key, result)
        return result

    async def reclaim(
        self, key: ObjectKey, expected_version: int, owner: OwnerFence, *, grace: float
    ) -> CasResult[None]:
        check_expected_version(expected_version)
        step = check_grace(grace)
        record = await self._write(
            "fetchrow",
            self._sql.reclaim,
            *codec.key_args(key),
            expected_version,
            *codec.fence_args(owner),
            step,
        )
        result = codec.decode_cas_none(record)
        self._rows.cas(key, result)
        return result

    async def owner_live(self, owner: OwnerFence) -> bool:
        live: bool = await self._read(
            "fetchval",
            self._sql.owner_live,
            owner.node_rid.value,
            owner.node_generation.value,
            owner.lease_generation.value,
        )
        return live

    async def list_reclaimable(self, *, grace: float, limit: int) -> Sequence[AuthorityRow]:
        step = check_grace(grace)
        check_list_limit(limit)
        records = await self._read("fetch", self._sql.list_reclaimable, step, limit)
        return tuple(codec.decode_row(r) for r in records)

    # ----- nodes, descriptors, leases ------------------------------------------------------
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
        ttl = float(lease_ttl)  # checked by check_registration
        record = await self._write(
            "fetchrow",
            self._sql.register_node,
            node_rid.value,
            node_generation.value,
            [codec.descriptor_arg(d) for d in batch],
            capacity,
            ttl,
            ENTRY_SPOT_TYPE.value.encode("utf-8"),
            unique_is_conflict=True,
        )
        return NodeLease(node_rid, node_generation, OwnerLeaseGeneration(record[0]), record[1])

    async def renew_lease(
        self, node_rid: NodeRid, lease_generation: OwnerLeaseGeneration, lease_ttl: float
    ) -> NodeLease:
        ttl = check_ttl(lease_ttl)
        record = await self._write(
            "fetchrow",
            self._sql.renew_lease,
            node_rid.value,
            lease_generation.value,
            ttl,
            idempotent=True,
        )
        if record is None:
            raise OwnerLeaseExpired(f"lease {lease_generation.value} of {node_rid} is gone")
        return NodeLease(node_rid, NodeGeneration(record[0]), lease_generation, record[1])

    async def remove_node(
        self,
        node_rid: NodeRid,
        node_generation: NodeGeneration,
        lease_generation: OwnerLeaseGeneration,
    ) -> bool:
        removed = await self._write(
            "fetchval",
            self._sql.remove_node,
            node_rid.value,
            node_generation.value,
            lease_generation.value,
        )
        return bool(removed)

    async def list_nodes(self, mesh_name: MeshName | None = None) -> Sequence[NodeRecord]:
        if mesh_name is None:
            records = await self._read("fetch", self._sql.list_nodes)
        else:
            records = await self._read(
                "fetch", self._sql.list_nodes_in_mesh, mesh_name.value.encode("utf-8")
            )
        return tuple(codec.decode_node_record(r) for r in records)

    # ----- durable operation terminals -------------------------------------------------------
    async def record_terminal(self, record: TerminalRecord, *, retain_for: float) -> TerminalRecord:
        retain = check_retention(retain_for)
        await self._maybe_sweep()
        stored = await self._write(
            "fetchval",
            self._sql.record_terminal,
            *codec.operation_args(record.key),
            bytes(record.result),
            retain,
            idempotent=True,
        )
        return record if stored == record.result else TerminalRecord(record.key, stored)

    async def read_terminal(self, key: OperationKey) -> TerminalRecord | None:
        result = await self._read("fetchval", self._sql.read_terminal, *codec.operation_args(key))
        return None if result is None else TerminalRecord(key, result)

    # ----- Relocation Store (immutable roots) --------------------------------------------------
    async def put_root(self, data: bytes, *, retain_for: float | None = None) -> ContentRef:
        retain = check_retention(retain_for)
        content = bytes(data)
        ref = ContentRef.of(content)
        await self._maybe_sweep()
        await self._write(
            "execute", self._sql.put_root, ref.sha256, ref.size, content, retain, idempotent=True
        )
        return ref

    async def read_root(self, ref: ContentRef) -> bytes | None:
        data = await self._read("fetchval", self._sql.read_root, ref.sha256)
        if data is None or not ref.matches(data):
            return None
        return bytes(data)

    async def delete_root(self, ref: ContentRef) -> bool:
        live = await self._write("fetchval", self._sql.delete_root, ref.sha256, idempotent=True)
        return bool(live)


# ----- lifetime ------------------------------------------------------------------------------
@asynccontextmanager
async def open_postgres_store(
    dsn: str,
    *,
    schema: str = "zlink",
    connections: int = 8,
    migrate: bool = True,
    cancel_grace: float = 2.0,
    retry_window: float = 5.0,
) -> AsyncIterator[PostgresLocationStore]:
    """Open a PostgreSQL Location Store for the body of the block.

    Args:
        dsn: libpq-style connection string.
        schema: schema holding every table (a plain identifier; created if missing).
        connections: dedicated connections (the store's concurrency); the store opens
            one more, Trio-native, for a lone CAS (docs/decisions.md).
        migrate: apply pending migrations first; when False, a schema that is not up to
            date raises ConfigurationError instead.
        cancel_grace: how long an interrupted statement's connection may take to settle
            server-side before its socket is aborted.
        retry_window: how long calls keep reconnecting before raising Unavailable.

    Raises:
        Unavailable: the server cannot be reached at startup.
        ConfigurationError: bad schema name, modified or missing migrations.
    """
    async with open_schema_connections(
        dsn,
        schema,
        connections,
        migrate=migrate,
        cancel_grace=cancel_grace,
        retry_window=retry_window,
        thread_name=f"zlink-pg-{schema}",
        fast=True,
    ) as (_, conns):
        yield PostgresLocationStore(conns, schema)


if TYPE_CHECKING:

    def _implements_protocol(store: PostgresLocationStore) -> LocationStore:
        return store
