"""Adversarial review of issue 16 (router part 2) through the public surface: each test
pins a defect found in review (its regression test)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import trio
import trio.testing
from router_app import FakeSession, Opener, Registry, Shared, World, builder, cluster, scaled
from router_kit import AGENT, KEY, S1, message

from zlink_trio.router import (
    AgentExecutionResult,
    EventListener,
    InboundMessage,
    InterruptReason,
    LiveSession,
    OpenRequest,
    Priority,
    SessionId,
    SessionInbox,
    SessionRouterConfig,
    SubmitRequest,
    TranscriptEntry,
    TurnInput,
    TurnInterrupted,
    open_session_router,
)
from zlink_trio.testing import settle


class _StubbornSession(FakeSession):
    """A turn "stubborn" ignores its interrupt: 20 s and its history write, shielded."""

    async def run_turn(self, turn: TurnInput, listener: EventListener) -> AgentExecutionResult:
        if turn.user_input.as_text() != "stubborn":
            return await super().run_turn(turn, listener)
        with trio.CancelScope(shield=True):
            await trio.sleep(scaled(20.0, self._world.scale))
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
        await settle()
        await a.release_session(S1)  # gives up after release_interrupt_timeout
        fresh = await a.submit(_request("fresh"))
        await fresh.result
        with trio.fail_after(shared.s(60)), contextlib.suppress(Exception):
            await zombie.result  # the abandoned turn ends (its outcome is not the point)
        record = await shared.records.load(S1)
    assert record is not None
    assert [e.text for e in record.transcript] == ["fresh", "re:fresh"]


class _FailingDeliver:
    """A node's view of the shared inbox whose ``deliver`` fails while ``down``."""

    def __init__(self, target: SessionInbox) -> None:
        self._target = target
        self.down = False

    async def deliver(self, message: InboundMessage) -> None:
        if self.down:
            raise OSError("inbox unreachable")
        await self._target.deliver(message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


async def test_a_keyed_submit_whose_hand_over_fails_frees_its_key(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """§9.2 / F2: a keyed submit that must be forwarded and whose inbox hand-over fails
    raises to its caller — the turn was not handed to anyone, so it will never run and its
    reservation must be freed (as a failed claim frees it): a retry under the same key then
    runs, instead of attaching to an orphaned IN_FLIGHT entry until the forward TTL."""
    world.duration = lambda text: 30.0 if text == "long" else 1.0
    inbox_b = _FailingDeliver(shared.inbox)
    async with (
        open_session_router(builder(shared, world, registry, "a")) as a,
        open_session_router(builder(shared, world, registry, "b", inbox=inbox_b)) as b,
    ):
        long = await a.submit(_request("long"))  # a holds the session
        await settle()
        keyed = SubmitRequest(session_id=S1, agent_ref=AGENT, user_input="k", idempotency_key=KEY)
        inbox_b.down = True
        with pytest.raises(OSError):
            await b.submit(keyed)
        inbox_b.down = False
        retry = await b.submit(keyed)
        with trio.fail_after(shared.s(60)):
            answer = await retry.result
        await long.result
    assert answer.text == "a:k:2"  # after "long" (two history entries)
    assert [t.text for t in world.turns] == ["long", "k"]


async def test_a_queued_own_turn_whose_hand_back_fails_settles_its_caller(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """§6.3 A / F4: a release stops a pass whose own submit waits behind an older collected
    message; the waiting turn is handed back to the inbox for the next holder. When that
    hand-back fails, the caller must still get an answer (an error), never wait forever."""
    world.duration = lambda text: 30.0 if text == "old" else 1.0
    inbox_a = _FailingDeliver(shared.inbox)
    async with open_session_router(builder(shared, world, registry, "a", inbox=inbox_a)) as a:
        await (await a.submit(_request("warm"))).result  # the record exists
        await shared.inbox.deliver(message("old"))  # no doorbell
        await trio.sleep(1)
        own = await a.submit(_request("own"))  # its pass runs "old" first (older)
        await settle()
        assert [t.text for t in world.turns] == ["warm", "old"]
        inbox_a.down = True
        await a.release_session(S1)
        with trio.fail_after(60), pytest.raises(Exception):  # noqa: B017 (any answer)
            await own.result


class _SlowClose(FakeSession):
    """Its handle takes 2 s to close."""

    async def aclose(self) -> None:
        await trio.sleep(2.0)
        await super().aclose()


class _SlowCloseOpener(Opener):
    def __init__(self, world: World, node: str, registry: Registry) -> None:
        super().__init__(world, node, registry)
        self._world, self._node = world, node

    async def open(self, request: OpenRequest) -> LiveSession:
        plain = await super().open(request)
        assert isinstance(plain, FakeSession)
        return _SlowClose(self._world, self._node, request.session_id, plain.runtime)


async def test_a_submit_during_an_idle_eviction_runs_when_the_eviction_ends(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """§6.3 B / §5.4: a submit that arrives while the cache sweeper closes the session's
    idle handle finds the gate held and is forwarded; its doorbell, heard while the gate is
    held, is dropped. When the eviction returns the lease with messages waiting it must ring
    again (as a hand-off does), so the turn starts then — not at the forward waiter's next
    poll (``forward_poll_interval`` later)."""
    config = SessionRouterConfig(idle_ttl=10.0)
    opener = _SlowCloseOpener(world, "a", registry)
    async with cluster(shared, world, registry, ["a"], session_opener=opener, config=config) as (
        a,
    ):
        await (await a.submit(_request("one"))).result
        await trio.sleep_until(60.5)  # the 60 s sweep is closing the handle (until 62 s)
        two = await a.submit(_request("two"))
        await two.result
    started = {t.text: t.start for t in world.turns}
    assert started["two"] <= 63.0


class _SlowReplies:
    """A view of the shared inbox whose ``collect`` answers 0.1 s after it read (a network
    round trip): a message delivered meanwhile is not in the answer."""

    def __init__(self, target: SessionInbox) -> None:
        self._target = target

    async def collect(self, session_id: SessionId, up_to: Priority) -> tuple[InboundMessage, ...]:
        taken = await self._target.collect(session_id, up_to)
        await trio.sleep(0.1)
        return taken

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


async def test_a_doorbell_heard_during_the_last_collect_of_a_pass_is_not_lost(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """§5.4 / F4: a MESSAGE_ENQUEUED the holder hears while its pass holds the gate is
    dropped (the pass collects before each turn). A message delivered after the pass's last
    collect read the inbox, but before the pass ended, rings while the gate is still held:
    the holder must still run it now, not when the submitter's waiter re-rings
    (``forward_poll_interval`` later)."""
    slow = _SlowReplies(shared.inbox)
    t0 = trio.current_time()  # on PostgreSQL: after the fixtures' schema set-up
    async with (
        open_session_router(builder(shared, world, registry, "a", inbox=slow)) as a,
        open_session_router(builder(shared, world, registry, "b")) as b,
    ):
        one = await a.submit(_request("one"))  # collect 0–0.1, turn 0.1–1.1, collect 1.1–1.2
        await trio.sleep_until(t0 + 1.15)
        two = await b.submit(_request("two"))  # delivered and rung at 1.15: gate held
        assert type(two).__name__ == "Forwarded"
        await one.result
        await two.result
    started = {t.text: t.start for t in world.turns}
    assert started["two"] - t0 <= 2.0


async def test_a_targeted_interrupt_right_after_submit_stops_that_turn(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """§8 / R10-108: ``interrupt(id, reason, turn_id)`` names the turn ``submit`` just
    returned (EXECUTED_LOCALLY). The turn starts on a task of its own (its session is opened
    there first), so a caller that interrupts at once must not find "no active turn" and
    lose the interrupt: the named turn ends interrupted. (Untargeted interrupts keep the
    no-op rule: they do not carry over to a later turn.)"""
    world.duration = lambda _t: 50.0
    async with cluster(shared, world, registry, ["a"]) as (a,):
        running = await a.submit(_request("stop me"))
        a.interrupt(S1, InterruptReason.USER, running.turn_id)
        with trio.fail_after(60), pytest.raises(TurnInterrupted):
            await running.result


class _SlowOpener(Opener):
    """Opening a session takes 2 s."""

    async def open(self, request: OpenRequest) -> LiveSession:
        await trio.sleep(2.0)
        return await super().open(request)


async def test_a_targeted_interrupt_during_the_session_s_open_stops_that_turn(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """§8 / R10-108: the same while the pass opens the session for the named turn (the
    turn is not running yet): it ends interrupted as soon as it starts."""
    world.duration = lambda _t: 50.0
    opener = _SlowOpener(world, "a", registry)
    async with cluster(shared, world, registry, ["a"], session_opener=opener) as (a,):
        running = await a.submit(_request("stop me"))
        await trio.sleep(1.0)  # opening
        a.interrupt(S1, InterruptReason.USER, running.turn_id)
        with trio.fail_after(60), pytest.raises(TurnInterrupted):
            await running.result
        assert trio.current_time() < 10.0


async def test_release_session_on_a_non_holder_gives_the_holder_s_handle_back(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """§5.1 / §6.3 A: releaseSession, like submit, does not expose the node (§5.1: which
    node holds the session is the router's business). Called on a node that does not hold
    the session, it purges the inbox and broadcasts EVICT — but the holder, hearing a
    peer's EVICT, keeps its open handle and its lease: the handle is not given back."""
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
        await (await a.submit(_request("one"))).result
        assert a.statistics().open_handles == 1
        await b.release_session(S1)
        await settle()
        stats = a.statistics()
        closes = world.closes.get("a", 0)
    assert (stats.open_handles, stats.held_leases, closes) == (0, 0, 1)
