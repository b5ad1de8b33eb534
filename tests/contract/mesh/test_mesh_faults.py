"""The fault plan's drop, delay, duplicate, reorder and cut fire observably; a lost
frame breaks the link (LinkLost), and a reply still arrives after the reconnect."""

from __future__ import annotations

import pytest
import trio
from mesh_kit import actor_send, address, echoes, fast, per_node, stats
from trio.testing import MockClock

from zlink_trio.mesh.api import LinkLost, PeerState
from zlink_trio.mesh.reasons import CloseReason, DropReason
from zlink_trio.testing import FaultKind, FaultPlan, TapDirection, WireTap, node_of, open_cluster
from zlink_trio.wire import Command, TerminalResult

ACTOR_SEND = Command.ACTOR_SEND


async def test_drop_breaks_the_link_and_the_request_gets_link_lost(
    autojump_clock: MockClock,
) -> None:
    plan = FaultPlan(seed=7)
    services = echoes(2)
    with trio.fail_after(60):
        async with open_cluster(
            2, config=fast(), services=per_node(services), fault_plan=plan
        ) as c:
            await c.wait_all_admitted()
            a, b = c.servers
            rule = plan.drop(command=ACTOR_SEND, sender=a.identity.node_rid, count=1)
            pending = await node_of(a).request(address(b), actor_send(a, b, b"lost"))
            with pytest.raises(LinkLost):
                await pending.wait()
            assert rule.fired == 1
            assert plan.fired(FaultKind.DROP) == 1
            assert [e.command for e in plan.events] == [ACTOR_SEND]
            # b noticed the gap at the next frame (a keepalive ping at the latest).
            assert stats(b).dropped(DropReason.SEQUENCE_GAP) == 1
            assert stats(b).closed(CloseReason.SEQUENCE_GAP) == 1
            assert services[1].received == []
            await c.wait_all_admitted()  # the dialer reconnected
            reply = await (await node_of(a).request(address(b), actor_send(a, b, b"again"))).wait()
            assert reply.terminal_result is TerminalResult.OK
            assert services[1].payloads() == [b"again"]


async def test_delay_holds_a_frame_back_and_later_frames_overtake_it(
    autojump_clock: MockClock,
) -> None:
    plan = FaultPlan()
    services = echoes(2)
    tap = WireTap()
    async with open_cluster(
        2, config=fast(), services=per_node(services), fault_plan=plan, tap=tap
    ) as c:
        await c.wait_all_admitted()
        a, b = c.servers
        rule = plan.delay(0.5, command=ACTOR_SEND, count=1)
        start = trio.current_time()
        await node_of(a).send(address(b), actor_send(a, b, b"first", request=False))
        await node_of(a).send(address(b), actor_send(a, b, b"second", request=False))
        await services[1].wait_received(2)
        assert services[1].payloads() == [b"second", b"first"]
        assert rule.fired == 1
        received = tap.select(
            node=b.identity.node_rid, direction=TapDirection.RECEIVED, command=ACTOR_SEND
        )
        assert [e.record.payload for e in received] == [b"second", b"first"]
        assert received[0].time == start
        assert received[1].time == pytest.approx(start + 0.5)
        assert set(stats(b).frames_dropped) <= {DropReason.DUPLICATE_CONNECTION}  # no gap


async def test_duplicate_delivers_a_record_twice(autojump_clock: MockClock) -> None:
    plan = FaultPlan()
    services = echoes(2)
    tap = WireTap()
    async with open_cluster(
        2, config=fast(), services=per_node(services), fault_plan=plan, tap=tap
    ) as c:
        await c.wait_all_admitted()
        a, b = c.servers
        rule = plan.duplicate(command=ACTOR_SEND, to=b.identity.node_rid, count=1)
        await node_of(a).send(address(b), actor_send(a, b, b"twice", request=False))
        await node_of(a).send(address(b), actor_send(a, b, b"once", request=False))
        await services[1].wait_received(3)
        assert services[1].payloads() == [b"twice", b"twice", b"once"]
        assert rule.fired == 1
        sent = tap.select(node=a.identity.node_rid, direction=TapDirection.SENT, command=24)
        assert [e.record.payload for e in sent] == [b"twice", b"twice", b"once"]


async def test_reorder_swaps_a_frame_with_the_next(autojump_clock: MockClock) -> None:
    plan = FaultPlan()
    services = echoes(2)
    async with open_cluster(2, config=fast(), services=per_node(services), fault_plan=plan) as c:
        await c.wait_all_admitted()
        a, b = c.servers
        rule = plan.reorder(command=ACTOR_SEND, count=1)
        for payload in (b"1", b"2", b"3"):
            await node_of(a).send(address(b), actor_send(a, b, payload, request=False))
        await services[1].wait_received(3)
        assert services[1].payloads() == [b"2", b"1", b"3"]
        assert rule.fired == 1 and not rule.active


async def test_cut_mid_request_gives_link_lost_and_the_reply_still_arrives(
    autojump_clock: MockClock,
) -> None:
    plan = FaultPlan()
    services = echoes(2, auto_reply=False)
    with trio.fail_after(60):
        async with open_cluster(
            2, config=fast(), services=per_node(services), fault_plan=plan
        ) as c:
            await c.wait_all_admitted()
            a, b = c.servers
            rule = plan.cut(command=ACTOR_SEND, deliver=True)  # delivered, then the link breaks
            pending = await node_of(a).request(address(b), actor_send(a, b, b"mid-cut"))
            with pytest.raises(LinkLost):
                await pending.wait()
            assert rule.fired == 1 and not rule.active
            assert node_of(a).peer_state(address(b)) is PeerState.CONNECTING  # a blip, not gone
            assert stats(a).closed(CloseReason.FAULT_CUT) == 1
            ((peer, record),) = await services[1].wait_received(1)
            # b answers over the next connection; a's request is still registered.
            while not (
                stats(b).connections_opened >= 2
                and node_of(b).peer_state(address(a)) is PeerState.ADMITTED
            ):
                await node_of(b).wait_peer_change(address(a))
            await services[1].reply(peer, record)
            reply = await pending.wait()
            assert reply.correlation == pending.correlation
            assert reply.tail.payload == b"mid-cut"
            assert stats(a).requests_pending == 0


async def test_rules_are_removed_and_cleared_at_runtime(autojump_clock: MockClock) -> None:
    plan = FaultPlan()
    services = echoes(2)
    async with open_cluster(2, config=fast(), services=per_node(services), fault_plan=plan) as c:
        await c.wait_all_admitted()
        a, b = c.servers
        dup = plan.duplicate(command=ACTOR_SEND)
        await node_of(a).send(address(b), actor_send(a, b, b"x", request=False))
        await services[1].wait_received(2)
        dup.remove()
        plan.reorder(command=ACTOR_SEND)
        plan.clear()
        assert plan.rules == ()
        await node_of(a).send(address(b), actor_send(a, b, b"y", request=False))
        await services[1].wait_received(3)
        assert services[1].payloads() == [b"x", b"x", b"y"]
        assert dup.fired == 1 and plan.fired() == 1
