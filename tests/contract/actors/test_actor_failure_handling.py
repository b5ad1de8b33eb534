"""Failure handling of the Actor runtime (docs/decisions.md, "Actor runtime: failure
handling"): reservations never wedge an ActorId, destroys never stop half-way, a connection
reader never waits for one Actor, accepted sends never expire, every authority read
teaches the route cache, an expired node refuses new work at once, and a runtime task's
failure never takes the server down. Regression tests for a review of the Actor runtime."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from actor_kit import Recorder, Wrapped, blackout, client_app, make_app

from zlink_trio import (
    App,
    CapacityExceeded,
    Created,
    DeadlineExceeded,
    DisableRelocation,
    Existing,
    InvalidOperation,
    NotFound,
    ServerConfig,
    Unavailable,
    on_request,
)
from zlink_trio.actors.results import Rejected
from zlink_trio.ids import NodeGeneration, NodeRid, OperationId, StableType
from zlink_trio.mesh.reasons import CloseReason
from zlink_trio.spots.approval import ActorCreateEvent, Approve, CreateDecision, Reject
from zlink_trio.store.api import (
    Applied,
    LocationStore,
    ObjectKey,
    ObjectKind,
    OperationKey,
    Reservation,
)
from zlink_trio.testing import (
    CountingStore,
    FaultPlan,
    WireTap,
    advance_store_clock,
    node_of,
    open_cluster,
)
from zlink_trio.wire.commands import Command


async def _capacity(store: LocationStore) -> tuple[int, int]:
    nodes = await store.list_nodes()
    return sum(n.active for n in nodes), sum(n.pending for n in nodes)


# --- 1. reservations never wedge an ActorId -------------------------------------------------


async def test_cancelled_create_gives_its_reservation_back(
    clock: object, store: CountingStore
) -> None:
    """A create whose caller is cancelled while the command 110 is being driven gives its
    reservation back before the cancellation completes: no Creating row, no pending
    capacity, and the id can be created at once."""
    rec = Recorder()
    apps = [client_app(), make_app(rec)]
    plan = FaultPlan(seed=1)
    async with open_cluster(2, store=store, app=lambda i: apps[i], fault_plan=plan) as cluster:
        await cluster.wait_all_admitted()
        actors = cluster.servers[0].actors
        await blackout(cluster, plan, 0, 1)
        with trio.move_on_after(1) as scope:
            await actors.get_or_create("p", "player").timeout(30)
        assert scope.cancelled_caught
        assert await store.read(ObjectKey.actor("p")) is None
        assert await _capacity(store) == (0, 0)
        plan.clear()
        await cluster.wait_all_admitted()
        created = await actors.get_or_create("p", "player").timeout(10)
        assert isinstance(created, Created)
        assert rec.runs("p") == 1


async def test_reserve_cut_short_by_the_deadline_is_given_back(
    clock: object, store: CountingStore
) -> None:
    """A reserve that committed but whose answer came after the caller's deadline (the
    caller saw only the cancellation) is found and given back by the caller itself."""
    rec = Recorder()
    wrapped = Wrapped(store)
    slow = trio.Event()

    async def reserve(reservation: Reservation) -> Any:
        result = await store.reserve(reservation)
        await slow.wait()  # the answer never arrives in time
        return result

    async with open_cluster(1, store=wrapped, app=make_app(rec)) as cluster:
        await cluster.wait_all_admitted()
        actors = cluster.servers[0].actors
        wrapped.reserve = reserve  # type: ignore[attr-defined]
        with pytest.raises(DeadlineExceeded):
            await actors.get_or_create("p", "player").timeout(0.5)
        slow.set()
        del wrapped.reserve
        assert await store.read(ObjectKey.actor("p")) is None
        assert await _capacity(store) == (0, 0)
        assert isinstance(await actors.get_or_create("p", "player").timeout(10), Created)


async def test_orphaned_reservation_of_a_dead_source_is_aborted_by_a_waiter(
    clock: object, store: CountingStore
) -> None:
    """A Creating row whose source node lifecycle is gone (it died between reserve and
    the command 110) cannot block the id: a GetOrCreate waiting on it sees it unchanged,
    finds its source dead, aborts it by CAS and creates the Actor."""
    rec = Recorder()
    async with open_cluster(1, store=store, app=make_app(rec)) as cluster:
        await cluster.wait_all_admitted()
        server = cluster.servers[0]
        (mesh,) = node_of(server).meshes
        dead = OperationKey(NodeRid.new(), NodeGeneration.new(), OperationId.new())
        reserved = await store.reserve(
            Reservation(
                key=ObjectKey.actor("orphan"),
                kind=ObjectKind.ACTOR,
                stable_type=StableType.parse("player"),
                owner=node_of(server).owner_fence(mesh),
                membership=node_of(server).entry_spot_id(mesh),
                operation=dead,
            )
        )
        assert isinstance(reserved, Applied)
        assert await _capacity(store) == (0, 1)
        created = await server.actors.get_or_create("orphan", "player").timeout(30)
        assert isinstance(created, Created)
        assert created.actor.object_generation != reserved.row.object_generation
        assert rec.runs("orphan") == 1
        assert await _capacity(store) == (1, 0)


async def test_target_abort_the_store_refused_is_retried_in_the_background(
    clock: object, store: CountingStore
) -> None:
    """A rejected creation whose abort cannot reach the Store gets its terminal anyway;
    the reservation is given back in the background once the Store answers again."""
    rec = Recorder()
    wrapped = Wrapped(store)
    refusals = 3
    given_back = trio.Event()

    async def abort_creation(key: ObjectKey, version: int, **kwargs: Any) -> Any:
        nonlocal refusals
        if refusals > 0:
            refusals -= 1
            await trio.lowlevel.checkpoint()
            raise Unavailable("test: the Store is unreachable")
        result = await store.abort_creation(key, version, **kwargs)
        given_back.set()
        return result

    async def reject(event: ActorCreateEvent) -> CreateDecision:
        return Reject(reply=b"no")

    wrapped.abort_creation = abort_creation  # type: ignore[attr-defined]
    async with open_cluster(1, store=wrapped, app=make_app(rec, on_create=reject)) as cluster:
        await cluster.wait_all_admitted()
        result = await cluster.servers[0].actors.create("r", "player").timeout(10)
        assert result == Rejected(b"no")
        with trio.fail_after(30):
            await given_back.wait()
        assert refusals == 0
        assert await store.read(ObjectKey.actor("r")) is None
        assert await _capacity(store) == (0, 0)


# --- 2./3. destroy never stops half-way -------------------------------------------------------


async def test_destroy_finishes_when_its_caller_is_cancelled(
    clock: object, store: CountingStore
) -> None:
    """A local destroy whose caller is cancelled while it waits for the turn in progress
    still completes (it runs in the runtime's nursery): the Actor is gone, a second
    destroy returns False, and the id can be created again."""
    rec = Recorder()
    rec.gate = trio.Event()
    async with open_cluster(1, store=store, app=make_app(rec)) as cluster:
        await cluster.wait_all_admitted()
        actors = cluster.servers[0].actors
        created = await actors.create("p1", "player").timeout(10)
        assert isinstance(created, Created)
        replies: list[bytes | None] = []
        async with trio.open_nursery() as nursery:

            async def blocked() -> None:
                replies.append(await actors.request("p1", "block").timeout(60))

            nursery.start_soon(blocked)
            await rec.entered.wait()
            with trio.move_on_after(1) as scope:
                await actors.destroy(created.actor)
            assert scope.cancelled_caught
            rec.gate.set()
        assert replies == [b"unblocked"]
        assert await actors.destroy(created.actor) is False  # waits for the first one
        assert await actors.find("p1") is None
        with pytest.raises(NotFound):
            await actors.request("p1", "echo", b"x")
        assert await _capacity(store) == (0, 0)
        assert isinstance(await actors.create("p1", "player").timeout(10), Created)


@pytest.mark.parametrize("backend", ["memory"])
async def test_destroy_refused_by_the_store_reopens_the_actor(
    clock: object, store: CountingStore
) -> None:
    """A destroy whose Closing CAS cannot reach the Store ends Unavailable, never True;
    the row is still Ready, so admission re-opens: the payloads that were parked behind
    the destroy barrier (not run while the Store was asked) run, in order."""
    rec = Recorder()
    rec.gate = trio.Event()
    wrapped = Wrapped(store)
    asked = trio.Event()
    answer = trio.Event()

    async def begin_closing(key: ObjectKey, version: int) -> Any:
        asked.set()
        await answer.wait()
        raise Unavailable("test: the Store is unreachable")

    config = ServerConfig(drain_timeout=5.0)
    async with open_cluster(1, store=wrapped, app=make_app(rec), config=config) as cluster:
        await cluster.wait_all_admitted()
        actors = cluster.servers[0].actors
        created = await actors.create("p", "player").timeout(10)
        assert isinstance(created, Created)
        outcome: list[object] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: actors.request("p", "block").timeout(60).submit())
            await rec.entered.wait()
            for i in range(3):
                await actors.send("p", "note", b"%d" % i)
            wrapped.begin_closing = begin_closing  # type: ignore[attr-defined]

            async def destroy() -> None:
                try:
                    outcome.append(await actors.destroy(created.actor))
                except Unavailable as exc:
                    outcome.append(exc)

            nursery.start_soon(destroy)
            await trio.testing.wait_all_tasks_blocked()
            rec.gate.set()
            await asked.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert [h[2] for h in rec.handled] == ["block"]  # parked, not run
            answer.set()
        assert len(outcome) == 1 and isinstance(outcome[0], Unavailable)
        assert await actors.find("p") == created.actor
        await rec.wait_handled(4)
        assert [h[3] for h in rec.handled[1:]] == [b"0", b"1", b"2"]
        assert await actors.request("p", "echo", b"after") == b"after"
        del wrapped.begin_closing
        assert await actors.destroy(created.actor) is True
        assert await actors.find("p") is None


@pytest.mark.parametrize("backend", ["memory"])
async def test_unsettled_destroy_stays_closed_and_a_retry_finishes_it(
    clock: object, store: CountingStore
) -> None:
    """A destroy whose Store step does not settle within drain_timeout (a Closing CAS
    that never answers) ends Unavailable and leaves the Actor closed (nothing runs,
    queued payloads fail Unavailable); the next destroy finishes it."""
    rec = Recorder()
    wrapped = Wrapped(store)

    async def begin_closing(key: ObjectKey, version: int) -> Any:
        await trio.sleep_forever()

    config = ServerConfig(drain_timeout=2.0)
    async with open_cluster(1, store=wrapped, app=make_app(rec), config=config) as cluster:
        await cluster.wait_all_admitted()
        actors = cluster.servers[0].actors
        created = await actors.create("p", "player").timeout(10)
        assert isinstance(created, Created)
        wrapped.begin_closing = begin_closing  # type: ignore[attr-defined]
        started = trio.current_time()
        with pytest.raises(Unavailable):
            await actors.destroy(created.actor)
        assert trio.current_time() - started == pytest.approx(2.0)
        with pytest.raises(Unavailable):
            await actors.request("p", "echo", b"x")
        del wrapped.begin_closing
        assert await actors.destroy(created.actor) is True
        assert await store.read(ObjectKey.actor("p")) is None
        assert await _capacity(store) == (0, 0)
        assert isinstance(await actors.create("p", "player").timeout(10), Created)


# --- 4. a connection's reader never waits for one Actor ----------------------------------------


@pytest.mark.parametrize("backend", ["memory"])
async def test_full_actor_queue_refuses_without_stalling_the_connection(
    clock: object, store: CountingStore
) -> None:
    """Command 24 to an Actor whose queue is full is refused at once (a request gets
    CapacityExceeded, a send is counted as refused) instead of blocking the connection's
    reader: another Actor on the same connection answers at once, and the keepalive never
    closes the link."""
    rec = Recorder()
    rec.gate = trio.Event()
    apps = [client_app(), make_app(rec)]
    config = ServerConfig(lane_capacity=2)
    async with open_cluster(2, store=store, app=lambda i: apps[i], config=config) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0].actors
        host = cluster.servers[1]
        await host.actors.create("hot", "player").timeout(10)
        await host.actors.create("cold", "player").timeout(10)
        assert await caller.request("hot", "echo", b"") == b""  # routes cached
        assert await caller.request("cold", "echo", b"") == b""
        refused: list[BaseException] = []
        async with trio.open_nursery() as nursery:

            async def block() -> None:
                try:
                    await caller.request("hot", "block").timeout(60)
                except CapacityExceeded as exc:
                    refused.append(exc)

            for _ in range(4):  # one runs, two wait in the queue, one is refused
                nursery.start_soon(block)
                await trio.testing.wait_all_tasks_blocked()
            await caller.send("hot", "note", b"refused")
            started = trio.current_time()
            assert await caller.request("cold", "echo", b"c").timeout(5) == b"c"
            assert trio.current_time() == started  # not held behind "hot"
            assert len(refused) == 1
            # the refusal names the Actor and the bound, never the runtime's internals
            assert str(refused[0]) == "actor 'hot': its queue is full (2)", str(refused[0])
            await trio.sleep(2 * host.config.hello_timeout)  # past the keepalive timeout
            rec.gate.set()
        stats = host.statistics().actors
        assert stats is not None
        (player,) = stats.types
        assert player.dispatch_refused == 2  # the refused request and the refused send
        closes = node_of(host).statistics().connections_closed
        assert closes.get(CloseReason.KEEPALIVE_TIMEOUT, 0) == 0


@pytest.mark.parametrize("backend", ["memory"])
async def test_frames_for_a_staging_actor_keep_their_order(
    clock: object, store: CountingStore
) -> None:
    """A04-09: frames that reach an Actor still being committed on its owner are parked
    (the reader goes on) and enter its queue first, in arrival order, once it is Ready."""
    rec = Recorder()
    approve = trio.Event()
    staging = trio.Event()

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        if rec.runs("x") == 2:
            staging.set()
            await approve.wait()
        return Approve()

    apps = [client_app(), make_app(rec, on_create=on_create)]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0].actors
        host = cluster.servers[1].actors
        first = await host.create("x", "player").timeout(10)
        await host.create("other", "player").timeout(10)
        assert isinstance(first, Created)
        assert await caller.request("x", "echo", b"warm") == b"warm"  # caller caches x
        assert await host.destroy(first.actor) is True  # the caller's route stays
        replies: list[bytes | None] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: host.create("x", "player").timeout(30).submit())
            await staging.wait()
            for i in range(3):
                await caller.send("x", "note", b"%d" % i)

            async def ask() -> None:
                replies.append(await caller.request("x", "echo", b"3").timeout(30))

            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            # the reader was not held: another Actor on that connection answers now
            assert await caller.request("other", "echo", b"o") == b"o"
            approve.set()
        assert replies == [b"3"]
        second = [
            h for h in rec.handled if h[0] == "x" and h[1] != first.actor.object_generation.value
        ]
        assert [h[3] for h in second] == [b"0", b"1", b"2", b"3"]


# --- 5. accepted sends never expire --------------------------------------------------------------


@pytest.mark.parametrize("backend", ["memory"])
async def test_accepted_sends_run_however_long_the_actor_is_busy(
    clock: object, store: CountingStore
) -> None:
    """A one-way send, once accepted, runs even if the Actor was busy far past the
    sender's timeout (no accepted message is lost); local and remote alike."""
    rec = Recorder()
    rec.gate = trio.Event()
    apps = [client_app(), make_app(rec)]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        host = cluster.servers[1].actors
        remote = cluster.servers[0].actors
        await host.create("p", "player").timeout(10)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: host.request("p", "block").timeout(120).submit())
            await rec.entered.wait()
            await host.send("p", "note", b"local").timeout(1)
            await remote.send("p", "note", b"remote").timeout(1)
            await trio.sleep(40)  # far past both senders' timeouts
            rec.gate.set()
        await rec.wait_handled(3)
        assert sorted(h[3] for h in rec.handled if h[2] == "note") == [b"local", b"remote"]
        stats = cluster.servers[1].statistics().actors
        assert stats is not None and stats.types[0].dispatch_expired == 0


