"""`zlink-trio status`'s reader: nodes with their owned Actors and Spots, rows of nodes no
longer registered, and relocations in flight (a row with a relocation mark), read from a
real store written by two real nodes."""

from __future__ import annotations

import io

import trio

from zlink_trio import App, Created, RecreateOnRelocation, SpotWide, on_request
from zlink_trio.ids import OperationId
from zlink_trio.ops.status import read_status, render
from zlink_trio.store.api import ObjectKey, OwnerFence, RelocationMark
from zlink_trio.testing import open_cluster, server_store


class Thing:
    def __init__(self, context: object) -> None:
        self.context = context

    @on_request("x")
    async def x(self, payload: bytes) -> bytes:
        return payload


def make_app() -> App:
    app = App()
    app.enable_actor_dispatch()
    app.register_actor("thing", Thing, relocation=RecreateOnRelocation())
    app.register_spot("hall", Thing, execution=SpotWide(), relocation=RecreateOnRelocation())
    return app


async def test_status_counts_ids_and_relocations_in_flight() -> None:
    with trio.fail_after(30):
        async with open_cluster(2, app=make_app()) as cluster:
            await cluster.wait_all_admitted()
            a, b = cluster.servers
            store = server_store(a)
            assert store is not None
            owners: dict[str, str] = {}
            for i in range(6):
                created = await a.actors.get_or_create(f"t{i}", "thing").timeout(5)
                assert isinstance(created, Created)
                owners[f"t{i}"] = created.actor.node_rid.hex
            await a.spots.get_or_create("hall-1", "hall").timeout(5)

            row = await store.read(ObjectKey.actor("t0"))
            assert row is not None
            other = b if row.owner.node_rid == a.identity.node_rid else a
            record = next(
                r
                for r in await store.list_nodes()
                if r.descriptor.node_rid == other.identity.node_rid
            )
            target = OwnerFence(
                row.owner.mesh_name, other.identity.node_rid, other.identity.node_generation,
                record.lease_generation,
            )  # fmt: skip
            mark = RelocationMark(relocation_id=OperationId.new(), target=target, sealed=True)
            await store.set_relocation(row.key, row.store_version, mark)

            status = await read_status(store)
            by_rid = {n.rid: n for n in status.nodes}
            assert set(by_rid) == {a.identity.node_rid.hex, b.identity.node_rid.hex}
            for rid, node in by_rid.items():
                assert set(node.ids["actor"]) == {i for i, owner in owners.items() if owner == rid}
                assert node.counts["actor"] == len(node.ids["actor"])
                assert node.live and node.actor_types == ("thing",) and node.spot_types == ("hall",)
            assert sum(n.counts["user_spot"] for n in status.nodes) == 1
            assert status.relocations == (
                {
                    "object": "actor:t0",
                    "source": row.owner.node_rid.hex,
                    "target": other.identity.node_rid.hex,
                    "sealed": True,
                },
            )
            assert status.orphans == {}
            out = io.StringIO()
            render(status, ids=True, out=out)
            text = out.getvalue()
            assert "2 node(s)" in text and "relocations in flight" in text and "actor:t0" in text
            await store.set_relocation(row.key, row.store_version + 1, None)
