"""Flow-trace events (issue 9, item 6): every logged-and-counted outcome is one
:class:`FlowEvent`, counted once in the owner's one FlowTrace and logged as one line on
the role's logger; statistics read the same counts. Observed through
``zlink_trio.testing.flow_count`` / ``flow_counts`` and ``server.statistics().flow``."""

from __future__ import annotations

import logging

import pytest
from actor_kit import Recorder, client_app, make_app

from zlink_trio import Created, NotFound
from zlink_trio.testing import (
    CountingStore,
    FaultPlan,
    FlowEvent,
    flow_count,
    flow_counts,
    open_cluster,
)

ACTOR_SEND = 24


async def test_a_repeated_frame_and_a_missing_handler_are_counted_and_logged_once(
    clock: object, store: CountingStore, caplog: pytest.LogCaptureFixture
) -> None:
    rec = Recorder()
    apps = [make_app(rec), client_app()]
    plan = FaultPlan(seed=31)
    async with open_cluster(2, store=store, app=lambda i: apps[i], fault_plan=plan) as cluster:
        await cluster.wait_all_admitted()
        owner, caller = cluster.servers
        created = await caller.actors.create("flow-1", "player").timeout(10)
        assert isinstance(created, Created)
        assert created.actor.node_rid == owner.identity.node_rid
        before = flow_counts(owner)
        assert set(before) == set(FlowEvent)
        caplog.set_level(logging.INFO, logger="zlink_trio.actors")
        caplog.clear()
        doubled = plan.duplicate(command=ACTOR_SEND, to=owner.identity.node_rid, count=1)
        await caller.actors.send("flow-1", "note", b"once")
        await doubled.wait_fired()
        with pytest.raises(NotFound):
            await caller.actors.request("flow-1", "no-such-packet", b"").timeout(10)
        # The request was queued behind the send: the repeat was seen by then.
        await rec.wait_handled(1)
        assert [h[3] for h in rec.handled] == [b"once"]  # ran once
        after = flow_counts(owner)
        changed = {e: after[e] - before[e] for e in FlowEvent if after[e] != before[e]}
        assert changed == {FlowEvent.REPEATED_FRAME_DROPPED: 1, FlowEvent.NO_HANDLER: 1}
        stats = owner.statistics()
        assert stats.flow == after
        assert stats.actors is not None
        assert stats.actors.repeated_ingress == flow_count(owner, FlowEvent.REPEATED_FRAME_DROPPED)
        assert flow_count(caller, FlowEvent.NO_HANDLER) == 0  # counted where it happened
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name == "zlink_trio.actors"
        and r.getMessage().startswith(("repeated_ingress:", "no_handler:"))
    ]
    assert len(lines) == 2
    assert all(r.exc_info is None for r in caplog.records if r.name == "zlink_trio.actors")
