"""How a session ends on a node (spec 10 §6.3 A–C, §7.7): release keeps the history, a
release that gives up on a stubborn turn force-closes it, purging forgets the doorbell,
graceful shutdown's order and its lease release, and delete as the only history delete,
cleaned up on every node by EVICT."""

from __future__ import annotations

import ast
import logging
import pathlib
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from router_app import Registry, Shared, World, on_time
from router_kit import AGENT, OTHER_AGENT, S1
from router_script import Script, Spied, Stage, scripted_cluster

import zlink_trio.router
from zlink_trio.router import (
    AssistantTextDelta,
    ExecutionCompleted,
    InterruptedAt,
    InterruptReason,
    SessionEvicted,
    SubmitRequest,
    TurnEvent,
    TurnInterrupted,
)
from zlink_trio.testing import settle

INBOX = {"collect": "collect", "has_pending": "has_pending"}


def _request(text: str, **kw: Any) -> SubmitRequest:
    return SubmitRequest(session_id=S1, agent_ref=AGENT, user_input=text, **kw)


async def _follow(
    router: Any, stage: Stage, name: str, got: list[TurnEvent], task_status: Any
) -> None:
    async with router.events(S1) as subscription:
        task_status.started()
        async for frame in subscription:
            got.append(frame)  # noqa: PERF401 (each frame as it arrives)
    stage.log.append((f"{name} complete", S1.value, None, trio.current_time()))


