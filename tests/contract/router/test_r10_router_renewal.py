"""Lease renewal and the touch slot (spec 10 §7.4): every successful renewal touches the
reservations bound to the lease at that tick — each cell a (key, reserverId) pair, two at
once when a pass is responsible for two — with the reservation's holder."""

from __future__ import annotations

import threading
from typing import Any

import attrs
import trio
import trio.testing
from router_app import Registry, Shared, World, all_on_time, builder, near
from router_kit import AGENT, S1, DroppingBus

from zlink_trio.router import (
    DispositionKind,
    HolderAcquired,
    IdempotencyKey,
    IdempotencyState,
    PutOutcome,
    Reserved,
    ReserverId,
    SessionMetrics,
    SubmitRequest,
    TakeoverOutcome,
    open_session_router,
)

KA = IdempotencyKey("k-a")
KB = IdempotencyKey("k-b")


def _request(text: str, **kw: object) -> SubmitRequest:
    return SubmitRequest(session_id=S1, agent_ref=AGENT, user_input=text, **kw)  # type: ignore[arg-type]


class HolderLosses(SessionMetrics):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.keys: list[IdempotencyKey] = []

    def on_holder_lost(self, key: IdempotencyKey) -> None:
        with self.lock:
            self.keys.append(key)


class Touches:
    """An idempotency store recording every touch (time, key, holder, matched) and every
    holder it handed out (by put_if_absent or acquire_holder) per key."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self.touches: list[tuple[float, IdempotencyKey, ReserverId, bool]] = []
        self.holders: dict[IdempotencyKey, set[ReserverId]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    async def put_if_absent(
        self, key: IdempotencyKey, digest: str, holder: ReserverId, **kw: Any
    ) -> PutOutcome:
        outcome: PutOutcome = await self._target.put_if_absent(key, digest, holder, **kw)
        if isinstance(outcome, Reserved):
            self.holders.setdefault(key, set()).add(holder)
        return outcome

    async def acquire_holder(self, key: IdempotencyKey, holder: ReserverId) -> TakeoverOutcome:
        outcome: TakeoverOutcome = await self._target.acquire_holder(key, holder)
        if isinstance(outcome, HolderAcquired):
            self.holders.setdefault(key, set()).add(holder)
        return outcome

    async def touch(self, key: IdempotencyKey, holder: ReserverId) -> bool:
        matched = bool(await self._target.touch(key, holder))
        self.touches.append((trio.current_time(), key, holder, matched))
        return matched

    def of(self, key: IdempotencyKey) -> list[tuple[float, bool]]:
        return [(t, m) for t, k, _, m in self.touches if k == key]


async def test_r10_98_one_pass_keeps_two_reservations_alive(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-98: h (which misses doorbells) holds the session; a's keyed message B waits in
    the inbox; h's own keyed submit A opens a pass that runs B first (delivered earlier,
    45 s) then A. The slot holds both cells: A's reservation (its caller waits the whole
    pass) and B's (taken over for its run) are both touched at every renewal while B runs,
    so neither goes stale: the caller attached to A's key on a never gets HOLDER_LOST, and
    both answers arrive."""
    world.duration = lambda t: 45.0 if t == "B" else 1.0
    t0 = trio.current_time()
    touches = Touches(shared.idempotency)
    losses = HolderLosses()
    deaf = DroppingBus(shared.bus, {"MESSAGE_ENQUEUED"})
    h_shared = attrs.evolve(shared, idempotency=touches, bus=deaf)
    async with (
        open_session_router(builder(h_shared, world, registry, "h", metrics=losses)) as h,
        open_session_router(builder(shared, world, registry, "a", metrics=losses)) as a,
    ):
        await (await h.submit(_request("bind"))).result  # h holds the lease from 0 s
        b = await a.submit(_request("B", idempotency_key=KB))
        assert b.kind is DispositionKind.FORWARDED
        await trio.sleep(shared.s(1))
        own = await h.submit(_request("A", idempotency_key=KA))  # at 2 s: B runs first
        attached = await a.submit(_request("A", idempotency_key=KA))
        assert attached.kind is DispositionKind.FORWARDED
        assert (await b.result).text == "h:B:2"
        assert (await own.result).text == "h:A:4"
        assert (await attached.result).text == "h:A:4"
    assert [t.text for t in world.turns] == ["bind", "B", "A"]
    for key in (KA, KB):
        assert [matched for _, matched in touches.of(key)] == [True] * 4
        assert all_on_time(shared, [t - t0 for t, _ in touches.of(key)], [10.0, 20.0, 30.0, 40.0])
    assert losses.keys == []


async def test_r10_97_every_touch_carries_one_reservation_s_own_pair(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-97 / R10-96: six keyed turns of exactly 10 s run back to back on one lease, so
    every turn switch falls on a renewal tick (the tick and the switch race at the same
    instant). Every touch carries a (key, reserverId) pair the store handed out together
    (never one turn's key with another turn's reserver), a touch that does not match is
    only ever one of a reservation already finished, and no live turn is swept."""
    world.duration = lambda _t: 10.0
    touches = Touches(shared.idempotency)
    losses = HolderLosses()
    keys = [IdempotencyKey(f"k-{i}") for i in range(6)]
    async with (
        open_session_router(
            builder(attrs.evolve(shared, idempotency=touches), world, registry, "h", metrics=losses)
        ) as h,
        open_session_router(builder(shared, world, registry, "a", metrics=losses)) as a,
    ):
        submitted = [
            await h.submit(_request(f"t{i}", idempotency_key=k)) for i, k in enumerate(keys)
        ]
        answers = [(await s.result).text for s in submitted]
        await trio.sleep(20)  # a sweeps too: nothing stale for anyone
        assert a.statistics().held_leases == 0
    assert answers == [f"h:t{i}:{2 * i}" for i in range(6)]
    assert [(t.start, t.end) for t in world.turns] == [(10.0 * i, 10.0 * i + 10) for i in range(6)]
    assert touches.touches
    for _, key, holder, matched in touches.touches:
        assert holder in touches.holders[key]
        if not matched:
            entry = await shared.idempotency.find(key)
            assert entry is not None and entry.state is IdempotencyState.DONE
    assert losses.keys == []
    assert await shared.idempotency.find_stale_in_flight() == ()


async def test_r10_99_touch_names_the_reservation_s_holder_not_the_lease_holder(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-99: the lease is held under the bare node id ("h"); the renewals of a 47 s keyed
    turn touch with the reservation's holder (h/<attempt>), every touch matches, and the
    entry's lastTouchedAt really advances with each renewal (40 s at 45 s)."""
    world.duration = lambda _t: 47.0
    t0 = trio.current_time()
    touches = Touches(shared.idempotency)
    async with open_session_router(
        builder(attrs.evolve(shared, idempotency=touches), world, registry, "h")
    ) as h:
        job = await h.submit(_request("job", idempotency_key=KA))
        await trio.sleep_until(t0 + shared.s(45.0))
        lease = await shared.leases.current(S1)
        assert lease is not None and lease.holder_id.value == "h"
        entry = await shared.idempotency.find(KA)
        assert entry is not None and near(shared, entry.last_touched_at - t0, 40.0)
        assert entry.holder_id is not None and entry.holder_id.value != "h"
        await job.result
    assert [m for _, _, _, m in touches.touches] == [True] * 4
    ticks = [t - t0 for t, _, _, _ in touches.touches]
    assert all_on_time(shared, ticks, [10.0 * k for k in range(1, 5)])
    assert {holder for _, _, holder, _ in touches.touches} == {entry.holder_id}
