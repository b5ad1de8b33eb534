"""Actor lifecycle contracts: identity across meshes, convergent creation, replays of a
create operation, rejection, destroy (spec 04 §2, §6; checklist A04-16, A04-18 … A04-21,
A04-26)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing
from actor_kit import Recorder, client_app, make_app

from zlink_trio import (
    ActorRef,
    AlreadyExists,
    ApplicationError,
    InvalidId,
    InvalidOperation,
    MeshConfig,
    OperationId,
    ServerConfig,
    TypeMismatch,
    Unavailable,
    ZLinkError,
)
from zlink_trio.actors.results import Created, Existing, Rejected
from zlink_trio.ids import ObjectGeneration
from zlink_trio.spots.approval import ActorCreateEvent, Approve, CreateDecision, Reject
from zlink_trio.store.api import Applied, ObjectKey, OperationKey, RelocationMark
from zlink_trio.testing import (
    CountingStore,
    advance_store_clock,
    entry_spot_statistics,
    open_cluster,
)


async def _capacity(store: CountingStore) -> list[tuple[int, int]]:
    return [(n.active, n.pending) for n in await store.list_nodes()]


async def test_a04_16_one_actor_id_across_meshes(clock: object, store: CountingStore) -> None:
    """A04-16: the same ActorId is never created twice under different MeshNames; case
    matters; GetOrCreate in another mesh returns the first mesh's incarnation."""
    rec = Recorder()
    two_meshes = ServerConfig(
        meshes=[MeshConfig(name="a"), MeshConfig(name="b")], cluster_secret=b"k" * 32
    )
    async with open_cluster(
        2, store=store, app=make_app(rec, types=("player", "npc")), config=two_meshes
    ) as cluster:
        await cluster.wait_all_admitted()
        actors = cluster.servers[0].actors
        first = await actors.create("hero", "player").in_mesh("a").timeout(10)
        assert isinstance(first, Created)
        assert first.actor.mesh_name.value == "a"
        try:
            await actors.create("hero", "player").in_mesh("b").timeout(10)
            raise AssertionError("a second create in another mesh must fail")
        except AlreadyExists:
            pass
        try:
            await cluster.servers[1].actors.create("hero", "npc").in_mesh("b").timeout(10)
            raise AssertionError("another type under the same id must fail")
        except TypeMismatch:
            pass
        again = await cluster.servers[1].actors.get_or_create("hero", "player").in_mesh("b")
        assert again == Existing(first.actor)
        other_case = await actors.create("Hero", "player").in_mesh("b").timeout(10)
        assert isinstance(other_case, Created) and other_case.actor.mesh_name.value == "b"
        assert rec.runs("hero") == 1 and rec.runs("Hero") == 1
        assert await actors.request("hero", "echo", b"1") == b"1"
        assert await actors.request("Hero", "echo", b"2") == b"2"


async def test_a04_16_actor_id_is_utf8_bytes_compared_as_is(
    clock: object, store: CountingStore
) -> None:
    """A04-16 (spec detail §2.1): an ActorId is 1..255 UTF-8 bytes (a 255-byte id of
    multi-byte characters is fine, 256 bytes or an empty id is refused with InvalidId
    before any Store access) and is compared as-is: NFC and NFD spellings of one word are
    two different Actors, each with its own factory run, reachable from another node."""
    rec = Recorder()
    apps = [client_app(), make_app(rec)]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0].actors
        longest = "\u00e9" * 127 + "a"  # 2 * 127 + 1 = 255 UTF-8 bytes
        assert len(longest.encode()) == 255
        assert isinstance(await caller.create(longest, "player").timeout(10), Created)
        assert await caller.request(longest, "echo", b"ok") == b"ok"
        store.reset()
        for bad in ("\u00e9" * 128, "", "a" * 256):
            try:
                await caller.create(bad, "player").timeout(10)
                raise AssertionError(f"ActorId of {len(bad.encode())} bytes must be refused")
            except InvalidId:
                pass
        assert store.calls == {}
        nfc, nfd = "caf\u00e9", "cafe\u0301"
        for actor_id in (nfc, nfd):
            assert isinstance(await caller.create(actor_id, "player").timeout(10), Created)
        assert rec.runs(nfc) == 1 and rec.runs(nfd) == 1
        assert await caller.request(nfc, "echo", b"c") == b"c"
        assert await caller.request(nfd, "echo", b"d") == b"d"
        assert [h[0] for h in rec.handled[-2:]] == [nfc, nfd]
        assert (await caller.find(nfc)) != (await caller.find(nfd))


