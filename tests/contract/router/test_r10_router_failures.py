"""Failure scenarios (spec 10 §10): a claim that fails, a signal bus that disconnects, a
lease backend lost for good, stale handle caches."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from router_app import Registry, Shared, World, builder, on_time
from router_kit import AGENT, KEY, S1, S2

from zlink_trio.router import (
    DispositionKind,
    InterruptReason,
    SessionClaimFailed,
    SessionId,
    SubmitRequest,
    TurnInterrupted,
    open_session_router,
)


def _request(text: str, session: SessionId = S1, **kw: object) -> SubmitRequest:
    return SubmitRequest(session_id=session, agent_ref=AGENT, user_input=text, **kw)  # type: ignore[arg-type]


class Broken:
    """A backend whose every call raises once ``broken`` is set."""

    def __init__(self, target: Any, *, broken: bool = False) -> None:
        self._target = target
        self.broken = broken

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not self.broken or not callable(value):
            return value

        async def fail(*_a: Any, **_k: Any) -> Any:
            raise ConnectionError(f"backend lost ({name})")

        return fail


async def test_r10_132_a_failed_claim_fails_the_submit_and_delivers_nothing(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-132: with a lease backend that throws, submit raises SessionClaimFailed (HTTP
    503: retry) and returns no disposition; nothing is delivered to the inbox, no turn
    runs, and a keyed submit leaves no reservation behind (a retry runs)."""
    leases = Broken(shared.leases, broken=True)
    async with open_session_router(
        builder(attrs.evolve(shared, leases=leases), world, registry, "a")
    ) as a:
        with pytest.raises(SessionClaimFailed) as info:
            await a.submit(_request("x", idempotency_key=KEY))
        assert info.value.http_status == 503
        assert not await shared.inbox.has_pending(S1)
        assert await shared.idempotency.find(KEY) is None
        leases.broken = False
        retry = await a.submit(_request("x", idempotency_key=KEY))
        assert retry.kind is DispositionKind.EXECUTED_LOCALLY
        assert (await retry.result).text == "a:x:0"
    assert [t.text for t in world.turns] == ["x"]


class FlakyBus:
    """A node's connection to the bus: ``cut()`` ends its subscriptions (the connection
    dropped) and, while ``down``, refuses new ones and publishes nothing."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self.down = False
        self.subscriptions = 0
        self._sends: list[trio.MemorySendChannel[Any]] = []

    def cut(self) -> None:
        self.down = True
        for send in self._sends:
            send.close()

    async def publish(self, signal: Any) -> None:
        if self.down:
            raise ConnectionError("bus down")
        await self._target.publish(signal)

    @asynccontextmanager
    async def subscribe(self) -> AsyncIterator[Any]:
        if self.down:
            raise ConnectionError("bus down")
        self.subscriptions += 1
        send, receive = trio.open_memory_channel[Any](1024)
        self._sends.append(send)
        async with self._target.subscribe() as inner, trio.open_nursery() as nursery:

            async def pump() -> None:
                try:
                    async for signal in inner:
                        await send.send(signal)
                except trio.ClosedResourceError:
                    pass

            nursery.start_soon(pump)
            try:
                yield receive
            finally:
                nursery.cancel_scope.cancel()


async def test_r10_134_signals_sent_while_the_bus_is_down_are_lost_then_it_resubscribes(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-134: a's connection to the bus drops at 5 s and comes back at 30 s. An INTERRUPT
    published meanwhile for a's running turn (S2) has no effect; a subscribes again by
    itself, and an INTERRUPT published after that stops the turn. The TURN_RESULT a missed
    meanwhile (its keyed forward on S1, answered by h at 21 s) is recovered by polling at
    the forward's 30 s tick."""
    world.duration = lambda t: {"long": 20.0, "m": 1.0}.get(t, 100.0)
    flaky = FlakyBus(shared.bus)
    async with (
        open_session_router(builder(shared, world, registry, "h")) as h,
        open_session_router(builder(attrs.evolve(shared, bus=flaky), world, registry, "a")) as a,
    ):
        await h.submit(_request("long"))  # h holds S1, busy 0 → 20 s
        forwarded = await a.submit(_request("m", idempotency_key=KEY))
        assert forwarded.kind is DispositionKind.FORWARDED
        running = await a.submit(_request("a-long", session=S2))  # a runs S2 0 → 100 s
        await trio.sleep_until(5.0)
        flaky.cut()
        await trio.sleep_until(6.0)
        h.interrupt(S2, InterruptReason.USER)
        await trio.sleep_until(29.0)
        assert not running.result.done()  # lost with the outage
        assert not forwarded.result.done()  # its TURN_RESULT (21 s) was missed
        flaky.down = False
        assert (await forwarded.result).text == "h:m:2"
        assert trio.current_time() == 30.0  # the poll tick, not the rail
        await trio.sleep_until(40.0)
        assert flaky.subscriptions == 2
        h.interrupt(S2, InterruptReason.USER)
        with pytest.raises(TurnInterrupted, match="USER"):
            await running.result
        assert trio.current_time() == 40.0
    assert [t.text for t in world.turns if t.interrupted] == ["a-long"]


async def test_r10_135_a_lease_backend_lost_for_good_ends_every_turn_history_stays(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-135: the lease backend (separate from the record store) is lost for good at
    5 s. Every renewal throws; each lease is declared lost at its local deadline (grant + 30 s) and
    both running turns end interrupted (LEASE_LOST) without writing; the record store still
    has the history written before."""
    t0 = trio.current_time()
    leases = Broken(shared.leases)
    world.duration = lambda t: 1.0 if t == "first" else 1000.0
    async with open_session_router(
        builder(attrs.evolve(shared, leases=leases), world, registry, "a")
    ) as a:
        await (await a.submit(_request("first"))).result
        await (await a.submit(_request("first", session=S2))).result
        one = await a.submit(_request("long"))
        two = await a.submit(_request("long", session=S2))
        await trio.sleep_until(t0 + shared.s(5.0))
        leases.broken = True
        for disposition, deadline in ((one, 30.0), (two, 31.0)):  # granted at 0 s and 1 s
            with pytest.raises(TurnInterrupted, match="LEASE_LOST"):
                await disposition.result
            assert on_time(shared, trio.current_time() - t0, deadline)
    for session in (S1, S2):
        view = await shared.records.load(session)
        assert view is not None and [e.text for e in view.transcript] == ["first", "re:first"]


async def test_r10_138_alternating_nodes_each_turn_starts_from_the_record(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-138: turns alternate between nodes a, b, a, b (each node releases its handle
    and lease after its turn, so the next node runs the next turn on its own handle). Every
    turn's input history holds all earlier turns: the record is the authority, not the
    handle's copy."""
    async with (
        open_session_router(builder(shared, world, registry, "a")) as a,
        open_session_router(builder(shared, world, registry, "b")) as b,
    ):
        for i, node in enumerate([a, b, a, b]):
            disposition = await node.submit(_request(f"t{i}"))
            assert disposition.kind is DispositionKind.EXECUTED_LOCALLY
            await disposition.result
            await node.release_session(S1)
    assert [(t.node, t.history_len) for t in world.turns] == [
        ("a", 0),
        ("b", 2),
        ("a", 4),
        ("b", 6),
    ]
    assert world.opens == {"a": 2, "b": 2}
