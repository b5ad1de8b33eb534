"""Every Creating reservation has a bounded life (issue 10): the three live-node paths
of the durable create's bookkeeping where failures or retries overlap, each on both
stores with a local target (the caller hosts the type) and a remote one (the caller's
node cannot host it).

a) one transient Store failure at the start of the target's attempt;
b) overlapping re-submissions of one explicit OperationId;
c) terminal retention stretched by the approval time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing
from actor_kit import Recorder, StoreFaults, Wrapped, client_app, make_app

from zlink_trio import (
    AlreadyExists,
    App,
    Created,
    Existing,
    OperationId,
    ServerConfig,
    Unavailable,
)
from zlink_trio.actors.results import Rejected
from zlink_trio.ids import StableType
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
    FlowEvent,
    advance_store_clock,
    flow_count,
    node_of,
    open_cluster,
)

LOCALITIES = ("local", "remote")

LONG_LEASE = ServerConfig(owner_lease_ttl=3600.0, owner_lease_renew_interval=60.0)
"""Store time jumps by minutes in some tests: leases that do not expire meanwhile."""


def _apps(locality: str, rec: Recorder, **kwargs: Any) -> tuple[int, Callable[[int], App]]:
    """(node count, app per index): node 0 is always the caller; with a remote target it
    hosts no Actor type, so the create goes to node 1."""
    if locality == "local":
        app = make_app(rec, **kwargs)
        return 1, lambda i: app
    apps = [client_app(), make_app(rec, **kwargs)]
    return 2, lambda i: apps[i]


async def _pending(store: LocationStore) -> int:
    return sum(n.pending for n in await store.list_nodes())


async def _nothing_left(store: LocationStore, actor_id: str) -> None:
    assert await store.read(ObjectKey.actor(actor_id)) is None
    assert await _pending(store) == 0


# --- a) one transient Store failure at the start of the target's attempt ---------------------


def _target_call(method: str) -> tuple[Callable[[str, tuple[Any, ...], dict[str, Any]], bool], int]:
    """A matcher for ``method`` on the create of "a" and which of its calls is the
    target's first: the source reads the authority row once before the target does; the
    terminal record and the request root are read by the target only (no explicit
    OperationId)."""

    def matches(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        if name == "abort_creation":
            return True  # watched (not failed): who gave the reservation back
        if name != method:
            return False
        return name != "read" or args[0] == ObjectKey.actor("a")

    return matches, 1 if method == "read" else 0


@pytest.mark.parametrize("locality", LOCALITIES)
@pytest.mark.parametrize("method", ["read_terminal", "read", "read_root"])
async def test_a_transient_store_failure_at_the_targets_start_leaves_no_reservation(
    clock: object, store: CountingStore, locality: str, method: str
) -> None:
    """Path a): the target's first read of the terminal record, of the reservation (the
    fence check) or of the creation request fails once (Unavailable). The create ends
    Unavailable, the TARGET aborts its reservation (with the terminal it sends) before
    answering, so no Creating row and no pending unit is left, and the id is created at
    once afterwards.

    A local target is handed the reservation its source's CAS just returned and reads
    neither the terminal record nor the row (docs/decisions.md, "Creation cost"): there
    the armed failure never fires and the create goes through."""
    rec = Recorder()
    faults = StoreFaults(store)
    n, app = _apps(locality, rec)
    async with open_cluster(n, store=faults, app=app) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0].actors
        matches, target_call = _target_call(method)
        faults.watch(matches, fail_at=target_call)
        if locality == "local" and method != "read_root":
            assert isinstance(
                await caller.create("a", "player").request(b"req").timeout(10), Created
            )
            assert faults.fired is None
            assert rec.runs("a") == 1
            assert await _pending(store) == 0
            return
        with pytest.raises(Unavailable):
            await caller.create("a", "player").request(b"req").timeout(10)
        assert faults.fired is not None and faults.fired.startswith(method)
        await _nothing_left(store, "a")
        # The target ended its own reservation: the one abort that applied is the
        # target's, recorded with its terminal (a source give-back carries none).
        applied = [terminal for terminal, result in faults.aborts if isinstance(result, Applied)]
        assert applied == [True], faults.aborts
        faults.stop()
        with trio.fail_after(5):  # well before the first attempt's deadline + grace
            assert isinstance(await caller.get_or_create("a", "player").timeout(5), Created)
        assert rec.runs("a") == 1
        assert await _pending(store) == 0


# --- b) overlapping re-submissions of one OperationId ------------------------------------------


class _Overlap:
    """Drives two submissions of one explicit OperationId so that the second one reads
    "no terminal yet" while the first is approving, and goes on only once the first has
    ended (its terminal recorded)."""

    def __init__(self, store: CountingStore, decision: CreateDecision) -> None:
        self.wrapped = Wrapped(store)
        self._store = store
        self._decision = decision
        self.entered = trio.Event()
        self._release = trio.Event()
        self.first_done = trio.Event()
        self._armed = False
        self.wrapped.read_terminal = self._read_terminal  # type: ignore[attr-defined]

    async def on_create(self, event: ActorCreateEvent) -> CreateDecision:
        if event.request == b"first":
            self.entered.set()
            await self._release.wait()
        if event.request in (b"first", b"second"):
            return self._decision
        return Approve(b"another operation")

    def arm(self) -> None:
        self._armed = True

    async def _read_terminal(self, key: OperationKey) -> Any:
        found = await self._store.read_terminal(key)
        if self._armed:  # the second submission's first check, while the first approves
            self._armed = False
            assert found is None
            self._release.set()
            await self.first_done.wait()
        return found


@pytest.mark.parametrize("locality", LOCALITIES)
async def test_b_an_overlapping_resubmission_of_a_rejected_operation_leaves_no_reservation(
    clock: object, store: CountingStore, locality: str
) -> None:
    """Path b), Rejected: the re-submission read "no terminal yet", then the first
    submission was Rejected and gave the id back; the re-submission reserves again under
    the same operation key. It gets the original Rejected (reply bytes included), the
    factory ran once, and the new reservation is given back: no Creating row, no pending
    unit, and the id is created at once by another operation."""
    rec = Recorder()
    overlap = _Overlap(store, Reject(b"original no"))
    n, app = _apps(locality, rec, on_create=overlap.on_create)
    async with open_cluster(n, store=overlap.wrapped, app=app) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0].actors
        op = OperationId.new()
        results: dict[str, object] = {}

        async def first() -> None:
            results["first"] = (
                await caller.create("b", "player").operation_id(op).request(b"first").timeout(20)
            )
            overlap.first_done.set()

        async def second() -> None:
            results["second"] = (
                await caller.create("b", "player").operation_id(op).request(b"second").timeout(20)
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(first)
            await overlap.entered.wait()
            overlap.arm()
            nursery.start_soon(second)
        assert results == {"first": Rejected(b"original no"), "second": Rejected(b"original no")}
        assert rec.runs("b") == 1 and rec.on_create_calls == 1
        await _nothing_left(store, "b")
        with trio.fail_after(5):
            created = await caller.get_or_create("b", "player").timeout(5)
        assert isinstance(created, Created)
        assert await _pending(store) == 0


@pytest.mark.parametrize("locality", LOCALITIES)
@pytest.mark.parametrize("exclusive", [True, False], ids=["create", "get_or_create"])
async def test_b_an_overlapping_resubmission_of_a_created_operation_gets_created(
    clock: object, store: CountingStore, locality: str, exclusive: bool
) -> None:
    """Path b), Created: the re-submission read "no terminal yet", then the first
    submission committed the Actor Ready. The re-submission finds the Ready row; it is
    the same operation, so it gets the original ``Created`` with its reply — never
    ``AlreadyExists`` (create) or ``Existing`` (get_or_create) — and nothing runs again."""
    rec = Recorder()
    overlap = _Overlap(store, Approve(b"original yes"))
    n, app = _apps(locality, rec, on_create=overlap.on_create)
    async with open_cluster(n, store=overlap.wrapped, app=app) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0].actors
        op = OperationId.new()
        results: dict[str, object] = {}

        def call(request: bytes) -> Any:
            made = caller.create if exclusive else caller.get_or_create
            return made("c", "player").operation_id(op).request(request).timeout(20)

        async def first() -> None:
            results["first"] = await call(b"first")
            overlap.first_done.set()

        async def second() -> None:
            try:
                results["second"] = await call(b"second")
            except AlreadyExists as exc:
                results["second"] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(first)
            await overlap.entered.wait()
            overlap.arm()
            nursery.start_soon(second)
        original = results["first"]
        assert isinstance(original, Created) and original.reply == b"original yes"
        assert not isinstance(results["second"], AlreadyExists | Existing), results["second"]
        assert results["second"] == original
        assert rec.runs("c") == 1 and rec.on_create_calls == 1
        assert await _pending(store) == 0
        assert await caller.find("c") == original.actor


# --- c) retention is not stretched by the approval time ----------------------------------------


@pytest.mark.parametrize("locality", LOCALITIES)
async def test_c_retention_ends_at_the_original_deadline_plus_five_minutes(
    clock: trio.testing.MockClock | None, store: CountingStore, locality: str
) -> None:
    """Path c): a create with a 100 s deadline whose approval takes 60 s and rejects. A
    re-send under the same OperationId at the original deadline + 4 min 59 s gets the
    original Rejected; at the original deadline + 5 min 1 s it is a fresh attempt (the
    factory and OnCreateActor run again): the 60 s of approval do not stretch the
    retention. (Memory: 60 s of virtual time pass in the approval; PostgreSQL: 60 s of
    store time.)"""
    rec = Recorder()
    deadlines: list[float] = []

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        if rec.on_create_calls > 1:
            return Approve(b"fresh")
        row = await store.read(ObjectKey.actor("slow"))
        assert row is not None and row.attempt_expires_at is not None
        deadlines.append(row.attempt_expires_at)  # the original deadline, in store time
        if clock is not None:
            await trio.sleep(60)
        else:
            await advance_store_clock(store, 60)
        return Reject(b"slow no")

    n, app = _apps(locality, rec, on_create=on_create)
    async with open_cluster(n, store=store, app=app, config=LONG_LEASE) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0].actors
        op = OperationId.new()
        first = await caller.create("slow", "player").operation_id(op).timeout(100)
        assert first == Rejected(b"slow no")
        (deadline,) = deadlines
        assert deadline - await store.now() >= 39  # it ended 60 s into its 100 s

        async def at(offset: float) -> None:
            await advance_store_clock(store, deadline + offset - await store.now())

        await at(299)
        assert await caller.create("slow", "player").operation_id(op).timeout(10) == first
        assert rec.on_create_calls == 1 and rec.runs("slow") == 1
        await at(301)
        fresh = await caller.create("slow", "player").operation_id(op).timeout(10)
        assert isinstance(fresh, Created) and fresh.reply == b"fresh"
        assert rec.on_create_calls == 2 and rec.runs("slow") == 2
        assert await _pending(store) == 0


# --- a Creating row past its attempt deadline + grace is ended by whoever finds it ---------


@pytest.mark.parametrize("locality", LOCALITIES)
async def test_a_waiter_reclaims_a_reservation_past_its_attempt_deadline(
    clock: trio.testing.MockClock | None, store: CountingStore, locality: str
) -> None:
    """A Creating row made by a live source lifecycle for a live owner, whose attempt
    deadline (recorded in the row) passed and whom nobody gave back (the source lost
    track of it; a terminal may or may not have been sent): a GetOrCreate waiting on it
    reclaims it by one fenced CAS at deadline + ``reservation_grace`` — not before — and
    creates the Actor; the pending unit comes back. (The background sweep is made too
    rare to be the one that finds it.)"""
    rec = Recorder()
    n, app = _apps(locality, rec)
    config = ServerConfig(reservation_grace=0.5, reclaim_sweep_interval=3600.0)
    async with open_cluster(n, store=store, app=app, config=config) as cluster:
        await cluster.wait_all_admitted()
        caller, host = cluster.servers[0], cluster.servers[-1]
        (mesh,) = node_of(host).meshes
        me = caller.identity
        made = await store.now()
        reserved = await store.reserve(
            Reservation(
                key=ObjectKey.actor("stale"),
                kind=ObjectKind.ACTOR,
                stable_type=StableType.parse("player"),
                owner=node_of(host).owner_fence(mesh),
                membership=node_of(host).entry_spot_id(mesh),
                operation=OperationKey(me.node_rid, me.node_generation, OperationId.new()),
                attempt_ttl=0.5,
            )
        )
        assert isinstance(reserved, Applied)
        assert await _pending(store) == 1
        created = await caller.actors.get_or_create("stale", "player").timeout(30)
        assert isinstance(created, Created)
        assert await store.now() - made >= 1.0  # not before deadline + grace
        if clock is not None:
            assert await store.now() - made < 2.0  # found by the waiter, not the sweep
        assert created.actor.object_generation != reserved.row.object_generation
        assert flow_count(caller, FlowEvent.RECLAIMED) == 1
        assert rec.runs("stale") == 1
        assert await _pending(store) == 0
