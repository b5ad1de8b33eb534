"""Store mutations of Create/Destroy whose outcome is unknown (``StoreOutcomeUnknown``: the
connection was lost mid-statement, docs/decisions.md "PostgreSQL store") never leave a
half-committed Actor behind: the runtime re-reads and settles them. Regression tests for
the PostgreSQL-restart fault test (tests/faults/test_postgres_restart_under_load.py), made
deterministic with a store wrapper that answers one mutation "unknown", after running it
or without running it."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from actor_kit import Recorder, make_app

from zlink_trio import Created, DeadlineExceeded, StoreOutcomeUnknown, Unavailable
from zlink_trio.spots.approval import ActorCreateEvent, CreateDecision
from zlink_trio.store.api import LocationStore, ObjectKey
from zlink_trio.testing import CountingStore, open_cluster


class UnknownOutcomes:
    """A LocationStore that delegates to ``inner``, except that the next ``times`` calls of
    ``method`` (once armed) raise StoreOutcomeUnknown, after running when ``applied``."""

    def __init__(self, inner: LocationStore) -> None:
        self._inner = inner
        self._method = ""
        self._applied = False
        self.left = 0

    def arm(self, method: str, *, applied: bool, times: int = 1) -> None:
        self._method, self._applied, self.left = method, applied, times

    @property
    def recovery_epoch(self) -> int:
        return self._inner.recovery_epoch

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._inner, name)
        if name != self._method:
            return real

        async def unknown(*args: Any, **kwargs: Any) -> Any:
            if self.left <= 0:
                return await real(*args, **kwargs)
            self.left -= 1
            if self._applied:
                await real(*args, **kwargs)
            else:
                await trio.lowlevel.checkpoint()
            raise StoreOutcomeUnknown(f"test: the outcome of {name} is unknown")

        return unknown


class OutageAtCommit:
    """A LocationStore that delegates to ``inner`` until the first ``commit_ready``, which
    is answered StoreOutcomeUnknown (after running when ``applied``) and starts an outage:
    every call raises Unavailable until :meth:`end`."""

    def __init__(self, inner: LocationStore, *, applied: bool) -> None:
        self._inner = inner
        self._applied = applied
        self.started = trio.Event()
        self.down = False
        self.refused = 0

    @property
    def recovery_epoch(self) -> int:
        return self._inner.recovery_epoch

    def end(self) -> None:
        self.down = False

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._inner, name)
        if not callable(real):
            return real

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                self.refused += 1
                await trio.lowlevel.checkpoint()
                raise Unavailable(f"test: the Store is unreachable ({name})")
            if name != "commit_ready" or self.started.is_set():
                return await real(*args, **kwargs)
            self.started.set()
            self.down = True
            if self._applied:
                await real(*args, **kwargs)
            else:
                await trio.lowlevel.checkpoint()
            raise StoreOutcomeUnknown("test: the outcome of commit_ready is unknown")

        return call


async def _capacity(store: LocationStore) -> tuple[int, int]:
    nodes = await store.list_nodes()
    return sum(n.active for n in nodes), sum(n.pending for n in nodes)


@pytest.mark.parametrize("applied", [True, False], ids=["committed", "rolled-back"])
async def test_reserve_with_unknown_outcome_is_driven_not_orphaned(
    clock: object, store: CountingStore, applied: bool
) -> None:
    """A reservation answered "unknown" is re-read: if it committed, the caller drives its
    own Creating row (never left orphaned, blocking the id); if not, it reserves again."""
    rec = Recorder()
    faulty = UnknownOutcomes(store)
    async with open_cluster(2, store=faulty, app=make_app(rec)) as cluster:
        await cluster.wait_all_admitted()
        faulty.arm("reserve", applied=applied)
        actors = cluster.servers[0].actors
        created = await actors.get_or_create("unsure", "player").timeout(10)
        assert faulty.left == 0
        assert isinstance(created, Created)
        assert rec.runs("unsure") == 1
        assert await actors.find("unsure") == created.actor
        assert await actors.request("unsure", "echo", b"x") == b"x"
        assert await _capacity(store) == (1, 0)


@pytest.mark.parametrize("applied", [True, False], ids=["committed", "rolled-back"])
@pytest.mark.parametrize("method", ["begin_closing", "release"])
async def test_destroy_with_unknown_outcomes_releases_the_row(
    clock: object, store: CountingStore, method: str, applied: bool
) -> None:
    """A destroy whose Closing or release CAS is answered "unknown" re-reads and finishes:
    the row is gone (never left Closing), the capacity unit returned, the Actor retired, and
    the id can be created again."""
    rec = Recorder()
    faulty = UnknownOutcomes(store)
    async with open_cluster(2, store=faulty, app=make_app(rec)) as cluster:
        await cluster.wait_all_admitted()
        actors = cluster.servers[1].actors
        created = await actors.create("doomed", "player").timeout(10)
        assert isinstance(created, Created)
        faulty.arm(method, applied=applied)
        assert await actors.destroy(created.actor) is True
        assert faulty.left == 0
        assert await store.read(ObjectKey.actor("doomed")) is None
        assert await _capacity(store) == (0, 0)
        assert await actors.find("doomed") is None
        for server in cluster.servers:
            stats = server.statistics().actors
            assert stats is not None and stats.hosted == 0
        again = await actors.create("doomed", "player").timeout(10)
        assert isinstance(again, Created)
        assert again.actor.object_generation != created.actor.object_generation


async def test_unknown_give_back_is_settled(clock: object, store: CountingStore) -> None:
    """A create that ends DeadlineExceeded gives its reservation back; when that abort
    (and the target's own) is answered "unknown" without running, the abort is retried
    while the row is still that reservation: no Creating row outlives the operation."""
    rec = Recorder()
    never = trio.Event()

    async def on_create(event: ActorCreateEvent) -> CreateDecision:
        await never.wait()
        raise AssertionError("unreachable")

    faulty = UnknownOutcomes(store)
    app = make_app(rec, on_create=on_create)
    async with open_cluster(1, store=faulty, app=app) as cluster:
        await cluster.wait_all_admitted()
        faulty.arm("abort_creation", applied=False, times=2)
        with pytest.raises(DeadlineExceeded):
            await cluster.servers[0].actors.create("late", "player").timeout(1)
        await _until_absent(store, "late")
        assert faulty.left == 0
        assert await _capacity(store) == (0, 0)


async def _until_absent(store: LocationStore, actor_id: str) -> None:
    """Poll the Store until ``actor_id`` has no row (bounded: 10 s)."""
    with trio.fail_after(10):
        while True:
            if await store.read(ObjectKey.actor(actor_id)) is None:
                return
            await trio.sleep(0.02)


@pytest.mark.parametrize("applied", [True, False], ids=["committed", "rolled-back"])
async def test_ready_commit_unknown_through_a_long_outage_is_settled(
    clock: object, store: CountingStore, applied: bool
) -> None:
    """A Ready commit answered "unknown" while the Store stays unreachable past the
    create's deadline: the target answers no terminal it cannot stand behind (the caller
    ends DeadlineExceeded: outcome unknown) and settles the commit once the Store is back:
    if it committed, the Actor is published (findable, messaged, the factory ran once);
    if not, the reservation is given back and the id is free again. Never a Ready row
    nobody hosts, never a Creating row nobody drives."""
    rec = Recorder()
    faulty = OutageAtCommit(store, applied=applied)
    async with open_cluster(2, store=faulty, app=make_app(rec)) as cluster:
        await cluster.wait_all_admitted()
        actors = cluster.servers[0].actors
        with pytest.raises(DeadlineExceeded):
            await actors.get_or_create("unsure", "player").timeout(2)
        assert faulty.started.is_set() and faulty.down and faulty.refused > 0
        faulty.end()
        assert rec.runs("unsure") == 1
        if applied:
            found = await actors.find("unsure")
            assert found is not None
            assert await actors.request("unsure", "echo", b"x").timeout(10) == b"x"
            existing = await actors.get_or_create("unsure", "player").timeout(10)
            assert not isinstance(existing, Created) and existing.actor == found
            assert rec.runs("unsure") == 1
        else:
            created = await actors.get_or_create("unsure", "player").timeout(10)
            assert isinstance(created, Created)
            assert rec.runs("unsure") == 2  # one factory run per reservation
            assert await actors.request("unsure", "echo", b"x").timeout(10) == b"x"
        assert await _capacity(store) == (1, 0)
