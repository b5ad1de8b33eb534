"""Issue 12 (framework timers): an Actor's timers through the public surface.

``self.context.timers.once/every/cancel`` from the Actor's own handlers, ``@on_timer``
handlers, ``server.statistics().timers``. The Actors live on node 0 and are driven from
node 1 over real TCP. Exact virtual times are asserted on the memory backend
(MockClock); the tests where the Store is part of the behaviour (destroy, a node's stop)
also run on PostgreSQL, on the real clock, with short periods and no exact times.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from actor_kit import client_app

from zlink_trio import (
    App,
    ConfigurationError,
    InvalidOperation,
    RecreateOnRelocation,
    ServerConfig,
    TimerKind,
    on_request,
    on_send,
    on_timer,
)
from zlink_trio.actors.results import Created
from zlink_trio.mesh.lease import LeaseHeld
from zlink_trio.testing import (
    Cluster,
    CountingStore,
    CutOffStore,
    FlowEvent,
    flow_count,
    node_of,
    open_cluster,
)

LONG = 60.0


@attrs.frozen
class Typed:
    """A registered payload class (a timer handler may not take one)."""

    n: int


@attrs.define
class Log:
    """What the Actors' handlers did, across the cluster: (time, actor, what, detail)."""

    entries: list[tuple[float, str, str, str]] = attrs.field(factory=list)
    instances: dict[str, Any] = attrs.field(factory=dict)
    gate: trio.Event = attrs.field(factory=trio.Event)
    entered: trio.Event = attrs.field(factory=trio.Event)
    tick_work: float = 0.0
    """Virtual seconds each "slow" tick handler takes."""
    stop_after: int = 0
    """The "self_cancel" handler cancels its timer at this many ticks."""
    _changed: trio.Event = attrs.field(factory=trio.Event)

    def add(self, actor: str, what: str, detail: str) -> None:
        self.entries.append((trio.current_time(), actor, what, detail))
        self._changed.set()
        self._changed = trio.Event()

    def ticks(self, name: str | None = None) -> list[float]:
        return [
            t
            for t, _a, what, detail in self.entries
            if what == "tick" and (name is None or detail.split("=")[0] == name)
        ]

    def order(self) -> list[str]:
        return [detail for _t, _a, _w, detail in self.entries]

    async def wait_ticks(self, count: int, name: str | None = None) -> None:
        with trio.fail_after(LONG):
            while len(self.ticks(name)) < count:
                await self._changed.wait()


