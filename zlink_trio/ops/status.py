"""``zlink-trio status``: what a Location Store says about a cluster, as a table.

::

    zlink-trio status --store postgresql://postgres@127.0.0.1:5432/test [--pg-schema zlink]
        [--ids] [--json]

Nodes (mesh, NodeRid, lifecycle generation, endpoint, lease: live and how long it has left,
the Actor and Spot types it hosts), the Actors and Spots each node owns (counts by kind,
their ids with ``--ids``), rows owned by nodes that are no longer registered, and every
relocation in flight (a row with a relocation mark: its object, source and target node,
sealed or not). ``--json`` prints the same as one JSON object (for scripts and tests).

It only reads: the schema must be up to date (``zlink-trio store migrate``), nothing is
migrated. An unreachable store or a bad schema is one ``zlink-trio status: ...`` line and
exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import attrs
import trio

from ..errors import ZLinkError
from ..store.api import AuthorityRow, LocationStore, Namespace, NodeRecord, ObjectKind

__all__ = ["ClusterStatus", "NodeRow", "add_status_parser", "read_status", "run"]

PAGE = 1000


@attrs.frozen
class NodeRow:
    """One registered node (one mesh descriptor) and what it owns."""

    mesh: str
    rid: str
    generation: int
    endpoint: str
    live: bool
    lease_left: float
    actor_types: tuple[str, ...]
    spot_types: tuple[str, ...]
    counts: dict[str, int]
    """Owned rows by kind (``actor``, ``user_spot``, ``instance_spot``; Entry claims left out)."""
    ids: dict[str, tuple[str, ...]]


@attrs.frozen
class ClusterStatus:
    nodes: tuple[NodeRow, ...]
    orphans: dict[str, dict[str, int]]
    """Rows owned by a NodeRid no registered node has: rid -> counts by kind."""
    relocations: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


async def _all_rows(store: LocationStore, namespace: Namespace) -> list[AuthorityRow]:
    rows: list[AuthorityRow] = []
    after: str | None = None
    while True:
        page = await store.list_rows(namespace, after=after, limit=PAGE)
        rows.extend(page)
        if len(page) < PAGE:
            return rows
        after = page[-1].key.object_id


async def read_status(store: LocationStore) -> ClusterStatus:
    """Everything ``zlink-trio status`` shows, read from ``store``."""
    now = await store.now()
    records: Sequence[NodeRecord] = await store.list_nodes()
    rows = await _all_rows(store, Namespace.ACTOR) + await _all_rows(store, Namespace.SPOT)
    owned: dict[str, list[AuthorityRow]] = {}
    for row in rows:
        if row.kind is not ObjectKind.ENTRY_SPOT:
            owned.setdefault(row.owner.node_rid.hex, []).append(row)
    nodes = []
    for record in records:
        d = record.descriptor
        mine = owned.get(d.node_rid.hex, [])
        counts = {k.value: 0 for k in ObjectKind if k is not ObjectKind.ENTRY_SPOT}
        ids: dict[str, list[str]] = {k: [] for k in counts}
        for row in mine:
            counts[row.kind.value] += 1
            ids[row.kind.value].append(row.key.object_id)
        nodes.append(
            NodeRow(
                mesh=str(d.mesh_name),
                rid=d.node_rid.hex,
                generation=d.node_generation.value,
                endpoint=f"{d.endpoint.host}:{d.endpoint.port}",
                live=record.live,
                lease_left=round(record.lease_expires_at - now, 3),
                actor_types=tuple(sorted(str(t) for t in d.actor_types)),
                spot_types=tuple(sorted(str(t) for t in d.spot_types | d.instance_types)),
                counts=counts,
                ids={k: tuple(v) for k, v in ids.items()},
            )
        )
    registered = {n.rid for n in nodes}
    orphans: dict[str, dict[str, int]] = {}
    for rid, mine in owned.items():
        if rid not in registered:
            for row in mine:
                kinds = orphans.setdefault(rid, {})
                kinds[row.kind.value] = kinds.get(row.kind.value, 0) + 1
    relocations = tuple(
        {
            "object": f"{row.kind.value}:{row.key.object_id}",
            "source": row.owner.node_rid.hex,
            "target": row.relocation.target.node_rid.hex,
            "sealed": row.relocation.sealed,
        }
        for row in rows
        if row.relocation is not None
    )
    return ClusterStatus(nodes=tuple(nodes), orphans=orphans, relocations=relocations)


def add_status_parser(commands: Any) -> None:
    """Add the ``status`` command to the ``zlink-trio`` sub-command parsers."""
    status = commands.add_parser("status", help="nodes, leases, Actors and Spots of a cluster")
    status.add_argument("--store", required=True, metavar="DSN", help="postgresql://...")
    status.add_argument("--pg-schema", default="zlink", help="PostgreSQL schema (zlink)")
    status.add_argument("--ids", action="store_true", help="list the ids each node owns")
    status.add_argument("--json", action="store_true", help="print JSON instead of tables")


def _short(rid: str) -> str:
    return rid[:12]


def render(status: ClusterStatus, *, ids: bool, out: TextIO) -> None:
    """The rich tables of ``status``."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out, width=max(100, Console(file=out).width))
    nodes = Table(title=f"{len(status.nodes)} node(s)", title_justify="left")
    for column in ("mesh", "node", "gen", "endpoint", "lease", "types"):
        nodes.add_column(column)
    for column in ("actors", "user spots", "instance spots"):
        nodes.add_column(column, justify="right")
    for n in status.nodes:
        lease = f"live, {n.lease_left:.1f}s left" if n.live else "[red]EXPIRED[/red]"
        nodes.add_row(
            n.mesh,
            _short(n.rid),
            str(n.generation),
            n.endpoint,
            lease,
            ", ".join(n.actor_types + n.spot_types) or "-",
            str(n.counts["actor"]),
            str(n.counts["user_spot"]),
            str(n.counts["instance_spot"]),
        )
    console.print(nodes)
    if ids:
        for n in status.nodes:
            listed = {k: v for k, v in n.ids.items() if v}
            if listed:
                console.print(f"[bold]{_short(n.rid)}[/bold] ({n.mesh})")
                for kind, values in listed.items():
                    console.print(f"  {kind}: {', '.join(values)}", soft_wrap=True)
    if status.orphans:
        orphans = Table(title="rows owned by unregistered nodes", title_justify="left")
        orphans.add_column("node")
        orphans.add_column("rows")
        for rid, kinds in status.orphans.items():
            orphans.add_row(_short(rid), ", ".join(f"{k} {v}" for k, v in kinds.items()))
        console.print(orphans)
    if status.relocations:
        moving = Table(title="relocations in flight", title_justify="left")
        for column in ("object", "from", "to", "sealed"):
            moving.add_column(column)
        for r in status.relocations:
            moving.add_row(r["object"], _short(r["source"]), _short(r["target"]), str(r["sealed"]))
        console.print(moving)
    else:
        console.print("no relocation in flight")


async def _read(dsn: str, schema: str) -> ClusterStatus:
    from ..store.postgres import open_postgres_store

    with trio.fail_after(30):
        async with open_postgres_store(
            dsn, schema=schema, connections=1, migrate=False, retry_window=2.0
        ) as store:
            return await read_status(store)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """The ``status`` command."""
    out = out if out is not None else sys.stdout
    if not args.store.startswith(("postgresql://", "postgres://")):
        print(
            "zlink-trio status: --store must be a postgresql:// DSN (an in-memory store "
            "lives inside one process and cannot be read from outside)",
            file=sys.stderr,
        )
        return 1
    try:
        status = trio.run(_read, args.store, args.pg_schema)
    except (ZLinkError, OSError, trio.TooSlowError) as exc:
        print(
            f"zlink-trio status: cannot read the store: {exc or type(exc).__name__}",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(json.dumps(status.to_json(), indent=2), file=out)
    else:
        render(status, ids=args.ids, out=out)
    return 0
