"""Races between two creation attempts of one ActorId on the same owner node: an attempt
that ends must not take away what a later attempt of the same id is staging."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from actor_kit import Recorder, Wrapped, client_app, make_app

from zlink_trio import Created, DeadlineExceeded
from zlink_trio.spots.approval import ActorCreateEvent, Approve, CreateDecision
from zlink_trio.store.api import ObjectKey
from zlink_trio.testing import CountingStore, open_cluster


async def test_an_ended_attempt_leaves_a_later_attempts_parked_frames_alone(
    clock: object, store: CountingStore
) -> None:
    """A04-09: attempt A of "x" is stuck in its Ready commit while its source gives the
    reservation back at the deadline; attempt B of "x" then stages on the same node and
    frames for it are parked. When A finally ends (its commit refused) the frames parked
    for B stay B's: every accepted send runs, in order, on the incarnation B publishes."""
    rec = Recorder()
    approve_b = trio.Event()
    staging_b = trio.Event()

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        if rec.runs("x") == 3:  # first incarnation, attempt A, attempt B
            staging_b.set()
            await approve_b.wait()
        return Approve()

    wrapped = Wrapped(store)
    apps = [client_app(), make_app(rec, on_create=on_create)]
    async with open_cluster(2, store=wrapped, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0].actors
        host = cluster.servers[1].actors
        first = await host.create("x", "player").timeout(10)
        assert isinstance(first, Created)
        assert await caller.request("x", "echo", b"warm") == b"warm"  # caller caches x
        assert await host.destroy(first.actor) is True  # the caller's route stays

        commit_entered = trio.Event()
        release_a = trio.Event()
        blocked = 0

        async def commit_ready(key: ObjectKey, version: int, **kw: Any) -> Any:
            nonlocal blocked
            blocked += 1
            if blocked == 1:  # attempt A's commit: held, nothing applied yet
                commit_entered.set()
                await release_a.wait()
            return await store.commit_ready(key, version, **kw)

        wrapped.commit_ready = commit_ready  # type: ignore[attr-defined]
        async with trio.open_nursery() as nursery:
            a_ended = trio.Event()

            async def attempt_a() -> None:
                with pytest.raises(DeadlineExceeded):
                    await host.create("x", "player").timeout(2)
                a_ended.set()

            nursery.start_soon(attempt_a)
            await commit_entered.wait()
            await a_ended.wait()
            # A's source gave its reservation back; A's target still waits in its commit
            assert await store.read(ObjectKey.actor("x")) is None

            created_b: list[Any] = []

            async def attempt_b() -> None:
                created_b.append(await host.create("x", "player").timeout(30))

            nursery.start_soon(attempt_b)
            await staging_b.wait()
            for i in range(3):
                await caller.send("x", "note", b"%d" % i)
            await trio.testing.wait_all_tasks_blocked()
            release_a.set()  # A's commit is refused (the row is B's): A ends
            await trio.testing.wait_all_tasks_blocked()
            approve_b.set()
        (second,) = created_b
        assert isinstance(second, Created)
        # acceptance order: the parked sends run before a request admitted after them
        assert await caller.request("x", "echo", b"after").timeout(10) == b"after"
        handled = [
            h[3]
            for h in rec.handled
            if h[0] == "x" and h[1] == second.actor.object_generation.value
        ]
        assert handled == [b"0", b"1", b"2", b"after"]
