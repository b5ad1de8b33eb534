"""Keyed turns wherever they run (spec 10 §7.1 F6–F7, §9.1, §9.2, §9.3): every keyed turn
finishes its reservation before its TURN_RESULT, so a retry — on any node, attached or
later — gets the answer, never a ForwardTimeout. Found by an adversarial review."""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing
from router_app import Registry, Shared, World, cluster, on_time
from router_kit import AGENT, KEY, S1, CallLog

from zlink_trio.router import (
    DispositionKind,
    IdempotencyState,
    Priority,
    SubmitRequest,
    TurnFailedError,
)
from zlink_trio.testing import settle


def _request(text: str = "hi", **kw: object) -> SubmitRequest:
    return SubmitRequest(session_id=S1, agent_ref=AGENT, user_input=text, **kw)  # type: ignore[arg-type]


async def test_r10_126_a_keyed_now_message_injected_mid_turn_is_marked_done(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-126 / R10-114 / R10-116: a keyed NOW message injected into a running turn takes
    over its reservation while the turn runs and finishes it with the turn's result: the
    store holds DONE afterwards, and a retry with the same key answers at once from the
    cache (EXECUTED_LOCALLY, already complete) without running a turn."""
    world.duration = lambda t: 50.0 if t == "long" else 1.0
    urgent_request = _request("urgent", priority=Priority.NOW, idempotency_key=KEY)
    with trio.fail_after(100):
        async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
            first = await a.submit(_request("long"))
            await trio.sleep(shared.s(1))
            urgent = await b.submit(urgent_request)
            assert urgent.kind is DispositionKind.FORWARDED
            await settle()
            assert world.injected == ["urgent"]
            during = await shared.idempotency.find(KEY)
            assert during is not None and during.state is IdempotencyState.IN_FLIGHT
            assert during.holder_id is not None  # taken over by the holder running it
            answer = await urgent.result
            assert answer == await first.result
            after = await shared.idempotency.find(KEY)
            assert after is not None and after.state is IdempotencyState.DONE
            retry = await b.submit(urgent_request)
            assert retry.kind is DispositionKind.EXECUTED_LOCALLY and retry.result.done()
            assert await retry.result == answer
    assert [t.text for t in world.turns] == ["long"]


async def test_r10_115_a_remote_attacher_gets_a_local_turn_s_failure(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-115 / R10-110 / R10-87: a retry on another node that attaches (same key, in
    flight) to a keyed turn running where it was submitted completes with that turn's
    failure over the TURN_RESULT rail the moment the turn ends — not with a ForwardTimeout
    at 5 min (the failed turn leaves no DONE entry for polling to find)."""
    t0 = trio.current_time()
    world.duration = lambda _t: 5.0
    world.failing.add("boom")
    with trio.fail_after(1000):
        async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
            local = await a.submit(_request("boom", idempotency_key=KEY))
            assert local.kind is DispositionKind.EXECUTED_LOCALLY
            await trio.sleep(1)
            attached = await b.submit(_request("boom", idempotency_key=KEY))
            assert attached.kind is DispositionKind.FORWARDED
            with pytest.raises(TurnFailedError, match="boom failed"):
                await attached.result
            assert on_time(shared, trio.current_time() - t0, 5.0)
            with pytest.raises(TurnFailedError):
                await local.result
    assert [t.text for t in world.turns] == ["boom"]


async def test_r10_87_a_remote_attacher_gets_a_local_turn_s_result_on_the_rail(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-87 / R10-115: the attacher on another node completes with the local turn's result
    through the rail when the turn ends, with no polling ``find``."""
    log = CallLog()
    spied = attrs.evolve(shared, idempotency=log.spy("idem", shared.idempotency))
    world.duration = lambda _t: 5.0
    with trio.fail_after(100):
        async with cluster(spied, world, registry, ["a", "b"]) as (a, b):
            local = await a.submit(_request("x", idempotency_key=KEY))
            await trio.sleep(1)
            attached = await b.submit(_request("x", idempotency_key=KEY))
            assert attached.kind is DispositionKind.FORWARDED
            assert await attached.result == await local.result
            assert trio.current_time() == 5.0
    assert "idem.find" not in log.calls
