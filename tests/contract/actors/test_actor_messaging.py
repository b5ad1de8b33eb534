"""Actor queue and messaging contracts (spec 04 §3–§5; checklist A04-01, A04-02, A04-03
(Entry Spot side), A04-09, A04-17)."""

from __future__ import annotations

import inspect

import trio
import trio.testing
from actor_kit import Recorder, client_app, make_app

from zlink_trio import NotFound, Unavailable
from zlink_trio.actors.client import ActorClient
from zlink_trio.actors.manager import ActorManager
from zlink_trio.actors.results import Created
from zlink_trio.spots.approval import ActorCreateEvent, Approve, CreateDecision
from zlink_trio.testing import CountingStore, WireTap, entry_spot_statistics, open_cluster
from zlink_trio.wire.commands import Command


def _host_index(cluster: object, created: Created) -> int:
    servers = cluster.servers  # type: ignore[attr-defined]
    return next(i for i, s in enumerate(servers) if s.identity.node_rid == created.actor.node_rid)


async def test_a04_01_entry_spot_actor_payloads_go_to_the_actor_queue(
    clock: object, store: CountingStore
) -> None:
    """A04-01: payloads for an Entry-Spot Actor reach the Actor's handler, from the local
    node and from a remote one, and no Spot callback or Spot queue is involved.

    "No Spot callback" is observed on the one Spot callback this runtime runs
    (OnCreateActor, counted by ``on_create_actor_calls``) and "no Spot queue" on both
    queues of the Entry Spot lane (``lifecycle_turns``, ``application_turns``, which
    tests/unit/spots proves can move). Spot packet handlers (``App.on_packet``) are not
    dispatched by this runtime at all, so an assertion that none ran could never fail;
    it was removed (issue 9, item 9) until the STREAM issue dispatches them."""
    rec = Recorder()
    apps = [make_app(rec), client_app()]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        created = await cluster.servers[0].actors.create("entry-actor", "player").timeout(10)
        assert isinstance(created, Created)
        spot_before = entry_spot_statistics(cluster.servers[0])
        assert await cluster.servers[0].actors.request("entry-actor", "echo", b"local") == b"local"
        assert (
            await cluster.servers[1].actors.request("entry-actor", "echo", b"remote") == b"remote"
        )
        await cluster.servers[1].actors.send("entry-actor", "note", b"one-way")
        await rec.wait_handled(3)
        assert [h[3] for h in rec.handled] == [b"local", b"remote", b"one-way"]
        # the Actor's membership is its node's Entry Spot
        spot_id = await cluster.servers[1].actors.request("entry-actor", "whoami")
        spots = entry_spot_statistics(cluster.servers[0])
        assert spot_id is not None and spot_id.decode() == spots[0].spot_id
        # payloads never became Spot turns or Spot callbacks
        assert [
            (s.lifecycle_turns, s.application_turns, s.on_create_actor_calls) for s in spots
        ] == [
            (s.lifecycle_turns, s.application_turns, s.on_create_actor_calls) for s in spot_before
        ]
        assert all(s.application_turns == 0 for s in spots)


async def test_a04_02_blocked_entry_spot_does_not_block_actor_payloads(
    clock: object, store: CountingStore
) -> None:
    """A04-02: Actor payloads never pass through a Spot callback or the Spot's queue: with
    the Entry Spot's handler blocked (OnCreateActor waiting), a payload to an Actor of that
    Entry Spot still runs."""
    rec = Recorder()
    release = trio.Event()
    entered = trio.Event()

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        if event.actor_id.value == "second":
            entered.set()
            await release.wait()
        return Approve()

    apps = [make_app(rec, on_create=on_create), client_app()]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        actors, remote = cluster.servers[0].actors, cluster.servers[1].actors
        assert isinstance(await actors.create("first", "player").timeout(30), Created)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: actors.create("second", "player").timeout(30).submit())
            await entered.wait()
            # The Entry Spot's lifecycle turn is blocked in OnCreateActor right now.
            (spot,) = entry_spot_statistics(cluster.servers[0])
            assert spot.on_create_actor_calls == 2
            assert await actors.request("first", "echo", b"runs") == b"runs"
            assert await remote.request("first", "echo", b"remote") == b"remote"
            await remote.send("first", "note", b"one-way")
            await rec.wait_handled(3)
            assert await remote.find("second") is None  # still held in OnCreateActor
            (spot,) = entry_spot_statistics(cluster.servers[0])
            assert spot.application_turns == 0 and spot.on_create_actor_calls == 2
            release.set()
        assert [h[3] for h in rec.handled] == [b"runs", b"remote", b"one-way"]
        (spot,) = entry_spot_statistics(cluster.servers[0])
        assert spot.application_turns == 0 and spot.lifecycle_turns == 2
        assert rec.on_create_calls == 2


