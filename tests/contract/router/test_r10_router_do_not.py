"""The do-not list (spec 10, "하지 말 것"): the router never closes the AgentRuntime, never
gates on status(), deletes history only through delete_session, and carries only JSON
primitives between nodes (the source-level review checks are in
tests/unit/router/test_router_review.py)."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from router_app import Registry, Shared, World, builder, cluster, on_time, start_crashable
from router_kit import AGENT, KEY, S1, S2

from zlink_trio.router import (
    AgentExecutionResult,
    ClusterSessionStatus,
    DispositionKind,
    HolderLost,
    NodeId,
    SessionActivity,
    SessionId,
    SessionRouterConfig,
    SessionSignal,
    SignalKind,
    SubmitRequest,
    TurnId,
    open_session_router,
    yield_signals,
)
from zlink_trio.testing import crash_session_router, settle


def _request(text: str, session: SessionId = S1, **kw: object) -> SubmitRequest:
    return SubmitRequest(session_id=session, agent_ref=AGENT, user_input=text, **kw)  # type: ignore[arg-type]


async def test_r10_168_no_end_path_closes_the_agent_runtime(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-168 (the paths of part 2): an LRU eviction, a YIELD hand-off mid-turn, a lease
    lost mid-turn, and a holder crash followed by HOLDER_LOST each end a handle (or a turn)
    without closing the registered AgentRuntime: its close count stays 0."""
    config = shared.router_config(max_cached_sessions=1)
    world.duration = lambda t: 1000.0 if t.startswith("long") else 1.0
    async with trio.open_nursery() as nursery:
        h = await start_crashable(nursery, builder(shared, world, registry, "h"))
        async with cluster(shared, world, registry, ["a", "b"], config=config) as (a, b):
            await (await a.submit(_request("x"))).result
            await (await a.submit(_request("y", session=S2))).result  # LRU-evicts S1 on a
            await a.release_session(S2)
            long = await b.submit(_request("long-1"))  # b holds S1
            await trio.sleep(shared.s(1))
            for signal in yield_signals(S1, NodeId("c")):
                await shared.bus.publish(signal)  # b yields mid-turn
            with pytest.raises(Exception):  # noqa: B017 (interrupted, whichever type)
                await long.result
            lost = await b.submit(_request("long-2", session=S2))
            await trio.sleep(shared.s(1))
            lease = await shared.leases.current(S2)
            assert lease is not None and await shared.leases.release(lease)
            with pytest.raises(Exception):  # noqa: B017 (LEASE_LOST)
                await lost.result
            crashing = await h.submit(
                _request("long-3", session=SessionId("s-3"), idempotency_key=KEY)
            )
            assert crashing.kind is DispositionKind.EXECUTED_LOCALLY
            waiting = await a.submit(
                _request("long-3", session=SessionId("s-3"), idempotency_key=KEY)
            )
            await trio.sleep(shared.s(1))
            crash_session_router(h)
            with pytest.raises(HolderLost):
                await waiting.result
        nursery.cancel_scope.cancel()
    assert sum(world.closes.values()) >= 3
    assert world.runtime_closes == 0 and world.runtime_constructions == 0


async def test_r10_169_a_status_snapshot_never_gates_a_submit(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-169: a heard STATUS says another node runs a turn of the session; a's status()
    reports that observation, yet a's submit is decided by the election alone — nobody
    holds the lease, so it runs here at once (EXECUTED_LOCALLY)."""
    t0 = trio.current_time()
    async with open_session_router(builder(shared, world, registry, "a")) as a:
        ghost = ClusterSessionStatus(
            session_id=S1,
            origin=NodeId("ghost"),
            seq=7,
            activity=SessionActivity.RUNNING,
            active_turn_id=TurnId("turn-ghost"),
            observed_at=0.0,
        )
        await shared.bus.publish(
            SessionSignal(
                kind=SignalKind.STATUS,
                session_id=S1,
                origin=NodeId("ghost"),
                payload=ghost.to_wire(),
            )
        )
        await settle()
        seen = a.status(S1)
        assert seen is not None and seen.activity is SessionActivity.RUNNING
        disposition = await a.submit(_request("x"))
        assert disposition.kind is DispositionKind.EXECUTED_LOCALLY
        assert (await disposition.result).text == "a:x:0"
        assert on_time(shared, trio.current_time() - t0, 1.0)


async def test_r10_170_only_delete_session_removes_history(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-170: release, idle eviction, an LRU eviction, a lost lease, a holder crash and
    closing the router all leave the session records and their history; delete_session is
    the one path that removes a record."""
    config = SessionRouterConfig(max_cached_sessions=1, idle_ttl=30.0)
    s3, s4 = SessionId("s-3"), SessionId("s-4")
    async with trio.open_nursery() as nursery:
        h = await start_crashable(nursery, builder(shared, world, registry, "h"))
        await (await h.submit(_request("crashed", session=s4))).result
        crash_session_router(h)
        async with open_session_router(builder(shared, world, registry, "a", config=config)) as a:
            await (await a.submit(_request("x"))).result
            await a.release_session(S1)
            await (await a.submit(_request("y", session=S2))).result
            await (await a.submit(_request("z", session=s3))).result  # LRU-evicts S2
            await trio.sleep(61)  # idle eviction of s3
            assert world.closed and a.statistics().open_handles == 0
        for session in (S1, S2, s3, s4):
            view = await shared.records.load(session)
            assert view is not None and len(view.transcript) == 2
        async with open_session_router(builder(shared, world, registry, "b")) as b:
            assert await b.delete_session(s4)
        assert await shared.records.load(s4) is None
        nursery.cancel_scope.cancel()


async def test_r10_173_what_crosses_nodes_is_json_text(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-173 / R10-03: the cluster's bus carries each signal as JSON text: a subscriber
    gets a fresh decode (equal, never the published object; a tuple comes back a list), and
    a forwarded turn's answer reaches its caller rebuilt from that text — a plain result
    with no artifacts, not the holder's object."""
    world.duration = lambda _t: 1.0
    async with (
        cluster(shared, world, registry, ["h", "a"]) as (h, a),
        shared.bus.subscribe() as receive,
    ):
        payload = {"frame": {"parts": (1, 2.5, None, True)}}
        sent = SessionSignal(
            kind=SignalKind.EVENT, session_id=S1, origin=NodeId("n"), payload=payload
        )
        await shared.bus.publish(sent)
        got = await receive.receive()
        assert got is not sent and got.payload is not sent.payload
        assert got.payload == {"frame": {"parts": [1, 2.5, None, True]}}
        await (await h.submit(_request("bind"))).result
        forwarded = await a.submit(_request("m"))
        answer = await forwarded.result
        assert type(answer) is AgentExecutionResult and answer.artifacts == ()
        assert answer.text == "h:m:2"
