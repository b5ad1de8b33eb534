"""Execution gates: a shared gate serializes a Spot lane and its member lanes (SpotWide);
lanes with their own gates run concurrently."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, cast

import pytest
import trio
import trio.testing
from engine_kit import Recorder

from zlink_trio.engine import ActorDeliveryLane, Lane, SpotLane, open_engine
from zlink_trio.errors import InvalidOperation


async def test_shared_gate_serializes_spot_and_member_lanes(recorder: Recorder) -> None:
    async with open_engine() as engine:
        gate = engine.new_gate()
        spot = engine.new_lane(SpotLane(), recorder, gate=gate)
        members = [engine.new_lane(ActorDeliveryLane(), recorder, gate=gate) for _ in range(2)]
        release = recorder.hold("spot-0")
        spot.submit_nowait("spot-0")
        await recorder.wait_entered("spot-0")
        members[0].submit_nowait("m0-0")
        members[1].submit_nowait("m1-0")
        await trio.testing.wait_all_tasks_blocked()
        assert recorder.seen == ["spot-0"]  # the members wait for the gate
        assert (gate.busy, gate.waiting) == (True, 2)
        assert members[0].statistics().scheduled == "ready"
        release.set()
        await engine.wait_idle()
        assert (gate.busy, gate.waiting) == (False, 0)
    assert recorder.seen == ["spot-0", "m0-0", "m1-0"]
    assert recorder.peak == 1


async def test_shared_gate_never_runs_two_turns_at_once(recorder: Recorder) -> None:
    async with open_engine(batch_size=3) as engine:
        gate = engine.new_gate()
        lanes: list[Lane[Any, Hashable]] = [
            engine.new_lane(ActorDeliveryLane(), recorder, gate=gate) for _ in range(4)
        ]
        lanes.append(engine.new_lane(SpotLane(), recorder, gate=gate))
        for i in range(20):
            for n, lane in enumerate(lanes):
                lane.submit_nowait((n, i))
        await engine.wait_idle()
    assert recorder.peak == 1
    seen = cast("list[tuple[int, int]]", recorder.seen)
    for n in range(5):
        assert [i for (m, i) in seen if m == n] == list(range(20))
    # The gate is handed between lanes after each batch, not held by one lane to the end.
    first_owner_run = next(k for k, (m, _) in enumerate(seen) if m != 0)
    assert first_owner_run <= 3


async def test_own_gates_run_concurrently(recorder: Recorder) -> None:
    async with open_engine() as engine:
        a = engine.new_lane(ActorDeliveryLane(), recorder)
        b = engine.new_lane(SpotLane(), recorder)
        release_a = recorder.hold("a")
        release_b = recorder.hold("b")
        a.submit_nowait("a")
        b.submit_nowait("b")
        await recorder.wait_entered("a")
        await recorder.wait_entered("b")
        assert recorder.active == 2  # both turns in progress at once
        release_a.set()
        release_b.set()
        await engine.wait_idle()
    assert a.gate is None and b.gate is None


async def test_lent_turn_frees_the_shared_gate_for_members(recorder: Recorder) -> None:
    async with open_engine() as engine:
        gate = engine.new_gate()
        spot = engine.new_lane(SpotLane(), recorder, gate=gate)
        member = engine.new_lane(ActorDeliveryLane(), recorder, gate=gate)
        release = recorder.hold("spot-0")
        spot.submit_nowait("spot-0")
        spot.submit_nowait("spot-1")
        await recorder.wait_entered("spot-0")
        member.submit_nowait("m-0")
        spot.lend_turn()  # inside the turn: no new spot turn until it comes back
        release.set()
        await engine.wait_idle()
        assert recorder.seen == ["spot-0", "m-0"]
        assert spot.statistics().application == 1
        spot.return_turn()
        await engine.wait_idle()
    assert recorder.seen == ["spot-0", "m-0", "spot-1"]


async def test_gate_of_another_engine_is_refused(recorder: Recorder) -> None:
    async with open_engine() as one, open_engine() as other:
        gate = one.new_gate()
        with pytest.raises(InvalidOperation):
            other.new_lane(ActorDeliveryLane(), recorder, gate=gate)
