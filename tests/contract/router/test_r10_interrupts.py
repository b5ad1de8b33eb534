"""Interrupt propagation (spec 10 §8) and what a forwarded turn's result carries (§9.4)."""

from __future__ import annotations

import logging
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from router_app import Registry, Shared, World, on_time
from router_kit import AGENT, S1, S2
from router_script import Script, Stage, scripted_cluster

from zlink_trio.router import (
    AgentExecutionResult,
    Artifact,
    InterruptedAt,
    InterruptReason,
    NodeId,
    SessionId,
    SessionRouterConfig,
    SessionSignal,
    SignalKind,
    SubmitRequest,
    TurnEvent,
    TurnFailedError,
    TurnInterrupted,
)
from zlink_trio.testing import settle


def _request(text: str, session: SessionId = S1) -> SubmitRequest:
    return SubmitRequest(session_id=session, agent_ref=AGENT, user_input=text)


class SignalLog:
    def __init__(self, target: Any) -> None:
        self._target = target
        self.signals: list[SessionSignal] = []

    async def publish(self, signal: SessionSignal) -> None:
        self.signals.append(signal)
        await self._target.publish(signal)

    def subscribe(self) -> Any:
        return self._target.subscribe()


async def _follow(router: Any, got: list[TurnEvent], task_status: Any) -> None:
    async with router.events(S1) as subscription:
        task_status.started()
        async for frame in subscription:
            got.append(frame)  # noqa: PERF401 (each frame as it arrives)


