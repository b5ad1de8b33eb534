"""Frames (spec 10 §3.3 EVENT, §5.1 events(), §5.5, §7.1 F5): the relay per turn, local and
remote subscribers, the remote queue's overflow grades, the EVENT payload codec."""

from __future__ import annotations

import json

import attrs
import pytest
import trio
import trio.testing
from router_app import Registry, Shared, World, cluster
from router_kit import AGENT, NODE_A, S1

from zlink_trio.router import (
    AgentExecutionResult,
    AssistantReasoningDelta,
    AssistantTextDelta,
    EventSubscription,
    ExecutionCompleted,
    ExecutionError,
    InterruptedAt,
    InterruptReason,
    RemoteEventQueue,
    SessionSignal,
    SignalKind,
    SubmitRequest,
    ToolUseCompleted,
    TurnEvent,
    TurnId,
    TurnInterrupted,
    event_from_wire,
    event_to_wire,
)
from zlink_trio.testing import settle


def _request(text: str = "hi") -> SubmitRequest:
    return SubmitRequest(session_id=S1, agent_ref=AGENT, user_input=text)


def _drain(subscription: EventSubscription) -> list[TurnEvent]:
    frames: list[TurnEvent] = []
    while subscription._frames:  # what arrived so far, without waiting
        frames.append(subscription._frames.popleft())
    return frames


