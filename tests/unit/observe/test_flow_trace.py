"""FlowTrace: every event counted once per emit, one log line at the event's level."""

from __future__ import annotations

import logging

import pytest

from zlink_trio.observe import FlowEvent, FlowTrace


def test_every_event_has_a_unique_stable_name_and_a_level() -> None:
    names = [event.value for event in FlowEvent]
    assert len(names) == len(set(names))
    assert all(name and name == name.lower() and " " not in name for name in names)
    assert FlowEvent("late_session_route_update") is FlowEvent.LATE_SESSION_ROUTE_UPDATE
    assert FlowEvent.LATE_SESSION_ROUTE_UPDATE.level == logging.WARNING
    assert all(event.level in (logging.DEBUG, logging.INFO, logging.WARNING) for event in FlowEvent)


def test_emit_counts_and_snapshot_is_a_frozen_copy() -> None:
    trace = FlowTrace()
    before = trace.snapshot()
    assert set(before) == set(FlowEvent)
    assert all(count == 0 for count in before.values())
    trace.emit(FlowEvent.DISPATCH_REFUSED, "actor %r", "a-1")
    trace.emit(FlowEvent.DISPATCH_REFUSED)
    trace.emit(FlowEvent.STALE_ROUTE_INGRESS)
    assert trace.count(FlowEvent.DISPATCH_REFUSED) == 2
    assert trace.count(FlowEvent.STALE_ROUTE_INGRESS) == 1
    assert trace.count(FlowEvent.CUTOVER_TIMEOUT) == 0
    assert before[FlowEvent.DISPATCH_REFUSED] == 0  # the earlier snapshot did not move
    with pytest.raises(TypeError):
        trace.snapshot()[FlowEvent.DISPATCH_REFUSED] = 5  # type: ignore[index]


def test_emit_logs_one_line_at_the_event_level_without_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    trace = FlowTrace()
    with caplog.at_level(logging.DEBUG, logger="zlink_trio"):
        trace.emit(FlowEvent.LATE_SESSION_ROUTE_UPDATE, "binding %s relocation %d", "b", 7)
        trace.emit(FlowEvent.REQUEST_EXPIRED)
    records = [r for r in caplog.records if r.name.startswith("zlink_trio")]
    assert [(r.name, r.levelno, r.getMessage()) for r in records] == [
        (
            "zlink_trio.sessions",
            logging.WARNING,
            "late_session_route_update: binding b relocation 7",
        ),
        ("zlink_trio.actors", logging.DEBUG, "request_expired"),
    ]
    assert all(r.exc_info is None for r in records)


def test_emit_with_traceback_carries_the_handled_exception(
    caplog: pytest.LogCaptureFixture,
) -> None:
    trace = FlowTrace()
    with caplog.at_level(logging.WARNING, logger="zlink_trio.actors"):
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            trace.emit(FlowEvent.HANDLER_CRASHED, "handler %r", "h", traceback=True)
    (record,) = [r for r in caplog.records if r.name == "zlink_trio.actors"]
    assert record.exc_info is not None and record.exc_info[0] is RuntimeError
    assert trace.count(FlowEvent.HANDLER_CRASHED) == 1


def test_disabled_level_still_counts(caplog: pytest.LogCaptureFixture) -> None:
    trace = FlowTrace()
    with caplog.at_level(logging.WARNING, logger="zlink_trio.actors"):
        trace.emit(FlowEvent.REQUEST_EXPIRED, "never formatted %s", object())
    assert trace.count(FlowEvent.REQUEST_EXPIRED) == 1
    assert not [r for r in caplog.records if r.name == "zlink_trio.actors"]
