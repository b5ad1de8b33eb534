"""The per-turn event relay (spec 10 §5.5): a producer that never blocks, local subscribers
that lose their oldest frames, the bounded remote queue with its three overflow grades,
counted drops reported at the relay's close, and the three flat payload codecs."""

from __future__ import annotations

import json
import logging
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from router_app import Registry, Shared, World, builder, on_time
from router_kit import AGENT, NODE_A, S1
from router_script import Script, ScriptedOpener, Stage, scripted_cluster

from zlink_trio.router import (
    AgentExecutionEvent,
    AgentExecutionResult,
    Artifact,
    AssistantReasoningDelta,
    AssistantTextDelta,
    ClusterSessionStatus,
    ExecutionCompleted,
    ExecutionError,
    RemoteEventQueue,
    SessionActivity,
    SessionSignal,
    SignalKind,
    SubmitRequest,
    ToolUseCompleted,
    ToolUseStarted,
    TurnEvent,
    TurnId,
    TurnSucceeded,
    event_from_wire,
    event_to_wire,
    open_session_router,
    turn_result_from_wire,
    turn_result_to_wire,
)
from zlink_trio.testing import settle


def _request(text: str) -> SubmitRequest:
    return SubmitRequest(session_id=S1, agent_ref=AGENT, user_input=text)


class HeldEvents:
    """A node's bus on which EVENT publishes wait until ``open`` is set (a slow Redis);
    records every EVENT payload that did leave the node."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self.open = trio.Event()
        self.published: list[dict[str, Any]] = []

    async def publish(self, signal: SessionSignal) -> None:
        if signal.kind is SignalKind.EVENT:
            await self.open.wait()
            self.published.append(dict(signal.payload))
        await self._target.publish(signal)

    def subscribe(self) -> Any:
        return self._target.subscribe()


async def _collect(subscription: Any, into: list[TurnEvent], task_status: Any) -> None:
    task_status.started()
    async for frame in subscription:
        into.append(frame)  # noqa: PERF401 (each frame as it arrives)


async def test_r10_46_a_subscriber_without_demand_never_stalls_the_turn(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-46: a local subscriber that reads nothing while a turn emits 1000 frames: the
    turn still completes on time (5 s); afterwards the subscriber gets only the newest 256
    frames (its buffer), ending with the terminal frame; its oldest frames were dropped,
    and counted."""
    deltas = [AssistantTextDelta(f"d{i}") for i in range(1000)]
    stage = Stage(scripts={"t": Script(duration=5.0, frames=deltas)})
    async with scripted_cluster(shared, world, registry, stage, ["a"]) as (a,):
        async with a.events(S1) as subscription:
            t0 = trio.current_time()  # from the submit: the routers' start is not the turn's
            answer = await (await a.submit(_request("t"))).result
            assert on_time(shared, trio.current_time() - t0, 5.0) and answer.text == "t:1"
            await a.release_session(S1)  # completes the subscription
            frames = [frame async for frame in subscription]
        assert subscription.dropped == 1001 - 256
        assert a.statistics().dropped_events == 1001 - 256
    assert len(frames) == 256
    assert [f.event for f in frames[:-1]] == deltas[-255:]
    assert isinstance(frames[-1].event, ExecutionCompleted)


