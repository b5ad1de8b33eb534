"""The local submit path's cost (spec 10 §3.2, §7.1 F2–F4; issue 17's benchmark findings):
a submit on the node that holds the session writes nothing to the record store, and a
submit arriving while the previous turn's pass only reads the inbox (no turn running) runs
locally instead of crossing the inbox and the bus."""

from __future__ import annotations

from typing import Any

import attrs
import trio
import trio.testing
from router_app import Registry, Shared, World, cluster
from router_kit import AGENT, S1, CallLog

from zlink_trio.router import (
    ExecutedLocally,
    Priority,
    SessionId,
    SubmitOptions,
    SubmitRequest,
)
from zlink_trio.testing import settle


def _request(text: str, session: SessionId = S1, **kw: Any) -> SubmitRequest:
    return SubmitRequest(session_id=session, agent_ref=AGENT, user_input=text, **kw)


class SlowCollect:
    """An inbox whose ``collect`` takes ``delay`` seconds (a database round trip, stretched
    so the interleaving is certain on MockClock)."""

    def __init__(self, target: Any, delay: float) -> None:
        self._target, self._delay = target, delay
        self.collects = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    async def collect(self, session_id: SessionId, up_to: Priority) -> Any:
        self.collects += 1
        await trio.sleep(self._delay)
        return await self._target.collect(session_id, up_to)


async def test_r10_05_a_warm_local_submit_writes_no_record(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-05: the lease lives as long as the session and later turns reuse it — so a
    later local turn's claim provisions nothing: one record provision (the acquisition's)
    over several consecutive turns on one node, one lease acquire."""
    log = CallLog()
    spied = attrs.evolve(
        shared, records=log.spy("records", shared.records), leases=log.spy("leases", shared.leases)
    )
    world.duration = lambda _t: 0.0
    async with cluster(spied, world, registry, ["a"]) as (a,):
        for text in ("one", "two", "three"):
            done = await a.submit(_request(text))
            assert isinstance(done, ExecutedLocally)
            await done.result
            await settle()  # the pass ended: a fresh claim
    assert log.of("leases").count("leases.try_acquire") == 1
    assert log.of("records").count("records.provision") == 1
    view = await shared.records.load(S1)
    assert view is not None and [e.text for e in view.transcript][::2] == ["one", "two", "three"]


async def test_r10_84_a_submit_during_the_pass_tail_collect_runs_locally(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-84: the pass collects once more after each turn; a submit on the same node
    arriving during that collect (no turn running) joins the pass: EXECUTED_LOCALLY, its
    submit options kept, nothing delivered to the inbox."""
    slow = SlowCollect(shared.inbox, 1.0)
    log = CallLog()
    wired = attrs.evolve(shared, inbox=log.spy("inbox", slow))
    world.duration = lambda _t: 0.0
    async with cluster(wired, world, registry, ["a"]) as (a,):
        first = await a.submit(_request("first"))
        assert (await first.result) is not None
        # the pass is in its tail collect now (1 s): no turn runs
        assert a.statistics().active_passes == 1
        delivered_before = log.of("inbox").count("inbox.deliver")
        second = await a.submit(_request("second", submit_options=SubmitOptions({"x": 1})))
        assert isinstance(second, ExecutedLocally)
        assert (await second.result).text.startswith("a:second")
        assert log.of("inbox").count("inbox.deliver") == delivered_before
        assert world.turn_options[-1] == {"x": 1}
    assert [t.text for t in world.turns] == ["first", "second"]
    assert [t.node for t in world.turns] == ["a", "a"]
