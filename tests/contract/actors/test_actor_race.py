"""A04-18 at scale: 8 nodes race GetOrCreate on the same 200 ids, on both stores.

Every node calls ``get_or_create`` for every id, all at once (1,600 concurrent calls
over one shared Location Store: a MemoryLocationStore, or one PostgreSQL schema). For each
id exactly one call wins the reservation: one factory run, one OnCreateActor call, one
Ready incarnation, one ``Created``; every other caller gets ``Existing`` with the same
ActorRef. The Store's capacity counters equal the Ready rows of each node, and each node
hosts exactly the Actors the Store says it owns.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import trio
from actor_kit import Recorder, make_app

from zlink_trio import ActorRef, Created, Existing
from zlink_trio.store.api import AuthorityState, Namespace
from zlink_trio.testing import CountingStore, open_cluster

NODES = 8
IDS = [f"race-{k:03d}" for k in range(200)]
BOUND = 60.0
"""Seconds for the whole race (virtual time on the memory store, real on PostgreSQL)."""


async def test_a04_18_eight_nodes_race_get_or_create_on_200_ids(
    clock: object, store: CountingStore
) -> None:
    """A04-18: N concurrent GetOrCreate calls of one id across nodes → one factory run,
    one OnCreateActor call, one Ready incarnation; all callers get the same ActorRef;
    capacity counters match the Ready rows."""
    rec = Recorder()
    results: dict[str, list[object]] = defaultdict(list)
    with trio.fail_after(BOUND):
        async with open_cluster(NODES, store=store, app=make_app(rec)) as cluster:
            await cluster.wait_all_admitted()
            servers = cluster.servers

            async def get_or_create(node: int, actor_id: str) -> None:
                actors = servers[node].actors
                try:
                    result = await actors.get_or_create(actor_id, "player").timeout(BOUND)
                except Exception as exc:  # recorded, asserted below with its id
                    result = exc
                results[actor_id].append(result)

            async with trio.open_nursery() as nursery:
                for actor_id in IDS:
                    for node in range(NODES):
                        nursery.start_soon(get_or_create, node, actor_id)

            failures = {i: r for i, rs in results.items() for r in rs if not _ok(r)}
            assert not failures, list(failures.items())[:5]
            refs: dict[str, ActorRef] = {}
            for actor_id in IDS:
                outcomes = results[actor_id]
                assert len(outcomes) == NODES
                created = [r for r in outcomes if isinstance(r, Created)]
                assert len(created) == 1, (actor_id, outcomes)
                ref = created[0].actor
                assert all(_ref(r) == ref for r in outcomes), (actor_id, outcomes)
                refs[actor_id] = ref
                assert rec.runs(actor_id) == 1, actor_id
            assert rec.on_create_calls == len(IDS)

            rows = await store.list_rows(Namespace.ACTOR, after=None, limit=1000)
            assert sorted(row.key.object_id for row in rows) == IDS
            for row in rows:
                ref = refs[row.key.object_id]
                assert row.state is AuthorityState.READY
                assert row.object_generation == ref.object_generation
                assert row.owner.node_rid == ref.node_rid
            ready_by_node = Counter(row.owner.node_rid for row in rows)
            nodes = await store.list_nodes()
            assert len(nodes) == NODES
            for record in nodes:
                rid = record.descriptor.node_rid
                assert (record.active, record.pending) == (ready_by_node[rid], 0), record
            reservations = 0
            for server in servers:
                stats = server.statistics().actors
                assert stats is not None
                assert stats.hosted == ready_by_node[server.identity.node_rid]
                assert stats.creates_in_flight == 0 and stats.staging == 0
                reservations += stats.creates
            assert reservations == len(IDS)  # one reservation won per id, no more
            assert store.count("reserve") > len(IDS)  # the race was real: CAS attempts lost


def _ok(result: object) -> bool:
    return isinstance(result, Created | Existing)


def _ref(result: object) -> ActorRef:
    assert isinstance(result, Created | Existing)
    return result.actor
