"""A router closed while its pass is inside a collect (found running the R10 suite on
PostgreSQL, where a collect is a statement in flight): the close waits for that collect —
it is never cancelled, since it removes what it returns — and the pass hands what it took
back to the inbox before the lease goes back; a hand-back that fails is answered."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing
from router_app import Registry, Shared, World, cluster
from router_kit import AGENT, S1, message

from zlink_trio.router import (
    IdempotencyKey,
    InboundMessage,
    Priority,
    SessionEvicted,
    SessionId,
    SessionSignal,
    SignalKind,
    SubmitRequest,
)


class _GatedInbox:
    """The shared inbox, whose collects wait at a gate while ``hold`` is set, whose
    deliveries are logged (and fail while ``fail_deliveries`` is set)."""

    def __init__(self, target: Any, log: list[str]) -> None:
        self._target = target
        self._log = log
        self.hold = False
        self.fail_deliveries = False
        self.entered = trio.Event()
        self.go = trio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    async def collect(self, session_id: SessionId, up_to: Priority) -> tuple[InboundMessage, ...]:
        if self.hold:
            self.entered.set()
            await self.go.wait()
        result: tuple[InboundMessage, ...] = await self._target.collect(session_id, up_to)
        return result

    async def deliver(self, message: InboundMessage) -> None:
        text = getattr(message.user_input, "text", "?")
        if self.fail_deliveries:
            self._log.append(f"deliver-failed {text}")
            raise OSError("injected: the inbox refused the delivery")
        self._log.append(f"deliver {text}")
        await self._target.deliver(message)


class _LoggedLeases:
    def __init__(self, target: Any, log: list[str]) -> None:
        self._target = target
        self._log = log

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    async def release(self, lease: Any) -> bool:
        self._log.append("lease released")
        return bool(await self._target.release(lease))


class _LoggedBus:
    """The shared bus, logging doorbells; a TURN_RESULT takes ``result_delay`` to publish."""

    def __init__(self, target: Any, log: list[str], result_delay: float = 0.0) -> None:
        self._target = target
        self._log = log
        self._result_delay = result_delay

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    async def publish(self, signal: SessionSignal) -> None:
        if signal.kind is SignalKind.MESSAGE_ENQUEUED:
            self._log.append(f"rung by {signal.origin.value}")
        if signal.kind is SignalKind.TURN_RESULT and self._result_delay:
            await trio.sleep(self._result_delay)
        await self._target.publish(signal)


async def _close_during_the_collect(a: Any, gated: _GatedInbox) -> None:
    """Close ``a`` while its pass waits inside its post-turn collect; check the close
    waits for that collect (the lease still held), then let the collect go."""
    async with trio.open_nursery() as nursery:
        closed = trio.Event()

        async def close() -> None:
            await a.aclose()
            closed.set()

        nursery.start_soon(close)
        await trio.testing.wait_all_tasks_blocked()
        assert not closed.is_set()  # the close waits for the collect in flight ...
        assert a.statistics().held_leases == 1  # ... holding the lease
        gated.go.set()


async def test_r10_84_a_close_waits_for_the_collect_in_flight_and_hands_back_first(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-84 (§7.1 F4, §6.3 C): ``aclose()`` of a router whose pass is inside its post-turn
    collect waits for that collect; what it took goes back to the inbox before the lease is
    given back, and the doorbell rings after that, so the next holder runs it; once
    ``aclose()`` has returned the closed node takes nothing more: a message delivered after
    it runs in the next holder's pass, a NOW one first."""
    log: list[str] = []
    gated = _GatedInbox(shared.inbox, log)
    leased = attrs.evolve(
        shared,
        inbox=gated,
        leases=_LoggedLeases(shared.leases, log),
        bus=_LoggedBus(shared.bus, log),
    )
    async with cluster(leased, world, registry, ["a", "b"]) as (a, b):
        first = await a.submit(SubmitRequest(session_id=S1, agent_ref=AGENT, user_input="a-turn"))
        await trio.sleep(0.5)  # the turn runs (1 s); its post-turn collect will wait
        gated.hold = True
        with trio.fail_after(5):
            await first.result
            await gated.entered.wait()  # a's pass is inside its post-turn collect
        gated.hold = False
        await shared.inbox.deliver(message("in-the-collect"))  # that collect takes it
        await _close_during_the_collect(a, gated)
        assert log == ["deliver in-the-collect", "lease released", "rung by a"]
        await trio.sleep(2)  # rung after the lease went back: b runs it
        await shared.inbox.deliver(message("after-close"))
        await trio.sleep(1)
        await shared.inbox.deliver(message("after-close-now", priority=Priority.NOW))
        await trio.sleep(1)
        await (await b.submit(SubmitRequest(session_id=S1, agent_ref=AGENT, user_input="b"))).result
    assert [(t.node, t.text) for t in world.turns] == [
        ("a", "a-turn"),
        ("b", "in-the-collect"),
        ("b", "after-close-now"),
        ("b", "after-close"),
        ("b", "b"),
    ]


