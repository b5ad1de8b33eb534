"""The lease keeper's deadline cell (what every Actor turn compares its clock reading
with): the local deadline while the lease is held, moved by each renewal, ``-inf`` once
the lease is lost or released."""

from __future__ import annotations

import math

import trio
import trio.testing

from zlink_trio.errors import Unavailable
from zlink_trio.ids import NodeGeneration, NodeRid, OwnerLeaseGeneration
from zlink_trio.mesh.lease import LeaseDeadline, LeaseExpired, LeaseHeld, LeaseKeeper
from zlink_trio.store.api import NodeLease


class Renewals:
    """renew_lease answers until ``fail`` is set, then raises Unavailable."""

    def __init__(self) -> None:
        self.fail = False

    async def renew_lease(
        self, node_rid: NodeRid, lease_generation: OwnerLeaseGeneration, lease_ttl: float
    ) -> NodeLease:
        await trio.lowlevel.checkpoint()
        if self.fail:
            raise Unavailable("test: the Store is unreachable")
        now = trio.current_time()
        return NodeLease(node_rid, NodeGeneration(1), lease_generation, now + lease_ttl)


async def test_the_cell_follows_renewals_and_falls_to_minus_infinity_on_loss(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = Renewals()
    cell = LeaseDeadline()
    lost: list[LeaseExpired] = []
    held = LeaseHeld(OwnerLeaseGeneration(1), 1.0, 1.0, 0.0)
    keeper = LeaseKeeper(
        store,  # type: ignore[arg-type]
        NodeRid.new(),
        held,
        ttl=1.0,
        interval=0.3,
        on_expired=lost.append,
        deadline=cell,
    )
    assert keeper.deadline is cell and cell.at == 1.0
    async with trio.open_nursery() as nursery:
        await nursery.start(keeper.run)
        await trio.sleep(0.35)  # one renewal, sent at 0.3
        assert cell.at == 1.3
        store.fail = True
        await trio.sleep(2)
        assert lost and cell.at == -math.inf
        assert lost[0].at == 1.3


async def test_a_released_lease_has_no_deadline() -> None:
    held = LeaseHeld(OwnerLeaseGeneration(1), 5.0, 5.0, 0.0)
    keeper = LeaseKeeper(
        Renewals(),  # type: ignore[arg-type]
        NodeRid.new(),
        held,
        ttl=5.0,
        interval=1.0,
        on_expired=lambda _: None,
    )
    assert keeper.deadline.at == 5.0
    keeper.release(True)
    assert keeper.deadline.at == -math.inf
    await trio.lowlevel.checkpoint()