async def test_r10_55_release_is_not_the_end_of_the_session(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-55: release returns the handle, not the session: submitting again with the same
    SessionId opens a new handle whose turn sees the earlier turn in the history."""
    stage = Stage()
    async with scripted_cluster(shared, world, registry, stage, ["a"]) as (a,):
        await (await a.submit(_request("first"))).result
        await a.release_session(S1)
        assert a.statistics().open_handles == 0
        assert (await (await a.submit(_request("second"))).result).text == "second:2"
    view = await shared.records.load(S1)
    assert view is not None and [e.text for e in view.transcript] == ["first#0", "second#0"]


async def test_r10_57_a_release_force_closes_a_turn_that_ignores_its_interrupt(
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R10-57: a turn that ignores SESSION_RELEASED: at 5 s the release gives up, warns,
    closes the handle, and the subscribers (here and on a peer) complete right away; the
    frames the turn emits afterwards — and its terminal frame — reach no one, not even a
    subscriber that joins later; the relay counts them."""
    stuck = Script(duration=20.0, stubborn=True, writes=0, late_frames=[AssistantTextDelta("late")])
    stage = Stage(scripts={"stuck": stuck})
    t0 = trio.current_time()
    here: list[TurnEvent] = []
    there: list[TurnEvent] = []
    later: list[TurnEvent] = []
    caplog.set_level(logging.WARNING, logger="zlink_trio.router")
    async with (
        scripted_cluster(shared, world, registry, stage, ["a", "b"]) as (a, b),
        trio.open_nursery() as nursery,
    ):
        await nursery.start(_follow, a, stage, "a", here)
        await nursery.start(_follow, b, stage, "b", there)
        await a.submit(_request("stuck"))
        await trio.sleep(shared.s(1))
        await a.release_session(S1)
        assert on_time(shared, trio.current_time() - t0, 6.0)
        assert any("ignored its interrupt" in r.getMessage() for r in caplog.records)
        await nursery.start(_follow, a, stage, "a later", later)
        await nursery.start(_follow, b, stage, "b later", later)
        await trio.sleep_until(t0 + shared.s(30.0))
        assert a.statistics().dropped_events >= 2  # the late frame and the terminal one
        nursery.cancel_scope.cancel()
    times = {e[0]: e[3] - t0 for e in stage.log}
    assert all(on_time(shared, times[k], 6.0) for k in ("close", "a complete", "b complete"))
    assert on_time(shared, times["turn end"], 20.0)
    for frames in (here, there, later):
        assert all(not isinstance(f.event, AssistantTextDelta | ExecutionCompleted) for f in frames)
        assert all(f.event != AssistantTextDelta("late") for f in frames)


@pytest.mark.parametrize("how", ["release", "delete"])
async def test_r10_58_ending_a_session_forgets_its_doorbell(
    how: str,
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-58: a peer's message waits in the inbox behind a running turn (its doorbell
    rung, unanswered) when the holder releases (or deletes) the session; the inbox is
    emptied, the peer hears EVICT, and afterwards no node makes an empty drain pass (no
    collect, no pending check, for two minutes); a new session with the same id runs its
    own turn and nothing else."""
    stage = Stage(scripts={"long": Script(duration=100.0)})
    spied = attrs.evolve(shared, inbox=Spied(stage, shared.inbox, INBOX))
    async with scripted_cluster(spied, world, registry, stage, ["a", "b"]) as (a, b):
        await a.submit(_request("long"))
        await trio.sleep(shared.s(1))
        waiting = await b.submit(_request("queued"))
        assert waiting.kind.name == "FORWARDED"
        await trio.sleep(shared.s(1))
        if how == "release":
            await a.release_session(S1)
        else:
            assert await a.delete_session(S1)
        with pytest.raises(SessionEvicted):
            await waiting.result
        assert not await shared.inbox.has_pending(S1)
        mark = len(stage.log)
        await trio.sleep(shared.s(120))
        assert [e[0] for e in stage.log[mark:] if e[0] in INBOX.values()] == []
        fresh = await a.submit(_request("fresh"))
        await fresh.result
        await trio.sleep(shared.s(60))
    turns = [e for e in stage.log[mark:] if e[0] == "turn start"]
    assert len(turns) == 1


async def test_r10_61_graceful_shutdown_runs_its_steps_in_order(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-61: close_gracefully(5) with a 100 s turn running: new submits are refused at
    once; after the 5 s wait the turn is interrupted with SYSTEM_SHUTDOWN (its subscriber
    sees InterruptedAt(SYSTEM_SHUTDOWN)); then the handle closes, the lease is released and
    the subscriber completes, in that order. The application runtime is never closed."""
    stage = Stage(scripts={"long": Script(duration=100.0)})
    got: list[TurnEvent] = []
    spied = attrs.evolve(shared, leases=Spied(stage, shared.leases, {"release": "lease release"}))
    async with (
        scripted_cluster(spied, world, registry, stage, ["a"]) as (a,),
        trio.open_nursery() as nursery,
    ):
        await nursery.start(_follow, a, stage, "subscriber", got)
        running = await a.submit(_request("long"))
        await trio.sleep(1)
        closing = trio.Event()

        async def close() -> None:
            await a.close_gracefully(5)
            closing.set()

        nursery.start_soon(close)
        await settle()
        with pytest.raises(Exception, match="not accepting"):
            await a.submit(_request("late"))
        await closing.wait()
        with pytest.raises(TurnInterrupted, match="SYSTEM_SHUTDOWN"):
            await running.result
    steps = [(e[0], e[3]) for e in stage.log if e[0] not in ("open", "turn start")]
    assert steps == [
        ("turn interrupted", 6.0),
        ("close", 6.0),
        ("lease release", 6.0),
        ("subscriber complete", 6.0),
    ]
    assert got[-1].event == InterruptedAt(InterruptReason.SYSTEM_SHUTDOWN)
    assert world.runtime_closes == 0


async def test_r10_62_shutdown_releases_leases_and_swallows_a_failing_release(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-62: after a holder closes, a peer takes the session at once (no wait for the
    30 s lease); a holder whose lease release fails still closes without raising (the
    lease then frees at its expiry)."""
    stage = Stage()
    async with scripted_cluster(shared, world, registry, stage, ["a", "b"]) as (a, b):
        await (await a.submit(_request("one"))).result
        closed_at = trio.current_time()
        await a.close_gracefully(5)
        taken = await b.submit(_request("two"))
        assert taken.kind.name == "EXECUTED_LOCALLY"
        assert trio.current_time() == closed_at
        await taken.result

    broken = attrs.evolve(
        shared, leases=Spied(stage, shared.leases, {"release": "release"}, fail={"release"})
    )
    async with scripted_cluster(broken, world, registry, stage, ["c"]) as (c,):
        await (await c.submit(_request("three"))).result
        await c.close_gracefully(5)  # does not raise
        assert "release" in stage.kinds()
        lease = await shared.leases.current(S1)
        assert lease is not None and lease.holder_id.value == "c"


def test_r10_102_only_delete_session_deletes_a_record() -> None:
    """R10-102 (review): in the router's code, the record store's ``delete`` is called in
    exactly two places — the fenced door (``FencedRecords.delete``) and
    ``SessionRouter.delete_session`` — and the router's tests call it only on the SPI under
    test or through a spy that forwards it."""
    package = pathlib.Path(zlink_trio.router.__file__).parent
    callers: set[tuple[str, str]] = set()
    for path in package.glob("*.py"):
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "delete"
                ):
                    callers.add((path.name, func.name))
    assert callers == {("session_store.py", "delete"), ("router.py", "delete_session")}
    tests = pathlib.Path(__file__).parent
    for path in tests.glob("*.py"):
        if path.name == "test_r10_session_store.py":  # the SPI contract itself
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            if call and node.func.attr == "delete":  # type: ignore[attr-defined]
                assert ast.unparse(node.func.value) == "self._target", path.name


async def test_r10_104_delete_cleans_up_every_node(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-104: after a delete on node A, on node B: the session's approvals and status
    projection are gone, B's forwarded result fails, B's events() subscriber completes, and
    a later submit of the same id with another agent is accepted (no stale binding)."""
    stage = Stage(scripts={"long": Script(duration=100.0)})
    got: list[TurnEvent] = []
    async with (
        scripted_cluster(shared, world, registry, stage, ["a", "b"]) as (a, b),
        trio.open_nursery() as nursery,
    ):
        await nursery.start(_follow, b, stage, "b subscriber", got)
        await a.submit(_request("long"))
        await trio.sleep(shared.s(11))  # a STATUS heartbeat reached b
        assert b.status(S1) is not None
        b.approvals(S1).grant("tool:search")
        waiting = await b.submit(_request("queued"))
        await trio.sleep(shared.s(1))
        assert await a.delete_session(S1)
        await settle()
        assert b.approvals(S1).granted() == frozenset()
        assert b.status(S1) is None
        with pytest.raises(SessionEvicted):
            await waiting.result
        assert "b subscriber complete" in stage.kinds()
        other = await b.submit(attrs.evolve(_request("fresh"), agent_ref=OTHER_AGENT))
        assert (await other.result).text.startswith("fresh:")
        nursery.cancel_scope.cancel()