async def test_a04_03_entry_spot_lifecycle_queue_gets_lifecycle_control_only(
    clock: object, store: CountingStore
) -> None:
    """A04-03 (Entry Spot side): the Entry Spot's lifecycle queue receives creation control
    only — one lifecycle turn per creation attempt — and never an Actor payload, however
    many payloads flow; after destroy no payload runs."""
    rec = Recorder()
    async with open_cluster(2, store=store, app=make_app(rec)) as cluster:
        await cluster.wait_all_admitted()
        for i in range(3):
            assert isinstance(await cluster.servers[0].actors.create(f"a{i}", "player"), Created)
        turns = sum(
            s.lifecycle_turns for srv in cluster.servers for s in entry_spot_statistics(srv)
        )
        assert turns == 3 == rec.on_create_calls
        for i in range(3):
            for j in range(5):
                await cluster.servers[j % 2].actors.request(f"a{i}", "echo", b"p")
        after = [s for srv in cluster.servers for s in entry_spot_statistics(srv)]
        assert sum(s.lifecycle_turns for s in after) == 3
        assert all(s.application_turns == 0 and s.queued_lifecycle == 0 for s in after)
        assert rec.on_create_calls == 3 and len(rec.handled) == 15
        ref = await cluster.servers[1].actors.find("a0")
        assert ref is not None
        assert await cluster.servers[1].actors.destroy(ref) is True
        handled = len(rec.handled)
        try:
            await cluster.servers[0].actors.request("a0", "echo", b"late")
            raise AssertionError("a destroyed Actor must not run payloads")
        except (NotFound, Unavailable):
            pass
        assert len(rec.handled) == handled


async def test_a04_09_every_ingress_kind_runs_in_acceptance_order(
    clock: object, store: CountingStore
) -> None:
    """A04-09: an Actor's payloads run in the order its queue accepted them, whatever the
    ingress: local send, local request, remote send, remote request, Actor-to-Actor."""
    rec = Recorder()
    apps = [make_app(rec), client_app()]
    rec.gate = trio.Event()
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        local, remote = cluster.servers[0].actors, cluster.servers[1].actors
        assert isinstance(await local.create("target", "player"), Created)
        assert isinstance(await local.create("relay", "player"), Created)
        # Warm every route first, so no Store I/O (a thread, on PostgreSQL) happens below
        # and "every task blocked" really means "the payload was admitted".
        assert await remote.request("target", "echo", b"w") == b"w"
        await local.send("relay", "forward", b"target|w")
        await rec.wait_handled(3)  # echo w, forward w (relay), note w (target)
        rec.handled.clear()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: local.request("target", "block", b"0").submit())
            await rec.entered.wait()  # the target is busy: everything below queues up
            steps = [
                lambda: local.send("target", "note", b"1").submit(),
                lambda: local.request("target", "echo", b"2").submit(),
                lambda: remote.send("target", "note", b"3").submit(),
                lambda: remote.request("target", "echo", b"4").submit(),
                lambda: local.send("relay", "forward", b"target|5").submit(),
                lambda: remote.send("target", "note", b"6").submit(),
            ]
            for step in steps:
                nursery.start_soon(step)
                await trio.testing.wait_all_tasks_blocked()
            rec.gate.set()
        order = [h[3] for h in rec.handled if h[0] == "target"]
        assert order == [b"0", b"1", b"2", b"3", b"4", b"5", b"6"]


