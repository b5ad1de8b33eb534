"""A server shutting down while its callers wait: every request, create and destroy it
started ends with ShuttingDown (or its terminal) by the drain deadline at the latest (the
stop lets accepted turns and control transactions finish until then); none waits for
its own deadline."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing
from actor_kit import Recorder, make_app

from zlink_trio import ServerConfig, ShuttingDown, Unavailable
from zlink_trio.actors.results import Created
from zlink_trio.spots.approval import ActorCreateEvent, Approve, CreateDecision
from zlink_trio.store.api import ObjectKey
from zlink_trio.testing import CountingStore, TapDirection, WireTap, open_cluster
from zlink_trio.wire import Command

LONG = 500.0
"""Every call's timeout: far beyond anything the shutdown itself takes."""
DRAIN = 3.0
"""``drain_timeout``: how long a stop lets accepted turns and transactions go on."""


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_shutdown_ends_waiting_calls_with_shutting_down(
    clock: object, store: CountingStore
) -> None:
    """Node 0 stops while its callers wait: requests on the general path (the route was
    not cached: a local Actor and a remote one), a request on the fast path, a local
    create (node 0 is the only host of its type) and a remote one, both held in
    OnCreateActor, and a local and a remote destroy waiting for a blocked turn. The stop
    lets the blocked turns and the held creates go on until the drain deadline
    (``drain_timeout`` = 3 s after the stop); they never finish, so each call ends with
    ShuttingDown exactly then."""
    approving = {"slow-home": trio.Event(), "slow-away": trio.Event()}

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        entered = approving.get(event.actor_id.value)
        if entered is not None:
            entered.set()
            await trio.sleep_forever()
        return Approve()

    here, there = Recorder(gate=trio.Event()), Recorder(gate=trio.Event())
    apps = [
        make_app(here, types=("home",), on_create=on_create),
        make_app(there, types=("away",), on_create=on_create),
    ]
    config = ServerConfig(drain_timeout=DRAIN)
    async with open_cluster(2, store=store, app=lambda i: apps[i], config=config) as cluster:
        await cluster.wait_all_admitted()
        other = cluster.servers[1].actors
        # Created by node 1: node 0 has no cached route to either (general path).
        local_cold = await other.create("local-cold", "home").timeout(30)
        remote_cold = await other.create("remote-cold", "away").timeout(30)
        assert isinstance(local_cold, Created) and isinstance(remote_cold, Created)
        await other.create("remote-warm", "away").timeout(30)
        caller = cluster.servers[0].actors
        assert await caller.request("remote-warm", "echo", b"w").timeout(30) == b"w"

        outcome: dict[str, object] = {}

        async def run(name: str, call: Callable[[], Awaitable[object]]) -> None:
            try:
                outcome[name] = await call()
            except Exception as exc:
                outcome[name] = exc

        async with trio.open_nursery() as nursery:
            for name in ("local-cold", "remote-cold", "remote-warm"):
                nursery.start_soon(
                    run, name, lambda n=name: caller.request(n, "block", b"").timeout(LONG)
                )
            nursery.start_soon(
                run, "slow-home", lambda: caller.create("slow-home", "home").timeout(LONG)
            )
            nursery.start_soon(
                run, "slow-away", lambda: caller.create("slow-away", "away").timeout(LONG)
            )
            for entered in approving.values():
                await entered.wait()
            await here.wait_handled(1)  # the local block
            await there.wait_handled(3)  # the echo and two blocks
            # destroys waiting for the blocked turns to end
            for name, ref in (("destroy-local", local_cold), ("destroy-remote", remote_cold)):
                nursery.start_soon(run, name, lambda r=ref.actor: caller.destroy(r))
            await trio.testing.wait_all_tasks_blocked()
            stopped = trio.current_time()
            await cluster.stop(0)
        late = {n: r for n, r in outcome.items() if not isinstance(r, ShuttingDown)}
        assert not late and len(outcome) == 7, late
        assert trio.current_time() == stopped + DRAIN
        # the local create ended without a terminal: its reservation was given back
        assert await store.read(ObjectKey.actor("slow-home")) is None


@pytest.mark.parametrize("backend", ["memory"])  # virtual time: MockClock only
@pytest.mark.parametrize("how", ["stop", "kill"])
async def test_remote_callers_end_when_the_owners_lifecycle_ends(
    clock: object, store: CountingStore, how: str
) -> None:
    """The owner of an Actor stops gracefully (goodbye, descriptor removed) or dies (its
    sockets close, its descriptor stays until its lease expires) while callers on another
    node wait: one request running (blocked in its handler) and two queued behind it. No
    reply can come from an ended lifecycle, so each ends Unavailable when the caller's
    node sees that lifecycle end (intent removed, no admitted peer) — once the drain
    deadline passed for a stop (the blocked turn never finishes), within the lease TTL
    for a crash — not at its 500 s deadline; never re-sent."""
    owner_rec, caller_rec = Recorder(gate=trio.Event()), Recorder()
    apps = [make_app(owner_rec), make_app(caller_rec, types=("other",))]
    tap = WireTap()
    async with open_cluster(2, store=store, app=lambda i: apps[i], tap=tap) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[1].actors
        created = await caller.create("held", "player").timeout(30)
        assert isinstance(created, Created)
        assert created.actor.node_rid == cluster.servers[0].identity.node_rid
        outcome: dict[int, object] = {}

        async def call(i: int) -> None:
            try:
                outcome[i] = await caller.request("held", "block", b"%d" % i).timeout(LONG)
            except Exception as exc:
                outcome[i] = exc

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for i in range(3):
                nursery.start_soon(call, i)
            await owner_rec.wait_handled(1)  # one turn runs (blocked); two are queued
            await trio.testing.wait_all_tasks_blocked()
            if how == "stop":
                await cluster.stop(0)
            else:
                await cluster.kill(0)
        elapsed = trio.current_time() - start
        assert sorted(outcome) == [0, 1, 2]
        assert all(isinstance(r, Unavailable) for r in outcome.values()), outcome
        if how == "stop":
            assert (
                cluster.configs[0].drain_timeout <= elapsed < cluster.configs[0].drain_timeout + 1
            )
        else:
            assert elapsed < cluster.configs[1].owner_lease_ttl + 5.0, elapsed
        sent = tap.count(
            command=Command.ACTOR_SEND,
            node=cluster.servers[1].identity.node_rid,
            direction=TapDirection.SENT,
        )
        assert sent == 3  # never re-sent
