"""Requests: correlations, reply routing by (peer, correlation), abandonment."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from mesh_kit import actor_send, address, echoes, fast, per_node, stats
from trio.testing import MockClock

from zlink_trio.errors import InvalidOperation
from zlink_trio.mesh.reasons import DropReason
from zlink_trio.testing import TapDirection, WireTap, node_of, open_cluster
from zlink_trio.wire import Command, TerminalReply


async def test_correlations_are_unique_and_replies_match_them(autojump_clock: MockClock) -> None:
    services = echoes(2)
    async with open_cluster(2, config=fast(), services=per_node(services)) as c:
        await c.wait_all_admitted()
        a, b = c.servers
        pendings = [
            await node_of(a).request(address(b), actor_send(a, b, bytes([i]))) for i in range(20)
        ]
        assert len({p.correlation for p in pendings}) == 20
        replies = [await p.wait() for p in reversed(pendings)]
        assert [r.tail.payload for r in replies] == [bytes([i]) for i in reversed(range(20))]
        assert stats(a).requests_pending == 0


async def test_reply_from_another_peer_or_unknown_correlation_is_dropped(
    autojump_clock: MockClock,
) -> None:
    services = echoes(3, auto_reply=False)
    tap = WireTap()
    async with open_cluster(3, config=fast(), services=per_node(services), tap=tap) as c:
        await c.wait_all_admitted()
        a, b, other = c.servers
        pending = await node_of(a).request(address(b), actor_send(a, b))
        ((peer, record),) = await services[1].wait_received(1)
        await node_of(other).send(address(a), TerminalReply.ok(pending.correlation))
        await node_of(other).send(address(a), TerminalReply.ok(pending.correlation + 1000))
        await tap.wait_for(
            count=2,
            node=a.identity.node_rid,
            direction=TapDirection.RECEIVED,
            command=Command.TERMINAL_REPLY,
            peer=other.identity.node_rid,
        )
        await services[1].reply(peer, record)
        reply = await pending.wait()
        assert reply.tail.payload == record.payload
        assert stats(a).dropped(DropReason.REPLY_WRONG_PEER) == 1
        assert stats(a).dropped(DropReason.UNKNOWN_CORRELATION) == 1


async def test_cancelled_wait_abandons_the_request(autojump_clock: MockClock) -> None:
    services = echoes(2, auto_reply=False)
    async with open_cluster(2, config=fast(), services=per_node(services)) as c:
        await c.wait_all_admitted()
        a, b = c.servers
        pending = await node_of(a).request(address(b), actor_send(a, b))
        with trio.move_on_after(1) as scope:  # the caller owns the timeout
            await pending.wait()
        assert scope.cancelled_caught
        assert stats(a).requests_pending == 0
        with pytest.raises(InvalidOperation):
            await pending.wait()
        ((peer, record),) = await services[1].wait_received(1)
        await services[1].reply(peer, record)
        await trio.testing.wait_all_tasks_blocked()
        assert stats(a).dropped(DropReason.UNKNOWN_CORRELATION) == 1


async def test_handlers_are_registered_once_before_start(autojump_clock: MockClock) -> None:
    async with open_cluster(1, config=fast()) as c:
        node = node_of(c.servers[0])

        async def handler(peer: object, record: object) -> None: ...

        with pytest.raises(InvalidOperation):
            node.on(Command.ACTOR_SEND, handler)  # started already
    services = echoes(1)

    async def claim_twice(context: object, *, task_status: object) -> None:
        for command in (Command.TERMINAL_REPLY, Command.PEER_PING, Command.ACTOR_SEND):
            with pytest.raises(InvalidOperation):
                context.node.on(command, handler)  # type: ignore[attr-defined]
        task_status.started()  # type: ignore[attr-defined]
        await trio.sleep_forever()

    async with open_cluster(1, config=fast(), services=[services[0], claim_twice]):
        pass