async def test_a04_18_concurrent_creates_run_one_factory(
    clock: object, store: CountingStore
) -> None:
    """A04-18: concurrent Create/GetOrCreate of one Actor from several nodes: one factory
    run, one OnCreateActor call, every call completes with that attempt's incarnation."""
    rec = Recorder()
    async with open_cluster(3, store=store, app=make_app(rec)) as cluster:
        await cluster.wait_all_admitted()
        results: list[object] = []

        async def one(server_index: int, exclusive: bool) -> None:
            manager = cluster.servers[server_index].actors
            call = manager.create if exclusive else manager.get_or_create
            try:
                results.append(await call("shared", "player").timeout(20))
            except AlreadyExists as exc:
                results.append(exc)

        async with trio.open_nursery() as nursery:
            for i in range(12):
                nursery.start_soon(one, i % 3, i % 4 == 0)
        assert rec.runs("shared") == 1
        assert rec.on_create_calls == 1
        created = [r for r in results if isinstance(r, Created)]
        assert len(created) == 1
        ref = created[0].actor
        for r in results:
            assert isinstance(r, Created | Existing | AlreadyExists)
            if isinstance(r, Existing):
                assert r.actor == ref
        assert await cluster.servers[2].actors.find("shared") == ref


async def test_a04_19_creating_observers_get_existing_or_compete(
    clock: object, store: CountingStore
) -> None:
    """A04-19: an operation that saw Creating gets Existing once Ready; after a rejection
    it competes for a new reservation, runs its own callback, never shares A's reply."""
    rec = Recorder()
    release = trio.Event()
    entered = trio.Event()
    decisions: list[CreateDecision] = [Reject(b"A-no"), Approve(b"B-yes")]

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        if event.request == b"A":
            entered.set()
            await release.wait()
        return decisions.pop(0)

    async with open_cluster(2, store=store, app=make_app(rec, on_create=on_create)) as cluster:
        await cluster.wait_all_admitted()
        a_result: list[object] = []

        async def op_a() -> None:
            a_result.append(
                await cluster.servers[0]
                .actors.create("contested", "player")
                .request(b"A")
                .timeout(30)
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(op_a)
            await entered.wait()
            b_call = cluster.servers[1].actors.get_or_create("contested", "player").request(b"B")
            b_result: list[object] = []

            async def op_b() -> None:
                b_result.append(await b_call.timeout(30))

            nursery.start_soon(op_b)
            await trio.testing.wait_all_tasks_blocked()
            assert b_result == []  # B saw Creating: it waits for A's attempt to end
            assert rec.on_create_calls == 1
            release.set()
        assert a_result == [Rejected(b"A-no")]
        (b,) = b_result
        assert isinstance(b, Created) and b.reply == b"B-yes"
        assert rec.on_create_calls == 2 and rec.runs("contested") == 2

    # and the Ready case: B observes Creating, then gets Existing with A's ref
    rec2 = Recorder()
    release2 = trio.Event()
    entered2 = trio.Event()

    async def slow_approve(event: ActorCreateEvent) -> CreateDecision:
        entered2.set()
        await release2.wait()
        return Approve(b"A-ok")

    async with open_cluster(2, store=store, app=make_app(rec2, on_create=slow_approve)) as cluster:
        await cluster.wait_all_admitted()
        got: dict[str, object] = {}

        async def a() -> None:
            got["a"] = await cluster.servers[0].actors.create("ready-case", "player").timeout(30)

        async def b() -> None:
            got["b"] = (
                await cluster.servers[1].actors.get_or_create("ready-case", "player").timeout(30)
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(a)
            await entered2.wait()
            nursery.start_soon(b)
            await trio.testing.wait_all_tasks_blocked()
            assert "b" not in got
            release2.set()
        assert isinstance(got["a"], Created)
        assert got["b"] == Existing(got["a"].actor)
        assert rec2.on_create_calls == 1


async def test_a04_20_replayed_create_gets_the_retained_terminal(
    clock: object, store: CountingStore
) -> None:
    """A04-20: a create re-sent with the same source RID, lifecycle generation and
    OperationId gets the identical terminal until original deadline + 5 min; after that,
    with no Ready authority, it is a new reservation and a new incarnation."""
    rec = Recorder()
    verdicts: list[CreateDecision] = [Reject(b"not yet"), Approve(b"welcome")]

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        if event.actor_id.value != "replayed":
            return Approve()
        return verdicts.pop(0)

    # Store time jumps by minutes below: leases long enough not to expire meanwhile.
    long_lease = ServerConfig(owner_lease_ttl=3600.0, owner_lease_renew_interval=60.0)
    async with open_cluster(
        1, store=store, app=make_app(rec, on_create=on_create), config=long_lease
    ) as cluster:
        actors = cluster.servers[0].actors
        op = OperationId.new()
        first = await actors.create("replayed", "player").operation_id(op).timeout(10)
        assert first == Rejected(b"not yet")
        assert rec.runs("replayed") == 1
        # 10 s deadline: the terminal lives until ~deadline + 300 s of store time.
        await advance_store_clock(store, 10 + 299)
        again = await actors.create("replayed", "player").operation_id(op).timeout(10)
        assert again == Rejected(b"not yet")  # identical state and reply bytes
        assert rec.runs("replayed") == 1 and rec.on_create_calls == 1
        other = await actors.get_or_create("other-op", "player").timeout(10)  # unrelated op
        assert isinstance(other, Created)
        await advance_store_clock(store, 2 + 10)
        late = await actors.create("replayed", "player").operation_id(op).timeout(10)
        assert isinstance(late, Created) and late.reply == b"welcome"
        assert rec.runs("replayed") == 2
        assert await actors.find("replayed") == late.actor


async def test_a04_20_replay_key_is_source_node_lifecycle_and_operation(
    clock: object, store: CountingStore
) -> None:
    """A04-20: across nodes (the callers are not the host): a create re-sent by the same
    source node with the same OperationId gets the identical terminal (state and reply
    bytes) at original deadline + 4 min 59 s with no factory run; the same OperationId
    from ANOTHER node, or a new OperationId from the same node, is not a replay (a new
    reservation: the factory and OnCreateActor run again) and does not overwrite the
    retained terminal; after deadline + 5 min the replay is a new reservation that
    creates a new incarnation."""
    rec = Recorder()
    verdicts: list[CreateDecision] = [
        Reject(b"first"),
        Reject(b"other node"),
        Reject(b"new operation"),
        Approve(b"welcome"),
    ]

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        return verdicts.pop(0)

    long_lease = ServerConfig(owner_lease_ttl=3600.0, owner_lease_renew_interval=60.0)
    apps = [client_app(), client_app(), make_app(rec, on_create=on_create)]
    async with open_cluster(3, store=store, app=lambda i: apps[i], config=long_lease) as cluster:
        await cluster.wait_all_admitted()
        source, other = cluster.servers[0].actors, cluster.servers[1].actors
        op = OperationId.new()
        first = await source.create("replayed", "player").operation_id(op).timeout(10)
        assert first == Rejected(b"first")
        assert rec.runs("replayed") == 1 and rec.on_create_calls == 1
        await advance_store_clock(store, 10 + 299)  # original deadline + 4 min 59 s
        assert await source.create("replayed", "player").operation_id(op).timeout(10) == first
        assert rec.runs("replayed") == 1 and rec.on_create_calls == 1
        # another source node, same OperationId: not a replay
        by_other = await other.create("replayed", "player").operation_id(op).timeout(10)
        assert by_other == Rejected(b"other node")
        assert rec.runs("replayed") == 2 and rec.on_create_calls == 2
        # the same source node, another OperationId: not a replay
        fresh = await source.create("replayed", "player").operation_id(OperationId.new())
        assert fresh == Rejected(b"new operation")
        assert rec.runs("replayed") == 3 and rec.on_create_calls == 3
        # the original terminal is still the one the original key gets
        assert await source.create("replayed", "player").operation_id(op).timeout(10) == first
        assert rec.runs("replayed") == 3 and rec.on_create_calls == 3
        await advance_store_clock(store, 2)  # original deadline + 5 min 1 s
        late = await source.create("replayed", "player").operation_id(op).timeout(10)
        assert isinstance(late, Created) and late.reply == b"welcome"
        assert rec.runs("replayed") == 4 and rec.on_create_calls == 4
        assert late.actor.node_rid == cluster.servers[2].identity.node_rid
        assert await other.find("replayed") == late.actor
        assert await other.request("replayed", "echo", b"hi") == b"hi"


async def _outcome(call: Any) -> object:
    """The result of a create call, or the typed error it raised."""
    try:
        return await call
    except ZLinkError as exc:
        return exc


def _same_terminal(a: object, b: object) -> bool:
    """The same semantic result: equal results (state, ref and reply bytes), or errors
    of the same public class with the same message."""
    if isinstance(a, ZLinkError) or isinstance(b, ZLinkError):
        return type(a) is type(b) and str(a) == str(b)
    return a == b


@pytest.mark.parametrize("locality", ["local", "remote"])
@pytest.mark.parametrize("terminal", ["created", "rejected", "failed"])
async def test_a04_20_every_terminal_kind_is_retained_until_deadline_plus_five_minutes(
    clock: object, store: CountingStore, terminal: str, locality: str
) -> None:
    """A04-20 for every terminal kind: a create re-sent under the same (NodeRid, lifecycle
    generation, OperationId) gets the identical terminal — Created with its reply (even
    once that incarnation was destroyed), Rejected with its reply, Failed with its error
    kind and message — at the original deadline + 4 min 59 s, with no factory or
    OnCreateActor run; at the original deadline + 5 min, with no Ready authority, it is a
    fresh attempt: a new reservation, the factory runs again, a new incarnation."""
    rec = Recorder()
    deadlines: list[float] = []

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        if rec.on_create_calls > 1:
            return Approve(b"fresh")
        row = await store.read(ObjectKey.actor("kept"))
        assert row is not None and row.attempt_expires_at is not None
        deadlines.append(row.attempt_expires_at)  # the original deadline (store time)
        if terminal == "created":
            return Approve(b"welcome")
        if terminal == "rejected":
            return Reject(b"not now")
        raise RuntimeError("the first approval failed")

    apps = [make_app(rec, on_create=on_create)]
    if locality == "remote":
        apps = [client_app(), *apps]
    long_lease = ServerConfig(owner_lease_ttl=3600.0, owner_lease_renew_interval=60.0)
    async with open_cluster(
        len(apps), store=store, app=lambda i: apps[i], config=long_lease
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0].actors
        op = OperationId.new()

        def resend() -> Any:
            return caller.create("kept", "player").operation_id(op).request(b"r").timeout(10)

        first = await _outcome(resend())
        expected: dict[str, Callable[[object], bool]] = {
            "created": lambda r: isinstance(r, Created) and r.reply == b"welcome",
            "rejected": lambda r: r == Rejected(b"not now"),
            "failed": lambda r: isinstance(r, ApplicationError) and "failed" in str(r),
        }
        assert expected[terminal](first), first
        (deadline,) = deadlines

        async def at(offset: float) -> None:
            await advance_store_clock(store, deadline + offset - await store.now())

        await at(4 * 60 + 59)
        again = await _outcome(resend())
        assert _same_terminal(again, first), (again, first)
        assert rec.runs("kept") == 1 and rec.on_create_calls == 1
        if isinstance(first, Created):
            # No Ready authority may be left for the fresh attempt below; the retained
            # terminal is the operation's, not the row's: it still answers.
            assert await caller.destroy(first.actor) is True
            assert _same_terminal(await _outcome(resend()), first)
            assert rec.runs("kept") == 1
        await at(5 * 60)
        fresh = await _outcome(resend())
        assert isinstance(fresh, Created) and fresh.reply == b"fresh", fresh
        assert rec.runs("kept") == 2 and rec.on_create_calls == 2
        if isinstance(first, Created):
            assert fresh.actor.object_generation > first.actor.object_generation
        assert await caller.find("kept") == fresh.actor
        assert [n.pending for n in await store.list_nodes()] == [0] * len(apps)


async def test_a04_20_a_new_source_lifecycle_is_another_operation(
    clock: object, store: CountingStore
) -> None:
    """A04-20 (implied), at server level: the operation key includes the source node's
    lifecycle. After the caller node restarts (a new lifecycle: here a new NodeRid and a
    new NodeGeneration), a create under the SAME OperationId well within the old
    terminal's retention is not a replay: a fresh attempt runs (factory and OnCreateActor
    again) and gets its own result; the old lifecycle's terminal is left alone."""
    rec = Recorder()
    verdicts: list[CreateDecision] = [Reject(b"old lifecycle"), Approve(b"new lifecycle")]

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        return verdicts.pop(0)

    apps = [client_app(), make_app(rec, on_create=on_create)]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        op = OperationId.new()
        old = cluster.servers[0].identity
        first = await cluster.servers[0].actors.create("lc", "player").operation_id(op)
        assert first == Rejected(b"old lifecycle")
        retained = OperationKey(old.node_rid, old.node_generation, op)
        assert await store.read_terminal(retained) is not None
        restarted = await cluster.restart(0)
        await cluster.wait_all_admitted()
        assert restarted.identity.node_generation != old.node_generation
        second = await restarted.actors.create("lc", "player").operation_id(op).timeout(10)
        assert isinstance(second, Created) and second.reply == b"new lifecycle"
        assert rec.runs("lc") == 2 and rec.on_create_calls == 2
        assert await store.read_terminal(retained) is not None  # untouched


async def test_a04_21_rejected_or_failed_leaves_nothing(
    clock: object, store: CountingStore
) -> None:
    """A04-21: after Rejected or Failed, Find sees nothing, capacity is back to where it
    was, and a concurrent Find never sees a transient Ready."""
    rec = Recorder()
    gates: dict[bytes, trio.Event] = {b"reject": trio.Event(), b"boom": trio.Event()}
    entered: dict[bytes, trio.Event] = {b"reject": trio.Event(), b"boom": trio.Event()}

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        assert event.request is not None
        entered[event.request].set()
        await gates[event.request].wait()
        if event.request == b"boom":
            raise RuntimeError("OnCreateActor failed")
        return Reject(b"no")

    async with open_cluster(2, store=store, app=make_app(rec, on_create=on_create)) as cluster:
        await cluster.wait_all_admitted()
        before = await _capacity(store)
        seen: list[ActorRef | None] = []
        results: list[object] = []

        async def create(request: bytes, done: trio.Event) -> None:
            try:
                results.append(
                    await cluster.servers[0]
                    .actors.create("ghost", "player")
                    .request(request)
                    .timeout(20)
                )
            except Exception as exc:
                results.append(exc)
            done.set()

        async def watch(done: trio.Event) -> None:
            while not done.is_set():
                seen.append(await cluster.servers[1].actors.find("ghost"))

        for request in (b"reject", b"boom"):
            done = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(create, request, done)
                await entered[request].wait()
                # while Creating the unit is reserved (pending): the counter is live
                during = await _capacity(store)
                assert sum(p for _, p in during) == sum(p for _, p in before) + 1
                assert sum(a for a, _ in during) == sum(a for a, _ in before)
                nursery.start_soon(watch, done)
                gates[request].set()
        assert results[0] == Rejected(b"no")
        assert type(results[1]).__name__ == "ApplicationError"
        assert seen and all(s is None for s in seen)
        assert await cluster.servers[0].actors.find("ghost") is None
        assert await _capacity(store) == before


async def test_a04_26_destroy_names_one_incarnation(clock: object, store: CountingStore) -> None:
    """A04-26: destroy accepts only the same generation: twice → False, an old ref after a
    recreate → InvalidOperation with the new incarnation untouched; sealed → Unavailable;
    no Entry Spot callback runs for a destroy. Node 0 cannot host the Actor, so its
    destroys take the remote path every run; node 1 (the host) destroys locally."""
    rec = Recorder()
    apps = [client_app(), make_app(rec)]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        actors = cluster.servers[0].actors
        first = await actors.create("mortal", "player").timeout(10)
        assert isinstance(first, Created)
        old = first.actor
        assert old.node_rid == cluster.servers[1].identity.node_rid  # remote from node 0
        calls_before = rec.on_create_calls
        turns_before = [
            (s.lifecycle_turns, s.application_turns)
            for srv in cluster.servers
            for s in entry_spot_statistics(srv)
        ]
        assert await actors.destroy(old) is True
        assert await actors.destroy(old) is False
        assert await cluster.servers[1].actors.destroy(old) is False
        assert await actors.find("mortal") is None
        assert rec.on_create_calls == calls_before  # no lifecycle callback for destroy
        # ... and no Spot turn at all (no OnLeaveActor-like callback on success)
        assert [
            (s.lifecycle_turns, s.application_turns)
            for srv in cluster.servers
            for s in entry_spot_statistics(srv)
        ] == turns_before
        second = await cluster.servers[1].actors.create("mortal", "player").timeout(10)
        assert isinstance(second, Created)
        assert second.actor.object_generation > old.object_generation
        try:
            await actors.destroy(old)
            raise AssertionError("destroying an old incarnation must fail")
        except InvalidOperation:
            pass
        assert await actors.find("mortal") == second.actor
        assert await actors.request("mortal", "echo", b"still") == b"still"
        # sealed for a move (the relocation mark in the Store) -> Unavailable
        key = ObjectKey.actor("mortal")
        row = await store.read(key)
        assert row is not None
        mark = RelocationMark(OperationId.new(), row.owner, sealed=True)
        assert isinstance(await store.set_relocation(key, row.store_version, mark), Applied)
        try:
            await actors.destroy(second.actor)
            raise AssertionError("destroying a sealed Actor must fail")
        except Unavailable:
            pass
        row = await store.read(key)
        assert row is not None
        await store.set_relocation(key, row.store_version, None)
        assert await cluster.servers[1].actors.destroy(second.actor) is True
        # a made-up generation of a missing id is simply gone
        ghost = ActorRef(
            old.actor_id,
            ObjectGeneration(old.object_generation.value + 1000),
            old.mesh_name,
            old.node_rid,
        )
        assert await actors.destroy(ghost) is False


async def test_caller_only_node_creates_and_calls(clock: object, store: CountingStore) -> None:
    """A node that hosts no Actor type still creates, finds and calls Actors elsewhere."""
    rec = Recorder()
    apps = [client_app(), make_app(rec)]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        created = await cluster.servers[0].actors.create("remote-one", "player").timeout(10)
        assert isinstance(created, Created)
        assert created.actor.node_rid == cluster.servers[1].identity.node_rid
        assert await cluster.servers[0].actors.request("remote-one", "echo", b"x") == b"x"
