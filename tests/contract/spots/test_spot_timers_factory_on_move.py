"""A Spot whose factory registers its timer (``context.timers.every`` in ``__init__``, as
the demo's rooms do), moved live between two nodes over real TCP on both stores."""

from __future__ import annotations

from typing import Any

import attrs
import trio

from zlink_trio import (
    App,
    PreserveStateWith,
    SpotContext,
    SpotWide,
    on_request,
    on_timer,
)
from zlink_trio.ids import SpotId
from zlink_trio.testing import CountingStore, open_cluster

LONG = 30.0
PERIOD = 0.2


@attrs.define
class Ticks:
    by_node: dict[str, int] = attrs.field(factory=dict)
    _changed: trio.Event = attrs.field(factory=trio.Event)

    def add(self, node: str) -> None:
        self.by_node[node] = self.by_node.get(node, 0) + 1
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, node: str, count: int) -> None:
        with trio.fail_after(LONG):
            while self.by_node.get(node, 0) < count:
                await self._changed.wait()


def metronome_app(ticks: Ticks, node: str) -> App:
    class Metronome:
        def __init__(self, context: SpotContext) -> None:
            self.context = context
            self.count = 0
            context.timers.every("beat", PERIOD, b"factory")

        @on_timer("beat")
        async def beat(self, payload: bytes) -> None:
            self.count += 1
            ticks.add(node)

        @on_request("timers")
        async def timers(self, payload: bytes) -> bytes:
            regs = self.context.timers.registrations()
            return ";".join(f"{r.name}:{r.period}:{r.serial}" for r in regs).encode()

    class Adapter:
        async def capture(self, spot: Metronome) -> bytes:
            return str(spot.count).encode()

        async def restore(self, spot: Metronome, payload: bytes) -> None:
            spot.count = int(payload)

    app = App()
    app.register_spot(
        "metronome", Metronome, execution=SpotWide(), relocation=PreserveStateWith(Adapter())
    )
    return app


def _timers(server: Any) -> Any:
    stats = server.statistics().timers
    assert stats is not None
    return stats


async def test_a04_05_a_factory_timer_is_the_restored_one_after_a_move(
    clock: object, store: CountingStore
) -> None:
    """A04-05 (the target builds the Spot before it admits anything; spec 06 §8: the
    target framework restores the timers, the application never registers them again): a
    SpotWide Spot whose factory registers ``every("beat")`` moves node 0 -> node 1 and
    back. On each target the factory runs again and registers the same name: the Spot
    holds ONE registration, the restored one (its serial from the source, not a new one),
    the target's timer service holds one registration and no waiting tick for it (no
    orphan table that keeps firing into a backlog), it ticks on the target only, and once
    it moved away (and is closed) no registration is left on any node."""
    ticks = Ticks()
    async with open_cluster(
        2, store=store, app=lambda i: metronome_app(ticks, f"node{i}")
    ) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        ref = None
        for i in range(64):
            created = await b.spots.get_or_create(f"m-{i}", "metronome").timeout(LONG)
            if created.spot.node_rid == a.identity.node_rid:
                ref = created.spot
                break
            assert await b.spots.close(created.spot) is True
        assert ref is not None
        spot = ref.spot_id
        await ticks.wait_for("node0", 2)
        before = await b.spots.request(spot, "timers").timeout(LONG)
        assert before.startswith(b"beat:0.2:")

        result = await a.relocate(SpotId(spot.value), to=b.identity.node_rid)
        assert result.committed
        # the one registration is the source's (same serial): the factory's did not
        # replace it, nor is it held beside it
        assert await b.spots.request(spot, "timers").timeout(LONG) == before
        await ticks.wait_for("node1", 3)
        stats = _timers(b)
        assert (stats.owners, stats.registered) == (1, 1), stats
        await trio.sleep(5 * PERIOD)
        assert _timers(b).backlog == 0, _timers(b)
        assert _timers(a).registered == 0, _timers(a)
        on_source = ticks.by_node.get("node0", 0)

        await b.relocate(SpotId(spot.value), to=a.identity.node_rid)
        assert await a.spots.request(spot, "timers").timeout(LONG) == before
        # node 1 keeps nothing of the Spot's timers once it moved away (no leaked table)
        await trio.sleep(5 * PERIOD)
        assert (_timers(b).owners, _timers(b).registered, _timers(b).backlog) == (0, 0, 0)
        assert (_timers(a).owners, _timers(a).registered) == (1, 1), _timers(a)
        await ticks.wait_for("node0", on_source + 2)
        found = await a.spots.find(spot.value)
        assert found is not None
        assert await a.spots.close(found) is True
        assert (_timers(a).owners, _timers(a).registered, _timers(a).backlog) == (0, 0, 0)
