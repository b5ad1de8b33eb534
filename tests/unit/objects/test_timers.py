"""The kind-generic timer core (zlink_trio.objects.timers) on a MockClock.

Owners here are real engine lanes whose turn handler takes both messages and ticks, the way
an owner kind plugs in (the package docstring): ticks are lane items, so every ordering
below is the lane's acceptance order. Times are exact (autojump MockClock).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from zlink_trio.engine import ActorDeliveryLane, Engine, open_engine
from zlink_trio.errors import (
    CapacityExceeded,
    ConfigurationError,
    InvalidArgument,
    InvalidOperation,
    ShuttingDown,
)
from zlink_trio.objects.timers import (
    MAX_TIMER_PAYLOAD,
    MAX_TIMERS_PER_OWNER,
    TimerKind,
    TimerService,
    TimersSnapshot,
    TimerTick,
    serve_timers,
)


@attrs.frozen
class Msg:
    text: str


class Owner:
    """One owner: a lane, its timer table and a log of what its turns ran."""

    def __init__(self, engine: Engine, service: TimerService, name: str = "o") -> None:
        self.name = name
        self.lane = engine.new_lane(ActorDeliveryLane(), self._turn)
        self.table = service.open_table(self)
        self.log: list[tuple[float, str, str]] = []
        self.stale: list[str] = []
        self.gates: dict[str, trio.Event] = {}
        self.entered: dict[str, trio.Event] = {}
        self.tick_work = 0.0
        """Virtual seconds each tick handler takes."""

    def submit_tick_nowait(self, tick: TimerTick) -> object:
        return self.lane.submit_nowait(tick)

    async def submit_tick(self, tick: TimerTick) -> object:
        return await self.lane.submit(tick)

    def send(self, text: str) -> None:
        self.lane.submit_nowait(Msg(text))

    def hold(self, text: str) -> trio.Event:
        gate = self.gates[text] = trio.Event()
        self.entered[text] = trio.Event()
        return gate

    async def _turn(self, item: Any) -> None:
        now = trio.current_time()
        if isinstance(item, TimerTick):
            registration = self.table.accept(item)
            if registration is None:
                self.stale.append(item.name)
                return
            self.log.append((now, "tick", f"{registration.name}:{registration.payload.decode()}"))
            if self.tick_work:
                await trio.sleep(self.tick_work)
            return
        self.log.append((now, "msg", item.text))
        gate = self.gates.get(item.text)
        if gate is not None:
            self.entered[item.text].set()
            await gate.wait()

    def ticks(self, name: str | None = None) -> list[float]:
        return [
            t
            for t, what, text in self.log
            if what == "tick" and (name is None or text.startswith(f"{name}:"))
        ]

    def order(self) -> list[str]:
        return [text for _t, _what, text in self.log]


@attrs.define
class Rig:
    engine: Engine
    service: TimerService
    nursery: trio.Nursery

    def owner(self, name: str = "o") -> Owner:
        return Owner(self.engine, self.service, name)


@pytest.fixture
async def rig(autojump_clock: trio.testing.MockClock) -> AsyncIterator[Rig]:
    async with open_engine(lane_capacity=4) as engine, trio.open_nursery() as nursery:
        service = await nursery.start(serve_timers)
        yield Rig(engine, service, nursery)
        nursery.cancel_scope.cancel()


async def test_a_one_shot_fires_once_at_its_due_time(
    rig: Rig, autojump_clock: trio.testing.MockClock
) -> None:
    owner = rig.owner()
    start = trio.current_time()
    registration = owner.table.once("t", 2.5, b"p")
    assert registration.kind is TimerKind.ONE_SHOT and registration.period is None
    assert "t" in owner.table
    await trio.sleep(100)
    assert owner.log == [(start + 2.5, "tick", "t:p")]
    assert "t" not in owner.table  # a one-shot's registration ends at its tick
    stats = rig.service.statistics()
    assert (stats.owners, stats.registered, stats.fired) == (0, 0, 1)


async def test_a_periodic_timer_does_not_drift_with_a_slow_handler(
    rig: Rig, autojump_clock: trio.testing.MockClock
) -> None:
    owner = rig.owner()
    owner.tick_work = 0.3  # a handler that takes 30 % of the period
    start = trio.current_time()
    owner.table.every("p", 1.0, b"x")
    await trio.sleep(10.5)
    assert owner.ticks("p") == [start + k for k in range(1, 11)]
    assert rig.service.statistics().coalesced == 0


async def test_periodic_due_times_come_from_the_origin_not_from_sums(
    rig: Rig, autojump_clock: trio.testing.MockClock
) -> None:
    """0.1 added 1000 times is not 100.0; origin + k * period is."""
    owner = rig.owner()
    start = trio.current_time()
    owner.table.every("p", 0.1, first=0.1)
    await trio.sleep(100.05)
    ticks = owner.ticks("p")
    assert len(ticks) == 1000
    assert ticks == [start + 0.1 + k * 0.1 for k in range(1000)]


async def test_a_periodic_timer_first_delay(
    rig: Rig, autojump_clock: trio.testing.MockClock
) -> None:
    owner = rig.owner()
    start = trio.current_time()
    owner.table.every("p", 5, first=0)
    await trio.sleep(11)
    assert owner.ticks("p") == [start, start + 5, start + 10]


async def test_due_times_of_a_tick_that_has_not_run_are_coalesced(
    rig: Rig, autojump_clock: trio.testing.MockClock
) -> None:
    """A handler slower than the period: at most one tick of the timer is outstanding;
    the due times that pass meanwhile fold into it (counted), the grid stays."""
    owner = rig.owner()
    owner.tick_work = 2.5
    start = trio.current_time()
    owner.table.every("p", 1.0)
    await trio.sleep(8.9)
    # t=1 runs until 3.5; the t=2 tick waits (t=3 folded in) and runs 3.5..6; the t=4
    # tick waits (5 folded in) and runs 6..8.5; the next one (6 or 7: whichever found no
    # tick outstanding) runs at 8.5, the other due times up to 8 folded in.
    assert owner.ticks("p") == [start + 1, start + 3.5, start + 6, start + 8.5]
    assert rig.service.statistics().coalesced == 4


async def test_a_tick_due_while_a_handler_runs_waits_for_it(
    rig: Rig, autojump_clock: trio.testing.MockClock
) -> None:
    owner = rig.owner()
    release = owner.hold("slow")
    start = trio.current_time()
    owner.send("slow")
    owner.table.once("t", 1)
    await owner.entered["slow"].wait()
    await trio.sleep(5)
    assert owner.order() == ["slow"]  # the tick is due but the handler still runs
    release.set()
    await trio.sleep(1)
    assert owner.log == [(start, "msg", "slow"), (start + 5, "tick", "t:")]


async def test_ticks_and_messages_run_in_acceptance_order(
    rig: Rig, autojump_clock: trio.testing.MockClock
) -> None:
    owner = rig.owner()
    release = owner.hold("a")
    owner.send("a")
    await owner.entered["a"].wait()
    owner.send("b")  # accepted before the tick fires
    owner.table.once("t", 1)
    await trio.sleep(2)  # the tick fired at 1 (behind b)
    owner.send("c")  # accepted after it
    release.set()
    await trio.sleep(1)
    assert owner.order() == ["a", "b", "t:", "c"]


async def test_a_cancelled_timer_never_fires(
    rig: Rig, autojump_clock: trio.testing.MockClock
) -> None:
    owner = rig.owner()
    owner.table.once("t", 2)
    owner.table.every("p", 1)
    await trio.sleep(1.5)
    assert owner.table.cancel("t") is True
    assert owner.table.cancel("p") is True
    assert owner.table.cancel("p") is False
    await trio.sleep(10)
    assert owner.ticks("t") == []
    assert len(owner.ticks("p")) == 1  # the tick of t=1, before the cancel
    assert rig.service.statistics().registered == 0


async def test_a_cancelled_timer_whose_tick_is_queued_does_not_run(
    rig: Rig, autojump_clock: trio.testing.MockClock
) -> None:
    owner = rig.owner()
    release = owner.hold("slow")
    owner.send("slow")
    await owner.entered["slow"].wait()
    owner.table.once("t", 1)
    await trio.sleep(2)  # fired: the tick waits in the lane behind "slow"
    assert owner.lane.backlog == 1
    assert owner.table.cancel("t") is True
    release.set()
    await trio.sleep(1)
    assert owner.order() == ["slow"]
    assert owner.stale == ["t"]
    assert rig.service.statistics().stale == 1


async def test_registering_a_name_again_replaces_it(
    rig: Rig, autojump_clock: trio.testing.MockClock
) -> None:
    owner = rig.owner()
    release = owner.hold("slow")
    start = trio.current_time()
    owner.send("slow")
    await owner.entered["slow"].wait()
    first = owner.table.once("t", 1, b"old")
    await trio.sleep(2)  # the old tick is queued
    second = owner.table.once("t", 3, b"new")
    assert second.serial != first.serial
    assert len(owner.table) == 1
    release.set()
    await trio.sleep(10)
    assert owner.log[1:] == [(start + 5, "tick", "t:new")]
    assert owner.stale == ["t"]
    # periodic replaced by one-shot and back
    owner.table.every("p", 1, b"a")
    owner.table.every("p", 2, b"b")
    now = trio.current_time()
    await trio.sleep(4.5)
    assert [t for t in owner.ticks("p")] == [now + 2, now + 4]
    assert owner.table.get("p") is not None and owner.table.get("p").payload == b"b"  # type: ignore[union-attr]


async def test_a_handler_may_register_its_own_one_shot_again(
    rig: Rig, autojump_clock: trio.testing.MockClock
) -> None:
    owner = rig.owner()
    start = trio.current_time()

    async def turn(item: Any) -> None:
        assert isinstance(item, TimerTick)
        registration = owner.table.accept(item)
        assert registration is not None
        owner.log.append((trio.current_time(), "tick", item.name))
        if len(owner.log) < 3:
            owner.table.once("t", 2)  # the tick's registration is over: a new one

    owner.lane = rig.engine.new_lane(ActorDeliveryLane(), turn)
    owner.table.once("t", 2)
    await trio.sleep(20)
    assert [t for t, _w, _n in owner.log] == [start + 2, start + 4, start + 6]


async def test_a_full_lane_blocks_neither_the_service_nor_loses_the_tick(
    rig: Rig, autojump_clock: trio.testing.MockClock
) -> None:
    """Lane bound 4: the owner's handler is stuck with 4 messages queued. Its one-shot and
    its periodic timer fire into the backlog (one pump task waits for space); another
    owner's timers fire on time meanwhile; when the owner runs again, the one-shot runs
    once, the periodic one once (its later due times coalesced), after the 4 messages."""
    stuck = rig.owner("stuck")
    other = rig.owner("other")
    release = stuck.hold("m0")
    start = trio.current_time()
    stuck.send("m0")
    await stuck.entered["m0"].wait()
    for i in range(1, 5):
        stuck.send(f"m{i}")
    with pytest.raises(CapacityExceeded):
        stuck.send("m5")
    stuck.table.once("once", 1)
    stuck.table.every("every", 1)
    other.table.every("beat", 1)
    await trio.sleep(5.5)
    assert other.ticks("beat") == [start + k for k in range(1, 6)]  # not blocked
    stats = rig.service.statistics()
    assert stats.backlog == 2
    assert len(rig.service._nursery.child_tasks) == 1  # one pump, for the stuck owner
    release.set()
    await trio.sleep(0.1)
    assert stuck.order()[:5] == ["m0", "m1", "m2", "m3", "m4"]
    assert sorted(stuck.order()[5:]) == ["every:", "once:"]
    assert rig.service.statistics().backlog == 0
    assert rig.service.statistics().coalesced >= 4
    await trio.sleep(1)
    assert len(stuck.ticks("every")) == 2  # the grid goes on: t=6
    assert stuck.ticks("every")[-1] == start + 6
    assert not rig.service._nursery.child_tasks  # the pump ended with the backlog


async def test_suspended_tables_keep_due_ticks_until_resumed(
    rig: Rig, autojump_clock: trio.testing.MockClock
) -> None:
    owner = rig.owner()
    start = trio.current_time()
    owner.table.once("t", 1)
    owner.table.every("p", 1)
    owner.table.suspend()
    await trio.sleep(5.5)
    assert owner.log == []
    assert rig.service.statistics().backlog == 2
    owner.table.resume()
    await trio.testing.wait_all_tasks_blocked()
    assert owner.log == [(start + 5.5, "tick", "t:"), (start + 5.5, "tick", "p:")]
    await trio.sleep(0.6)
    assert owner.ticks("p")[-1] == start + 6


async def test_close_cleans_up_once_and_nothing_fires_after(
    rig: Rig, autojump_clock: trio.testing.MockClock
) -> None:
    owner = rig.owner()
    release = owner.hold("slow")
    owner.send("slow")
    await owner.entered["slow"].wait()
    owner.table.every("p", 1)
    owner.table.once("t", 1)
    owner.table.once("later", 50)
    await trio.sleep(1.5)  # two ticks queued behind "slow"
    assert owner.table.close() == 3
    assert owner.table.close() == 0  # once
    assert owner.table.closed and len(owner.table) == 0
    assert rig.service.statistics().owners == 0
    release.set()
    await trio.sleep(100)
    assert owner.order() == ["slow"]
    assert sorted(owner.stale) == ["p", "t"]
    with pytest.raises(InvalidOperation):
        owner.table.once("t", 1)
    assert rig.service._heap == [] or all(e[2].seq != e[1] for e in rig.service._heap)


async def test_a_tick_the_lane_drops_is_discarded(
    rig: Rig, autojump_clock: trio.testing.MockClock
) -> None:
    owner = rig.owner()
    release = owner.hold("slow")
    owner.send("slow")
    await owner.entered["slow"].wait()
    owner.table.once("t", 1)
    owner.table.every("p", 1)
    await trio.sleep(1.5)
    dropped = owner.lane.retire()
    for item in dropped:
        if isinstance(item, TimerTick):
            owner.table.discard(item)
    assert "t" not in owner.table  # the one-shot is over
    assert "p" in owner.table
    assert rig.service.statistics().dropped == 2
    release.set()
    await trio.sleep(1)  # p fires again (not pending any more), the lane refuses it
    assert rig.service.statistics().dropped == 3


async def test_seal_fires_nothing_more_and_the_service_end_closes_every_table(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_engine() as engine:
        async with trio.open_nursery() as nursery:
            service = await nursery.start(serve_timers)
            owner = Owner(engine, service)
            owner.table.every("p", 1)
            await trio.sleep(2.5)
            assert len(owner.ticks()) == 2
            service.seal()
            await trio.sleep(10)
            assert len(owner.ticks()) == 2
            owner.table.once("t", 0)  # registered, never fired
            assert service.statistics().registered == 2 and service.statistics().sealed
            nursery.cancel_scope.cancel()
        assert service.closed and owner.table.closed
        assert service.statistics().registered == 0 and service.statistics().owners == 0
        with pytest.raises(InvalidOperation):
            owner.table.once("t", 0)
        with pytest.raises(ShuttingDown):
            service.open_table(owner)


async def test_capture_and_restore_keep_registrations_serials_and_due_times(
    rig: Rig, autojump_clock: trio.testing.MockClock
) -> None:
    source = rig.owner("source")
    release = source.hold("slow")
    source.send("slow")
    await source.entered["slow"].wait()
    start = trio.current_time()
    source.table.every("p", 10, b"pp")
    source.table.once("t", 3, b"tt")
    source.table.once("fired", 1, b"ff")
    await trio.sleep(2)  # "fired" is in the lane (pending), t due in 1, p in 8
    snapshot = source.table.capture()
    assert source.table.suspended
    assert isinstance(snapshot, TimersSnapshot)
    states = {s.registration.name: s for s in snapshot.timers}
    assert states["p"].remaining == 8 and not states["p"].tick_pending
    assert states["t"].remaining == 1
    assert states["fired"].remaining == 0 and states["fired"].tick_pending
    assert snapshot.next_serial == 4
    # the relocation takes the source lane's pending items and closes the source
    pending = [item for item in source.lane.retire() if isinstance(item, TimerTick)]
    source.table.close()
    release.set()
    target = rig.owner("target")
    target.table = rig.service.restore(target, snapshot)
    for tick in pending:
        target.submit_tick_nowait(tick)
    await trio.sleep(0.5)
    assert target.order() == ["fired:ff"]  # the moved tick runs (its serial matches)
    target.table.resume()
    await trio.sleep(20)
    assert target.ticks("t") == [start + 3]
    assert target.ticks("p") == [start + 10, start + 20]
    assert target.table.once("new", 1).serial == 4


async def test_idle_timers_hold_no_task(rig: Rig, autojump_clock: trio.testing.MockClock) -> None:
    """10 000 owners with an hourly timer each: one heap entry each, no task."""
    owners = [rig.owner(f"o{i}") for i in range(10_000)]
    for owner in owners:
        owner.table.every("hourly", 3600)
    stats = rig.service.statistics()
    assert (stats.owners, stats.registered) == (10_000, 10_000)
    assert not rig.service._nursery.child_tasks
    await trio.sleep(3600.5)
    assert all(owner.ticks() == [owner.ticks()[0]] for owner in owners)
    assert rig.service.statistics().fired == 10_000


async def test_argument_checks(rig: Rig, autojump_clock: trio.testing.MockClock) -> None:
    table = rig.owner().table
    for bad in (-1, math.inf, math.nan, "1", True, None):
        with pytest.raises(InvalidArgument):
            table.once("t", bad)  # type: ignore[arg-type]
    for bad in (0, 0.0005, -1, math.inf, "1"):
        with pytest.raises(InvalidArgument):
            table.every("t", bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        table.every("t", 1, first=-1)
    with pytest.raises(InvalidArgument):
        table.once("t", 1, "text")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        table.once("t", 1, b"x" * (MAX_TIMER_PAYLOAD + 1))
    for bad_name in ("", "x" * 256, 3):
        with pytest.raises(ConfigurationError):
            table.once(bad_name, 1)  # type: ignore[arg-type]
    assert len(table) == 0
    for i in range(MAX_TIMERS_PER_OWNER):
        table.once(f"t{i}", 10)
    with pytest.raises(CapacityExceeded):
        table.once("one-more", 10)
    table.once("t0", 20)  # replacing is not one more
    assert len(table) == MAX_TIMERS_PER_OWNER