@pytest.mark.parametrize("keyed", [False, True], ids=["keyless", "keyed"])
async def test_r10_84_a_failed_hand_back_is_answered_and_frees_the_key(
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
    keyed: bool,
) -> None:
    """R10-84 (§6.3 C, §7.2): a message the closing node's collect took and could not hand
    back (the inbox refuses the delivery) is not silently lost: its caller hears at once
    that it did not run (SessionEvicted, long before the forward TTL), and its key is freed,
    so a retry under the same key runs on the next holder."""
    log: list[str] = []
    gated = _GatedInbox(shared.inbox, log)
    async with cluster(attrs.evolve(shared, inbox=gated), world, registry, ["a", "b"]) as (a, b):
        first = await a.submit(SubmitRequest(session_id=S1, agent_ref=AGENT, user_input="a-turn"))
        await trio.sleep(0.5)
        key = IdempotencyKey("k-close") if keyed else None
        request = SubmitRequest(
            session_id=S1, agent_ref=AGENT, user_input="from-b", idempotency_key=key
        )
        forwarded = await b.submit(request)  # a holds S1: into the inbox
        gated.hold = True
        with trio.fail_after(5):
            await first.result
            await gated.entered.wait()  # a's post-turn collect will take "from-b"
        gated.hold = False
        gated.fail_deliveries = True
        started = trio.current_time()
        await _close_during_the_collect(a, gated)
        gated.fail_deliveries = False
        assert log == ["deliver from-b", "deliver-failed from-b"]
        with trio.fail_after(5), pytest.raises(SessionEvicted, match="did not run"):
            await forwarded.result
        assert trio.current_time() - started < 5
        retried = await b.submit(request)
        with trio.fail_after(5):
            answer = await retried.result
        assert answer is not None
    assert [(t.node, t.text) for t in world.turns] == [("a", "a-turn"), ("b", "from-b")]


async def test_r10_84_what_an_interrupted_pass_still_queued_goes_back_before_the_lease(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-84 (§6.3 C): ``aclose()`` interrupts a collected turn (SYSTEM_SHUTDOWN) while the
    same collect's next message waits: that message is back in the inbox before the lease
    is given back (the pass put it back before the turn started, R10-72) and is rung for
    after, and the next holder runs it. (A TURN_RESULT
    takes 0.1 s to publish here: the interrupted turn's end steps outlast the close's.)"""
    log: list[str] = []
    world.duration = lambda text: 100.0 if text == "x1" else 1.0
    logged = attrs.evolve(
        shared,
        inbox=_GatedInbox(shared.inbox, log),
        leases=_LoggedLeases(shared.leases, log),
        bus=_LoggedBus(shared.bus, log, result_delay=0.1),
    )
    async with cluster(logged, world, registry, ["a", "b"]) as (a, _b):
        first = await a.submit(SubmitRequest(session_id=S1, agent_ref=AGENT, user_input="a-turn"))
        await trio.sleep(0.5)
        await shared.inbox.deliver(message("x1"))  # one collect after a-turn takes both
        await shared.inbox.deliver(message("x2"))
        await first.result
        await trio.sleep(1)  # x1 runs (100 s), x2 waits in the inbox again
        assert [t.text for t in world.turns] == ["a-turn", "x1"]
        await a.aclose()
        assert log == ["deliver x2", "lease released", "rung by a"]
        await trio.sleep(2)  # rung after the lease went back: b runs x2
    assert [(t.node, t.text, t.interrupted) for t in world.turns] == [
        ("a", "a-turn", False),
        ("a", "x1", True),
        ("b", "x2", False),
    ]
