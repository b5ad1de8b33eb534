"""The builder and DeploymentMode (spec 10 §11.2), SessionMetrics (§12), and what the
router never closes (§2, §5.1)."""

from __future__ import annotations

import threading

import attrs
import pytest
import trio
import trio.testing
from router_app import FakeSession, Opener, Registry, Shared, World, builder, cluster
from router_kit import AGENT, S1

from zlink_trio.errors import ConfigurationError
from zlink_trio.router import (
    AgentRef,
    DeploymentMode,
    LiveSession,
    LiveSessionOptions,
    OpenAttributes,
    SessionId,
    SessionMetrics,
    SessionRouterBuilder,
    SubmitRequest,
    open_session_router,
)

SPIS = ["record_store", "lease_store", "inbox", "signal_bus", "idempotency_store", "node_id"]


def _request(text: str = "hi", **kw: object) -> SubmitRequest:
    return SubmitRequest(session_id=S1, agent_ref=AGENT, user_input=text, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("missing", SPIS)
def test_r10_146_distributed_fails_at_build_without_any_spi_or_node_id(
    missing: str, shared: Shared, world: World, registry: Registry
) -> None:
    """R10-146: DISTRIBUTED mode needs every SPI and a node id; build() fails naming each
    missing piece (one case per piece)."""
    complete = builder(shared, world, registry, "a")
    complete.build()
    incomplete = attrs.evolve(complete, **{missing: None})
    with pytest.raises(ConfigurationError, match=missing):
        incomplete.build()


async def test_r10_145_single_node_fills_missing_spis_in_memory(
    world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-145: SINGLE_NODE with no SPIs and no node id builds, and the router works."""
    only = SessionRouterBuilder(session_opener=Opener(world, "solo", registry))
    assert only.mode is DeploymentMode.SINGLE_NODE
    async with open_session_router(only) as router:
        assert (await (await router.submit(_request())).result).text == "solo:hi:0"


def test_r10_143_exactly_one_of_opener_and_factory(
    shared: Shared, world: World, registry: Registry
) -> None:
    """R10-143 (build side): neither or both of session_opener / session_factory fail."""
    with_opener = builder(shared, world, registry, "a")

    async def factory(s: SessionId, a: AgentRef, o: LiveSessionOptions) -> LiveSession:
        raise AssertionError("unused")

    with pytest.raises(ConfigurationError, match="exactly one"):
        attrs.evolve(with_opener, session_factory=factory).build()
    with pytest.raises(ConfigurationError, match="exactly one"):
        attrs.evolve(with_opener, session_opener=None).build()


async def test_r10_143_the_factory_never_sees_open_attributes_the_opener_does(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-143 (run side): with the opener the caller's OpenAttributes reach the open; the
    factory path is given no attributes to see."""
    seen: list[tuple[SessionId, AgentRef, LiveSessionOptions]] = []
    runtime = registry.lookup(AGENT, None)

    async def factory(s: SessionId, a: AgentRef, o: LiveSessionOptions) -> LiveSession:
        seen.append((s, a, o))
        return FakeSession(world, "f", s, runtime)

    attrs_ = OpenAttributes({"tenant": "t-1"})
    with_factory = attrs.evolve(
        builder(shared, world, registry, "f"), session_opener=None, session_factory=factory
    )
    async with open_session_router(with_factory) as router:
        await (await router.submit(_request(open_attributes=attrs_))).result
    assert seen == [(S1, AGENT, LiveSessionOptions())]
    assert world.open_attributes == []
    assert await shared.leases.current(S1) is None  # that router gave its lease back
    async with cluster(shared, world, registry, ["o"]) as (router,):
        await (await router.submit(_request(open_attributes=attrs_))).result
    assert world.open_attributes == [{"tenant": "t-1"}]


async def test_r10_144_each_build_assembles_its_own_session_store(
    shared: Shared, world: World, registry: Registry
) -> None:
    """R10-144 / R10-171: the builder takes the two backends, not a SessionStore, and two
    builds over the same backends get distinct stores."""
    fields = attrs.fields_dict(SessionRouterBuilder)
    assert {"record_store", "lease_store"} <= set(fields)
    assert not any("session_store" in f for f in fields)
    b = builder(shared, world, registry, "a")
    assert b.build().store is not b.build().store


def test_r10_157_internal_parts_are_not_injectable() -> None:
    """R10-157: no builder field for the lease renewer, the event publisher or the cache."""
    names = " ".join(attrs.fields_dict(SessionRouterBuilder))
    for internal in ("renewer", "publisher", "cache"):
        assert internal not in names


async def test_r10_158_no_metrics_needed_and_one_hook_is_enough(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-158: a router built without metrics works; a metrics class overriding a single
    hook is accepted and called."""
    submits: list[object] = []
    hooked = threading.Event()

    class OnlySubmits(SessionMetrics):
        def on_submit(self, session_id: SessionId, kind: object) -> None:
            submits.append(kind)
            hooked.set()

    async with cluster(shared, world, registry, ["plain"]) as (plain,):
        await (await plain.submit(_request("a"))).result
    async with cluster(shared, world, registry, ["metered"], metrics=OnlySubmits()) as (m,):
        await (await m.submit(_request("b"))).result
        await trio.to_thread.run_sync(hooked.wait, 5)
    assert len(submits) == 1


async def test_r10_167_hooks_that_raise_or_block_change_nothing(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-167 (and the issue's rule): with every hook raising, and one blocking its thread,
    turns still complete and leases still renew; the failures never reach the router."""
    release = threading.Event()

    class Hostile(SessionMetrics):
        def on_submit(self, session_id: SessionId, kind: object) -> None:
            release.wait(10)  # blocks its worker thread, not the router
            raise RuntimeError("hook")

        def on_cache_miss(self, session_id: SessionId) -> None:
            raise RuntimeError("hook")

        def on_lock_acquired(self, session_id: SessionId, latency: float) -> None:
            raise RuntimeError("hook")

    world.duration = lambda _t: 25.0
    t0 = trio.current_time()
    async with cluster(shared, world, registry, ["a"], metrics=Hostile()) as (a,):
        first = await a.submit(_request("one"))
        assert (await first.result).text == "a:one:0"
        lease = await shared.leases.current(S1)
        # renewed during the turn: it expires later than the first 30 s lease would
        assert lease is not None and lease.expires_at - t0 > shared.s(30.0)
        second = await a.submit(_request("two"))
        assert (await second.result).text == "a:two:2"
        release.set()


async def test_r10_01_the_router_never_creates_or_closes_the_agent_runtime(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-01 / R10-31 / R10-168: opens look the registered runtime up (lookups >= 1) and
    construct none; no session close path closes the runtime: release_session,
    delete_session, idle eviction, close() and close_gracefully() each close their handle
    and leave the runtime's close count at 0."""
    from zlink_trio.router import SessionId

    idle = SessionId("s-idle")
    config = shared.router_config(idle_ttl=30.0)
    async with cluster(shared, world, registry, ["a", "b"], config=config) as (a, b):
        await (await a.submit(_request("x"))).result
        await a.release_session(_request("x").session_id)  # release
        await (await a.submit(_request("y"))).result
        assert await a.delete_session(_request("y").session_id)  # delete
        await (await a.submit(attrs.evolve(_request("z"), session_id=idle))).result
        await trio.sleep(shared.s(61))  # idle eviction at the 60 s sweep
        assert [s for s, _ in world.closed] == ["s-1", "s-1", "s-idle"]
        await (await a.submit(_request("w"))).result
        await a.close_gracefully(shared.s(1.0))  # close_gracefully
        await (await b.submit(_request("v"))).result
        await b.aclose()  # close()
    assert world.runtime_lookups >= 5
    assert world.runtime_constructions == 0
    assert world.closes == {"a": 4, "b": 1}
    assert world.runtime_closes == 0
