"""Adversarial review probes of framework timers (docs/api.md "Timers"; spec 06 §7 and
§8 as they apply to timers), through the public surface only: ``context.timers`` from
an Actor's (and a Spot's) own turns, ``@on_timer`` / ``register_*_timer_handler``,
``server.statistics().timers`` and the ``zlink_trio.testing`` hooks. The Actors live on
node 0 and are driven from node 1 over real TCP; exact virtual times on the memory
backend (MockClock), the Store-dependent probes on PostgreSQL too.

Tests marked ``xfail(strict=True, reason="BUG: ...")`` pin a behaviour that contradicts
docs/api.md or the spec (the reason names it); the others are regression guards."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from actor_kit import client_app

from zlink_trio import (
    App,
    Approve,
    CapacityExceeded,
    ConfigurationError,
    DisableRelocation,
    InvalidArgument,
    InvalidId,
    InvalidOperation,
    RecreateOnRelocation,
    Reject,
    ServerConfig,
    SpotCallback,
    SpotContext,
    SpotCreated,
    SpotRejected,
    SpotWide,
    TimerKind,
    on_lifecycle,
    on_request,
    on_timer,
)
from zlink_trio.actors.results import Created
from zlink_trio.testing import Cluster, CountingStore, FlowEvent, flow_count, open_cluster

LONG = 60.0
KIB = 1024
NAMES = ("a", "b", "c", "slow", "crash", "zerr", "hang", "rearm", "close-me")
MANY = tuple(f"t{i:04d}" for i in range(1100))
"""Timer names with a handler each (a timer name needs its handler): the count limit."""

Action = Callable[[Any], Awaitable[object]]


@attrs.define
class Ctl:
    """The test's hand inside the Actors: ``actions`` run in an Actor's turn (request
    "run" with the action's key), ``on_tick`` hooks run in its timer handlers; every tick
    is logged as (time, actor, name, payload)."""

    actions: dict[str, Action] = attrs.field(factory=dict)
    on_tick: dict[str, Action] = attrs.field(factory=dict)
    ticks: list[tuple[float, str, str, bytes]] = attrs.field(factory=list)
    instances: dict[str, Any] = attrs.field(factory=dict)
    gate: trio.Event = attrs.field(factory=trio.Event)
    entered: trio.Event = attrs.field(factory=trio.Event)
    factory_action: Action | None = None
    _changed: trio.Event = attrs.field(factory=trio.Event)

    def log(self, actor: str, name: str, payload: bytes) -> None:
        self.ticks.append((trio.current_time(), actor, name, payload))
        self._changed.set()
        self._changed = trio.Event()

    def times(self, name: str, actor: str | None = None) -> list[float]:
        return [t for t, a, n, _p in self.ticks if n == name and (actor is None or a == actor)]

    async def wait_ticks(self, name: str, count: int) -> None:
        with trio.fail_after(LONG):
            while len(self.times(name)) < count:
                await self._changed.wait()


def probe_app(ctl: Ctl) -> App:
    class Probe:
        def __init__(self, context: Any) -> None:
            self.context = context
            ctl.instances[context.actor_id.value] = self
            if ctl.factory_action is not None:
                ctl.factory_action(self)

        @on_request("run")
        async def run(self, payload: bytes) -> bytes:
            result = await ctl.actions[payload.decode()](self)
            return repr(result).encode()

        @on_request("block")
        async def block(self, payload: bytes) -> bytes:
            ctl.entered.set()
            await ctl.gate.wait()
            action = ctl.actions.get(payload.decode())
            if action is not None:
                await action(self)
            return b"done"

        @on_request("now")
        async def now(self, payload: bytes) -> bytes:
            return repr(trio.current_time()).encode()

    app = App()
    app.enable_actor_dispatch()
    app.register_actor("probe", Probe, relocation=RecreateOnRelocation())

    def handler(name: str) -> Callable[[Any, bytes], Awaitable[None]]:
        async def on_tick(actor: Any, payload: bytes) -> None:
            ctl.log(actor.context.actor_id.value, name, payload)
            hook = ctl.on_tick.get(name)
            if hook is not None:
                await hook(actor)

        return on_tick

    for name in NAMES + MANY:
        app.register_actor_timer_handler("probe", name, handler(name))
    return app


def _apps(ctl: Ctl) -> Any:
    apps = [probe_app(ctl), client_app()]
    return lambda i: apps[i]


async def _probe(cluster: Cluster, actor_id: str = "p-1") -> Any:
    created = await cluster.servers[1].actors.create(actor_id, "probe").timeout(LONG)
    assert isinstance(created, Created)
    return created.actor


async def _run(
    cluster: Cluster, ctl: Ctl, action: Action, actor_id: str = "p-1", *, local: bool = False
) -> bytes:
    """Run ``action`` in one turn of the Actor (from node 1, or node 0 ``local``)."""
    key = f"k{len(ctl.actions)}"
    ctl.actions[key] = action
    caller = cluster.servers[0 if local else 1].actors
    result: bytes = await caller.request(actor_id, "run", key.encode()).timeout(LONG)
    return result


async def _request(caller: Any, packet: str, payload: bytes, actor_id: str = "p-1") -> None:
    await caller.request(actor_id, packet, payload).timeout(LONG)


def _timers(cluster: Cluster, index: int = 0) -> Any:
    stats = cluster.servers[index].statistics().timers
    assert stats is not None
    return stats


memory_only = pytest.mark.parametrize("backend", ["memory"])  # exact virtual times


# --- limits ----------------------------------------------------------------------------


@memory_only
async def test_timer_count_limit(clock: trio.testing.MockClock, store: CountingStore) -> None:
    """docs/api.md Timers ("an Actor holds at most 1,024 timers (CapacityExceeded)"):
    1,024 registrations are held; the 1,025th new name is CapacityExceeded (also for a
    remote caller: the kind travels) and nothing is added; re-registering a held name at
    the limit replaces it; after a cancel there is room for one more."""
    ctl = Ctl()
    async with open_cluster(2, store=store, app=_apps(ctl)) as cluster:
        await cluster.wait_all_admitted()
        await _probe(cluster)

        async def fill(actor: Any) -> int:
            for name in MANY[:1024]:
                actor.context.timers.once(name, 3600)
            return len(actor.context.timers.registrations())

        assert await _run(cluster, ctl, fill) == b"1024"

        async def one_more(actor: Any) -> None:
            actor.context.timers.once(MANY[1024], 1)

        for local in (False, True):
            with pytest.raises(CapacityExceeded):
                await _run(cluster, ctl, one_more, local=local)

        async def replace_and_swap(actor: Any) -> int:
            timers = actor.context.timers
            timers.every(MANY[0], 5.0)  # a held name: replaced, still 1,024
            assert timers.cancel(MANY[1])
            timers.once(MANY[1024], 3600)
            return len(timers.registrations())

        assert await _run(cluster, ctl, replace_and_swap) == b"1024"
        assert _timers(cluster).registered == 1024


@memory_only
async def test_timer_argument_bounds(clock: trio.testing.MockClock, store: CountingStore) -> None:
    """docs/api.md Timers: a payload of 64 KiB (bytes, bytearray, memoryview) is held and
    handed to the handler as bytes; 64 KiB + 1, a ``str`` or None payload is
    InvalidArgument; a period of 0.001 s is accepted, 0.000999 s, 0, nan, inf, a bool
    or a str is InvalidArgument; a negative, nan or bool delay or ``first`` is
    InvalidArgument; an empty, 256-byte or non-str name is InvalidId -- each raised in
    the Actor's turn as that class (locally), and nothing is registered by a refused
    call."""
    ctl = Ctl()
    async with open_cluster(2, store=store, app=_apps(ctl)) as cluster:
        await cluster.wait_all_admitted()
        await _probe(cluster)
        refused: list[str] = []

        async def probe_bounds(actor: Any) -> int:
            timers = actor.context.timers
            timers.once("a", 1, b"x" * (64 * KIB))
            timers.once("b", 1, bytearray(b"y" * (64 * KIB)))
            timers.once("c", 1, memoryview(b"z" * 3))
            timers.every("slow", 0.001)
            assert timers.cancel("slow")
            cases: list[tuple[type[Exception], Callable[[], object]]] = [
                (InvalidArgument, lambda: timers.once("crash", 1, b"x" * (64 * KIB + 1))),
                (InvalidArgument, lambda: timers.once("crash", 1, "text")),
                (InvalidArgument, lambda: timers.once("crash", 1, None)),
                (InvalidArgument, lambda: timers.every("crash", 0.000999)),
                (InvalidArgument, lambda: timers.every("crash", 0)),
                (InvalidArgument, lambda: timers.every("crash", float("nan"))),
                (InvalidArgument, lambda: timers.every("crash", float("inf"))),
                (InvalidArgument, lambda: timers.every("crash", True)),
                (InvalidArgument, lambda: timers.every("crash", "1")),
                (InvalidArgument, lambda: timers.every("crash", 1, first=-0.001)),
                (InvalidArgument, lambda: timers.every("crash", 1, first=float("nan"))),
                (InvalidArgument, lambda: timers.once("crash", -0.001)),
                (InvalidArgument, lambda: timers.once("crash", True)),
                (InvalidArgument, lambda: timers.once("crash", float("-inf"))),
                (InvalidId, lambda: timers.once("", 1)),
                (InvalidId, lambda: timers.once("n" * 256, 1)),
                (InvalidId, lambda: timers.once(42, 1)),
            ]
            for expected, call in cases:
                try:
                    call()
                except expected:
                    continue
                except Exception as exc:  # pragma: no cover - the probe's finding
                    refused.append(f"{type(exc).__name__}")
                    continue
                refused.append("accepted")  # pragma: no cover
            return len(timers.registrations())

        assert await _run(cluster, ctl, probe_bounds) == b"3"
        assert refused == []
        await trio.sleep(2)
        payloads = {name: p for _t, _a, name, p in ctl.ticks}
        assert payloads == {"a": b"x" * (64 * KIB), "b": b"y" * (64 * KIB), "c": b"zzz"}
        assert all(type(p) is bytes for p in payloads.values())


@memory_only
async def test_a_one_millisecond_period_ticks_every_millisecond(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """docs/api.md Timers ("a tick every period seconds (finite, >= 0.001)", "No drift:
    ... first + k * period"): a 1 ms periodic timer with an instant handler ticks exactly
    1,000 times in a second, each at registration + k ms, none coalesced."""
    ctl = Ctl()
    async with open_cluster(2, store=store, app=_apps(ctl)) as cluster:
        await cluster.wait_all_admitted()
        await _probe(cluster)

        async def arm(actor: Any) -> float:
            actor.context.timers.every("a", 0.001)
            return trio.current_time()

        start = float(await _run(cluster, ctl, arm))
        await trio.sleep_until(start + 1.0005)
        times = ctl.times("a")
        assert len(times) == 1000
        assert times == pytest.approx([start + k * 0.001 for k in range(1, 1001)], abs=1e-9)
        assert _timers(cluster).coalesced == 0


# --- ordering, cancellation, replacement ------------------------------------------------


@memory_only
async def test_a_zero_delay_tick_runs_right_after_the_turn_that_armed_it(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """docs/api.md Timers ("ordered with its messages by the moment each entered its
    queue"): ``once("a", 0)`` and ``every("b", 5, first=0)`` registered in a turn tick at
    that very virtual time, after the turn (never inside it), and before a message the
    caller sends once the turn answered."""
    ctl = Ctl()
    order: list[str] = []
    async with open_cluster(2, store=store, app=_apps(ctl)) as cluster:
        await cluster.wait_all_admitted()
        await _probe(cluster)

        async def arm(actor: Any) -> float:
            actor.context.timers.once("a", 0)
            actor.context.timers.every("b", 5, first=0)
            await trio.sleep(1)  # the turn goes on: no tick runs inside it
            order.append("turn")
            return trio.current_time()

        async def note(actor: Any) -> None:
            order.append("note")

        ctl.on_tick["a"] = lambda actor: _append(order, "a")
        ctl.on_tick["b"] = lambda actor: _append(order, "b")
        ended = float(await _run(cluster, ctl, arm))
        await _run(cluster, ctl, note)
        assert order[:4] == ["turn", "a", "b", "note"]
        assert ctl.times("a") == [ended] and ctl.times("b")[0] == ended
        await trio.sleep(10.5)
        assert ctl.times("b") == [ended, ended - 1 + 5, ended - 1 + 10]


async def _append(order: list[str], what: str) -> None:
    order.append(what)
    await trio.lowlevel.checkpoint()


@memory_only
async def test_a_tick_waiting_for_a_full_queue_is_cancelled_for_good(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """docs/api.md Timers ("A cancelled or replaced timer never runs its handler again —
    not even for a tick that already fired and waits"): lane bound 2; the Actor's turn is
    blocked and its queue full, so the due ticks of "a" (one-shot) and "b" (periodic)
    wait in the timer backlog; the blocked turn then cancels both: neither ever runs,
    and nothing is left in the backlog."""
    ctl = Ctl()
    apps = [probe_app(ctl), client_app()]
    config = ServerConfig(lane_capacity=2)
    async with open_cluster(2, store=store, app=lambda i: apps[i], config=config) as cluster:
        await cluster.wait_all_admitted()
        await _probe(cluster)

        async def arm(actor: Any) -> None:
            actor.context.timers.once("a", 2)
            actor.context.timers.every("b", 1)

        await _run(cluster, ctl, arm)

        async def cancel_both(actor: Any) -> None:
            assert actor.context.timers.cancel("a") and actor.context.timers.cancel("b")

        ctl.actions["cancel"] = cancel_both

        async def noop(actor: Any) -> None:
            return None

        ctl.actions["noop"] = noop
        caller = cluster.servers[1].actors
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_request, caller, "block", b"cancel")
            await ctl.entered.wait()
            for _ in range(2):  # fill the queue (bound 2) with requests
                nursery.start_soon(_request, caller, "run", b"noop")
            await trio.sleep(5)
            assert _timers(cluster).backlog == 2  # a and b wait for space
            ctl.gate.set()
        await trio.sleep(10)
        assert ctl.times("a") == [] and ctl.times("b") == []
        stats = _timers(cluster)
        assert (stats.backlog, stats.registered, stats.owners) == (0, 0, 0)


@memory_only
async def test_a_periodic_timer_replaced_from_its_own_tick_starts_a_new_grid(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """docs/api.md Timers ("registering a name again replaces its registration"): the
    handler of ``every("rearm", 1)`` replaces it at its second tick by ``every("rearm",
    3)``: the ticks are 1, 2 (the old grid), then 2 + 3k (the new one); no tick of the old
    grid after the replacement."""
    ctl = Ctl()
    async with open_cluster(2, store=store, app=_apps(ctl)) as cluster:
        await cluster.wait_all_admitted()
        await _probe(cluster)

        async def rearm(actor: Any) -> None:
            if len(ctl.times("rearm")) == 2:
                registration = actor.context.timers.every("rearm", 3)
                assert registration.kind is TimerKind.PERIODIC and registration.period == 3

        ctl.on_tick["rearm"] = rearm

        async def arm(actor: Any) -> float:
            actor.context.timers.every("rearm", 1)
            return trio.current_time()

        start = float(await _run(cluster, ctl, arm))
        await trio.sleep(11.5)
        assert ctl.times("rearm") == [start + 1, start + 2, start + 5, start + 8, start + 11]


# --- failures in timer handlers ---------------------------------------------------------


@memory_only
async def test_a_crashing_timer_handler_leaves_its_actor_and_node_serving(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """docs/api.md Timers ("Timer handler results count as dispatch_ok/dispatch_failed
    ... their errors are flow events like a send handler's"): a periodic timer whose
    handler raises RuntimeError every tick goes on ticking (one handler_crashed event
    each), a one-shot whose handler raises is over; the Actor still answers requests and
    a new Actor can be created on that node."""
    ctl = Ctl()

    async def crash(actor: Any) -> None:
        raise RuntimeError("a timer handler crashing on purpose")

    ctl.on_tick["crash"] = crash
    ctl.on_tick["zerr"] = crash
    async with open_cluster(2, store=store, app=_apps(ctl)) as cluster:
        await cluster.wait_all_admitted()
        await _probe(cluster)

        async def arm(actor: Any) -> None:
            actor.context.timers.every("crash", 1)
            actor.context.timers.once("zerr", 1)

        await _run(cluster, ctl, arm)
        await trio.sleep(5.5)
        assert len(ctl.times("crash")) == 5 and len(ctl.times("zerr")) == 1
        assert flow_count(cluster.servers[0], FlowEvent.HANDLER_CRASHED) == 6

        async def names(actor: Any) -> list[str]:
            return [r.name for r in actor.context.timers.registrations()]

        assert await _run(cluster, ctl, names) == b"['crash']"
        await _probe(cluster, "p-2")
        assert len(ctl.times("crash")) >= 5


@pytest.mark.parametrize("backend", ["memory"])  # virtual time: MockClock only
async def test_a_stop_with_a_hung_timer_handler_ends_within_the_drain_bound(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """docs/api.md ("a clean stop ... ticks already queued run in the drain, like
    accepted messages") and the drain bound (``drain_timeout``): a timer handler that
    never returns does not hang the node's stop: it ends within drain_timeout, and the
    peer then sees the Actor gone."""
    ctl = Ctl()

    async def hang(actor: Any) -> None:
        await trio.sleep_forever()

    ctl.on_tick["hang"] = hang
    apps = [probe_app(ctl), client_app()]
    config = ServerConfig(drain_timeout=3.0)
    async with open_cluster(2, store=store, app=lambda i: apps[i], config=config) as cluster:
        await cluster.wait_all_admitted()
        await _probe(cluster)

        async def arm(actor: Any) -> None:
            actor.context.timers.once("hang", 1)

        await _run(cluster, ctl, arm)
        await ctl.wait_ticks("hang", 1)
        began = trio.current_time()
        with trio.fail_after(LONG):
            await cluster.stop(0)
        assert trio.current_time() - began <= 3.0 + 1.0
        assert await cluster.servers[1].actors.find("p-1") is None


# --- where timers may be used -----------------------------------------------------------


@memory_only
async def test_timers_outside_the_owners_own_turn(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """docs/api.md Timers ("only inside the Actor's own turns ...; in its factory, from
    another task or another Actor it is InvalidOperation"): Actor A's turn using Actor
    B's timers (register, cancel), a task the handler itself spawned, and the test's
    own task are each InvalidOperation and change nothing; B's timer still fires. Reads
    (``get``, ``registrations``, ``in``) work from anywhere."""
    ctl = Ctl()
    async with open_cluster(2, store=store, app=_apps(ctl)) as cluster:
        await cluster.wait_all_admitted()
        await _probe(cluster, "p-a")
        await _probe(cluster, "p-b")

        async def arm(actor: Any) -> None:
            actor.context.timers.once("a", 5, b"b's")

        await _run(cluster, ctl, arm, "p-b")
        b_timers = ctl.instances["p-b"].context.timers
        seen: list[str] = []

        async def cross(actor: Any) -> None:
            for call in (
                lambda: b_timers.once("b", 1),
                lambda: b_timers.cancel("a"),
                lambda: b_timers.every("c", 1),
            ):
                try:
                    call()
                    seen.append("accepted")
                except InvalidOperation:
                    seen.append("refused")

        await _run(cluster, ctl, cross, "p-a")

        async def spawned(actor: Any) -> None:
            async def child() -> None:
                try:
                    actor.context.timers.once("b", 1)
                    seen.append("accepted")
                except InvalidOperation:
                    seen.append("refused")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(child)

        await _run(cluster, ctl, spawned, "p-a")
        with pytest.raises(InvalidOperation):
            b_timers.once("b", 1)
        assert seen == ["refused"] * 4
        assert b_timers.get("a") is not None and "a" in b_timers
        assert [r.name for r in b_timers.registrations()] == ["a"]
        await trio.sleep(6)
        assert [(a, n) for _t, a, n, _p in ctl.ticks] == [("p-b", "a")]


@memory_only
async def test_a_factory_using_timers_fails_its_create_only(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """docs/api.md Timers ("in its factory ... it is InvalidOperation"): an Actor
    factory that registers a timer fails that create with InvalidOperation (a typed
    error, nothing published, the id free); the node keeps creating Actors."""
    ctl = Ctl()

    def in_factory(actor: Any) -> Any:
        actor.context.timers.once("a", 1)

    ctl.factory_action = in_factory
    async with open_cluster(2, store=store, app=_apps(ctl)) as cluster:
        await cluster.wait_all_admitted()
        with pytest.raises(InvalidOperation):
            await cluster.servers[1].actors.create("p-1", "probe").timeout(LONG)
        assert await cluster.servers[1].actors.find("p-1") is None
        ctl.factory_action = None
        await _probe(cluster)
        assert _timers(cluster).registered == 0


# --- lifetime: destroy, stop ------------------------------------------------------------


async def test_a_timer_registered_during_the_destroy_never_fires(
    clock: trio.testing.MockClock | None, store: CountingStore
) -> None:
    """docs/api.md Timers ("A destroy stops them when admission closes ... no tick of it
    runs after destroy returns"): the turn in progress when destroy begins registers a
    0.1 s one-shot and a periodic timer before it ends; destroy returns True, no tick of
    either ever runs, and the node holds none of their registrations."""
    ctl = Ctl()
    async with open_cluster(2, store=store, app=_apps(ctl)) as cluster:
        await cluster.wait_all_admitted()
        ref = await _probe(cluster)

        async def late(actor: Any) -> None:
            actor.context.timers.once("a", 0.1)
            actor.context.timers.every("b", 0.1)

        ctl.actions["late"] = late
        caller = cluster.servers[1].actors
        outcome: dict[str, object] = {}

        async def destroy() -> None:
            outcome["destroyed"] = await caller.destroy(ref)

        with trio.fail_after(LONG):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_request, caller, "block", b"late")
                await ctl.entered.wait()
                nursery.start_soon(destroy)
                await trio.sleep(0.5)  # destroy waits for the turn in progress
                ctl.gate.set()
        assert outcome["destroyed"] is True
        await trio.sleep(2)
        assert ctl.ticks == []
        stats = _timers(cluster)
        assert (stats.registered, stats.owners, stats.backlog) == (0, 0, 0)


@pytest.mark.parametrize("backend", ["memory"])  # virtual time: MockClock only
async def test_a_stop_while_a_tick_waits_for_a_full_queue(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """docs/api.md Timers ("A node's clean stop fires no tick once the stop began ... and
    cleans up every registration"): lane bound 1 and a turn blocked, so a due tick
    waits for space (a pump task); the node stops while it waits and the turn is then
    released: the stop ends (bounded); the tick that fired before the stop runs once in
    the drain, none fires after; the statistics say sealed with nothing held."""
    ctl = Ctl()
    apps = [probe_app(ctl), client_app()]
    config = ServerConfig(lane_capacity=1, drain_timeout=5.0)
    async with open_cluster(2, store=store, app=lambda i: apps[i], config=config) as cluster:
        await cluster.wait_all_admitted()
        await _probe(cluster)

        async def arm(actor: Any) -> None:
            actor.context.timers.every("b", 1)

        await _run(cluster, ctl, arm)
        owner = cluster.servers[0]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_request, cluster.servers[1].actors, "block", b"")
            await ctl.entered.wait()

            async def noop(actor: Any) -> None:
                return None

            ctl.actions["noop"] = noop
            nursery.start_soon(_request, cluster.servers[1].actors, "run", b"noop")
            await trio.sleep(3.5)
            assert _timers(cluster).backlog == 1  # one tick of "b" waits for space
            assert ctl.times("b") == []
            with trio.fail_after(LONG):
                nursery.start_soon(cluster.stop, 0)
                await trio.sleep(1)
                released = trio.current_time()
                ctl.gate.set()
        # The one tick that fired before the stop and waited for room runs once, in the
        # drain ("enters the queue as soon as there is room"); none fired after.
        assert ctl.times("b") == [released]
        after = owner.statistics().timers
        assert after is not None
        assert (after.registered, after.owners, after.backlog, after.sealed) == (0, 0, 0, True)


# --- startup ------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["memory"])  # no Store involved
async def test_a_timer_handler_with_a_wrong_signature_is_refused_at_startup(
    clock: trio.testing.MockClock,
) -> None:
    """docs/api.md Timers / Actor handlers ("@on_send(packet) methods take (self,
    payload: bytes)"; the timer handler is ``async def fn(actor, payload)``; "Startup:
    ... a timer handler whose payload is annotated with anything but bytes ... is a
    startup ConfigurationError"): a timer handler that cannot take the payload is a
    startup ConfigurationError."""

    class Bad:
        def __init__(self, context: Any) -> None:
            self.context = context

        @on_timer("t")
        async def t(self) -> None: ...

    app = App()
    app.enable_actor_dispatch()
    app.register_actor("bad", Bad, relocation=RecreateOnRelocation())
    with pytest.raises(ConfigurationError):
        async with open_cluster(1, app=app):
            pass  # pragma: no cover


# --- Spot timers ------------------------------------------------------------------------


@attrs.define
class SpotCtl:
    """The test's hand inside the Spots: the creation request names what the CREATE
    callback does; ``on_tick`` hooks run in the timer handlers."""

    ticks: list[tuple[float, str, str]] = attrs.field(factory=list)
    on_tick: dict[str, Action] = attrs.field(factory=dict)
    on_close: Action | None = None
    instances: dict[str, Any] = attrs.field(factory=dict)
    published: dict[str, float] = attrs.field(factory=dict)
    errors: list[BaseException] = attrs.field(factory=list)
    factory_timers: bool = False

    def times(self, name: str, spot: str | None = None) -> list[float]:
        return [t for t, s, n in self.ticks if n == name and (spot is None or s == spot)]


def spot_timer_app(ctl: SpotCtl) -> App:
    class Tower:
        def __init__(self, context: SpotContext) -> None:
            self.context = context
            ctl.instances[context.spot_id.value] = self
            if ctl.factory_timers:
                context.timers.once("a", 0)
                context.timers.every("b", 1, first=0)

        @on_lifecycle(SpotCallback.CREATE)
        async def created(self, request: bytes | None) -> Approve | Reject:
            timers = self.context.timers
            how = (request or b"").decode()
            if how.startswith("nap:"):
                await trio.sleep(float(how[4:]))
            elif how != "none":
                timers.once("a", 0.5)
                timers.every("b", 0.5)
            if how == "reject":
                return Reject(reply=b"no")
            if how == "boom":
                raise RuntimeError("the create callback fails after arming timers")
            if how.startswith("sleep:"):
                await trio.sleep(float(how[6:]))
            ctl.published[self.context.spot_id.value] = trio.current_time()
            return Approve()  # (the Ready commit and publication follow at once)

        @on_lifecycle(SpotCallback.CLOSE)
        async def closing(self, event: object) -> None:
            if ctl.on_close is not None:
                await ctl.on_close(self)

    app = App()
    app.register_spot("tower", Tower, execution=SpotWide(), relocation=DisableRelocation())

    def handler(name: str) -> Callable[[Any, bytes], Awaitable[None]]:
        async def on_tick(spot: Any, payload: bytes) -> None:
            ctl.ticks.append((trio.current_time(), spot.context.spot_id.value, name))
            hook = ctl.on_tick.get(name)
            if hook is not None:
                await hook(spot)

        return on_tick

    for name in NAMES:
        app.register_spot_timer_handler("tower", name, handler(name))
    return app


def _spot_apps(ctl: SpotCtl) -> Any:
    apps = [spot_timer_app(ctl), App()]
    return lambda i: apps[i]


async def test_spot_timers_of_a_create_that_did_not_publish_never_fire(
    clock: trio.testing.MockClock | None, store: CountingStore
) -> None:
    """docs/api.md Timers (Spots: "timers registered while it is staging fire from its
    publication on, and vanish with it if its create is rejected"): timers armed in the
    CREATE callback of a create that is rejected, that fails (the callback raises), or
    whose deadline passes (DeadlineExceeded) never fire, and the node holds none of them."""
    ctl = SpotCtl()
    async with open_cluster(2, store=store, app=_spot_apps(ctl)) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        rejected = await spots.get_or_create("t-r", "tower").request(b"reject").timeout(LONG)
        assert isinstance(rejected, SpotRejected)
        from zlink_trio import ApplicationError, DeadlineExceeded

        with pytest.raises(ApplicationError):
            await spots.get_or_create("t-f", "tower").request(b"boom").timeout(LONG)
        with pytest.raises(DeadlineExceeded):
            await spots.get_or_create("t-d", "tower").request(b"sleep:3").timeout(1)
        await trio.sleep(5)
        assert ctl.ticks == []
        stats = _timers(cluster)
        assert (stats.registered, stats.owners, stats.backlog) == (0, 0, 0)


@memory_only
async def test_spot_timers_armed_by_the_factory_wait_for_the_publication(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """docs/api.md Timers (Spots: valid in the factory; "they fire from its publication
    on"): a zero-delay one-shot and a ``first=0`` 1 s periodic armed in the factory of a
    Spot whose CREATE callback takes 3.5 s tick first at the publication (one tick each:
    the periodic due times that passed while staging are coalesced), and the periodic
    one then stays on its grid (registration + k s)."""
    ctl = SpotCtl(factory_timers=True)
    async with open_cluster(2, store=store, app=_spot_apps(ctl)) as cluster:
        await cluster.wait_all_admitted()
        start = trio.current_time()
        created = (
            await cluster.servers[1]
            .spots.get_or_create("t-p", "tower")
            .request(b"nap:3.5")
            .timeout(LONG)
        )
        assert isinstance(created, SpotCreated)
        await trio.sleep(3)
        published = ctl.published["t-p"]
        assert published == start + 3.5
        assert ctl.times("a") == [published]
        b = ctl.times("b")
        assert b[0] == published and b[1:] == [start + 4, start + 5, start + 6]


@memory_only
async def test_a_spot_timer_handler_that_fails_or_closes_its_own_spot(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """docs/api.md ("Timer handler ... errors are flow events like a send handler's";
    Spots close: "awaited inside a turn ... under the Spot's gate is InvalidOperation"):
    a Spot's periodic timer whose handler raises keeps ticking (counted as handler
    failures); a timer handler awaiting ``server.spots.close`` of its OWN Spot gets
    InvalidOperation at once (no wait for ever) while closing ANOTHER Spot from there
    works; the failing Spot is then closed normally."""
    ctl = SpotCtl()
    refs: dict[str, Any] = {}
    async with open_cluster(2, store=store, app=_spot_apps(ctl)) as cluster:
        await cluster.wait_all_admitted()
        owner = cluster.servers[0]

        async def crash(spot: Any) -> None:
            raise RuntimeError("a Spot timer handler crashing on purpose")

        async def close_self_then_other(spot: Any) -> None:
            if spot.context.spot_id.value != "t-1":
                return
            try:
                with trio.fail_after(5):
                    await owner.spots.close(refs["t-1"])
            except BaseException as exc:  # the probe records it
                ctl.errors.append(exc)
            ctl.errors.append(await owner.spots.close(refs["t-2"]))  # type: ignore[arg-type]

        ctl.on_tick["b"] = crash
        ctl.on_tick["a"] = close_self_then_other
        for spot_id in ("t-1", "t-2"):
            created = await cluster.servers[1].spots.get_or_create(spot_id, "tower").timeout(LONG)
            assert isinstance(created, SpotCreated)
            refs[spot_id] = created.spot
        await trio.sleep(3.2)
        assert len(ctl.times("b", "t-1")) == 6
        (own, other, *_rest) = ctl.errors
        assert isinstance(own, InvalidOperation)
        assert other is True
        from zlink_trio.testing import spot_statistics

        (tower,) = spot_statistics(owner).types
        assert tower.handler_failures >= 6
        assert await cluster.servers[1].spots.close(refs["t-1"]) is True
        ticks = len(ctl.ticks)
        await trio.sleep(3)
        assert len(ctl.ticks) == ticks
        stats = _timers(cluster)
        assert (stats.registered, stats.owners) == (0, 0)


async def test_spot_timers_after_the_close(
    clock: trio.testing.MockClock | None, store: CountingStore
) -> None:
    """docs/api.md Timers (Spots, close: "the CLOSE callback still sees the
    registrations; then every timer of the Spot is cleaned up, once"): a timer the CLOSE
    callback registers never fires; after the close the Spot's ``context.timers`` holds
    nothing, refuses registration (InvalidOperation) and the node holds no timer."""
    ctl = SpotCtl()

    async def arm_at_close(spot: Any) -> None:
        spot.context.timers.once("c", 0)
        spot.context.timers.every("rearm", 0.1)

    ctl.on_close = arm_at_close
    async with open_cluster(2, store=store, app=_spot_apps(ctl)) as cluster:
        await cluster.wait_all_admitted()
        spots = cluster.servers[1].spots
        created = await spots.get_or_create("t-c", "tower").request(b"none").timeout(LONG)
        assert isinstance(created, SpotCreated)
        timers = ctl.instances["t-c"].context.timers
        with pytest.raises(InvalidOperation):
            timers.once("a", 1)  # not from the test's task
        assert await spots.close(created.spot) is True
        await trio.sleep(2)
        assert ctl.times("c") == [] and ctl.times("rearm") == []
        assert timers.registrations() == () and timers.get("c") is None
        with pytest.raises(InvalidOperation):
            timers.once("a", 1)
        stats = _timers(cluster)
        assert (stats.registered, stats.owners, stats.backlog) == (0, 0, 0)


@memory_only
async def test_ticks_held_by_a_destroy_that_keeps_the_actor_run_afterwards(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """docs/api.md Timers ("A destroy stops them when admission closes (ticks due
    meanwhile wait; they run if the destroy ends with the Actor still Ready)"): the
    destroy waits for a turn in progress while three due times pass, then finds the
    owner's Store cut and ends Unavailable with the Actor still Ready: the one tick held
    meanwhile then runs once (the other due times coalesced into it) and the timer goes
    on on its grid."""
    from zlink_trio import Unavailable
    from zlink_trio.testing import CutOffStore

    ctl = Ctl()
    cut = CutOffStore(store)
    apps = [probe_app(ctl), client_app()]

    def config(index: int) -> ServerConfig:
        return ServerConfig(
            location_store=cut if index == 0 else store,
            owner_lease_ttl=60.0,
            owner_lease_renew_interval=5.0,
            drain_timeout=2.0,
        )

    async with open_cluster(2, app=lambda i: apps[i], config=config) as cluster:
        await cluster.wait_all_admitted()
        ref = await _probe(cluster)

        async def arm(actor: Any) -> float:
            actor.context.timers.every("b", 1)
            return trio.current_time()

        start = float(await _run(cluster, ctl, arm))
        await trio.sleep(2.5)
        assert ctl.times("b") == [start + 1, start + 2]
        caller = cluster.servers[1].actors
        outcome: list[BaseException] = []

        async def destroy() -> None:
            try:
                await caller.destroy(ref)
            except Unavailable as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_request, caller, "block", b"")
            await ctl.entered.wait()
            nursery.start_soon(destroy)
            await trio.sleep(3)  # due at 3, 4, 5 while the destroy holds admission
            cut.cut()
            kept = trio.current_time()
            ctl.gate.set()
        assert len(outcome) == 1
        cut.heal()
        await trio.sleep_until(start + 10.5)
        times = ctl.times("b")
        assert times[:2] == [start + 1, start + 2]
        assert times[2] == kept  # the one held tick, at once
        grid = [t for t in times[3:]]
        assert grid == [start + k for k in range(int(kept - start) + 1, 11)]
        assert await _run(cluster, ctl, _names) == b"['b']"


async def _names(actor: Any) -> list[str]:
    return [r.name for r in actor.context.timers.registrations()]


@memory_only
async def test_a_spot_whose_owner_lost_its_lease_runs_no_tick(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """docs/api.md Timers ("a node whose owner lease was lost runs no tick"; spec 06 §9
    "Owner가 expired다 → 신규 message·timer admission ... 수행할 수 없다"): node 0 hosting a
    User Spot with a 0.5 s periodic timer is cut off from the Store: no tick of it runs at
    or after its local lease deadline, and once the lease is lost its timers are cleaned
    up (nothing registered, the service sealed)."""
    from zlink_trio.mesh.lease import LeaseHeld
    from zlink_trio.testing import CutOffStore, node_of

    ctl = SpotCtl()
    cut = CutOffStore(store)
    apps = [spot_timer_app(ctl), App()]

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
        created = await cluster.servers[1].spots.get_or_create("t-l", "tower").timeout(LONG)
        assert isinstance(created, SpotCreated)
        await trio.sleep(1.2)
        assert len(ctl.times("b")) >= 2
        cut.cut()
        # A renewal already inside the Store when it was cut may still succeed: read the
        # local deadline once nothing is in flight (no later renewal can succeed).
        await trio.testing.wait_all_tasks_blocked()
        lease = node_of(cluster.servers[0]).lease
        assert isinstance(lease, LeaseHeld)
        deadline = lease.local_deadline
        await cluster.servers[0].wait_lease_lost()
        await trio.sleep(5)
        assert [t for t in ctl.times("b") if t >= deadline] == []
        stats = _timers(cluster)
        assert (stats.registered, stats.owners, stats.sealed) == (0, 0, True)


@memory_only
async def test_a_spot_cannot_use_another_spots_timers(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """docs/api.md Timers ("only inside the [owner's] own turns ...; from another task or
    another [owner] it is InvalidOperation", the same API for Spots): Spot t-1's timer
    handler registering and cancelling on Spot t-2's timers is InvalidOperation each
    time and changes nothing: t-2's own timers go on ticking."""
    ctl = SpotCtl()
    seen: list[str] = []

    async def meddle(spot: Any) -> None:
        if spot.context.spot_id.value != "t-1":
            return
        other = ctl.instances["t-2"].context.timers
        for call in (lambda: other.once("c", 0), lambda: other.cancel("b")):
            try:
                call()
                seen.append("accepted")
            except InvalidOperation:
                seen.append("refused")

    ctl.on_tick["a"] = meddle
    async with open_cluster(2, store=store, app=_spot_apps(ctl)) as cluster:
        await cluster.wait_all_admitted()
        for spot_id in ("t-1", "t-2"):
            created = await cluster.servers[1].spots.get_or_create(spot_id, "tower").timeout(LONG)
            assert isinstance(created, SpotCreated)
        await trio.sleep(2.2)
        assert seen == ["refused", "refused"]
        assert ctl.times("c") == []
        assert len(ctl.times("b", "t-2")) == 4