# --- 6. every authority read teaches the route cache ---------------------------------------------


async def test_reads_showing_a_newer_version_invalidate_the_cached_route(
    clock: object, store: CountingStore
) -> None:
    """Spec 04 §5.1: a Find or GetOrCreate that reads a larger StoreVersion than the
    cached route's drops it (the next call reaches the new incarnation, no stale error),
    and a successful destroy drops the entry."""
    rec = Recorder()
    apps = [client_app(), make_app(rec)]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0].actors
        host = cluster.servers[1].actors
        first = await host.create("x", "player").timeout(10)
        assert isinstance(first, Created)
        assert await caller.request("x", "echo", b"1") == b"1"  # cached
        assert await host.destroy(first.actor) is True
        second = await host.create("x", "player").timeout(10)
        assert isinstance(second, Created)
        # A Find shows the newer StoreVersion: the stale route goes.
        assert await caller.find("x") == second.actor
        assert await caller.request("x", "echo", b"2") == b"2"
        assert await host.destroy(second.actor) is True
        third = await host.create("x", "player").timeout(10)
        assert isinstance(third, Created)
        # So does a GetOrCreate that finds it Existing.
        assert await caller.get_or_create("x", "player") == Existing(third.actor)
        assert await caller.request("x", "echo", b"3") == b"3"
        stats = cluster.servers[0].statistics().actors
        assert stats is not None and stats.stale_route_results == 0
        # A successful destroy drops the entry: the next call reads the Store afresh.
        entries = stats.route_cache_entries
        assert await caller.destroy(third.actor) is True
        stats = cluster.servers[0].statistics().actors
        assert stats is not None and stats.route_cache_entries == entries - 1
        store.reset()
        with pytest.raises(NotFound):
            await caller.request("x", "echo", b"4")
        assert store.count("read") == 1
        generations = [h[1] for h in rec.handled]
        assert generations == [
            first.actor.object_generation.value,
            second.actor.object_generation.value,
            third.actor.object_generation.value,
        ]


