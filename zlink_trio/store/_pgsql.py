"""The statements of the PostgreSQL Location Store, built once per schema.

Every store operation is ONE of these statements (functions in migrations/0001_init.sql
do the multi-row work server-side), so each is its own transaction and one round trip.
"""

from __future__ import annotations

import attrs

from ._pgmigrate import quote_schema

__all__ = ["Statements"]

_SWEEP_BATCH = 1000


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
    set_membership: str
    set_recovery: str
    set_relocation: str
    begin_closing: str
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

    @classmethod
    def for_schema(cls, schema: str) -> Statements:
        q = quote_schema(schema)
        now = f"{q}.store_now()"

        def call(fn: str, n: int) -> str:
            params = ", ".join(f"${i}" for i in range(1, n + 1))
            return f"SELECT * FROM {q}.{fn}({params})"

        def field_cas(assignments: str, condition: str = "") -> str:
            # The fast path of a CAS that touches only the row: a plain UPDATE (status 0 +
            # the row, like the ``outcome`` type); when it matches nothing, ``lost`` reads
            # the current row right after, on the same connection.
            return (
                f"UPDATE {q}.authority SET {assignments},"
                f" store_version = nextval('{q}.store_version_seq')"
                " WHERE namespace = $1 AND object_id = $2 AND store_version = $3"
                f" AND kind <> 'entry_spot'{condition} RETURNING 0::smallint, *"
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
            set_membership=field_cas("membership = $4"),
            set_recovery=field_cas(
                "recovery_sha256 = $4, recovery_size = $5, recovery_cursor = $6"
            ),
            set_relocation=field_cas(
                "relocation_id = $4, relocation_mesh = $5, relocation_rid = $6,"
                " relocation_node_generation = $7, relocation_lease_generation = $8,"
                " relocation_sealed = $9"
            ),
            begin_closing=field_cas("state = 'closing'", " AND state = 'ready'"),
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
        )
