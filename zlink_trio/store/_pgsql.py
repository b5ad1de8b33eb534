"""The statements of the PostgreSQL Location Store, built once per schema.

Every store operation is ONE of these statements (functions in migrations/0001_init.sql
do the multi-row work server-side), so each is its own transaction and one round trip.
"""

from __future__ import annotations

import attrs

from ._pgmigrate import quote_schema
from ._pqfast import type_oids

__all__ = ["FieldCas", "Statements"]

_SWEEP_BATCH = 1000


@attrs.frozen
class FieldCas:
    """The statements of one field CAS (``set_membership``, ``set_recovery``,
    ``set_relocation``, ``begin_closing``): a plain ``UPDATE`` matching the key, the
    expected ``store_version`` (and the state it accepts), never an Entry claim.

    ``single``/``batch`` return the whole row (``full``) or only the new version
    (``slim``: the caller rebuilds the row from the one it held at the expected version).
    The batched forms take one array per column — ``(namespace, object_id, expected,
    *fields)`` — and return ``(i, ...)`` for each row they changed, ``i`` the 1-based
    position of its entry (at most one entry per key)."""

    name: str
    fields: int
    oids: tuple[int, ...]
    """The parameter types of ``single_slim`` (``namespace, object_id, expected, *fields``)
    for the Trio-native connection (:mod:`._pqfast`)."""
    single_full: str
    single_slim: str
    batch_full: str
    batch_slim: str


