"""Pending replies: matched on (peer rid, correlation); LinkLost once, then still wait."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from zlink_trio.errors import InvalidOperation
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid
from zlink_trio.mesh.api import LinkLost, PeerIdentity
from zlink_trio.mesh.reasons import DropReason
from zlink_trio.mesh.replies import ReplyRegistry, step_aside

PEER = PeerIdentity(MeshName("m"), NodeRid.new(), NodeGeneration(1))
OTHER = PeerIdentity(MeshName("m"), NodeRid.new(), NodeGeneration(1))


class _Conn:
    """What the registry needs of a connection: its count of requests in flight."""

    def __init__(self) -> None:
        self.in_flight = 0


CONN = _Conn()


async def test_a_request_is_in_flight_on_its_connection_until_settled() -> None:
    registry = ReplyRegistry()
    conn = _Conn()
    answered, abandoned, lost, expired = (
        registry.register(PEER, conn)  # type: ignore[arg-type]
        for _ in range(4)
    )
    assert conn.in_flight == 4
    assert registry.deliver(PEER, answered.correlation, "reply") is None
    abandoned.discard()
    abandoned.discard()  # (twice: counted once)
    assert conn.in_flight == 2
    registry.connection_broke(conn)  # type: ignore[arg-type]
    assert conn.in_flight == 0  # both went out on the broken connection
    expired.expire(RuntimeError("late"))
    lost.discard()
    assert conn.in_flight == 0


async def test_reply_goes_to_its_waiter_only_from_its_peer() -> None:
    registry = ReplyRegistry()
    first = registry.register(PEER, CONN)  # type: ignore[arg-type]
    second = registry.register(PEER, CONN)  # type: ignore[arg-type]
    assert second.correlation == first.correlation + 1
    assert registry.deliver(OTHER, first.correlation, "forged") is DropReason.REPLY_WRONG_PEER
    assert registry.deliver(PEER, 999, "late") is DropReason.UNKNOWN_CORRELATION
    assert registry.deliver(PEER, first.correlation, "one") is None
    assert await first.wait() == "one"
    assert len(registry) == 1
    second.discard()
    assert len(registry) == 0
    assert registry.deliver(PEER, second.correlation, "two") is DropReason.UNKNOWN_CORRELATION


async def test_link_lost_once_then_a_later_reply_is_delivered() -> None:
    registry = ReplyRegistry()
    pending = registry.register(PEER, CONN)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        got: list[object] = []

        async def waiter() -> None:
            with pytest.raises(LinkLost):
                await pending.wait()
            got.append(await pending.wait())

        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        registry.connection_broke(CONN)  # type: ignore[arg-type]
        await trio.testing.wait_all_tasks_blocked()
        registry.connection_broke(CONN)  # type: ignore[arg-type]  # already reported
        registry.deliver(PEER, pending.correlation, "after reconnect")
    assert got == ["after reconnect"]


async def test_cancelled_wait_abandons() -> None:
    registry = ReplyRegistry()
    pending = registry.register(PEER, CONN)  # type: ignore[arg-type]
    with trio.move_on_after(0.01):
        await pending.wait()
    assert len(registry) == 0
    with pytest.raises(InvalidOperation):
        await pending.wait()


async def test_only_one_waiter() -> None:
    registry = ReplyRegistry()
    pending = registry.register(PEER, CONN)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pending.wait)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(trio.BusyResourceError):
            await pending.wait()
        registry.deliver(PEER, pending.correlation, "done")


async def test_expire_ends_the_wait_and_forgets_the_request() -> None:
    """expire(error): a waiting task raises ``error`` at once (a wait after it too), the
    registration is gone (a late reply is dropped), and a reply that came first wins."""
    registry = ReplyRegistry()
    pending = registry.register(PEER, CONN)  # type: ignore[arg-type]
    errors: list[BaseException] = []
    async with trio.open_nursery() as nursery:

        async def waiter() -> None:
            try:
                await pending.wait()
            except TimeoutError as exc:
                errors.append(exc)

        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        pending.expire(TimeoutError("deadline"))
    assert [str(e) for e in errors] == ["deadline"]
    assert len(registry) == 0
    assert registry.deliver(PEER, pending.correlation, "late") is DropReason.UNKNOWN_CORRELATION
    with pytest.raises(TimeoutError):
        await pending.wait()
    pending.expire(TimeoutError("again"))  # idempotent
    answered = registry.register(PEER, CONN)  # type: ignore[arg-type]
    registry.deliver(PEER, answered.correlation, "first")
    answered.expire(TimeoutError("too late"))
    assert await answered.wait() == "first"


async def _park_aside(registry: ReplyRegistry, log: list[str]) -> None:
    """A reader: delivers the reply of the lone request in flight, steps aside, logs."""
    conn = _Conn()
    pending = registry.register(PEER, conn)  # type: ignore[arg-type]

    async def caller() -> None:
        assert await pending.wait() == "reply"
        log.append("caller ran")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller)
        await trio.testing.wait_all_tasks_blocked()
        me = trio.lowlevel.current_task()
        found = registry.deliver_aside(PEER, pending.correlation, "reply", me)
        assert found is pending
        with trio.fail_after(10):  # (a guard: the caller reschedules this task at once)
            await step_aside(pending)
        log.append("reader reads on")


async def test_a_reader_that_woke_the_only_caller_reads_on_after_that_caller_ran() -> None:
    log: list[str] = []
    await _park_aside(ReplyRegistry(), log)
    assert log == ["caller ran", "reader reads on"]


async def test_a_reader_does_not_step_aside_when_other_requests_are_in_flight() -> None:
    registry = ReplyRegistry()
    conn = _Conn()
    first = registry.register(PEER, conn)  # type: ignore[arg-type]
    registry.register(PEER, conn)  # type: ignore[arg-type]  # still in flight
    me = trio.lowlevel.current_task()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(first.wait)
        await trio.testing.wait_all_tasks_blocked()
        assert registry.deliver_aside(PEER, first.correlation, "reply", me) is None
    # Nobody waits yet (the reply came first): nothing to step aside for.
    late = ReplyRegistry()
    alone = late.register(PEER, _Conn())  # type: ignore[arg-type]
    assert late.deliver_aside(PEER, alone.correlation, "reply", me) is None
    assert await alone.wait() == "reply"
    assert late.deliver_aside(OTHER, 5, "x", me) is DropReason.UNKNOWN_CORRELATION
    forged = late.register(PEER, _Conn())  # type: ignore[arg-type]
    assert late.deliver_aside(OTHER, forged.correlation, "x", me) is DropReason.REPLY_WRONG_PEER


async def test_a_reader_cancelled_while_aside_leaves_and_is_not_rescheduled() -> None:
    registry = ReplyRegistry()
    pending = registry.register(PEER, _Conn())  # type: ignore[arg-type]
    got: list[object] = []

    async def caller() -> None:
        got.append(await pending.wait())

    async def reader() -> None:
        with trio.CancelScope() as scope:
            me = trio.lowlevel.current_task()
            assert registry.deliver_aside(PEER, pending.correlation, "reply", me) is pending
            scope.cancel()
            await step_aside(pending)  # cancelled before the caller ran: leaves at once
        got.append(scope.cancelled_caught)
        # The task ends here: a caller that rescheduled it now would break the run.

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(reader)
    assert sorted(map(str, got)) == ["True", "reply"]
