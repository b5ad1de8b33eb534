"""The I/O-free lane core: admission, selection with the lifecycle burst, seal/hold,
session close and lane close."""

from __future__ import annotations

import pytest

from zlink_trio.engine import (
    ActorDeliveryLane,
    Admission,
    ConnectionClosed,
    Handover,
    LaneCore,
    LaneLimits,
    RelocationSealed,
    SessionLane,
    SpotLane,
)
from zlink_trio.engine.core import NOTHING
from zlink_trio.errors import ConfigurationError, InvalidOperation

Core = LaneCore[str]


def make(policy: object = None, *, capacity: int = 100, burst: int = 3) -> Core:
    return LaneCore(policy or ActorDeliveryLane(), LaneLimits(capacity, burst))  # type: ignore[arg-type]


def drain(core: Core) -> list[str]:
    out = []
    while (item := core.next_item()) is not NOTHING:
        out.append(item)
    return out


def test_limits_are_validated() -> None:
    with pytest.raises(ConfigurationError):
        LaneLimits(0, 1)
    with pytest.raises(ConfigurationError):
        LaneLimits(1, 0)


def test_each_queue_keeps_acceptance_order() -> None:
    core = make()
    for i in range(5):
        assert core.admit(f"a{i}") is Admission.ACCEPTED
    assert drain(core) == [f"a{i}" for i in range(5)]


def test_lifecycle_runs_first() -> None:
    core = make(burst=8)
    core.admit("a0")
    core.admit("a1")
    core.admit("L0", lifecycle=True)
    core.admit("L1", lifecycle=True)
    assert drain(core) == ["L0", "L1", "a0", "a1"]


def test_lifecycle_burst_pays_yield_debt_so_application_never_starves() -> None:
    core = make(burst=3)
    for i in range(5):
        core.admit(f"a{i}")
    for i in range(10):
        core.admit(f"L{i}", lifecycle=True)
    seq = drain(core)
    assert "".join(x[0] for x in seq) == "LLLaLLLaLLLaLaa"
    # Acceptance order within each queue is unchanged.
    assert [x for x in seq if x[0] == "L"] == [f"L{i}" for i in range(10)]
    assert [x for x in seq if x[0] == "a"] == [f"a{i}" for i in range(5)]


def test_streak_counts_only_while_application_work_waits() -> None:
    core = make(burst=2)
    for i in range(4):
        core.admit(f"L{i}", lifecycle=True)
    assert core.next_item() == "L0"  # nothing waiting: no debt accrues
    assert core.next_item() == "L1"
    assert core.lifecycle_streak == 0
    core.admit("a0")
    assert [core.next_item(), core.next_item(), core.next_item()] == ["L2", "L3", "a0"]


def test_capacity_bounds_each_queue_and_a_rejected_item_enters_no_queue() -> None:
    core = make(capacity=2)
    assert core.admit("a0") is Admission.ACCEPTED
    assert core.admit("a1") is Admission.ACCEPTED
    assert core.admit("a2") is Admission.FULL
    assert core.admit("L0", lifecycle=True) is Admission.ACCEPTED  # its own bound
    assert core.admit("L1", lifecycle=True) is Admission.ACCEPTED
    assert core.admit("L2", lifecycle=True) is Admission.FULL
    assert not core.has_space(True)
    assert not core.has_space(False)
    assert drain(core) == ["L0", "L1", "a0", "a1"]


def test_idle_core_holds_no_queue_objects() -> None:
    core = make()
    core.admit("a0")
    core.admit("L0", lifecycle=True)
    drain(core)
    assert (core._life, core._app, core._held) == (None, None, None)


def test_seal_holds_application_ingress_and_pauses_application_work() -> None:
    core = make(SpotLane())
    core.admit("a0")
    core.seal("r1")
    assert core.policy == SpotLane(RelocationSealed("r1"))
    assert core.admit("a1") is Admission.HELD
    assert core.admit("L0", lifecycle=True) is Admission.ACCEPTED
    assert drain(core) == ["L0"]  # lifecycle runs, application does not
    assert (core.application_count, core.held_count) == (1, 1)
    assert not core.runnable()