@attrs.frozen
class Statements:
    now: str
    advance_clock: str
    read: str
    scan_owned: str
    list_first: str
    list_after: str
    reserve: str
    commit_ready: str
    abort_creation: str
    change_owner: str
    change_owners: str
    lost: str
    release: str
    reclaim: str
    owner_live: str
    list_reclaimable: str
    register_node: str
    renew_lease: str
    remove_node: str
    list_nodes: str
    list_nodes_in_mesh: str
    record_terminal: str
    read_terminal: str
    put_root: str
    read_root: str
    delete_root: str
    sweep: str
    field_cas: tuple[FieldCas, ...]
    lost_many: str
    """The current rows of the keys ``(namespace[], object_id[])``: ``(i, row...)`` per
    entry, the row all NULL when Missing (a fresh snapshot: READ COMMITTED)."""

    @classmethod
    def for_schema(cls, schema: str) -> Statements:
        q = quote_schema(schema)
        now = f"{q}.store_now()"

        def call(fn: str, n: int) -> str:
            params = ", ".join(f"${i}" for i in range(1, n + 1))
            return f"SELECT * FROM {q}.{fn}({params})"

        def field_set(
            name: str, assignments: str, types: tuple[str, ...], condition: str = ""
        ) -> FieldCas:
            # Single: $1 namespace, $2 object_id, $3 expected, $4.. the fields.
            single = (
                f"UPDATE {q}.authority SET {assignments},"
                f" store_version = nextval('{q}.store_version_seq')"
                " WHERE namespace = $1 AND object_id = $2 AND store_version = $3"
                f" AND kind <> 'entry_spot'{condition} RETURNING"
            )
            columns = ", ".join(f"f{i}" for i in range(len(types)))
            arrays = ", ".join(f"${i + 4}::{t}[]" for i, t in enumerate(types))
            batched = (
                f"UPDATE {q}.authority a SET {_from_u(assignments, len(types))},"
                f" store_version = nextval('{q}.store_version_seq')"
                f" FROM unnest($1::text[], $2::bytea[], $3::bigint[]{', ' if types else ''}"
                f"{arrays}) WITH ORDINALITY"
                f" AS u(ns, oid, expected{', ' if types else ''}{columns}, i)"
                " WHERE a.namespace = u.ns AND a.object_id = u.oid"
                f" AND a.store_version = u.expected AND a.kind <> 'entry_spot'"
                f"{condition.replace(' AND ', ' AND a.')} RETURNING u.i,"
            )
            return FieldCas(
                name=name,
                fields=len(types),
                oids=type_oids(("text", "bytea", "bigint", *types)),
                single_full=f"{single} 0::smallint, *",
                single_slim=f"{single} store_version",
                batch_full=f"{batched} a.*",
                batch_slim=f"{batched} a.store_version",
            )

        nodes_select = (
            "SELECT d.mesh_name, d.node_rid, d.node_generation, d.host, d.port, d.object_role,"
            " d.actor_types, d.spot_types, d.instance_types, d.placement_weight,"
            f" d.entry_spot_id, n.lease_generation, n.lease_expires_at, {now} < n.lease_expires_at,"
            " n.capacity, coalesce(u.active, 0), coalesce(u.pending, 0)"
            f" FROM {q}.descriptors d JOIN {q}.nodes n ON n.node_rid = d.node_rid"
            f" LEFT JOIN {q}.node_usage u ON u.node_rid = d.node_rid"
        )
        return cls(
            now=f"SELECT {now}",
            advance_clock=f"UPDATE {q}.store_clock SET offset_seconds = offset_seconds + $1",
            read=f"SELECT * FROM {q}.authority WHERE namespace = $1 AND object_id = $2",
            scan_owned=(
                f"SELECT * FROM {q}.authority WHERE owner_rid = $1 ORDER BY namespace, object_id"
            ),
            list_first=(
                f"SELECT * FROM {q}.authority WHERE namespace = $1 ORDER BY object_id LIMIT $2"
            ),
            list_after=(
                f"SELECT * FROM {q}.authority WHERE namespace = $1 AND object_id > $2"
                " ORDER BY object_id LIMIT $3"
            ),
            reserve=call("reserve", 18),
            commit_ready=call("commit_ready", 8),
            abort_creation=call("abort_creation", 8),
            change_owner=call("change_owner", 9),
            change_owners=call("change_owners", 7),
            lost=call("lost", 2),
            release=call("release", 3),
            reclaim=call("reclaim", 8),
            owner_live=(
                f"SELECT EXISTS (SELECT 1 FROM {q}.nodes WHERE node_rid = $1"
                f" AND node_generation = $2 AND lease_generation = $3"
                f" AND {now} < lease_expires_at)"
            ),
            list_reclaimable=(
                f"SELECT a.* FROM {q}.authority a WHERE a.kind <> 'entry_spot'"
                f" AND {q}.reclaimable({now}, a, $1)"
                " ORDER BY a.namespace, a.object_id LIMIT $2"
            ),
            register_node=call("register_node", 6),
            renew_lease=(
                f"UPDATE {q}.nodes SET lease_expires_at = {now} + $3"
                f" WHERE node_rid = $1 AND lease_generation = $2 AND {now} < lease_expires_at"
                " RETURNING node_generation, lease_expires_at"
            ),
            remove_node=(
                f"WITH gone AS (DELETE FROM {q}.nodes"
                " WHERE node_rid = $1 AND node_generation = $2 AND lease_generation = $3"
                " RETURNING node_rid),"
                f" claims AS (DELETE FROM {q}.authority"
                " WHERE namespace = 'spot' AND kind = 'entry_spot' AND owner_rid = $1"
                " AND owner_lease_generation = $3 AND EXISTS (SELECT 1 FROM gone))"
                " SELECT count(*) FROM gone"
            ),
            list_nodes=f"{nodes_select} ORDER BY d.mesh_name, d.node_rid",
            list_nodes_in_mesh=(
                f"{nodes_select} WHERE d.mesh_name = $1 ORDER BY d.mesh_name, d.node_rid"
            ),
            record_terminal=f"SELECT {q}.put_terminal({now}, $1, $2, $3, $4, $5)",
            read_terminal=(
                f"SELECT result FROM {q}.terminals WHERE source_rid = $1"
                f" AND source_generation = $2 AND operation_id = $3 AND {now} < expires_at"
            ),
            put_root=(
                f"INSERT INTO {q}.roots AS r VALUES ($1, $2, $3, {now} + $4)"
                " ON CONFLICT (sha256) DO UPDATE SET expires_at = excluded.expires_at"
                f" WHERE NOT ({now} < r.expires_at AND r.expires_at >= excluded.expires_at)"
            ),
            read_root=f"SELECT data FROM {q}.roots WHERE sha256 = $1 AND {now} < expires_at",
            delete_root=f"DELETE FROM {q}.roots WHERE sha256 = $1 RETURNING {now} < expires_at",
            sweep=(
                f"WITH t AS (DELETE FROM {q}.terminals WHERE ctid = ANY (ARRAY("
                f"SELECT ctid FROM {q}.terminals WHERE expires_at <= {now}"
                f" LIMIT {_SWEEP_BATCH})) RETURNING 1),"
                f" r AS (DELETE FROM {q}.roots WHERE ctid = ANY (ARRAY("
                f"SELECT ctid FROM {q}.roots WHERE expires_at <= {now}"
                f" LIMIT {_SWEEP_BATCH})) RETURNING 1)"
                " SELECT (SELECT count(*) FROM t) + (SELECT count(*) FROM r)"
            ),
            field_cas=(
                field_set("membership", "membership = $4", ("bytea",)),
                field_set(
                    "recovery",
                    "recovery_sha256 = $4, recovery_size = $5, recovery_cursor = $6",
                    ("bytea", "bigint", "bigint"),
                ),
                field_set(
                    "relocation",
                    "relocation_id = $4, relocation_mesh = $5, relocation_rid = $6,"
                    " relocation_node_generation = $7, relocation_lease_generation = $8,"
                    " relocation_sealed = $9",
                    ("bytea", "bytea", "bytea", "bigint", "bigint", "boolean"),
                ),
                field_set("closing", "state = 'closing'", (), " AND state = 'ready'"),
            ),
            lost_many=(
                "SELECT u.i, a.* FROM unnest($1::text[], $2::bytea[]) WITH ORDINALITY"
                f" AS u(ns, oid, i) LEFT JOIN {q}.authority a"
                " ON a.namespace = u.ns AND a.object_id = u.oid"
            ),
        )


def _from_u(assignments: str, n: int) -> str:
    """``assignments`` of the single form (``col = $4, ...``) reading the batch's columns."""
    for i in range(n, 0, -1):  # $10 before $1
        assignments = assignments.replace(f"${i + 3}", f"u.f{i - 1}")
    return assignments
