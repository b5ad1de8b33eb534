"""Remote payloads whose turn the owner's connection reader runs itself (a lone frame for an
idle Actor, ``Lane.run_here``): a turn that waits neither blocks the connection it came on
nor is cut short by that connection's end (docs/performance.md, "Cross-node requests")."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from actor_kit import blackout

from zlink_trio import App, DeadlineExceeded
from zlink_trio.actors.handlers import on_request
from zlink_trio.actors.policy import RecreateOnRelocation
from zlink_trio.testing import CountingStore, FaultPlan, open_cluster

LONG = 30.0


class _Log:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.gate = trio.Event()
        self.entered = trio.Event()


def _apps(log: _Log) -> list[App]:
    """Node 0 hosts "front" Actors, node 1 hosts "back" Actors."""

    class Front:
        def __init__(self, context: Any) -> None:
            self.context = context

        @on_request("block")
        async def block(self, payload: bytes) -> bytes:
            log.events.append("block started")
            log.entered.set()
            await log.gate.wait()
            log.events.append("block finished")
            return b"unblocked"

        @on_request("echo")
        async def echo(self, payload: bytes) -> bytes:
            log.events.append(f"echo {payload.decode()}")
            return payload

        @on_request("ask-back")
        async def ask_back(self, payload: bytes) -> bytes:
            # Back to the caller's node, over the connection the request came in on.
            reply = await self.context.actors.request("back-1", "double", payload)
            return b"front:" + reply

    class Back:
        def __init__(self, context: Any) -> None:
            self.context = context

        @on_request("double")
        async def double(self, payload: bytes) -> bytes:
            return payload * 2

    front, back = App(), App()
    front.enable_actor_dispatch()
    back.enable_actor_dispatch()
    front.register_actor("front", Front, relocation=RecreateOnRelocation())
    back.register_actor("back", Back, relocation=RecreateOnRelocation())
    return [front, back]


async def test_a04_02_a_waiting_remote_turn_does_not_block_its_connection(
    clock: object, store: CountingStore
) -> None:
    """A04-02: node 1 requests ``front-1.block`` on node 0 (a lone frame for an idle Actor:
    node 0's reader may run that turn itself) and the turn waits. Requests from node 1 to
    another Actor of node 0 — over the same connection — still run and are answered
    while it waits; then it finishes and is answered too."""
    log = _Log()
    apps = _apps(log)
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[1].actors
        await caller.create("front-1", "front").timeout(LONG)
        await caller.create("front-2", "front").timeout(LONG)
        await caller.request("front-1", "echo", b"warm").timeout(LONG)  # routes cached
        await caller.request("front-2", "echo", b"warm").timeout(LONG)
        replies: list[object] = []

        async def blocked() -> None:
            replies.append(await caller.request("front-1", "block", b"").timeout(LONG))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(blocked)
            await log.entered.wait()
            start = trio.current_time()
            for i in range(3):
                assert await caller.request("front-2", "echo", str(i).encode()).timeout(5) == (
                    str(i).encode()
                )
            assert trio.current_time() - start < 5  # answered, not timed out
            assert replies == []
            log.gate.set()
        assert replies == [b"unblocked"]
        assert log.events[-5:] == ["block started", "echo 0", "echo 1", "echo 2", "block finished"]


async def test_a04_09_a_remote_turn_may_call_back_over_its_own_connection(
    clock: object, store: CountingStore
) -> None:
    """A04-09: a remote request's turn on node 0 requests an Actor on the caller's node 1
    and waits for that reply, which comes back over the connection the outer request came
    in on (the reading goes on while the turn waits); then the outer reply is answered.
    Repeated: every round trip completes, in order."""
    log = _Log()
    apps = _apps(log)
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[1].actors
        await caller.create("front-1", "front").timeout(LONG)
        await cluster.servers[0].actors.create("back-1", "back").timeout(LONG)
        for i in range(5):
            payload = f"x{i}".encode()
            reply = await caller.request("front-1", "ask-back", payload).timeout(5)
            assert reply == b"front:" + payload * 2


async def test_a04_17_a_remote_turn_that_waits_survives_the_end_of_its_connection(
    clock: object, store: CountingStore
) -> None:
    """A04-17: node 0 runs a remote request's turn that waits; meanwhile the connection the
    request came on is cut (and stays partitioned). The turn is not cut short: once
    released it finishes, exactly once; the request is never re-sent, and its caller
    (whose link broke, the outcome unknown) ends at its deadline or with the reply."""
    log = _Log()
    apps = _apps(log)
    plan = FaultPlan(seed=7)
    async with open_cluster(2, store=store, app=lambda i: apps[i], fault_plan=plan) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[1].actors
        await caller.create("front-1", "front").timeout(LONG)
        await caller.request("front-1", "echo", b"warm").timeout(LONG)
        outcome: list[object] = []

        async def blocked() -> None:
            try:
                outcome.append(await caller.request("front-1", "block", b"").timeout(3))
            except DeadlineExceeded as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(blocked)
            await log.entered.wait()
            await blackout(cluster, plan, 1, 0)  # the request's connection ends now
            await trio.sleep(0.5)
            assert log.events.count("block started") == 1
            log.gate.set()
            await trio.sleep(0.5)
            assert log.events.count("block finished") == 1  # ran to its end, once
        assert len(outcome) == 1
    assert log.events.count("block started") == 1  # never re-sent
