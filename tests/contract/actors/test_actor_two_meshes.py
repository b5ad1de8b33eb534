"""Two nodes that share two meshes: one connection per mesh between the same pair of
nodes. Message ids of a source node are drawn from one counter for both connections, so
the owner's repeat filter must never take a fresh frame of one connection for a repeat
because the other connection ran far ahead (issue 9, item 8, first defect)."""

from __future__ import annotations

import trio
import trio.testing
from actor_kit import Recorder, client_app, make_app

from zlink_trio import Created, MeshConfig, MeshName, ServerConfig
from zlink_trio.testing import CountingStore, FaultPlan, open_cluster

ACTOR_SEND = 24  # the command that carries an Actor message
BURST = 5000
HOLD = 2.0
SECRET = b"two-meshes-secret-0123456789"


async def test_a_send_held_back_on_one_mesh_still_runs_after_a_burst_on_the_other(
    clock: object, store: CountingStore
) -> None:
    rec = Recorder()
    apps = [make_app(rec), client_app()]
    plan = FaultPlan(seed=9)
    config = ServerConfig(
        meshes=(MeshConfig(name="a"), MeshConfig(name="b")), cluster_secret=SECRET
    )
    async with open_cluster(
        2, store=store, app=lambda i: apps[i], config=config, fault_plan=plan
    ) as cluster:
        await cluster.wait_all_admitted()
        owner, caller = cluster.servers
        slow = await caller.actors.create("slow", "player").in_mesh("a").timeout(10)
        fast = await caller.actors.create("fast", "player").in_mesh("b").timeout(10)
        assert isinstance(slow, Created) and isinstance(fast, Created)
        assert slow.actor.node_rid == fast.actor.node_rid == owner.identity.node_rid
        held = plan.delay(
            HOLD,
            command=ACTOR_SEND,
            mesh=MeshName("a"),
            to=owner.identity.node_rid,
            count=1,
        )
        await caller.actors.send("slow", "note", b"held")
        await held.wait_fired()  # the writer holds it back now
        for i in range(BURST):
            await caller.actors.send("fast", "note", b"%d" % i)
        with trio.move_on_after(HOLD + 30):  # (a dropped send never arrives)
            await rec.wait_handled(BURST + 1)
        stats = owner.statistics().actors
        assert stats is not None
        assert stats.repeated_ingress == 0
        handled = sorted((h[0], h[3]) for h in rec.handled)
        expected = sorted([("slow", b"held")] + [("fast", b"%d" % i) for i in range(BURST)])
        assert handled == expected