def timer_app(log: Log, *, extra: type | None = None) -> App:
    """Actor type "clock": requests that drive its timers, and its timer handlers."""

    class Clock:
        def __init__(self, context: Any) -> None:
            self.context = context
            log.instances[context.actor_id.value] = self
            self.count: dict[str, int] = {}

        def _tick(self, name: str, payload: bytes) -> None:
            self.count[name] = self.count.get(name, 0) + 1
            log.add(self.context.actor_id.value, "tick", f"{name}={payload.decode()}")

        # --- driving requests: b"name|seconds[|payload[|first]]"
        @on_request("once")
        async def once(self, payload: bytes) -> bytes:
            name, seconds, *rest = payload.decode().split("|")
            data = rest[0].encode() if rest else b""
            self.context.timers.once(name, float(seconds), data)
            return repr(trio.current_time()).encode()

        @on_request("every")
        async def every(self, payload: bytes) -> bytes:
            name, seconds, *rest = payload.decode().split("|")
            data = rest[0].encode() if rest else b""
            first = float(rest[1]) if len(rest) > 1 else None
            registration = self.context.timers.every(name, float(seconds), data, first=first)
            assert registration.kind is TimerKind.PERIODIC
            return repr(trio.current_time()).encode()

        @on_request("cancel")
        async def cancel(self, payload: bytes) -> bytes:
            return b"1" if self.context.timers.cancel(payload.decode()) else b"0"

        @on_request("list")
        async def list_(self, payload: bytes) -> bytes:
            regs = self.context.timers.registrations()
            return ",".join(f"{r.name}:{r.kind.value}" for r in regs).encode()

        @on_request("block")
        async def block(self, payload: bytes) -> bytes:
            """Hold the turn until the gate opens, then (payload ``cancel:x`` /
            ``once:x``) cancel or re-register timer x from inside this same turn."""
            log.add(self.context.actor_id.value, "msg", "block")
            log.entered.set()
            await log.gate.wait()
            verb, _, name = payload.decode().partition(":")
            if verb == "cancel":
                return b"1" if self.context.timers.cancel(name) else b"0"
            if verb == "once":
                self.context.timers.once(name, 2, b"new")
            return b"done"

        @on_send("note")
        async def note(self, payload: bytes) -> None:
            log.add(self.context.actor_id.value, "msg", payload.decode())

        # --- timer handlers
        @on_timer("a")
        async def a(self, payload: bytes) -> None:
            self._tick("a", payload)

        @on_timer("b")
        async def b(self, payload: bytes) -> None:
            self._tick("b", payload)

        @on_timer("slow")
        async def slow(self, payload: bytes) -> None:
            self._tick("slow", payload)
            await trio.sleep(log.tick_work)

        @on_timer("self_cancel")
        async def self_cancel(self, payload: bytes) -> None:
            self._tick("self_cancel", payload)
            if self.count["self_cancel"] >= log.stop_after:
                assert self.context.timers.cancel("self_cancel")

        @on_timer("again")
        async def again(self, payload: bytes) -> None:
            self._tick("again", payload)
            if self.count["again"] < 3:
                self.context.timers.once("again", 2, payload)  # a one-shot re-armed

        @on_timer("fails")
        async def fails(self, payload: bytes) -> None:
            self._tick("fails", payload)
            raise InvalidOperation("a timer handler failing on purpose")

    app = App()
    app.enable_actor_dispatch()
    app.register_actor("clock", Clock, relocation=RecreateOnRelocation())
    if extra is not None:
        app.register_actor("extra", extra, relocation=RecreateOnRelocation())
    return app


def _apps(log: Log) -> Any:
    apps = [timer_app(log), client_app()]
    return lambda i: apps[i]


async def _clock(cluster: Cluster, actor_id: str = "clock-1") -> Any:
    created = await cluster.servers[1].actors.create(actor_id, "clock").timeout(LONG)
    assert isinstance(created, Created)
    assert created.actor.node_rid == cluster.servers[0].identity.node_rid
    return created.actor


async def _ask(cluster: Cluster, packet: str, payload: bytes, actor_id: str = "clock-1") -> Any:
    return await cluster.servers[1].actors.request(actor_id, packet, payload).timeout(LONG)


def _timers(cluster: Cluster, index: int = 0) -> Any:
    stats = cluster.servers[index].statistics().timers
    assert stats is not None
    return stats


