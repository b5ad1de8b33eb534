"""Fault plan decisions: filters, after/count/probability, determinism per seed."""

from __future__ import annotations

import pytest

from zlink_trio.ids import MeshName, NodeGeneration, NodeRid
from zlink_trio.mesh.api import PeerIdentity
from zlink_trio.testing import FaultKind, FaultPlan

A, B, C = NodeRid.new(), NodeRid.new(), NodeRid.new()
TO_B = PeerIdentity(MeshName("m"), B, NodeGeneration(1))
TO_C = PeerIdentity(MeshName("m"), C, NodeGeneration(1))


def decisions(plan: FaultPlan, n: int, command: int = 24) -> list[bool]:
    return [plan._decide(A, TO_B, command) is not None for _ in range(n)]


async def test_filters_after_and_count() -> None:
    plan = FaultPlan()
    rule = plan.drop(command=24, to=B, sender=A, after=2, count=3)
    assert plan._decide(A, TO_C, 24) is None  # another receiver
    assert plan._decide(B, TO_B, 24) is None  # another sender
    assert plan._decide(A, TO_B, 20) is None  # another command
    assert decisions(plan, 8) == [False, False, True, True, True, False, False, False]
    assert rule.fired == 3 and not rule.active
    assert plan.fired(FaultKind.DROP) == 3
    assert [e.kind for e in plan.events] == [FaultKind.DROP] * 3


async def test_first_firing_rule_decides() -> None:
    plan = FaultPlan()
    first = plan.duplicate(command={20, 24}, count=1)
    second = plan.reorder()
    assert plan._decide(A, TO_B, 24) is first
    assert plan._decide(A, TO_B, 24) is second
    assert plan._decide(A, TO_B, 102) is second


@pytest.mark.parametrize("seed", [0, 1, 42])
async def test_probability_is_deterministic_per_seed(seed: int) -> None:
    one, two = FaultPlan(seed), FaultPlan(seed)
    one.drop(probability=0.5)
    two.drop(probability=0.5)
    first = decisions(one, 200)
    assert first == decisions(two, 200)
    assert 60 < sum(first) < 140
    other = FaultPlan(seed + 1000)
    other.drop(probability=0.5)
    assert decisions(other, 200) != first


async def test_remove_and_clear_stop_rules_and_keep_counters() -> None:
    plan = FaultPlan()
    cut = plan.cut(count=None, deliver=True)
    assert plan._decide(A, TO_B, 24) is cut
    cut.remove()
    assert plan._decide(A, TO_B, 24) is None
    plan.delay(1.0)
    plan.clear()
    assert plan._decide(A, TO_B, 24) is None
    assert cut.fired == 1 and plan.fired() == 1 and plan.rules == ()


async def test_invalid_rules_are_refused() -> None:
    plan = FaultPlan()
    with pytest.raises(ValueError):
        plan.drop(probability=1.5)
    with pytest.raises(ValueError):
        plan.delay(-1.0)
    with pytest.raises(ValueError):
        plan.drop(after=-1)