async def test_r10_47_a_slow_publish_never_delays_the_turn(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-47: with the holder's EVENT publishes held, its turn still ends at its own time
    (2 s) and its caller has the answer; the peer's subscriber has nothing yet; once the bus
    moves, the dispatcher publishes the frames and the peer receives all of them."""
    frames = [AssistantReasoningDelta("r"), AssistantTextDelta("t"), ToolUseStarted("x")]
    stage = Stage(scripts={"t": Script(duration=2.0, frames=frames)}, scale=shared.scale)
    held = HeldEvents(shared.bus)
    opener = ScriptedOpener(stage)
    got: list[TurnEvent] = []
    async with (
        open_session_router(
            builder(attrs.evolve(shared, bus=held), world, registry, "a", session_opener=opener)
        ) as a,
        open_session_router(builder(shared, world, registry, "b")) as b,
        b.events(S1) as subscription,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(_collect, subscription, got)
        submitted = trio.current_time()
        answer = await (await a.submit(_request("t"))).result
        assert on_time(shared, trio.current_time() - submitted, 2.0) and answer.text == "t:1"
        await trio.sleep(shared.s(30))
        assert got == []
        held.open.set()
        await settle()
        assert [f.event for f in got] == [*frames, ExecutionCompleted(answer)]
        nursery.cancel_scope.cancel()


def test_r10_48_a_tiny_queue_keeps_every_structural_frame() -> None:
    """R10-48: a remote queue of 3 with nothing draining it, fed a mix of every grade:
    what is left is exactly the structural frames and the terminal one (grades 0 and 1
    went first)."""
    t = TurnId("t")
    queue = RemoteEventQueue(capacity=3)
    mix: list[AgentExecutionEvent] = [
        AssistantReasoningDelta("r1"),
        ToolUseStarted("search"),
        AssistantTextDelta("x1"),
        AssistantReasoningDelta("r2"),
        ToolUseCompleted("search", 5),
        AssistantTextDelta("x2"),
        AssistantReasoningDelta("r3"),
        ExecutionCompleted(AgentExecutionResult("done")),
        AssistantTextDelta("x3"),
    ]
    for event in mix:
        queue.put(S1, TurnEvent(t, event))
    assert [f.event for f in queue.buffered()] == [
        ToolUseStarted("search"),
        ToolUseCompleted("search", 5),
        ExecutionCompleted(AgentExecutionResult("done")),
    ]
    assert queue.dropped == len(mix) - 3


async def test_r10_48_under_a_blocked_publisher_the_remote_side_gets_every_grade_2_frame(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-48 (router): a turn floods 2500 frames (2 reasoning, 2 text, 1 tool frame per
    step) into the 1024-frame remote queue while the publisher is blocked: what leaves the
    holder afterwards includes every one of the 500 tool frames and the terminal frame, and
    the peer's subscriber completes its turn (it sees ExecutionCompleted)."""
    flood: list[AgentExecutionEvent] = []
    for i in range(500):
        flood += [AssistantReasoningDelta(f"r{i}"), AssistantReasoningDelta(f"R{i}")]
        flood += [AssistantTextDelta(f"t{i}"), AssistantTextDelta(f"T{i}")]
        flood.append(ToolUseCompleted(f"tool{i}", i))
    stage = Stage(scripts={"t": Script(duration=1.0, frames=flood)})
    held = HeldEvents(shared.bus)
    terminal: list[TurnEvent] = []
    async with (
        open_session_router(
            builder(
                attrs.evolve(shared, bus=held),
                world,
                registry,
                "a",
                session_opener=ScriptedOpener(stage),
            )
        ) as a,
        open_session_router(builder(shared, world, registry, "b")) as b,
        b.events(S1) as subscription,
    ):
        await (await a.submit(_request("t"))).result
        held.open.set()
        with trio.fail_after(60):
            async for frame in subscription:
                if frame.event.is_terminal:
                    terminal.append(frame)
                    break
        dropped = a.statistics().dropped_events
    types = [p["type"] for p in held.published]
    assert types.count("toolUseCompleted") == 500
    assert types[-1] == "completed"
    assert 0 < dropped == len(flood) + 1 - len(held.published)
    assert isinstance(terminal[0].event, ExecutionCompleted)


async def test_r10_50_drops_are_counted_and_reported_at_close(
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R10-50: a forced overflow (2000 text deltas, then the terminal frame, into the
    1024-frame queue, the publisher blocked): the drop count the relay reports at its close
    — a warning naming it, and ``statistics().dropped_events`` — equals the number of frames
    missing at the receiver, and the report is there as soon as the turn ended."""
    deltas = [AssistantTextDelta(f"d{i}") for i in range(2000)]
    stage = Stage(scripts={"t": Script(duration=1.0, frames=deltas)})
    held = HeldEvents(shared.bus)
    caplog.set_level(logging.WARNING, logger="zlink_trio.router")
    async with open_session_router(
        builder(
            attrs.evolve(shared, bus=held),
            world,
            registry,
            "a",
            session_opener=ScriptedOpener(stage),
        )
    ) as a:
        await (await a.submit(_request("t"))).result
        reported = a.statistics().dropped_events
        messages = [r.getMessage() for r in caplog.records]
        assert any(f"{reported} frame(s) dropped" in m for m in messages)
        held.open.set()
        await settle()
        received = len(held.published)
    assert 0 < reported == 2001 - received
    assert held.published[-1]["type"] == "completed"


async def test_r10_51_codecs_lose_exactly_what_they_say(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-51: over the wire an error's cause is its message string only (no type, no
    stack), a tool's non-primitive input values are gone, durations are whole ms, a turn
    result has no artifacts, and a status snapshot carries no session options."""
    stage = Stage(scripts={"bad": Script(fail=ValueError("boom"))})
    got: list[TurnEvent] = []
    async with (
        scripted_cluster(shared, world, registry, stage, ["a", "b"]) as (a, b),
        b.events(S1) as subscription,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(_collect, subscription, got)
        with pytest.raises(Exception, match="boom"):
            await (await a.submit(_request("bad"))).result
        await settle()
        nursery.cancel_scope.cancel()
    error = got[-1].event
    assert isinstance(error, ExecutionError)
    assert type(error.message) is str and "boom" in error.message
    assert set(attrs.asdict(error)) == {"message"}

    t = TurnId("t")
    wire = event_to_wire(t, ToolUseStarted("search", (("q", "cats"),)))
    wire["input"] = {"q": "cats", "n": 3, "deep": {"a": 1}, "many": [1, 2], "none": None}
    decoded = event_from_wire(json.loads(json.dumps(wire)))
    assert decoded == TurnEvent(t, ToolUseStarted("search", (("q", "cats"), ("n", "3"))))

    done = event_to_wire(t, ToolUseCompleted("search", 1500))
    assert done["durationMs"] == 1500 and isinstance(done["durationMs"], int)
    assert event_from_wire(done) == TurnEvent(t, ToolUseCompleted("search", 1500))

    rich = TurnSucceeded(AgentExecutionResult("answer", (Artifact("f.txt", b"data"),)))
    _, back = turn_result_from_wire(json.loads(json.dumps(turn_result_to_wire(t, rich))))
    assert isinstance(back, TurnSucceeded) and back.result == AgentExecutionResult("answer")
    assert back.result.artifacts == ()

    status = ClusterSessionStatus(
        session_id=S1, origin=NODE_A, seq=2, activity=SessionActivity.RUNNING, active_turn_id=t
    )
    payload = status.to_wire()
    assert "options" not in payload
    assert ClusterSessionStatus.from_wire(json.loads(json.dumps(payload))) == status


def test_r10_52_numbers_are_read_as_numbers_and_unknown_types_are_ignored() -> None:
    """R10-52: an int field arriving as a float (3.0) or a long as an int decodes right;
    an unknown ``type`` (a newer node's frame) decodes to None without raising, and so does
    a malformed payload; unknown extra fields are ignored."""
    t = TurnId("t")
    widened = {"turnId": "t", "type": "toolUseCompleted", "tool": "s", "durationMs": 3.0}
    assert event_from_wire(widened) == TurnEvent(t, ToolUseCompleted("s", 3))
    big = {"turnId": "t", "type": "toolUseCompleted", "tool": "s", "durationMs": 2**40}
    assert event_from_wire(big) == TurnEvent(t, ToolUseCompleted("s", 2**40))
    status = ClusterSessionStatus(
        session_id=S1, origin=NODE_A, seq=4, activity=SessionActivity.IDLE, observed_at=7.0
    )
    payload = status.to_wire()
    payload["seq"], payload["observedAt"] = 4.0, 7
    assert ClusterSessionStatus.from_wire(payload) == status
    assert event_from_wire({"turnId": "t", "type": "fromTheFuture", "x": 1}) is None
    assert event_from_wire({"turnId": "t", "type": "toolUseCompleted", "tool": "s"}) is None
    assert event_from_wire({"turnId": "t", "type": "toolUseCompleted", "tool": "s",
                            "durationMs": 2.5}) is None  # fmt: skip
    newer = {"turnId": "t", "type": "textDelta", "text": "x", "addedLater": {"k": 1}}
    assert event_from_wire(newer) == TurnEvent(t, AssistantTextDelta("x"))


async def test_r10_42_a_restarted_holder_s_status_is_accepted(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-42 (the router's seq stamps): a node that restarts under the same NodeId after
    many heartbeats takes its session again; its peer's projection accepts the new
    incarnation's snapshots (its seq stamps continue above the old ones) instead of keeping
    the dead incarnation's view as newer."""
    stage = Stage(scripts={"old": Script(duration=100.0), "new": Script(duration=100.0)})
    async with open_session_router(builder(shared, world, registry, "b")) as b:
        async with scripted_cluster(shared, world, registry, stage, ["a"]) as (a,):
            old = await a.submit(_request("old"))
            await trio.sleep(shared.s(95))  # nine heartbeats
            seen = b.status(S1)
            assert seen is not None and seen.active_turn_id == old.turn_id
            await old.result
        async with scripted_cluster(shared, world, registry, stage, ["a"]) as (a2,):
            new = await a2.submit(_request("new"))
            await trio.sleep(shared.s(15))
            seen = b.status(S1)
            assert seen is not None and seen.active_turn_id == new.turn_id
            await new.result
