"""The handle cache's two bounds and its asymmetric pin (spec 10 §5.2, §6.3 B): a pin (a
running turn) prevents idle eviction, even of an entry read and updated while pinned; the
LRU bound evicts a pinned entry at once and closes it after its turn, returning the lease
after the close and inside the session's turn gate; the cache sweeper runs every minute."""

from __future__ import annotations

import random
from typing import Any

import attrs
import trio
import trio.testing
from router_app import Registry, Shared, World, on_time
from router_kit import AGENT, S1, S2
from router_script import Script, Spied, Stage, scripted_cluster

from zlink_trio.router import (
    AgentExecutionResult,
    SessionEvicted,
    SessionId,
    SessionRouterConfig,
    SubmitRequest,
    TurnInterrupted,
)
from zlink_trio.testing import settle

SIGNALS = {"publish": "publish"}
ORDER = {"open", "turn start", "close", "lease release"}


def _request(text: str, session: SessionId = S1) -> SubmitRequest:
    return SubmitRequest(session_id=session, agent_ref=AGENT, user_input=text)


async def test_r10_32_a_pinned_entry_is_not_idle_evicted(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-32: under the idle-TTL bound the pin prevents eviction itself: a session whose
    turn runs past idle_ttl (600 s) is still cached after the sweeps at 60 … 660 s, and a
    further submit on the node runs on the same handle (one open)."""
    stage = Stage(scripts={"long": Script(duration=700.0)})
    async with scripted_cluster(shared, world, registry, stage, ["a"]) as (a,):
        long = await a.submit(_request("long"))
        await trio.sleep_until(665.0)  # the sweep at 660 s ran
        assert a.statistics().open_handles == 1
        assert "close" not in stage.kinds()
        again = await a.submit(_request("again"))
        assert (await long.result).text == "long:1"
        assert (await again.result).text == "again:1"
        assert stage.kinds().count("open") == 1


async def test_r10_35_reading_and_updating_a_pinned_entry_keeps_its_protection(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-35: the entry is read (a cache hit starting the next turn) and updated (the
    previous turn's end) while pinned, then stays pinned past the TTL from that activity:
    the sweeps at 720, 780 and 840 s keep it; it closes only at the first sweep after its
    last activity (the turn's end at 900 s) + 600 s, i.e. at 1560 s."""
    stage = Stage(scripts={"a": Script(duration=100.0), "b": Script(duration=800.0)})
    config = SessionRouterConfig(idempotency_forward_ttl=2_000.0)  # b's caller waits 900 s
    async with scripted_cluster(shared, world, registry, stage, ["a"], config=config) as (a,):
        first = await a.submit(_request("a"))
        await trio.sleep(1)
        second = await a.submit(_request("b"))  # queued: read + updated at 100 s
        for t in (700.0, 760.0, 850.0):
            await trio.sleep_until(t)
            assert a.status(S1) is not None  # reads of the session change nothing
        assert (await first.result).text == "a:1"
        assert (await second.result).text == "b:1"
        assert "close" not in stage.kinds()
        await trio.sleep_until(1561.0)
    closes = [e[3] for e in stage.log if e[0] == "close"]
    assert closes == [1560.0]
    assert stage.kinds().count("open") == 1


async def test_r10_38_the_cache_sweeper_closes_idle_handles_every_minute(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-38: nothing touches the cache after a 30 s turn; the handle, idle past its TTL
    from 630 s, is closed by the next one-minute sweep (660 s) and its lease returned."""
    stage = Stage(scripts={"t": Script(duration=30.0)})
    async with scripted_cluster(shared, world, registry, stage, ["a"]) as (a,):
        await (await a.submit(_request("t"))).result
        await trio.sleep_until(659.0)
        assert a.statistics().open_handles == 1
        await trio.sleep_until(661.0)
        assert a.statistics().open_handles == 0
        assert await shared.leases.current(S1) is None
    assert [e[3] for e in stage.log if e[0] == "close"] == [660.0]


async def test_r10_59_idle_timeout_is_strict_silent_and_returns_the_lease_after_the_close(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-59: a turn ending at 60 s: the entry survives the sweep at exactly 60 + 600 s
    (strict comparison), is closed by the next one (720 s), no EVICT / YIELD / INTERRUPT is
    published (other nodes decide by their own measure), and the lease is released through
    the close path: after the handle's close."""
    stage = Stage(scripts={"t": Script(duration=60.0)})
    spied = attrs.evolve(
        shared,
        bus=Spied(stage, shared.bus, SIGNALS),
        leases=Spied(stage, shared.leases, {"release": "lease release"}),
    )
    async with scripted_cluster(spied, world, registry, stage, ["a"]) as (a,):
        await (await a.submit(_request("t"))).result
        await trio.sleep_until(661.0)
        assert a.statistics().open_handles == 1  # 60 + 600 is not past the TTL
        await trio.sleep_until(721.0)
        assert a.statistics().open_handles == 0
        tail = [e[0] for e in stage.log if e[3] >= 720.0 and not e[0].startswith("publish")]
    assert tail[:2] == ["close", "lease release"]
    published = {k for k in stage.kinds() if k.startswith("publish:")}
    assert published <= {"publish:STATUS", "publish:EVENT"}


async def test_r10_36_a_pinned_evicted_session_closes_then_releases_its_lease(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-36: the close listener fires after ``session.close()``, not at map removal: a
    session LRU-evicted at 1 s while its turn runs keeps writing history (five fenced
    writes, all accepted) until the turn ends at 10 s; then its handle closes, and only
    then is its lease released."""
    t0 = trio.current_time()
    stage = Stage(scripts={"long": Script(duration=10.0, writes=5)})
    spied = attrs.evolve(shared, leases=Spied(stage, shared.leases, {"release": "lease release"}))
    config = shared.router_config(max_cached_sessions=1)
    async with scripted_cluster(spied, world, registry, stage, ["a"], config=config) as (a,):
        long = await a.submit(_request("long"))
        await trio.sleep(shared.s(1))
        await (await a.submit(_request("other", session=S2))).result  # evicts S1
        assert a.statistics().open_handles == 1
        assert (await long.result).text == "long:1"
        await settle()
        s1 = [(e[0], e[3] - t0) for e in stage.log if e[1] == S1.value and e[0] != "turn start"]
    expected = [
        ("open", 0.0),
        ("write", 2.0),
        ("write", 4.0),
        ("write", 6.0),
        ("write", 8.0),
        ("write", 10.0),
        ("turn end", 10.0),
        ("close", 10.0),
        ("lease release", 10.0),
    ]
    assert [what for what, _ in s1] == [what for what, _ in expected]
    assert all(on_time(shared, at, e) for (_, at), (_, e) in zip(s1, expected, strict=True))
    view = await shared.records.load(S1)
    assert view is not None and len(view.transcript) == 5


async def test_r10_34_the_lru_lease_is_returned_inside_the_turn_gate(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-34: the double-handle window left by the LRU bound is closed one level up: the
    evicted running session's lease is released while its turn gate is still held (so a
    submit meanwhile is queued, not run on a second handle), and the queued turn runs on a
    new handle opened after the old one closed — never two handles of one session running
    turns at once."""
    passes_at_release: list[int] = []
    routers: list[Any] = []

    class Leases:
        def __init__(self, target: Any) -> None:
            self._target = target

        def __getattr__(self, name: str) -> Any:
            return getattr(self._target, name)

        async def release(self, lease: Any) -> bool:
            if lease.session_id == S1:
                passes_at_release.append(routers[0].statistics().active_passes)
                stage.log.append(("lease release", S1.value, None, trio.current_time()))
            return bool(await self._target.release(lease))

    stage = Stage(scripts={"long": Script(duration=10.0)})
    config = shared.router_config(max_cached_sessions=1)
    spied = attrs.evolve(shared, leases=Leases(shared.leases))
    async with scripted_cluster(spied, world, registry, stage, ["a"], config=config) as (a,):
        routers.append(a)
        long = await a.submit(_request("long"))
        await trio.sleep(shared.s(1))
        await (await a.submit(_request("other", session=S2))).result  # evicts S1
        follow = await a.submit(_request("follow"))
        assert follow.kind.name == "FORWARDED"  # the gate is still held
        await long.result
        assert (await follow.result).text == "follow:3"
    assert passes_at_release[0] == 1  # S1's gate, still held
    s1 = [(e[0], e[2]) for e in stage.log if e[1] == S1.value and e[0] in ORDER]
    assert s1[:5] == [
        ("open", 1),
        ("turn start", 1),
        ("close", 1),
        ("lease release", None),
        ("open", 3),
    ]
    assert stage.overlaps == 0


async def test_r10_37_racing_pins_unpins_and_close_requests_close_each_handle_once(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-37: a seeded stress of submits to eight sessions through a two-entry cache, on
    two nodes, with releases among them (pins, unpins, LRU close requests and releases
    racing): no deadlock (bounded), no two
    handles of a session ever run turns at once, every handle is closed exactly once, and
    once the turns are done no handle with a close request is left open (the open ones are
    exactly the cached ones)."""
    rng = random.Random(37)
    sessions = [SessionId(f"s-{i}") for i in range(8)]
    stage = Stage()
    for i in range(80):
        stage.scripts[f"m{i}"] = Script(duration=rng.choice([0.5, 1.0, 2.0, 5.0]))
    config = shared.router_config(max_cached_sessions=2)
    results: list[Any] = []
    with trio.fail_after(shared.s(5_000)):
        async with scripted_cluster(
            shared, world, registry, stage, ["a", "b"], config=config
        ) as nodes:
            async with trio.open_nursery() as nursery:

                async def submit_at(delay: float, text: str) -> None:
                    await trio.sleep(shared.s(delay))
                    node = nodes[rng.randrange(2)]
                    disposition = await node.submit(_request(text, rng.choice(sessions)))
                    try:
                        results.append(await disposition.result)
                    except (SessionEvicted, TurnInterrupted) as ended:  # a release won
                        results.append(ended)

                async def release_at(delay: float) -> None:
                    await trio.sleep(shared.s(delay))
                    await nodes[rng.randrange(2)].release_session(rng.choice(sessions))

                for i in range(80):
                    nursery.start_soon(submit_at, rng.uniform(0, 60), f"m{i}")
                for _ in range(10):
                    nursery.start_soon(release_at, rng.uniform(0, 60))
            await settle()
            assert len(results) == 80
            assert sum(isinstance(r, AgentExecutionResult) for r in results) >= 40
            assert stage.overlaps == 0
            assert all(count == 1 for count in stage.closes.values())
            cached = sum(n.statistics().open_handles for n in nodes)
            assert len(stage.open_handles) == cached <= 4
    opened = stage.kinds().count("open")
    assert opened > 8  # the bound made handles close and reopen
    assert sorted(stage.closes) == list(range(1, opened + 1))
    assert set(stage.closes.values()) == {1}
