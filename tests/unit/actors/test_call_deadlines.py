"""The deadline arithmetic of calls: what travels on the wire and what a call is bounded by
(``objects/durable.remaining_ms``, ``actors/calls``)."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

from zlink_trio import DeadlineExceeded, InvalidArgument
from zlink_trio.actors.calls import call_deadline, check_timeout, yield_to_caller
from zlink_trio.objects.durable import remaining_ms


@pytest.mark.parametrize(
    ("left", "expected"),
    [
        (0.2, 200),
        (0.19999999999999998, 200),  # float noise below a nanosecond is forgiven
        (0.2005, 200),  # rounded DOWN: the receiver never outlives the sender
        (0.0009, 1),  # at least 1 ms
        (0.0, 1),
        (-5.0, 1),
        (-math.inf, 1),  # an already-cancelled caller scope
        (math.inf, 0xFFFF_FFFF),
        (10**9, 0xFFFF_FFFF),  # capped at the wire's u32
    ],
)
async def test_remaining_ms(
    autojump_clock: trio.testing.MockClock, left: float, expected: int
) -> None:
    assert remaining_ms(trio.current_time() + left) == expected


def test_check_timeout_rounds_up_to_milliseconds_and_refuses_misuse() -> None:
    assert check_timeout(0.2005) == 0.201
    assert check_timeout(5) == 5
    for bad in (0, -1, math.nan, math.inf, -math.inf, True, "1", None):
        with pytest.raises(InvalidArgument):
            check_timeout(bad)  # type: ignore[arg-type]


async def test_call_deadline_is_the_earlier_of_own_and_callers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    now = trio.current_time()
    assert call_deadline(5.0) == (now + 5.0, False)
    with trio.CancelScope(deadline=now + 1.0) as scope:
        assert call_deadline(5.0) == (scope.deadline, True)
        assert call_deadline(0.5) == (now + 0.5, False)
        assert call_deadline(1.0) == (scope.deadline, True)  # a tie is the caller's
        await trio.lowlevel.checkpoint()


async def test_yield_to_caller_turns_an_early_deadline_exceeded_into_the_callers_scope(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def answered_early() -> None:
        await trio.sleep(0.1)
        raise DeadlineExceeded("the owner ended it at the rounded-down deadline")

    start = trio.current_time()
    with pytest.raises(trio.TooSlowError):
        with trio.fail_after(0.1005):
            deadline, bound = call_deadline(30.0)
            assert bound
            await yield_to_caller(answered_early(), deadline)
    assert trio.current_time() - start == pytest.approx(0.1005)
    # Not caller-bound: the error is the call's own.
    with pytest.raises(DeadlineExceeded):
        await answered_early()
