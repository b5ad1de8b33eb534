"""Lane policies on the running engine: relocation seal and hold, lent turns, session
connection close, lane close."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing
from engine_kit import Recorder

from zlink_trio.engine import (
    ActorDeliveryLane,
    Admission,
    ConnectionClosed,
    Handover,
    RelocationSealed,
    SessionLane,
    SpotLane,
    open_engine,
)
from zlink_trio.errors import InvalidOperation, Unavailable


async def test_sealed_spot_lane_holds_ingress_and_runs_only_lifecycle(recorder: Recorder) -> None:
    async with open_engine() as engine:
        lane = engine.new_lane(SpotLane(), recorder)
        release = recorder.hold("busy")
        lane.submit_nowait("busy")
        await recorder.wait_entered("busy")
        lane.submit_nowait("a0")  # accepted before the seal
        lane.seal("r1")
        assert lane.policy == SpotLane(RelocationSealed("r1"))
        assert lane.submit_nowait("h0") is Admission.HELD
        assert lane.submit_nowait("h1") is Admission.HELD
        assert lane.submit_nowait("L0", lifecycle=True) is Admission.ACCEPTED
        release.set()  # the turn in progress finishes normally
        await engine.wait_idle()
        assert recorder.seen == ["busy", "L0"]  # held and pending items did not run
        stats = lane.statistics()
        assert (stats.application, stats.held, stats.scheduled) == (1, 2, "idle")
        # The relocation takes the work: the captured queue, then the held ingress.
        assert lane.take_held() == Handover(pending=("a0",), held=("h0", "h1"))
        assert lane.submit_nowait("h2") is Admission.HELD
        await engine.wait_idle()
    assert recorder.seen == ["busy", "L0"]


async def test_unseal_runs_held_items_behind_pending_ones(recorder: Recorder) -> None:
    async with open_engine() as engine:
        lane = engine.new_lane(SpotLane(), recorder)
        lane.seal("r1")
        lane.submit_nowait("h0")
        lane.submit_nowait("h1")
        await engine.wait_idle()
        assert recorder.seen == []
        with pytest.raises(InvalidOperation):
            lane.unseal("another relocation")
        lane.unseal("r1")  # relocation aborted
        lane.submit_nowait("a-after")
        await engine.wait_idle()
    assert recorder.seen == ["h0", "h1", "a-after"]


async def test_seal_keeps_pending_work_in_order_for_unseal(recorder: Recorder) -> None:
    async with open_engine() as engine:
        lane = engine.new_lane(SpotLane(), recorder)
        release = recorder.hold("busy")
        lane.submit_nowait("busy")
        await recorder.wait_entered("busy")
        lane.submit_nowait("a0")
        lane.submit_nowait("a1")
        lane.seal("r1")
        lane.submit_nowait("h0")
        release.set()
        await engine.wait_idle()
        lane.unseal("r1")
        await engine.wait_idle()
    assert recorder.seen == ["busy", "a0", "a1", "h0"]


async def test_lent_turn_starts_no_turn_until_returned(recorder: Recorder) -> None:
    async with open_engine() as engine:
        lane = engine.new_lane(SpotLane(), recorder)
        lane.lend_turn()
        assert lane.submit_nowait("a0") is Admission.ACCEPTED
        lane.submit_nowait("L0", lifecycle=True)
        await trio.testing.wait_all_tasks_blocked()
        assert recorder.seen == []
        assert lane.statistics().scheduled == "idle"
        with pytest.raises(InvalidOperation):
            lane.seal("r1")  # states exclude each other
        lane.return_turn()
        await engine.wait_idle()
    assert recorder.seen == ["L0", "a0"]


async def test_session_close_drops_pending_items_and_reports_each(recorder: Recorder) -> None:
    dropped: list[str] = []
    async with open_engine() as engine:
        lane = engine.new_lane(SessionLane(), recorder, on_drop=dropped.append)
        release = recorder.hold("busy")
        lane.submit_nowait("busy")
        await recorder.wait_entered("busy")
        lane.submit_nowait("a0")
        lane.submit_nowait("a1")
        lane.submit_nowait("cleanup", lifecycle=True)
        lane.close_connection()
        assert dropped == ["a0", "a1"]  # each handed over so its reply can be failed
        assert lane.policy == SessionLane(ConnectionClosed())
        with pytest.raises(Unavailable):
            lane.submit_nowait("late")
        lane.submit_nowait("disconnect-callback", lifecycle=True)  # lifecycle still runs
        release.set()
        await engine.wait_idle()
        lane.close_connection()  # idempotent
    assert recorder.seen == ["busy", "cleanup", "disconnect-callback"]
    assert dropped == ["a0", "a1"]


async def test_close_drops_everything_reports_and_rejects(recorder: Recorder) -> None:
    dropped: list[str] = []
    async with open_engine() as engine:
        lane = engine.new_lane(SpotLane(), recorder, on_drop=dropped.append)
        release = recorder.hold("busy")
        lane.submit_nowait("busy")
        await recorder.wait_entered("busy")
        lane.submit_nowait("a0")
        lane.submit_nowait("L0", lifecycle=True)
        lane.seal("r1")
        lane.submit_nowait("h0")
        lane.close()
        assert dropped == ["L0", "a0", "h0"]
        assert lane.statistics().closed
        with pytest.raises(Unavailable):
            lane.submit_nowait("late")
        with pytest.raises(Unavailable):
            await lane.submit("late", lifecycle=True)
        release.set()  # the turn in progress finishes
        await engine.wait_idle()
        lane.close()  # idempotent
    assert recorder.seen == ["busy"]


async def test_drop_without_callback_is_logged(
    recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_engine() as engine:
        lane = engine.new_lane(ActorDeliveryLane(), recorder)
        release = recorder.hold("busy")
        lane.submit_nowait("busy")
        await recorder.wait_entered("busy")
        lane.submit_nowait("a0")
        with caplog.at_level(logging.WARNING, logger="zlink_trio.engine"):
            lane.close()
        release.set()
    assert "dropped 1 item" in caplog.text


async def test_failing_drop_callback_is_logged_and_the_rest_still_reported(
    recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    reported: list[str] = []

    def on_drop(item: str) -> None:
        reported.append(item)
        if item == "a0":
            raise RuntimeError("boom")

    async with open_engine() as engine:
        lane = engine.new_lane(SessionLane(), recorder, on_drop=on_drop)
        release = recorder.hold("busy")
        lane.submit_nowait("busy")
        await recorder.wait_entered("busy")
        lane.submit_nowait("a0")
        lane.submit_nowait("a1")
        with caplog.at_level(logging.ERROR, logger="zlink_trio.engine"):
            lane.close_connection()
        release.set()
    assert reported == ["a0", "a1"]
    assert "on_drop callback" in caplog.text