def test_unseal_puts_held_items_behind_pending_ones_in_arrival_order() -> None:
    core = make(SpotLane())
    core.admit("a0")
    core.admit("a1")
    core.seal("r1")
    core.admit("h0")
    core.admit("h1")
    with pytest.raises(InvalidOperation):
        core.unseal("other")
    core.unseal("r1")
    core.admit("a2")
    assert drain(core) == ["a0", "a1", "h0", "h1", "a2"]


def test_take_held_hands_pending_then_held_and_stays_sealed() -> None:
    core = make(SpotLane())
    core.admit("a0")
    core.seal("r1")
    core.admit("h0")
    assert core.take_held() == Handover(pending=("a0",), held=("h0",))
    assert core.admit("h1") is Admission.HELD
    assert core.take_held() == Handover(pending=(), held=("h1",))
    core.unseal("r1")
    with pytest.raises(InvalidOperation):
        core.take_held()


def test_held_items_count_against_the_application_bound() -> None:
    core = make(SpotLane(), capacity=2)
    core.admit("a0")
    core.seal("r1")
    assert core.admit("h0") is Admission.HELD
    assert core.admit("h1") is Admission.FULL
    core.unseal("r1")
    assert core.application_count == 2


def test_lent_turn_admits_but_selects_nothing() -> None:
    core = make(SpotLane())
    core.lend_turn()
    assert core.admit("a0") is Admission.ACCEPTED
    assert core.admit("L0", lifecycle=True) is Admission.ACCEPTED
    assert core.next_item() is NOTHING
    core.return_turn()
    assert drain(core) == ["L0", "a0"]


def test_session_close_drops_application_work_and_keeps_lifecycle() -> None:
    core = make(SessionLane())
    core.admit("a0")
    core.admit("a1")
    core.admit("L0", lifecycle=True)
    assert core.close_connection() == ("a0", "a1")
    assert core.policy == SessionLane(ConnectionClosed())
    assert core.admit("a2") is Admission.CONNECTION_CLOSED
    assert core.admit("L1", lifecycle=True) is Admission.ACCEPTED
    assert drain(core) == ["L0", "L1"]
    assert core.close_connection() == ()


def test_close_drops_everything_and_admits_nothing() -> None:
    core = make(SpotLane())
    core.admit("a0")
    core.admit("L0", lifecycle=True)
    core.seal("r1")
    core.admit("h0")
    assert core.close() == ("L0", "a0", "h0")
    assert core.closed
    assert core.admit("a1") is Admission.LANE_CLOSED
    assert core.admit("L1", lifecycle=True) is Admission.LANE_CLOSED
    assert core.next_item() is NOTHING
    assert core.close() == ()
    with pytest.raises(InvalidOperation):
        core.unseal("r1")


def test_closing_a_session_connection_after_the_lane_is_harmless() -> None:
    core = make(SessionLane())
    core.admit("a0")
    assert core.close() == ("a0",)
    assert core.close_connection() == ()


def test_transitions_check_the_lane_kind_dynamically() -> None:
    with pytest.raises(InvalidOperation):
        make(SessionLane()).seal("r1")
    with pytest.raises(InvalidOperation):
        make(ActorDeliveryLane()).lend_turn()
    with pytest.raises(InvalidOperation):
        make(SpotLane()).close_connection()


def test_invalid_transition_changes_nothing() -> None:
    core = make(SpotLane())
    core.lend_turn()
    core.admit("a0")
    with pytest.raises(InvalidOperation):
        core.seal("r1")
    assert core.held_count == 0 and core.application_count == 1
    core.return_turn()
    assert drain(core) == ["a0"]


@pytest.mark.parametrize("module", ["core", "lanes"])
def test_core_modules_do_no_io(module: str) -> None:
    """The core and the policy types import no trio (nor anything that does I/O)."""
    import ast
    import importlib
    import pathlib

    source = importlib.import_module(f"zlink_trio.engine.{module}").__file__
    assert source is not None
    tree = ast.parse(pathlib.Path(source).read_text(encoding="utf-8"))
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not {name for name in imported if name.split(".")[0] in {"trio", "socket", "asyncio"}}
