"""A server shutting down while its callers wait: every request, create and destroy it
started ends at once with ShuttingDown (or its terminal); none waits for its deadline."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing
from actor_kit import Recorder, make_app

from zlink_trio import ShuttingDown
from zlink_trio.actors.approval import ActorCreateEvent, Approve, CreateDecision
from zlink_trio.actors.results import Created
from zlink_trio.store.api import ObjectKey
from zlink_trio.testing import CountingStore, open_cluster

LONG = 500.0
"""Every call's timeout: far beyond anything the shutdown itself takes."""


@pytest.mark.parametrize("backend", ["memory"])  # exact virtual times: MockClock only
async def test_shutdown_ends_waiting_calls_with_shutting_down(
    clock: object, store: CountingStore
) -> None:
    """Node 0 stops while its callers wait: requests on the general path (the route was
    not cached: a local Actor and a remote one), a request on the fast path, a local
    create (node 0 is the only host of its type) and a remote one, both held in
    OnCreateActor, and a local and a remote destroy waiting for a blocked turn. Each ends
    with ShuttingDown at the instant of the stop."""
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
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
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

        start = trio.current_time()
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
            await cluster.stop(0)
        late = {n: r for n, r in outcome.items() if not isinstance(r, ShuttingDown)}
        assert not late and len(outcome) == 7, late
        assert trio.current_time() - start < 1.0
        # the local create ended without a terminal: its reservation was given back
        assert await store.read(ObjectKey.actor("slow-home")) is None
