"""Caller-owned deadlines (issue 9 §5): a call's deadline is ``min(submit time + its
timeout, trio.current_effective_deadline())``, that deadline travels to a remote owner,
and an owner never starts work whose deadline has passed.

Public surface only (``zlink_trio``, ``zlink_trio.testing``); two nodes over real TCP; the
memory store on ``MockClock(autojump_threshold=0)``, so every instant is exact.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from zlink_trio import (
    ActorCreateEvent,
    App,
    Approve,
    Created,
    CreateDecision,
    DeadlineExceeded,
    ErrorKind,
    RecreateOnRelocation,
    Unavailable,
    on_request,
    on_send,
)
from zlink_trio.testing import CountingStore, TapDirection, WireTap, open_cluster

pytestmark = pytest.mark.parametrize("backend", ["memory"])

ACTOR_SEND = 24
"""Command 24 (spec 04): an Actor send or request on the wire."""
ACTOR_CREATE = 110
ACTOR_DESTROY = 111
TERMINAL_REPLY = 20


class Counts:
    """What the application saw: handler runs per packet, factory runs per ActorId."""

    def __init__(self) -> None:
        self.handled: dict[str, int] = {}
        self.factory: dict[str, int] = {}
        self.gate = trio.Event()
        self.busy = trio.Event()
        self.approving = trio.Event()
        self.approval_gate: trio.Event | None = None


def host_app(counts: Counts) -> App:
    app = App()
    app.enable_actor_dispatch()

    class Player:
        def __init__(self, context: Any) -> None:
            self.context = context
            key = context.actor_id.value
            counts.factory[key] = counts.factory.get(key, 0) + 1

        def _count(self, packet: str) -> None:
            counts.handled[packet] = counts.handled.get(packet, 0) + 1

        @on_send("hold")
        async def hold(self, payload: bytes) -> None:
            self._count("hold")
            counts.busy.set()
            await counts.gate.wait()

        @on_request("echo")
        async def echo(self, payload: bytes) -> bytes:
            self._count("echo")
            return payload

    app.register_actor("player", Player, relocation=RecreateOnRelocation())

    async def approve(event: ActorCreateEvent) -> CreateDecision:
        if counts.approval_gate is not None and event.actor_id.value == "slow":
            counts.approving.set()
            await counts.approval_gate.wait()
        return Approve()

    app.on_create_actor(approve)
    return app


def caller_app() -> App:
    app = App()
    app.enable_actor_dispatch()
    return app


def two_nodes(counts: Counts) -> Any:
    """Node 0 is a caller only; node 1 hosts every Actor."""
    apps = [caller_app(), host_app(counts)]
    return lambda i: apps[i]


async def test_a_callers_fail_after_shortens_the_deadline_the_owner_sees(
    clock: object, store: CountingStore
) -> None:
    """``with trio.fail_after(0.2)`` around a remote request (default timeout 30 s): the
    command 24 the owner receives says it expires in at most 200 ms. The request still
    gets its reply, and a request without a caller deadline carries its own timeout."""
    counts = Counts()
    tap = WireTap()
    async with open_cluster(2, store=store, app=two_nodes(counts), tap=tap) as cluster:
        await cluster.wait_all_admitted()
        caller, host = cluster.servers
        assert isinstance(await caller.actors.create("p", "player").timeout(10), Created)
        await caller.actors.request("p", "echo", b"warm")  # the route is cached now
        owner = host.identity.node_rid
        tap.clear()
        with trio.fail_after(0.2):
            assert await caller.actors.request("p", "echo", b"x") == b"x"
        (event,) = tap.select(node=owner, direction=TapDirection.RECEIVED, command=ACTOR_SEND)
        assert 0 < event.record.timeout_ms <= 200
        tap.clear()
        with trio.fail_after(0.2):
            assert await caller.actors.request("p", "echo", b"y").timeout(0.05) == b"y"
        (event,) = tap.select(node=owner, direction=TapDirection.RECEIVED, command=ACTOR_SEND)
        assert 0 < event.record.timeout_ms <= 50
        tap.clear()
        assert await caller.actors.request("p", "echo", b"z").timeout(7) == b"z"
        (event,) = tap.select(node=owner, direction=TapDirection.RECEIVED, command=ACTOR_SEND)
        assert 6_000 < event.record.timeout_ms <= 7_000


@pytest.mark.parametrize("where", ["remote", "local"])
async def test_a_request_expired_in_the_owners_queue_is_never_run(
    clock: object, store: CountingStore, where: str
) -> None:
    """The owner's Actor is busy in a long turn while a request under the caller's
    ``fail_after(0.2)`` waits in its queue: the caller gets trio's TooSlowError at 0.2 s,
    and once the turn ends the expired request is skipped (its handler never runs) while
    a fresh request runs. Remote (the deadline came over the wire) and local alike."""
    counts = Counts()
    async with open_cluster(2, store=store, app=two_nodes(counts)) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0] if where == "remote" else cluster.servers[1]
        assert isinstance(await caller.actors.create("p", "player").timeout(10), Created)
        await caller.actors.send("p", "hold")
        await counts.busy.wait()
        start = trio.current_time()
        with pytest.raises(trio.TooSlowError):
            with trio.fail_after(0.2):
                await caller.actors.request("p", "echo", b"late")
        assert trio.current_time() - start == pytest.approx(0.2)
        counts.gate.set()
        assert await caller.actors.request("p", "echo", b"fresh").timeout(5) == b"fresh"
        assert counts.handled == {"hold": 1, "echo": 1}  # only the fresh one ran


@pytest.mark.parametrize("where", ["remote", "local"])
async def test_an_own_timeout_is_deadline_exceeded_a_callers_scope_is_trios(
    clock: object, store: CountingStore, where: str
) -> None:
    """The call's own ``.timeout()`` ending first gives DeadlineExceeded; the caller's
    cancel scope ending first (or at the same instant) gives what trio users expect:
    TooSlowError from ``fail_after``, a silent stop from ``move_on_after``."""
    counts = Counts()
    async with open_cluster(2, store=store, app=two_nodes(counts)) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0] if where == "remote" else cluster.servers[1]
        assert isinstance(await caller.actors.create("p", "player").timeout(10), Created)
        await caller.actors.send("p", "hold")
        await counts.busy.wait()
        with trio.fail_after(1):
            with pytest.raises(DeadlineExceeded):
                await caller.actors.request("p", "echo").timeout(0.1)
        with pytest.raises(trio.TooSlowError):
            with trio.fail_after(0.1):
                await caller.actors.request("p", "echo").timeout(0.1)
        with trio.move_on_after(0.1) as scope:
            await caller.actors.request("p", "echo").timeout(5)
        assert scope.cancelled_caught
        counts.gate.set()
        assert await caller.actors.request("p", "echo", b"ok").timeout(5) == b"ok"
        assert counts.handled == {"hold": 1, "echo": 1}


async def test_a_create_under_fail_after_carries_it_and_an_expired_create_runs_no_factory(
    clock: object, store: CountingStore
) -> None:
    """A create under the caller's ``fail_after(0.2)`` tells the target it expires in at
    most 200 ms (command 110). While the target's Entry Spot is held by a slow approval,
    a second create waits in its lifecycle lane past that deadline: the caller gets
    TooSlowError, and the factory of the expired create never runs."""
    counts = Counts()
    counts.approval_gate = trio.Event()
    tap = WireTap()
    async with open_cluster(2, store=store, app=two_nodes(counts), tap=tap) as cluster:
        await cluster.wait_all_admitted()
        caller, host = cluster.servers
        owner = host.identity.node_rid
        with trio.fail_after(0.2):
            assert isinstance(await caller.actors.create("quick", "player").timeout(10), Created)
        (event,) = tap.select(node=owner, direction=TapDirection.RECEIVED, command=ACTOR_CREATE)
        assert 0 < event.record.timeout_ms <= 200
        results: list[object] = []
        async with trio.open_nursery() as nursery:

            async def slow() -> None:
                results.append(await caller.actors.create("slow", "player").timeout(30))

            nursery.start_soon(slow)
            await counts.approving.wait()
            with pytest.raises(trio.TooSlowError):
                with trio.fail_after(0.2):
                    await caller.actors.create("expired", "player").timeout(30)
            counts.approval_gate.set()
        assert isinstance(results[0], Created)
        assert counts.factory == {"quick": 1, "slow": 1}  # "expired" never ran
        assert await caller.actors.find("expired") is None


class FailingClosing:
    """A Location Store delegating to a CountingStore, whose ``begin_closing`` fails,
    while ``failing``, as an unreachable Store would (nothing applied) -- after waiting
    for ``gate`` if one is set. Counts those attempts in ``closings``."""

    def __init__(self, inner: CountingStore) -> None:
        self._inner = inner
        self.failing = True
        self.gate: trio.Event | None = None
        self.asked = trio.Event()
        self.closings = 0

    @property
    def recovery_epoch(self) -> int:
        return self._inner.recovery_epoch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def begin_closing(self, key: Any, expected_version: int) -> Any:
        if not self.failing:
            return await self._inner.begin_closing(key, expected_version)
        self.closings += 1
        self.asked.set()
        if self.gate is not None:
            await self.gate.wait()
        raise Unavailable("test: the Store is unreachable")


async def test_a_remote_destroy_carries_the_callers_deadline_and_never_starts_late(
    clock: object, store: CountingStore
) -> None:
    """A remote destroy under ``fail_after(0.2)`` tells the owner it expires in at most
    200 ms (command 111; before, always the 30 s default). While an earlier destroy of the
    same Actor holds it (its Store step stalls, then fails: the Actor stays Ready), the
    remote destroy waits past its deadline: its caller gets TooSlowError, and once the
    earlier one lets go the expired destroy never starts (the owner answers
    DeadlineExceeded and makes no Store step); the Actor is still Ready and serving."""
    counts = Counts()
    held = FailingClosing(store)
    tap = WireTap()
    async with open_cluster(2, store=held, app=two_nodes(counts), tap=tap) as cluster:
        await cluster.wait_all_admitted()
        caller, host = cluster.servers
        owner = host.identity.node_rid
        created = await caller.actors.create("p", "player").timeout(10)
        assert isinstance(created, Created)
        # How many Closing attempts one destroy makes against this Store before giving up.
        with pytest.raises(Unavailable):
            await host.actors.destroy(created.actor)
        one_destroy = held.closings
        assert one_destroy >= 1
        held.closings = 0
        held.gate = trio.Event()
        held.asked = trio.Event()
        outcome: list[object] = []
        async with trio.open_nursery() as nursery:

            async def first() -> None:
                try:
                    outcome.append(await host.actors.destroy(created.actor))
                except Unavailable as exc:
                    outcome.append(exc)

            nursery.start_soon(first)
            await held.asked.wait()
            tap.clear()
            with pytest.raises(trio.TooSlowError):
                with trio.fail_after(0.2):
                    await caller.actors.destroy(created.actor)
            (sent,) = tap.select(node=owner, direction=TapDirection.RECEIVED, command=ACTOR_DESTROY)
            assert 0 < sent.record.timeout_ms <= 200
            held.gate.set()
        assert len(outcome) == 1 and isinstance(outcome[0], Unavailable)
        (answer,) = await tap.wait_for(
            node=owner, direction=TapDirection.SENT, command=TERMINAL_REPLY
        )
        assert answer.record.failure_code is ErrorKind.DEADLINE_EXCEEDED
        assert held.closings == one_destroy  # the first destroy's only: the late one never began
        assert await caller.actors.find("p") == created.actor
        assert await caller.actors.request("p", "echo", b"alive").timeout(5) == b"alive"
        held.failing = False
        assert await caller.actors.destroy(created.actor) is True


async def test_a_callers_deadline_is_never_reported_as_deadline_exceeded(
    clock: object, store: CountingStore
) -> None:
    """The owner is told whole milliseconds (rounded down), so with the caller's
    ``fail_after(0.2005)`` the target cancels the slow approval at 0.2 s and answers
    DeadlineExceeded half a millisecond before the caller's scope fires. The caller
    still sees its own scope: TooSlowError at 0.2005 s. A deadline of the call's own
    (``.timeout(0.2005)``, kept as 0.201 s: timeouts are whole milliseconds, rounded up)
    is DeadlineExceeded."""
    counts = Counts()
    counts.approval_gate = trio.Event()
    async with open_cluster(2, store=store, app=two_nodes(counts)) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0]
        start = trio.current_time()
        with pytest.raises(trio.TooSlowError):
            with trio.fail_after(0.2005):
                await caller.actors.create("slow", "player")
        assert trio.current_time() - start == pytest.approx(0.2005)
        start = trio.current_time()
        with trio.fail_after(5):
            with pytest.raises(DeadlineExceeded):
                await caller.actors.create("slow", "player").timeout(0.2005)
        assert trio.current_time() - start == pytest.approx(0.201)
        counts.approval_gate.set()
        assert await caller.actors.find("slow") is None
