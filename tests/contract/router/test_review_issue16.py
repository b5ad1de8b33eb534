"""Adversarial review of issue 16 (router part 2) through the public surface: each test
pins a defect found in review (its regression test)."""

from __future__ import annotations

import contextlib

import trio
import trio.testing
from router_app import FakeSession, Opener, Registry, Shared, World, cluster
from router_kit import AGENT, S1

from zlink_trio.router import (
    AgentExecutionResult,
    EventListener,
    LiveSession,
    OpenRequest,
    SubmitRequest,
    TranscriptEntry,
    TurnInput,
)


class _StubbornSession(FakeSession):
    """A turn "stubborn" ignores its interrupt: 20 s and its history write, shielded."""

    async def run_turn(self, turn: TurnInput, listener: EventListener) -> AgentExecutionResult:
        if turn.user_input.as_text() != "stubborn":
            return await super().run_turn(turn, listener)
        with trio.CancelScope(shield=True):
            await trio.sleep(20.0)
            await turn.history.append([TranscriptEntry("user", "stubborn", turn.turn_id)])
        return AgentExecutionResult("zombie")


class _StubbornOpener(Opener):
    def __init__(self, world: World, node: str, registry: Registry) -> None:
        super().__init__(world, node, registry)
        self._args = (world, node, registry)

    async def open(self, request: OpenRequest) -> LiveSession:
        plain = await super().open(request)
        world, node, _ = self._args
        assert isinstance(plain, FakeSession)
        return _StubbornSession(world, node, request.session_id, plain.runtime)


def _request(text: str) -> SubmitRequest:
    return SubmitRequest(session_id=S1, agent_ref=AGENT, user_input=text)


async def test_a_force_released_turn_cannot_write_under_the_node_s_next_lease(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-36 / §6.3 A: a turn that ignored SESSION_RELEASED is abandoned by the release,
    which returns the lease; its later history write must be refused — also when this same
    node claims the session again for a new turn meanwhile (the store fences by "this node
    holds a lease", so the zombie would write under the new lease, beside the new turn)."""
    opener = _StubbornOpener(world, "a", registry)
    async with cluster(shared, world, registry, ["a"], session_opener=opener) as (a,):
        zombie = await a.submit(_request("stubborn"))
        await trio.testing.wait_all_tasks_blocked()
        await a.release_session(S1)  # gives up after release_interrupt_timeout
        fresh = await a.submit(_request("fresh"))
        await fresh.result
        with trio.fail_after(60), contextlib.suppress(Exception):
            await zombie.result  # the abandoned turn ends (its outcome is not the point)
        record = await shared.records.load(S1)
    assert record is not None
    assert [e.text for e in record.transcript] == ["fresh", "re:fresh"]