async def test_r10_25_a_non_holder_subscriber_receives_the_holder_s_frames(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-25 / R10-15: events(id) on a node that runs nothing yields the holder's frames,
    relayed as EVENT signals over the serializing bus, each stamped with its TurnId, ending
    with the terminal frame."""
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b), b.events(S1) as remote:
        disposition = await a.submit(_request())
        await disposition.result
        await settle()
        frames = _drain(remote)
    assert [f.event for f in frames] == [
        AssistantTextDelta("thinking about hi"),
        ExecutionCompleted(AgentExecutionResult("a:hi:0")),
    ]
    assert {f.turn_id for f in frames} == {disposition.turn_id}


async def test_r10_85_a_forwarded_turn_s_frames_reach_local_and_remote_subscribers(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-85: the relay given to the turn fans out to the holder's local subscribers and,
    over the EVENT rail, to the submitter's."""
    world.duration = lambda _t: 3.0
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
        await (await a.submit(_request("warm"))).result
        await settle()  # the warm turn's frames are delivered
        async with a.events(S1) as local, b.events(S1) as remote:
            forwarded = await b.submit(_request("fwd"))
            await forwarded.result
            await settle()
            got_local, got_remote = _drain(local), _drain(remote)
    assert got_local == got_remote
    assert [f.turn_id for f in got_local] == [forwarded.turn_id] * 2
    assert isinstance(got_local[-1].event, ExecutionCompleted)


async def test_r10_45_one_relay_per_turn_stamps_its_own_turn_id(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-45: over two consecutive turns every frame carries its own turn's id; a per-turn
    view never sees another turn's frame."""
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b), b.events(S1) as remote:
        one = await a.submit(_request("one"))
        await one.result
        two = await a.submit(_request("two"))
        await two.result
        await settle()
        frames = _drain(remote)
    by_turn = {t: [f.event for f in frames if f.turn_id == t] for t in (one.turn_id, two.turn_id)}
    assert by_turn[one.turn_id][0] == AssistantTextDelta("thinking about one")
    assert by_turn[two.turn_id][0] == AssistantTextDelta("thinking about two")
    assert all(len(v) == 2 for v in by_turn.values())


async def test_interrupted_turns_end_with_interrupted_at(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """§5.1 interrupt: the turn's last frame is InterruptedAt(reason)."""
    world.duration = lambda _t: 50.0
    async with cluster(shared, world, registry, ["a"]) as (a,), a.events(S1) as local:
        running = await a.submit(_request())
        await settle()
        a.interrupt(S1, InterruptReason.USER)
        with pytest.raises(TurnInterrupted):
            await running.result
        frames = _drain(local)
    assert frames[-1].event == InterruptedAt(InterruptReason.USER)


async def test_r10_11_evict_completes_the_peer_s_subscribers(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-11 (subscriber part): on a peer that receives EVICT, events() subscribers
    complete (the iteration ends)."""
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
        await (await a.submit(_request())).result
        await settle()
        async with b.events(S1) as remote:
            await a.release_session(S1)
            seen = [frame async for frame in remote]
    assert seen == []
    assert remote.completed


def test_r10_49_overflow_drops_by_grade() -> None:
    """R10-49 / R10-48: a full remote queue drops, among buffered frames not above the
    incoming grade, the oldest of the lowest grade; else the incoming one; structural
    frames go only to make room for a structural frame when nothing else can."""
    t = TurnId("t")

    def fr(e: object) -> TurnEvent:
        return TurnEvent(t, e)  # type: ignore[arg-type]

    text1, text2 = fr(AssistantTextDelta("1")), fr(AssistantTextDelta("2"))
    reasoning = fr(AssistantReasoningDelta("r"))
    struct1, struct2 = fr(ToolUseCompleted("x", 1)), fr(ToolUseCompleted("y", 2))
    cases = [
        ([text1, reasoning, struct1], text2, [text1, struct1, text2]),
        ([text1, struct1], text2, [struct1, text2]),
        ([text1, text2, struct1], reasoning, [text1, text2, struct1]),
        ([struct1, struct2], fr(ExecutionError("e")), [struct2, fr(ExecutionError("e"))]),
        ([struct1, struct2], text1, [struct1, struct2]),
    ]
    for before, incoming, after in cases:
        queue = RemoteEventQueue(capacity=len(before))
        for frame in before:
            queue.put(S1, frame)
        queue.put(S1, incoming)
        assert queue.buffered() == after
        assert queue.dropped == 1


def test_event_payloads_are_flat_and_unknown_types_are_ignored() -> None:
    """§5.5.2 (R10-51/52): EVENT payloads round-trip through JSON text with their TurnId;
    a result keeps its text only; numbers may come back as floats; an unknown type decodes
    to None without raising."""
    t = TurnId("t-9")
    frames = [
        AssistantReasoningDelta("r"),
        AssistantTextDelta("x"),
        ToolUseCompleted("search", 12),
        ExecutionCompleted(AgentExecutionResult("done")),
        ExecutionError("boom"),
        InterruptedAt(InterruptReason.LEASE_LOST),
    ]
    for event in frames:
        back = json.loads(json.dumps(event_to_wire(t, event)))
        assert event_from_wire(back) == TurnEvent(t, event)
    widened = event_to_wire(t, ToolUseCompleted("s", 3))
    widened["durationMs"] = 3.0
    assert event_from_wire(widened) == TurnEvent(t, ToolUseCompleted("s", 3))
    assert event_from_wire({"turnId": "t", "type": "fromTheFuture"}) is None
    signal = SessionSignal(
        kind=SignalKind.EVENT, session_id=S1, origin=NODE_A, payload=event_to_wire(t, frames[0])
    )
    assert signal.payload["turnId"] == "t-9"


async def test_r10_15_frames_cross_nodes_as_event_signals(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-15: a turn's frames leave the holder as EVENT signals (on the events channel),
    each payload stamped with the TurnId."""
    seen: list[SessionSignal] = []

    class Tap:
        def __init__(self, target: object) -> None:
            self._target = target

        async def publish(self, signal: SessionSignal) -> None:
            if signal.kind is SignalKind.EVENT:
                seen.append(signal)
            await self._target.publish(signal)  # type: ignore[attr-defined]

        def subscribe(self) -> object:
            return self._target.subscribe()  # type: ignore[attr-defined]

    async with cluster(attrs.evolve(shared, bus=Tap(shared.bus)), world, registry, ["a"]) as (a,):
        disposition = await a.submit(_request())
        await disposition.result
        await settle()
    assert [s.payload["type"] for s in seen] == ["textDelta", "completed"]
    assert {s.payload["turnId"] for s in seen} == {disposition.turn_id.value}
    assert all(s.channel.value == "events" for s in seen)
