"""Issue 12 (framework timers): a User Spot's timers through the public surface.

Direct calls to Spots are another engineer's part, so the Spot arms its timers in its
CREATE callback (a lifecycle turn of the Spot while it is staging: they fire from its
publication on) from the creation request ``b"<op>:<name>:<seconds>[;...]"``, and its
timer handlers re-arm, cancel or hold. The Spot lives on node 0, created and closed from
node 1 over real TCP. Exact virtual times on the memory backend (MockClock); the close and
the node's stop also on PostgreSQL (real clock, short periods, no exact times).
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing

from zlink_trio import (
    App,
    Approve,
    ConfigurationError,
    DisableRelocation,
    Reject,
    SpotCallback,
    SpotContext,
    SpotCreated,
    SpotWide,
    ZLinkError,
    on_lifecycle,
    on_timer,
)
from zlink_trio.testing import Cluster, CountingStore, open_cluster

LONG = 60.0


@attrs.define
class Log:
    entries: list[tuple[float, str]] = attrs.field(factory=list)
    gate: trio.Event = attrs.field(factory=trio.Event)
    entered: trio.Event = attrs.field(factory=trio.Event)
    armed_at: float = 0.0
    registered_at_close: list[str] = attrs.field(factory=list)
    _changed: trio.Event = attrs.field(factory=trio.Event)

    def add(self, what: str) -> None:
        self.entries.append((trio.current_time(), what))
        self._changed.set()
        self._changed = trio.Event()

    def times(self, what: str) -> list[float]:
        return [t for t, w in self.entries if w == what]

    def order(self) -> list[str]:
        return [w for _t, w in self.entries]

    async def wait_for(self, what: str, count: int = 1) -> None:
        with trio.fail_after(LONG):
            while len(self.times(what)) < count:
                await self._changed.wait()


def clock_app(log: Log) -> App:
    class Belfry:
        def __init__(self, context: SpotContext) -> None:
            self.context = context

        @on_lifecycle(SpotCallback.CREATE)
        async def created(self, request: bytes | None) -> Approve | Reject:
            log.armed_at = trio.current_time()
            try:
                for op in (request or b"").decode().split(";"):
                    if not op:
                        continue
                    verb, name, seconds = op.split(":")
                    if verb == "once":
                        self.context.timers.once(name, float(seconds), name.encode())
                    else:
                        self.context.timers.every(name, float(seconds), name.encode())
            except ZLinkError as exc:
                return Reject(reply=type(exc).__name__.encode())
            return Approve()

        @on_lifecycle(SpotCallback.CLOSE)
        async def closing(self, event: object) -> None:
            log.registered_at_close.extend(r.name for r in self.context.timers.registrations())
            log.add("close")

        @on_timer("a")
        async def a(self, payload: bytes) -> None:
            log.add(f"a={payload.decode()}")

        @on_timer("b")
        async def b(self, payload: bytes) -> None:
            log.add("b")

        @on_timer("hold")
        async def hold(self, payload: bytes) -> None:
            log.add("hold")
            log.entered.set()
            await log.gate.wait()

        @on_timer("three")
        async def three(self, payload: bytes) -> None:
            log.add("three")
            if len(log.times("three")) == 3:
                assert self.context.timers.cancel("three")

    app = App()
    app.register_spot("belfry", Belfry, execution=SpotWide(), relocation=DisableRelocation())
    return app


def _apps(log: Log) -> Any:
    apps = [clock_app(log), App()]
    return lambda i: apps[i]


async def _belfry(cluster: Cluster, request: bytes, spot_id: str = "belfry-1") -> Any:
    created = await (
        cluster.servers[1].spots.get_or_create(spot_id, "belfry").request(request).timeout(LONG)
    )
    assert isinstance(created, SpotCreated), created
    assert created.spot.node_rid == cluster.servers[0].identity.node_rid
    return created.spot


def _timers(cluster: Cluster, index: int = 0) -> Any:
    stats = cluster.servers[index].statistics().timers
    assert stats is not None
    return stats


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_spot_timers_armed_at_creation_tick_on_their_grid(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """Issue 12 (timers): a one-shot and a periodic timer registered in the CREATE
    callback: the one-shot runs its handler once with its payload, the periodic one at
    exactly arm time + k * period (no drift), one cancelled by its own handler at its
    third tick has exactly three."""
    log = Log()
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        await _belfry(cluster, b"once:a:2.5;every:b:1;every:three:1")
        armed = log.armed_at
        await trio.sleep(10.5)
        assert log.times("a=a") == [armed + 2.5]
        assert log.times("b") == [armed + k for k in range(1, 11)]
        assert len(log.times("three")) == 3
        assert _timers(cluster).registered == 1  # b only


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_a_spot_tick_due_while_its_handler_runs_waits_for_it(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """Issue 12 (timers): ticks are turns of the Spot's lane: "a" falls due while the
    "hold" timer handler runs and runs right after it, never beside it."""
    log = Log()
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        await _belfry(cluster, b"once:hold:1;once:a:2")
        await log.entered.wait()
        await trio.sleep(5)
        assert log.order() == ["hold"]
        assert _timers(cluster).fired == 2
        released = trio.current_time()
        log.gate.set()
        await log.wait_for("a=a")
        assert log.times("a=a") == [released]


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_close_runs_the_ticks_accepted_before_its_seal_then_cleans_up_once(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """Issue 12 (timers; spec 06 §7 steps 2-3): the tick of "a" is queued behind the
    running "hold" handler when the close is asked for: the close seals admission after
    that turn, "a" still runs (accepted before the seal), then the cleanup: the CLOSE
    callback (which still sees the registrations), then every timer is gone; nothing
    ticks again (the periodic "b" due during the close does not)."""
    log = Log()
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        ref = await _belfry(cluster, b"once:hold:1;once:a:2;every:b:50")
        await log.entered.wait()
        await trio.sleep(5)  # a queued behind hold
        async with trio.open_nursery() as nursery:
            result: list[bool] = []

            async def close() -> None:
                result.append(await cluster.servers[1].spots.close(ref))

            nursery.start_soon(close)
            await trio.sleep(1)
            assert result == []  # the close waits for the running turn
            log.gate.set()
        assert result == [True]
        assert log.order() == ["hold", "a=a", "close"]
        assert log.registered_at_close == ["b"]
        stats = _timers(cluster)
        assert (stats.registered, stats.owners, stats.backlog) == (0, 0, 0)
        await trio.sleep(200)
        assert log.order() == ["hold", "a=a", "close"]


async def test_closing_a_spot_cleans_up_its_timers(
    clock: trio.testing.MockClock | None, store: CountingStore
) -> None:
    """Issue 12 (timers): after ``close(ref)`` is True no tick of the Spot runs and the
    node holds none of its registrations; the same id created again starts with none."""
    log = Log()
    period = 1.0 if clock is not None else 0.05
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        ref = await _belfry(cluster, f"every:b:{period};once:a:3600".encode())
        await log.wait_for("b", 3)
        assert _timers(cluster).registered == 2
        assert await cluster.servers[1].spots.close(ref) is True
        ticks = len(log.times("b"))
        stats = _timers(cluster)
        assert (stats.registered, stats.owners) == (0, 0)
        await trio.sleep(20 * period)
        assert len(log.times("b")) == ticks
        await _belfry(cluster, b"")
        assert _timers(cluster).registered == 0


async def test_a_node_stop_cleans_up_spot_timers(
    clock: trio.testing.MockClock | None, store: CountingStore
) -> None:
    """Issue 12 (timers): node 0 stops cleanly while its Spot has timers: no tick after the
    stop, and its timer service holds nothing (sealed)."""
    log = Log()
    period = 1.0 if clock is not None else 0.05
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        await _belfry(cluster, f"every:b:{period};once:a:3600".encode())
        await log.wait_for("b", 2)
        owner = cluster.servers[0]
        await cluster.stop(0)
        ticks = len(log.times("b"))
        after = owner.statistics().timers
        assert after is not None
        assert (after.registered, after.owners, after.sealed) == (0, 0, True)
        await trio.sleep(20 * period)
        assert len(log.times("b")) == ticks


@pytest.mark.parametrize("backend", ["memory"])  # no timing
async def test_a_spot_timer_without_a_handler_is_a_configuration_error(
    clock: trio.testing.MockClock, store: CountingStore
) -> None:
    """Issue 12 (timers): a Spot registering a timer name its type has no ``@on_timer``
    handler for gets a ConfigurationError (here: its CREATE callback rejects with the
    error's name); the timer it registered before in that callback is cleaned up with the
    rejected staging Spot and never ticks."""
    log = Log()
    async with open_cluster(2, store=store, app=_apps(log)) as cluster:
        await cluster.wait_all_admitted()
        result = await (
            cluster.servers[1]
            .spots.get_or_create("nope", "belfry")
            .request(b"once:a:1;once:unknown:1")
            .timeout(LONG)
        )
        assert not isinstance(result, SpotCreated)
        assert result.reply == b"ConfigurationError"
        assert _timers(cluster).registered == 0
        await trio.sleep(10)
        assert log.order() == []


def test_spot_timer_handlers_are_validated_at_startup() -> None:
    """Issue 12 (timers): the Spot registry validates timer handlers as the Actor registry
    does (one table per type; the same rules): a plain ``def``, a name handled twice and a
    function handler for an unregistered Spot type are named in one ConfigurationError."""

    class Bad:
        def __init__(self, context: SpotContext) -> None:
            self.context = context

        @on_timer("plain")
        def plain(self, payload: bytes) -> None: ...

        @on_timer("dup")
        async def one(self, payload: bytes) -> None: ...

        @on_timer("dup")
        async def two(self, payload: bytes) -> None: ...

    async def orphan(spot: Any, payload: bytes) -> None: ...

    app = App()
    app.register_spot("bad", Bad, execution=SpotWide(), relocation=DisableRelocation())
    app.register_spot_timer_handler("nobody", "x", orphan)
    with pytest.raises(ConfigurationError) as raised:
        app.validate()
    message = str(raised.value)
    assert (
        "spot type 'bad': timer handler" in message and "'plain') must be an async def" in message
    )
    assert "spot type 'bad': timer 'dup' has two handlers" in message
    assert "timer handler for unregistered spot type 'nobody'" in message