async def test_a04_17_messaging_by_actor_id_only(clock: object, store: CountingStore) -> None:
    """A04-17: send/request take only an ActorId and a payload; Missing is never cached
    (a fresh Store read each time); a recreated Actor handles later sends; a stale route
    ends with an error and no second send on the wire, and the next call resolves anew."""
    for fn in (ActorClient.send, ActorClient.request, ActorManager.send, ActorManager.request):
        assert list(inspect.signature(fn).parameters) == ["self", "actor_id", "packet", "payload"]
    rec = Recorder()
    tap = WireTap()
    apps = [client_app(), make_app(rec), make_app(rec)]
    async with open_cluster(3, store=store, app=lambda i: apps[i], tap=tap) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0].actors
        # no negative caching: each call after a Missing result reads the Store again
        store.reset()
        for _ in range(2):
            try:
                await caller.request("later", "echo", b"")
                raise AssertionError("a missing Actor must be NotFound")
            except NotFound:
                pass
        assert store.count("read") == 2
        created = await caller.create("later", "player")
        assert isinstance(created, Created)
        assert await caller.request("later", "echo", b"a") == b"a"  # route now cached
        # destroy and recreate until the new incarnation lives on the OTHER host node
        # (the host destroys it: a destroy made by the caller would drop its cached route)
        old_host = _host_index(cluster, created)
        for _ in range(64):
            assert await cluster.servers[old_host].actors.destroy(created.actor) is True
            created_again = await cluster.servers[old_host].actors.create("later", "player")
            assert isinstance(created_again, Created)
            if _host_index(cluster, created_again) != old_host:
                break
            created = created_again
            assert await caller.request("later", "echo", b"warm") == b"warm"
        else:
            raise AssertionError("placement never chose the other node")
        tap.clear()
        me = cluster.servers[0].identity.node_rid
        try:
            await caller.request("later", "echo", b"stale")
            raise AssertionError("the cached route is stale: the call must fail")
        except Unavailable:
            pass
        assert tap.count(node=me, command=Command.ACTOR_SEND) == 1
        # the next call resolves afresh and reaches the new incarnation
        assert await caller.request("later", "echo", b"fresh") == b"fresh"
        last = [h for h in rec.handled if h[3] == b"fresh"]
        assert last and last[0][1] == created_again.actor.object_generation.value


async def test_a04_17_generation_seen_at_resolve_is_not_a_target_match(
    clock: object, store: CountingStore
) -> None:
    """A04-17: the ObjectGeneration seen at resolve is not a target-match condition: after
    the Actor is destroyed and re-created on the SAME owner, a caller still holding the
    route it resolved for the old incarnation sends without any Store read (the cached
    route is used), and the current Ready incarnation handles the payload, once."""
    rec = Recorder()
    tap = WireTap()
    apps = [client_app(), make_app(rec)]
    async with open_cluster(2, store=store, app=lambda i: apps[i], tap=tap) as cluster:
        await cluster.wait_all_admitted()
        caller, host = cluster.servers[0].actors, cluster.servers[1].actors
        first = await host.create("phoenix", "player")
        assert isinstance(first, Created)
        assert await caller.request("phoenix", "echo", b"old") == b"old"  # route cached
        assert await host.destroy(first.actor) is True
        second = await host.create("phoenix", "player")
        assert isinstance(second, Created)
        assert second.actor.node_rid == first.actor.node_rid
        assert second.actor.object_generation > first.actor.object_generation
        store.reset()
        tap.clear()
        me = cluster.servers[0].identity.node_rid
        assert await caller.request("phoenix", "echo", b"new") == b"new"
        await caller.send("phoenix", "note", b"newer")
        await rec.wait_handled(3)
        assert store.count("read") == 0  # resolved at the old generation, not re-read
        assert tap.count(node=me, command=Command.ACTOR_SEND) == 2  # no re-send
        assert [(h[1], h[3]) for h in rec.handled] == [
            (first.actor.object_generation.value, b"old"),
            (second.actor.object_generation.value, b"new"),
            (second.actor.object_generation.value, b"newer"),
        ]
