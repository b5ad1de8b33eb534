"""The router over an at-least-once, unordered bus (spec 10 §3.3, §5.4): one doorbell and one
TURN_RESULT per forwarded turn, duplicates and reordering tolerated, empty doorbells."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing
from router_app import Registry, Shared, World, cluster
from router_kit import AGENT, S1, CallLog, message

from zlink_trio.router import (
    Forwarded,
    IdempotencyKey,
    NodeId,
    SessionEvicted,
    SessionSignal,
    SignalKind,
    SubmitRequest,
)
from zlink_trio.testing import settle

B = NodeId("b")


def _request(text: str = "hi", **kw: object) -> SubmitRequest:
    return SubmitRequest(session_id=S1, agent_ref=AGENT, user_input=text, **kw)  # type: ignore[arg-type]


class DuplicatingReorderingBus:
    """Every signal is delivered twice, and each pair of consecutive signals is swapped."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self._held: list[SessionSignal] = []
        self.published = 0

    async def publish(self, signal: SessionSignal) -> None:
        self.published += 1
        self._held.append(signal)
        if len(self._held) == 2:
            second, first = self._held
            self._held.clear()
            for s in (first, second, first, second):
                await self._target.publish(s)

    async def flush(self) -> None:
        held, self._held = self._held, []
        for s in held + held:
            await self._target.publish(s)

    def subscribe(self) -> Any:
        return self._target.subscribe()


async def test_r10_13_one_doorbell_per_forwarded_delivery(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-13: each forwarded delivery publishes exactly one MESSAGE_ENQUEUED."""
    log = CallLog()
    world.duration = lambda _t: 5.0
    async with cluster(
        attrs.evolve(shared, bus=log.spy("bus", shared.bus)), world, registry, ["a", "b"]
    ) as (a, b):
        first = await a.submit(_request("first"))
        forwards = [await b.submit(_request(f"f{i}")) for i in range(3)]
        assert all(isinstance(f, Forwarded) for f in forwards)
        assert log.calls.count("bus.publish:MESSAGE_ENQUEUED") == 3
        await first.result
        for f in forwards:
            await f.result


async def test_r10_14_one_turn_result_per_forwarded_turn_after_mark_done(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-14: exactly one TURN_RESULT per forwarded turn, each published after that turn's
    markDone. A keyed local turn publishes one too (callers attached by its key on other
    nodes wait on it, §9.2 row 3); a keyless local one publishes none."""
    log = CallLog()
    spied = attrs.evolve(
        shared, bus=log.spy("bus", shared.bus), idempotency=log.spy("idem", shared.idempotency)
    )
    world.duration = lambda _t: 2.0
    async with cluster(spied, world, registry, ["a", "b"]) as (a, b):
        plain = await a.submit(_request("plain"))
        await plain.result
        assert "bus.publish:TURN_RESULT" not in log.calls
        local = await a.submit(_request("local", idempotency_key=IdempotencyKey("l")))
        forwards = [
            await b.submit(_request(f"f{i}", idempotency_key=IdempotencyKey(f"k{i}")))
            for i in range(2)
        ]
        await local.result
        for f in forwards:
            await f.result
    results = [i for i, c in enumerate(log.calls) if c == "bus.publish:TURN_RESULT"]
    dones = [i for i, c in enumerate(log.calls) if c == "idem.mark_done"]
    assert len(results) == 3
    assert len(dones) == 3
    assert all(done < result for done, result in zip(dones, results, strict=True))
    assert results[0] < dones[1] and results[1] < dones[2]


async def test_r10_41_duplicated_and_reordered_signals_change_nothing(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-41: over a bus that duplicates and reorders every signal, each forwarded result
    completes exactly once with its own answer, no message runs twice, nothing raises, and
    the history converges."""
    world.duration = lambda _t: 3.0
    noisy = DuplicatingReorderingBus(shared.bus)
    async with cluster(attrs.evolve(shared, bus=noisy), world, registry, ["a", "b"]) as (a, b):
        first = await a.submit(_request("first"))
        forwards = {f"f{i}": await b.submit(_request(f"f{i}")) for i in range(4)}
        await noisy.flush()
        await first.result
        answers = {text: await f.result for text, f in forwards.items()}
        await noisy.flush()
        await settle()
    assert {t: a.text.split(":")[1] for t, a in answers.items()} == {t: t for t in forwards}
    ran = [t.text for t in world.turns]
    assert sorted(ran) == sorted(["first", *forwards])
    view = await shared.records.load(S1)
    assert view is not None and len(view.transcript) == 2 * len(ran)


async def test_r10_43_an_empty_doorbell_is_a_no_op(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-43: ring twice for one message: the second drain pass collects nothing, runs no
    turn and raises nothing."""
    log = CallLog()
    world.duration = lambda _t: 0.0  # turns end before the tasks block
    async with cluster(
        attrs.evolve(shared, inbox=log.spy("inbox", shared.inbox)), world, registry, ["a"]
    ) as (a,):
        await (await a.submit(_request("bind"))).result
        await shared.inbox.deliver(message("once"))
        ring = SessionSignal(kind=SignalKind.MESSAGE_ENQUEUED, session_id=S1, origin=B)
        await shared.bus.publish(ring)
        await settle()
        collects = log.calls.count("inbox.collect")
        await shared.bus.publish(ring)
        await settle()
        assert log.calls.count("inbox.collect") == collects + 1
    assert [t.text for t in world.turns] == ["bind", "once"]


async def test_r10_11_evict_fails_the_forwarded_results_of_the_session(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-11 / R10-110 (the forwarded-result part; subscribers, the projection and approvals have
    their own tests): an EVICT for the session fails every pending forwarded result on the
    receiving node with SessionEvicted."""
    await shared.leases.try_acquire(S1, NodeId("ghost"), 10_000)
    async with cluster(shared, world, registry, ["a"]) as (a,):
        pending = [await a.submit(_request(f"p{i}")) for i in range(2)]
        await shared.bus.publish(SessionSignal(kind=SignalKind.EVICT, session_id=S1, origin=B))
        for f in pending:
            with pytest.raises(SessionEvicted):
                await f.result
        assert a.statistics().waiting_forwards == 0


async def test_r10_19_forwarded_submits_go_to_the_inbox_and_only_the_holder_collects(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-19 (router side): each forwarded submit is one delivery to the shared inbox from
    the submitting node; only the lease holder collects — the non-holder hears the same
    doorbells, loses the election and never calls collect. (The holder's one delivery is
    f1 going back to the inbox while f0 runs: a pass keeps no collected message across a
    turn, R10-72.)"""
    from router_app import builder

    from zlink_trio.router import open_session_router

    log = CallLog()
    world.duration = lambda _t: 5.0
    on = {n: attrs.evolve(shared, inbox=log.spy(f"{n}-inbox", shared.inbox)) for n in "ab"}
    async with (
        open_session_router(builder(on["a"], world, registry, "a")) as a,
        open_session_router(builder(on["b"], world, registry, "b")) as b,
    ):
        first = await a.submit(_request("first"))
        await settle()
        forwarded = [await b.submit(_request(f"f{i}")) for i in range(2)]
        for f in [first, *forwarded]:
            await f.result
    assert log.calls.count("b-inbox.deliver") == 2
    assert log.calls.count("a-inbox.deliver") == 1
    assert "b-inbox.collect" not in log.calls
    assert "a-inbox.collect" in log.calls