async def test_r10_105_an_interrupt_on_b_stops_the_turn_on_a(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-105: ``interrupt(id, USER)`` on node B publishes INTERRUPT(id, USER) with origin
    B; the turn running on A ends with InterruptedAt(USER)."""
    t0 = trio.current_time()
    stage = Stage(scripts={"long": Script(duration=100.0)})
    recorded = SignalLog(shared.bus)
    got: list[TurnEvent] = []
    async with (
        scripted_cluster(attrs.evolve(shared, bus=recorded), world, registry, stage, ["a", "b"])
        as (a, b),
        trio.open_nursery() as nursery,
    ):  # fmt: skip
        await nursery.start(_follow, a, got)
        running = await a.submit(_request("long"))
        await trio.sleep(1)
        b.interrupt(S1, InterruptReason.USER)
        with pytest.raises(TurnInterrupted, match="USER"):
            await running.result
        assert on_time(shared, trio.current_time() - t0, 1.0)
        await settle()
        nursery.cancel_scope.cancel()
    interrupts = [s for s in recorded.signals if s.kind is SignalKind.INTERRUPT]
    assert [(s.session_id, s.origin, s.payload["reason"]) for s in interrupts] == [
        (S1, NodeId("b"), "USER")
    ]
    assert got[-1] == TurnEvent(running.turn_id, InterruptedAt(InterruptReason.USER))


async def test_r10_106_a_node_without_turn_or_entry_ignores_an_interrupt(
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R10-106: only a node with an active turn (or an entry) for the session acts on its
    INTERRUPT: node C, which has neither, does nothing and raises nothing — no warning, no
    state change — and still serves the session afterwards; an interrupt for a session no
    node knows is ignored everywhere."""
    stage = Stage(scripts={"long": Script(duration=10.0)})
    caplog.set_level(logging.WARNING, logger="zlink_trio.router")
    async with scripted_cluster(shared, world, registry, stage, ["a", "b", "c"]) as (a, b, c):
        running = await a.submit(_request("long"))
        await trio.sleep(1)
        before = c.statistics()
        b.interrupt(S1, InterruptReason.USER)
        b.interrupt(SessionId("nobody"), InterruptReason.USER)
        await settle()
        assert c.statistics() == before
        with pytest.raises(TurnInterrupted):
            await running.result
        later = await c.submit(_request("later"))
        assert (await later.result).text.startswith("later:")
    assert [r for r in caplog.records if "could not be handled" in r.getMessage()] == []


async def test_r10_107_the_running_turn_s_session_wins_over_the_cache(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-107: S1's entry is LRU-evicted mid-turn (pinned: its turn keeps running on that
    handle); an interrupt — local here, remote from B — stops that running turn, and no new
    handle is opened for S1 to receive it."""
    stage = Stage(scripts={"long": Script(duration=100.0)})
    config = SessionRouterConfig(max_cached_sessions=1)
    async with scripted_cluster(shared, world, registry, stage, ["a", "b"], config=config) as (
        a,
        b,
    ):
        for interrupter in (a, b):
            running = await a.submit(_request("long"))
            await trio.sleep(1)
            await (await a.submit(_request("other", S2))).result  # evicts S1's entry
            assert a.statistics().open_handles == 1
            opens = stage.kinds(S1).count("open")
            interrupter.interrupt(S1, InterruptReason.USER)
            with pytest.raises(TurnInterrupted, match="USER"):
                await running.result
            assert stage.kinds(S1).count("open") == opens
            await settle()
    interrupted = [e[2] for e in stage.log if e[0] == "turn interrupted"]
    starts = [e[2] for e in stage.log if e[0] == "turn start" and e[1] == S1.value]
    assert interrupted == starts  # exactly the running handles, each once


async def test_r10_108_interrupt_races_settle_safely(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-108: an interrupt arriving after its turn ended is a silent no-op (the next turn
    runs untouched); the targeted form naming another turn does nothing to the active one;
    on the node that FORWARDED a turn nothing runs, so its interrupt is a no-op there (and,
    targeted at the forwarded turn that has not started, does not touch the turn running on
    the holder)."""
    stage = Stage(scripts={"t": Script(duration=5.0), "next": Script(duration=5.0)})
    async with scripted_cluster(shared, world, registry, stage, ["a", "b"]) as (a, b):
        done = await a.submit(_request("t"))
        await done.result
        a.interrupt(S1, InterruptReason.USER)
        b.interrupt(S1, InterruptReason.USER, done.turn_id)
        await settle()
        assert (await (await a.submit(_request("next"))).result).text == "next:1"

        active = await a.submit(_request("t"))
        await trio.sleep(shared.s(1))
        a.interrupt(S1, InterruptReason.USER, done.turn_id)  # another turn's id
        b.interrupt(S1, InterruptReason.USER, done.turn_id)
        forwarded = await b.submit(_request("next"))
        assert forwarded.kind.name == "FORWARDED"
        b.interrupt(S1, InterruptReason.USER, forwarded.turn_id)  # not started anywhere
        assert b.statistics().active_passes == 0
        assert (await active.result).text == "t:1"
        assert (await forwarded.result).text == "next:1"
    assert "turn interrupted" not in stage.kinds()


async def test_r10_130_a_forwarded_result_carries_no_artifacts(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-130: the holder's local result keeps the turn's artifacts; the same turn's result
    reaching a forwarding node over TURN_RESULT has none (its text intact)."""
    rich = AgentExecutionResult("report", (Artifact("report.pdf", b"%PDF"),))
    stage = Stage(scripts={"make": Script(duration=5.0, result=rich)})
    async with scripted_cluster(shared, world, registry, stage, ["a", "b"]) as (a, b):
        local = await a.submit(_request("make"))
        remote = await b.submit(_request("make"))
        assert remote.kind.name == "FORWARDED"
        assert (await local.result).artifacts == rich.artifacts
        assert await remote.result == AgentExecutionResult("report")


async def test_r10_131_an_unknown_failure_code_still_completes_the_caller(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-131: a TURN_RESULT from a newer build with code "NEW_CODE" and message "m"
    decodes as FAILED with "m", and the forwarded caller does complete (with
    TurnFailedError), not wait for its deadline."""
    t0 = trio.current_time()
    stage = Stage(scripts={"long": Script(duration=100.0)})
    async with scripted_cluster(shared, world, registry, stage, ["a", "b"]) as (a, b):
        await a.submit(_request("long"))
        await trio.sleep(1)
        waiting = await b.submit(_request("queued"))
        assert waiting.kind.name == "FORWARDED" and waiting.inbound_message_id is not None
        await shared.bus.publish(
            SessionSignal(
                kind=SignalKind.TURN_RESULT,
                session_id=S1,
                origin=NodeId("newer-build"),
                payload={
                    "messageId": waiting.inbound_message_id.value,
                    "status": "failed",
                    "code": "NEW_CODE",
                    "message": "m",
                },
            )
        )
        with pytest.raises(TurnFailedError) as failed:
            await waiting.result
        assert str(failed.value) == "m"
        assert on_time(shared, trio.current_time() - t0, 1.0)
