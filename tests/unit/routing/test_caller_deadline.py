"""``caller_deadline()`` (the hot path's effective-deadline walk) answers exactly what
``trio.current_effective_deadline()`` answers, in every arrangement of scopes: none,
nested deadlines either way round, a shield, a cancelled scope, a cancelled scope with a
shielded one inside, a relative deadline, a deadline moved after entry, a child task
(on a MockClock that does not move, so the relative deadline is exact)."""

# ruff: noqa: ASYNC100  (the scopes are entered to be looked at, never to time out)

from __future__ import annotations

import math

import trio
import trio.testing

from zlink_trio.routing import deadline as module
from zlink_trio.routing.deadline import caller_deadline


def same() -> float:
    ours, trios = caller_deadline(), trio.current_effective_deadline()
    assert ours == trios
    return ours


def test_the_walk_is_used_with_this_trio() -> None:
    assert caller_deadline is module._walk_deadline


async def test_matches_trio_in_every_arrangement(mock_clock: trio.testing.MockClock) -> None:
    now = trio.current_time()
    assert same() == math.inf
    with trio.CancelScope(deadline=now + 50):
        assert same() == now + 50
        with trio.CancelScope(deadline=now + 80):
            assert same() == now + 50  # the outer one is sooner
            with trio.CancelScope(deadline=now + 20):
                assert same() == now + 20  # the inner one is sooner
        with trio.CancelScope(shield=True):
            assert same() == math.inf  # a shield hides every outer deadline
            with trio.CancelScope(deadline=now + 70):
                assert same() == now + 70
        with trio.move_on_after(30):
            assert same() == now + 30  # a relative deadline, fixed on entry
        with trio.CancelScope() as scope:
            scope.deadline = now + 10  # moved after entry
            assert same() == now + 10
    with trio.CancelScope() as cancelled:
        cancelled.cancel()
        assert same() == -math.inf
        with trio.CancelScope(deadline=now + 5):
            assert same() == -math.inf  # inside a cancelled scope
        with trio.CancelScope(shield=True, deadline=now + 5):
            assert same() == now + 5  # a shield inside a cancelled scope


async def test_matches_trio_in_a_child_task(mock_clock: trio.testing.MockClock) -> None:
    seen: list[float] = []

    async def child(scope_deadline: float) -> None:
        with trio.CancelScope(deadline=scope_deadline):
            seen.append(same())

    now = trio.current_time()
    with trio.CancelScope(deadline=now + 40):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child, now + 60)
            nursery.start_soon(child, now + 15)
    assert sorted(seen) == [now + 15, now + 40]
