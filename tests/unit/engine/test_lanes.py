"""Lane policy values and transitions at run time (the static side is in
test_lane_policy_static.py)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from zlink_trio.engine import (
    OPEN,
    ActorDeliveryLane,
    AwaitingReturn,
    ConnectionClosed,
    Open,
    RelocationSealed,
    SessionLane,
    SpotLane,
    close_connection,
    lend_turn,
    return_turn,
    seal,
    unseal,
)
from zlink_trio.errors import InvalidOperation


def test_defaults_are_open() -> None:
    assert SpotLane().state == OPEN == Open()
    assert SessionLane().state == OPEN
    assert attrs.fields(ActorDeliveryLane) == ()


@pytest.mark.parametrize(
    ("kind", "state"),
    [
        (SessionLane, RelocationSealed("r")),
        (SessionLane, AwaitingReturn()),
        (SpotLane, ConnectionClosed()),
        (SpotLane, "open"),
    ],
)
def test_impossible_states_are_rejected_at_run_time_too(kind: Any, state: object) -> None:
    with pytest.raises(TypeError):
        kind(state=state)


def test_actor_delivery_lane_takes_no_state() -> None:
    with pytest.raises(TypeError):
        ActorDeliveryLane(state=OPEN)  # type: ignore[call-arg]


def test_spot_lane_transitions() -> None:
    sealed = seal(SpotLane(), "r1")
    assert sealed.state == RelocationSealed("r1")
    assert seal(sealed, "r1") == sealed  # same relocation: no-op
    with pytest.raises(InvalidOperation):
        seal(sealed, "r2")
    with pytest.raises(InvalidOperation):
        unseal(sealed, "r2")  # only the matching seal is lifted
    assert unseal(sealed, "r1") == SpotLane()
    with pytest.raises(InvalidOperation):
        unseal(SpotLane(), "r1")

    lent = lend_turn(SpotLane())
    assert lent.state == AwaitingReturn()
    with pytest.raises(InvalidOperation):
        lend_turn(lent)
    with pytest.raises(InvalidOperation):
        seal(lent, "r1")
    with pytest.raises(InvalidOperation):
        lend_turn(sealed)
    assert return_turn(lent) == SpotLane()
    with pytest.raises(InvalidOperation):
        return_turn(SpotLane())


def test_session_lane_transitions() -> None:
    closed = close_connection(SessionLane())
    assert closed.state == ConnectionClosed()
    assert close_connection(closed) == closed  # idempotent


@pytest.mark.parametrize("fn", [lambda p: seal(p, "r"), lend_turn, return_turn])
def test_spot_transitions_refuse_other_kinds_dynamically(fn: Any) -> None:
    for policy in (SessionLane(), ActorDeliveryLane()):
        with pytest.raises(InvalidOperation):
            fn(policy)


def test_close_connection_refuses_other_kinds_dynamically() -> None:
    for policy in (SpotLane(), ActorDeliveryLane()):
        with pytest.raises(InvalidOperation):
            close_connection(policy)  # type: ignore[arg-type]


def test_policies_are_frozen_values() -> None:
    policy = SessionLane()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        policy.state = ConnectionClosed()  # type: ignore[misc]
    assert {SpotLane(), SpotLane()} == {SpotLane()}
