"""What keeps a held session moving (spec 10 §6.3 D, §7.3, §7.4, §9.2): renewals touch the
reservations bound to the lease at that tick, and doorbells ring again when a message would
otherwise wait for nobody. Each test kills a mutant an adversarial review found surviving."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio
import trio.testing
from router_app import Registry, Shared, World, all_on_time, builder, cluster, on_time
from router_kit import AGENT, S1

from zlink_trio.router import (
    DispositionKind,
    IdempotencyKey,
    IdempotencyState,
    NodeId,
    ReserverId,
    SessionId,
    SessionMetrics,
    SignalKind,
    SubmitRequest,
    open_session_router,
    yield_signals,
)
from zlink_trio.testing import settle

K1 = IdempotencyKey("k-turn-1")
K2 = IdempotencyKey("k-turn-2")


def _request(text: str, **kw: object) -> SubmitRequest:
    return SubmitRequest(session_id=S1, agent_ref=AGENT, user_input=text, **kw)  # type: ignore[arg-type]


class TouchLog:
    """An idempotency store recording every touch (key, time, whether it matched)."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self.touches: list[tuple[IdempotencyKey, float]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    async def touch(self, key: IdempotencyKey, holder_id: ReserverId) -> bool:
        self.touches.append((key, trio.current_time()))
        return bool(await self._target.touch(key, holder_id))


class Rerings(SessionMetrics):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sessions: list[SessionId] = []

    def on_forward_doorbell_rerung(self, session_id: SessionId) -> None:
        with self.lock:
            self.sessions.append(session_id)


async def test_r10_120_a_live_keyed_turn_stays_in_flight_past_ten_minutes(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-120 / R10-96: a keyed turn whose holder is alive is still IN_FLIGHT, held and
    freshly touched after 10 min (the renewals touch it every 10 s), so no sweep resets it
    and a retry at 10 min attaches to it instead of running the request twice."""
    world.duration = lambda _t: 660.0
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
        first = await a.submit(_request("long", idempotency_key=K1))
        await trio.sleep(600)
        entry = await shared.idempotency.find(K1)
        assert entry is not None and entry.state is IdempotencyState.IN_FLIGHT
        assert entry.holder_id is not None
        assert trio.current_time() - entry.last_touched_at <= 10.0
        assert await shared.idempotency.find_stale_in_flight() == ()
        retry = await b.submit(_request("long", idempotency_key=K1))
        assert retry.kind is DispositionKind.FORWARDED
        assert await retry.result == await first.result
    assert [t.text for t in world.turns] == ["long"]


async def test_r10_96_a_finished_turn_s_key_is_never_touched_again(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-96 / R10-174 / R10-120: one lease serves two keyed turns; every renewal tick
    touches the reservation bound to the slot at that tick: turn 2's key at each 10 s tick
    while it runs (it outlives the 30 s secondary TTL unswept), turn 1's key never once it
    finished (its cell was unbound, not captured at schedule time)."""
    touches = TouchLog(shared.idempotency)
    t0 = trio.current_time()
    world.duration = lambda t: 5.0 if t == "one" else 42.0
    async with cluster(attrs.evolve(shared, idempotency=touches), world, registry, ["a"]) as (a,):
        await (await a.submit(_request("one", idempotency_key=K1))).result  # 0 → 5
        two = await a.submit(_request("two", idempotency_key=K2))  # 5 → 47
        assert (await two.result).text == "a:two:2"
        await trio.sleep(shared.s(30))  # ticks at 50, 60, 70 with no reservation bound
    assert [key for key, _ in touches.touches] == [K2] * 4
    assert all_on_time(shared, [t - t0 for _, t in touches.touches], [10.0, 20.0, 30.0, 40.0])
    done = await shared.idempotency.find(K2)
    assert done is not None and done.state is IdempotencyState.DONE


class _DropFirstDoorbell:
    """A node's view of the bus that misses the first MESSAGE_ENQUEUED it would hear."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self.missed = 0

    async def publish(self, signal: Any) -> None:
        await self._target.publish(signal)

    @asynccontextmanager
    async def subscribe(self) -> AsyncIterator[Any]:
        send, receive = trio.open_memory_channel[Any](1024)
        async with self._target.subscribe() as inner, trio.open_nursery() as nursery:

            async def pump() -> None:
                async with send:
                    async for signal in inner:
                        if signal.kind is SignalKind.MESSAGE_ENQUEUED and not self.missed:
                            self.missed += 1
                            continue
                        await send.send(signal)

            nursery.start_soon(pump)
            try:
                yield receive
            finally:
                nursery.cancel_scope.cancel()


async def test_r10_72_a_lost_doorbell_is_rung_again_at_the_next_poll(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-72 / R10-73 / R10-75 (part 1's share): the holder misses the doorbell of a
    forwarded message; the waiting node's poll tick (15 s later) finds the inbox non-empty
    and rings again (counted once), so the holder runs it then — not at the 5 min forward
    deadline. A forward whose message was collected (inbox empty) rings nothing at its
    ticks."""
    deaf = _DropFirstDoorbell(shared.bus)
    rerings = Rerings()
    t0 = trio.current_time()
    world.duration = lambda t: 40.0 if t == "long" else 1.0
    async with (
        open_session_router(builder(attrs.evolve(shared, bus=deaf), world, registry, "a")) as a,
        open_session_router(builder(shared, world, registry, "b", metrics=rerings)) as b,
    ):
        await (await a.submit(_request("bind"))).result  # a holds the lease, idle from 1 s
        await trio.sleep(shared.s(1))
        late = await b.submit(_request("late"))  # t = 2; a misses its doorbell
        assert late.kind is DispositionKind.FORWARDED
        assert (await late.result).text == "a:late:2"
        assert deaf.missed == 1
        assert on_time(shared, trio.current_time() - t0, 2 + 15 + 1)  # at b's first poll tick
        collected = await b.submit(_request("long"))  # collected at once, runs 40 s
        await collected.result  # b's two poll ticks meanwhile see an empty inbox
    assert rerings.sessions == [S1]


async def test_r10_12_after_a_hand_off_the_inbox_is_rung_for_at_once(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-12 / R10-90: a holder that yields mid-turn rings the doorbell for the messages
    still in the inbox when it has returned the lease, so the requester runs them at that
    moment — not at its forward's next poll tick (no re-ring needed). Which node then wins
    the lease is not asserted (R10-100)."""
    rerings = Rerings()
    world.duration = lambda t: 100.0 if t == "long" else 1.0
    async with cluster(shared, world, registry, ["a", "b"], metrics=rerings) as (a, b):
        long = await a.submit(_request("long"))
        await trio.sleep(1)
        queued = await b.submit(_request("queued"))  # waits in the inbox behind "long"
        await trio.sleep(4)
        for signal in yield_signals(S1, NodeId("c")):
            await shared.bus.publish(signal)
        assert (await queued.result).text.endswith(":queued:0")
        assert [(t.text, t.start) for t in world.turns][-1] == ("queued", 5.0)
        await settle()
        assert long.result.done()
    assert rerings.sessions == []