# --- 7. an expired node refuses new work at once -------------------------------------------------


@pytest.mark.parametrize("backend", ["memory"])
async def test_an_expired_node_refuses_new_operations_at_once(
    clock: object, store: CountingStore
) -> None:
    """After this node's lease is lost (fail-stop) every new Actor operation ends
    Unavailable at once, without a Store call, and refresh_peers() does not wait for the
    cancelled descriptor watcher."""
    rec = Recorder()
    async with open_cluster(2, store=store, app=make_app(rec)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        created = await b.actors.create("x", "player").timeout(10)
        assert isinstance(created, Created)
        ref = created.actor
        await advance_store_clock(store, cluster.configs[0].owner_lease_ttl + 1)
        await a.wait_lease_lost()
        store.reset()
        started = trio.current_time()
        await node_of(a).refresh_peers()
        calls: list[Any] = [
            lambda: a.actors.request("x", "echo", b"1").timeout(20).submit(),
            lambda: a.actors.send("x", "note", b"1").timeout(20).submit(),
            lambda: a.actors.create("new", "player").timeout(20).submit(),
            lambda: a.actors.get_or_create("x", "player").timeout(20).submit(),
            lambda: a.actors.find("x"),
            lambda: a.actors.destroy(ref),
        ]
        for call in calls:
            with pytest.raises(Unavailable):
                await call()
        assert trio.current_time() == started
        for method in ("read", "list_nodes", "reserve", "read_terminal", "begin_closing"):
            assert store.count(method) == 0


# --- 8. a runtime task's failure never takes the server down --------------------------------------


async def test_unexpected_failure_of_a_remote_destroy_is_a_terminal(
    clock: object, store: CountingStore
) -> None:
    """A destroy handled for a peer that fails with a non-ZLinkError ends as an
    Unavailable terminal; the owner's runtime (and server) keeps serving, and a retried
    destroy finishes."""
    rec = Recorder()
    wrapped = Wrapped(store)
    apps = [client_app(), make_app(rec)]
    async with open_cluster(2, store=wrapped, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0].actors
        host = cluster.servers[1].actors
        doomed = await host.create("x", "player").timeout(10)
        assert isinstance(await host.create("y", "player").timeout(10), Created)
        assert isinstance(doomed, Created)
        reads = 0

        async def read(key: ObjectKey) -> Any:
            nonlocal reads
            reads += 1
            if reads == 2:  # the owner's read (the caller's own read comes first)
                raise RuntimeError("test: unexpected failure")
            return await store.read(key)

        wrapped.read = read  # type: ignore[attr-defined]
        with pytest.raises(Unavailable):
            await caller.destroy(doomed.actor)
        del wrapped.read
        assert reads == 2
        assert await caller.request("y", "echo", b"alive") == b"alive"
        assert await caller.destroy(doomed.actor) is True
        assert await caller.find("x") is None


# --- an Actor's own turn ----------------------------------------------------------------------


async def test_destroy_awaited_inside_the_actors_own_turn_is_refused(
    clock: object, store: CountingStore
) -> None:
    """A handler that awaits the destroy of its own Actor (a closure over the server's
    ActorManager) gets InvalidOperation at once instead of waiting for ever: the destroy
    waits for the turn in progress, i.e. for the very handler awaiting it. The Actor stays
    usable and a destroy from outside the turn then succeeds."""
    servers: list[Any] = []
    outcomes: list[str] = []
    app = App()
    app.enable_actor_dispatch()

    class Mortal:
        def __init__(self, context: Any) -> None:
            self.context = context

        @on_request("die")
        async def die(self, payload: bytes) -> bytes:
            actors = servers[0].actors
            me = await actors.find(self.context.actor_id.value)
            try:
                await actors.destroy(me)
            except InvalidOperation as exc:
                outcomes.append(type(exc).__name__)
                return b"refused"
            outcomes.append("destroyed")
            return b"destroyed"

        @on_request("echo")
        async def echo(self, payload: bytes) -> bytes:
            return payload

    app.register_actor("mortal", Mortal, relocation=DisableRelocation())
    client = client_app()
    async with open_cluster(2, store=store, app=lambda i: (app, client)[i]) as cluster:
        await cluster.wait_all_admitted()
        servers.append(cluster.servers[0])
        owner = cluster.servers[0].actors
        created = await owner.create("m", "mortal").timeout(10)
        assert isinstance(created, Created)
        caller = cluster.servers[1].actors
        with trio.fail_after(30):
            assert await caller.request("m", "die").timeout(10) == b"refused"
        assert outcomes == ["InvalidOperation"]
        assert await caller.request("m", "echo", b"still here").timeout(10) == b"still here"
        assert await caller.destroy(created.actor) is True
        assert await owner.find("m") is None


async def test_remote_destroy_cut_by_a_broken_link_forgets_its_request(
    clock: object, store: CountingStore
) -> None:
    """A remote destroy whose connection breaks after the command went out ends
    Unavailable (outcome unknown, never re-sent: one command on the wire) and leaves no
    request registered on the caller's node."""
    rec = Recorder()
    plan = FaultPlan(seed=71)
    tap = WireTap()
    apps = [client_app(), make_app(rec)]
    async with open_cluster(
        2, store=store, app=lambda i: apps[i], fault_plan=plan, tap=tap
    ) as cluster:
        await cluster.wait_all_admitted()
        created = await cluster.servers[1].actors.create("d", "player").timeout(30)
        assert isinstance(created, Created)
        host = cluster.servers[1].identity.node_rid
        me = cluster.servers[0].identity.node_rid
        cut = plan.cut(command=Command.ACTOR_DESTROY, to=host, deliver=True, count=1)
        with pytest.raises(Unavailable):
            await cluster.servers[0].actors.destroy(created.actor)
        assert cut.fired == 1
        assert tap.count(node=me, command=Command.ACTOR_DESTROY) == 1
        assert node_of(cluster.servers[0]).statistics().requests_pending == 0