async def test_a_one_shot_timer_fires_once_as_a_turn_with_its_payload(
    clock: trio.testing.MockClock | None, store: CountingStore
) -> None:
    """Issue 12 (timers): ``once("a", delay, payload)`` runs the ``@on_timer("a")``
    handler once, with the payload, ``delay`` after the registration (exactly, on the
    MockClock); the registration is gone afterwards."""
    log = Log()
    delay = 2.5 if clock is not None else 0.2
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        await _clock(cluster)
        registered_at = float(await _ask(cluster, "once", f"a|{delay}|hello".encode()))
        assert await _ask(cluster, "list", b"") == b"a:one_shot"
        assert _timers(cluster).registered == 1
        await log.wait_ticks(1)
        if clock is not None:
            assert log.ticks() == [registered_at + delay]
            await trio.sleep(100)  # nothing more
        else:
            await trio.sleep(3 * delay)
        assert log.order() == ["a=hello"]
        assert await _ask(cluster, "list", b"") == b""
        stats = _timers(cluster)
        assert (stats.registered, stats.owners, stats.fired) == (0, 0, 1)


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_a_handler_may_arm_its_one_shot_again(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """Issue 12 (timers): a one-shot's registration ends when its tick runs, so its own
    handler may register the same name again (three ticks, 2 s apart)."""
    log = Log()
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        await _clock(cluster)
        start = float(await _ask(cluster, "once", b"again|2|x"))
        await trio.sleep(20)
        assert log.ticks("again") == [start + 2, start + 4, start + 6]


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_a_periodic_timer_does_not_drift(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """Issue 12 (timers): ``every("slow", 1.0)`` whose handler takes 0.3 s: the ticks
    run at exactly registration + k s for k = 1..10 (the period is measured from the
    registration's grid, not from each handler's end: no drift accumulates); ``first``
    moves the grid's start."""
    log = Log(tick_work=0.3)
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        await _clock(cluster)
        start = float(await _ask(cluster, "every", b"slow|1.0"))
        await trio.sleep(10.5)
        assert log.ticks("slow") == [start + k for k in range(1, 11)]
        assert _timers(cluster).coalesced == 0
        assert await _ask(cluster, "cancel", b"slow") == b"1"
        start = float(await _ask(cluster, "every", b"a|5|p|0"))
        await trio.sleep(11)
        assert log.ticks("a") == [start, start + 5, start + 10]


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_due_times_of_a_tick_that_has_not_run_are_coalesced(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """Issue 12 (timers): a handler slower than its period (2.5 s for 1 s) never has two
    ticks of the timer waiting: the due times that pass while one waits are folded into
    it (counted as ``coalesced``), and the grid stays (the next tick is the first due time
    after a tick ran)."""
    log = Log(tick_work=2.5)
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        await _clock(cluster)
        start = float(await _ask(cluster, "every", b"slow|1"))
        await trio.sleep(8.9)
        assert log.ticks("slow") == [start + 1, start + 3.5, start + 6, start + 8.5]
        assert _timers(cluster).coalesced == 4


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_a_tick_due_while_a_handler_runs_waits_for_it(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """Issue 12 (timers): the tick is a turn of the Actor: due while a request handler of
    the same Actor runs, it waits until that turn ends and then runs at once (never
    concurrently with the handler)."""
    log = Log()
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        await _clock(cluster)
        await _ask(cluster, "once", b"a|1")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_ask, cluster, "block", b"")
            await log.entered.wait()
            await trio.sleep(5)
            assert _timers(cluster).fired == 1  # due and queued behind the turn
            assert log.order() == ["block"]
            released = trio.current_time()
            log.gate.set()
        assert log.order() == ["block", "a="]
        assert log.ticks() == [released]


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_ticks_and_messages_run_in_acceptance_order(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """Issue 12 (timers): a tick enters the Actor's queue when it is due, like a message
    arriving then: a note accepted before the due time runs before the tick, one accepted
    after runs after it."""
    log = Log()
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        await _clock(cluster)
        caller = cluster.servers[1].actors
        start = float(await _ask(cluster, "once", b"a|10"))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_ask, cluster, "block", b"")
            await log.entered.wait()
            await caller.send("clock-1", "note", b"before").timeout(LONG)
            await _wait_backlog(cluster, 1)
            assert trio.current_time() < start + 10
            await trio.sleep_until(start + 10.5)
            await _wait_backlog(cluster, 2)  # the tick, behind "before"
            await caller.send("clock-1", "note", b"after").timeout(LONG)
            await _wait_backlog(cluster, 3)
            log.gate.set()
        await log.wait_ticks(1)
        await trio.sleep(1)
        assert log.order() == ["block", "before", "a=", "after"]


async def _wait_backlog(cluster: Cluster, count: int) -> None:
    """Until node 0's Actors hold ``count`` queued application items (ticks included)."""
    with trio.fail_after(LONG):
        while True:
            stats = cluster.servers[0].statistics().actors
            assert stats is not None
            if sum(t.application_backlog for t in stats.types) >= count:
                return
            await trio.testing.wait_all_tasks_blocked(cushion=0.001)


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_a_cancelled_timer_never_fires(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """Issue 12 (timers): cancel before the due time: no tick ever; a periodic timer
    cancelled by its own handler at its third tick has exactly three; cancel of an unknown
    name is False."""
    log = Log(stop_after=3)
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        await _clock(cluster)
        await _ask(cluster, "once", b"a|5")
        await _ask(cluster, "every", b"b|1")
        await _ask(cluster, "every", b"self_cancel|1")
        await trio.sleep(2.5)
        assert await _ask(cluster, "cancel", b"a") == b"1"
        assert await _ask(cluster, "cancel", b"b") == b"1"
        assert await _ask(cluster, "cancel", b"b") == b"0"
        assert await _ask(cluster, "cancel", b"unknown") == b"0"
        await trio.sleep(30)
        assert log.ticks("a") == []
        assert len(log.ticks("b")) == 2  # at 1 and 2, before the cancel
        assert len(log.ticks("self_cancel")) == 3
        assert _timers(cluster).registered == 0


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_a_cancelled_timer_whose_tick_is_already_queued_does_not_run(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """Issue 12 (timers): the tick of "a" is due and queued behind a running handler,
    which then cancels "a": the queued tick never runs its handler (it is counted
    ``stale``), as Akka's timers promise."""
    log = Log()
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        await _clock(cluster)
        await _ask(cluster, "once", b"a|1")
        async with trio.open_nursery() as nursery:

            async def block() -> None:
                assert await _ask(cluster, "block", b"cancel:a") == b"1"

            nursery.start_soon(block)
            await log.entered.wait()
            await trio.sleep(5)
            assert _timers(cluster).fired == 1
            log.gate.set()
        await trio.sleep(5)
        assert log.order() == ["block"]
        assert _timers(cluster).stale == 1


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_registering_a_name_again_replaces_it(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """Issue 12 (timers): ``once("a", ...)`` again replaces the first registration (one
    timer, the new delay and payload); replacing a timer whose tick is already queued
    drops that tick; periodic → one-shot replaces too."""
    log = Log()
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        await _clock(cluster)
        await _ask(cluster, "once", b"a|5|old")
        start = float(await _ask(cluster, "once", b"a|2|new"))
        assert await _ask(cluster, "list", b"") == b"a:one_shot"
        await trio.sleep(10)
        assert log.entries == [(start + 2, "clock-1", "tick", "a=new")]
        # a queued tick of the replaced registration does not run
        await _ask(cluster, "once", b"a|1|old")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_ask, cluster, "block", b"once:a")  # re-registers "a" (2 s)
            await log.entered.wait()
            await trio.sleep(5)
            released = trio.current_time()
            log.gate.set()
        await trio.sleep(10)
        assert log.order() == ["a=new", "block", "a=new"]
        assert log.ticks()[-1] == released + 2
        # periodic replaced by a one-shot
        await _ask(cluster, "every", b"b|1|p")
        start = float(await _ask(cluster, "once", b"b|3|o"))
        await trio.sleep(10)
        assert [t for t in log.ticks("b")] == [start + 3]
        assert log.order()[-1] == "b=o"


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_a_full_queue_delays_a_tick_without_losing_it_or_blocking_others(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """Issue 12 (timers): lane bound 4. Actor 1's handler is stuck and its queue is full:
    its one-shot and its periodic tick wait (in the timer service's backlog, one per
    timer) while actor 2's periodic timer ticks on time; when actor 1 runs again both run
    once, after the queued notes (the periodic due times in between coalesced)."""
    log = Log()
    apps = [timer_app(log), client_app()]
    config = ServerConfig(lane_capacity=4)
    async with open_cluster(2, store=store, app=lambda i: apps[i], config=config) as cluster:
        await cluster.wait_all_admitted()
        await _clock(cluster, "clock-1")
        await _clock(cluster, "clock-2")
        caller = cluster.servers[1].actors
        await _ask(cluster, "once", b"a|3", "clock-1")
        await _ask(cluster, "every", b"b|1", "clock-1")
        start = float(await _ask(cluster, "every", b"b|1", "clock-2"))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_ask, cluster, "block", b"", "clock-1")
            await log.entered.wait()
            # b's tick at start+1 may be queued already: fill what is left of the bound
            while _backlog_of(cluster) < 4:
                await caller.send("clock-1", "note", b"n").timeout(LONG)
                await _wait_backlog(cluster, 1)
            await trio.sleep_until(start + 10.5)
            assert _timers(cluster).backlog >= 1  # a (at least) waits for space
            other = [t for t, actor, _w, _d in log.entries if actor == "clock-2"]
            assert other == [start + k for k in range(1, 11)]  # on time meanwhile
            log.gate.set()
        await trio.sleep(0.5)
        mine = [d for _t, actor, _w, d in log.entries if actor == "clock-1"]
        assert mine.count("a=") == 1
        assert mine.count("b=") == 1
        assert mine.index("a=") > mine.index("n")
        assert _timers(cluster).backlog == 0
        assert _timers(cluster).coalesced >= 8


def _backlog_of(cluster: Cluster) -> int:
    stats = cluster.servers[0].statistics().actors
    assert stats is not None
    return sum(t.application_backlog for t in stats.types)


async def test_destroy_cleans_up_the_timers(
    clock: trio.testing.MockClock | None, store: CountingStore
) -> None:
    """Issue 12 (timers): destroying an Actor ends its timers once: after ``destroy``
    returns no tick of it runs, the node holds none of its registrations, and the Actor
    created again under the same id starts with no timer."""
    log = Log()
    period = 1.0 if clock is not None else 0.05
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        ref = await _clock(cluster)
        await _ask(cluster, "every", f"b|{period}".encode())
        await _ask(cluster, "once", b"a|3600")
        await log.wait_ticks(3)
        assert _timers(cluster).registered == 2
        assert await cluster.servers[1].actors.destroy(ref) is True
        ticks = len(log.ticks())
        stats = _timers(cluster)
        assert (stats.registered, stats.owners, stats.backlog) == (0, 0, 0)
        await trio.sleep(20 * period)
        assert len(log.ticks()) == ticks
        await _clock(cluster)
        assert await _ask(cluster, "list", b"") == b""


async def test_a_node_stop_cleans_up_every_timer(
    clock: trio.testing.MockClock | None, store: CountingStore
) -> None:
    """Issue 12 (timers): node 0 stops cleanly while its Actors have timers: once the
    stop began no tick fires, and after it the node's timer service holds no registration
    (its statistics say sealed, 0 registered, 0 owners)."""
    log = Log()
    period = 1.0 if clock is not None else 0.05
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        for actor_id in ("clock-1", "clock-2"):
            await _clock(cluster, actor_id)
            await _ask(cluster, "every", f"b|{period}".encode(), actor_id)
            await _ask(cluster, "once", b"a|3600", actor_id)
        await log.wait_ticks(4)
        owner = cluster.servers[0]
        before = _timers(cluster)
        assert (before.registered, before.owners) == (4, 2)
        await cluster.stop(0)
        ticks = len(log.ticks())
        after = owner.statistics().timers
        assert after is not None
        assert (after.registered, after.owners, after.backlog, after.sealed) == (0, 0, 0, True)
        await trio.sleep(20 * period)
        assert len(log.ticks()) == ticks


@pytest.mark.parametrize("backend", ["memory"])  # virtual time: MockClock only
async def test_a_tick_queued_before_the_stop_runs_in_the_drain_and_none_fires_after(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """Issue 12 (timers; spec 06 §7 as it applies to a node's stop): a tick accepted
    before the stop runs in the drain, like any accepted turn; no timer fires once the
    stop began (the periodic one due during the drain does not tick)."""
    log = Log()
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        await _clock(cluster)
        await _ask(cluster, "once", b"a|1")
        await _ask(cluster, "every", b"b|2|p|3")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_ask, cluster, "block", b"")
            await log.entered.wait()
            await trio.sleep(2)  # a is due and queued behind the block
            assert _timers(cluster).fired == 1
            nursery.start_soon(cluster.stop, 0)
            await trio.sleep(5)  # the stop waits for the block turn (drain); b was due at 3, 5
            assert log.order() == ["block"]
            log.gate.set()
        assert log.order() == ["block", "a="]
        assert log.ticks("b") == []


@pytest.mark.parametrize("backend", ["memory"])  # virtual time: MockClock only
async def test_a_timer_without_a_handler_is_a_configuration_error(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """Issue 12 (timers): registering a timer name the Actor type has no ``@on_timer``
    handler for is a ConfigurationError (nothing registered); bad delays, periods and
    payloads are InvalidArgument; ``context.timers`` used outside the Actor's own turn
    (here: from the test's task) is InvalidOperation."""
    log = Log()
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        await _clock(cluster)
        with pytest.raises(ConfigurationError, match="no @on_timer"):
            await _ask(cluster, "once", b"nohandler|1")
        # InvalidArgument at the owner; a remote caller gets its kind (CONFIGURATION)
        with pytest.raises(ConfigurationError, match="timer delay: must be >= 0"):
            await _ask(cluster, "once", b"a|-1")
        with pytest.raises(ConfigurationError, match="timer period"):
            await _ask(cluster, "every", b"a|0")
        with pytest.raises(ConfigurationError, match="must be finite"):
            await _ask(cluster, "once", f"a|{math.inf}".encode())
        assert await _ask(cluster, "list", b"") == b""
        timers = log.instances["clock-1"].context.timers
        with pytest.raises(InvalidOperation, match="own turns"):
            timers.once("a", 1)
        with pytest.raises(InvalidOperation):
            timers.cancel("a")
        assert timers.registrations() == ()


@pytest.mark.parametrize("backend", ["memory"])  # virtual time: MockClock only
async def test_a_failing_timer_handler_is_logged_and_its_timer_goes_on(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """Issue 12 (timers): a timer handler that raises a ZLinkError is one
    ``handler_error`` flow event per tick; the periodic timer keeps ticking."""
    log = Log()
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        await _clock(cluster)
        await _ask(cluster, "every", b"fails|1")
        await trio.sleep(3.5)
        assert len(log.ticks("fails")) == 3
        assert flow_count(cluster.servers[0], FlowEvent.HANDLER_ERROR) == 3


@pytest.mark.parametrize("backend", ["memory"])  # no Store involved
async def test_timer_handlers_are_validated_at_startup(clock: trio.testing.MockClock) -> None:
    """Issue 12 (timers): a plain ``def`` timer handler, two handlers for one timer name,
    a timer handler with a typed payload and a function timer handler for an unregistered
    type are startup ConfigurationErrors, each named."""

    class Bad:
        def __init__(self, context: Any) -> None:
            self.context = context

        @on_timer("plain")
        def plain(self, payload: bytes) -> None: ...

        @on_timer("dup")
        async def one(self, payload: bytes) -> None: ...

        @on_timer("dup")
        async def two(self, payload: bytes) -> None: ...

        @on_timer("typed")
        async def typed(self, payload: Typed) -> None: ...

    app = App()
    app.enable_actor_dispatch()
    app.register_codec(Typed)
    app.register_actor("bad", Bad, relocation=RecreateOnRelocation())

    async def orphan(actor: Any, payload: bytes) -> None: ...

    app.register_actor_timer_handler("nobody", "x", orphan)
    with pytest.raises(ConfigurationError) as raised:
        async with open_cluster(1, app=app):
            pass  # pragma: no cover
    message = str(raised.value)
    assert "'plain') must be an async def" in message
    assert "timer 'dup' has two handlers" in message
    assert "timer handler 'typed' takes the payload bytes" in message
    assert "unregistered actor type 'nobody'" in message
    with pytest.raises(ConfigurationError):
        on_timer("")


@pytest.mark.parametrize("backend", ["memory"])  # virtual time: MockClock only
async def test_a_node_whose_lease_was_lost_fires_and_runs_no_tick(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """Issue 12 (timers; docs/decisions.md "Owner loss: fencing"): node 0 is cut off from
    the Store while its Actor has a periodic timer: no tick runs at or after its local
    lease deadline, and once the lease is lost its timers are cleaned up (nothing
    registered, the service sealed)."""
    log = Log()
    cut = CutOffStore(store)
    apps = [timer_app(log), client_app()]

    def config(index: int) -> ServerConfig:
        return ServerConfig(
            owner_lease_ttl=1.0,
            owner_lease_renew_interval=0.3,
            descriptor_poll_interval=0.2,
            reclaim_sweep_interval=0.2,
            location_store=cut if index == 0 else store,
        )

    async with open_cluster(2, app=lambda i: apps[i], config=config) as cluster:
        await cluster.wait_all_admitted()
        await _clock(cluster)
        await _ask(cluster, "every", b"b|0.05")
        await log.wait_ticks(3)
        lease = node_of(cluster.servers[0]).lease
        assert isinstance(lease, LeaseHeld)
        deadline = lease.local_deadline
        cut.cut()
        await cluster.servers[0].wait_lease_lost()
        await trio.sleep(5)
        assert log.ticks()  # it ticked until the cut
        assert [t for t in log.ticks() if t >= deadline] == []
        stats = _timers(cluster)
        assert (stats.registered, stats.owners, stats.sealed) == (0, 0, True)
