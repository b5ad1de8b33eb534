"""Owner loss (docs/decisions.md, "Owner loss"): when the node hosting Actors dies (here
in-process: ``Cluster.kill`` exits like a crash — no release, no descriptor removal —;
tests/faults/test_owner_loss_processes.py does it with SIGKILLed processes), its rows are
reclaimed once its lease expired by the Store's clock, lazily by the calls that resolve
them and by every node's bounded background sweep, and the ids are Missing again: ``find``
is None, ``destroy`` of the dead incarnation ends it, messages are NotFound, a
``get_or_create`` makes a new incarnation, and the Store keeps nothing of the dead
lifecycle. A restarted node reclaims at startup what expired lifecycles left.

Both stores (the memory one on MockClock); 1 s leases.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import trio
from actor_kit import Recorder, make_app
from owner_loss_kit import (
    applied,
    create_on,
    rows_of,
    short_leases,
    wait_gone,
)

import zlink_trio
from zlink_trio import Created, NotFound, StoreOutcomeUnknown, Unavailable
from zlink_trio.store.api import AuthorityState, LocationStore, ObjectKey
from zlink_trio.testing import (
    CutOffStore,
    FlowEvent,
    RecordingStore,
    StoreWrapper,
    flow_count,
    open_cluster,
)

EXPORTED = {getattr(zlink_trio, name) for name in zlink_trio.__all__}


def exported(exc: BaseException) -> bool:
    return type(exc) in EXPORTED


async def test_find_and_destroy_end_an_incarnation_whose_owner_died(
    clock: object, store: LocationStore
) -> None:
    """``find`` never returns a ref whose owner lease expired: it reclaims the row and
    answers None; ``destroy(ref)`` of such an incarnation ends it by reclaiming its row
    (True, the dead owner is not asked), a second destroy is False. Each winning CAS is
    counted once (FlowEvent.RECLAIMED); no background sweep runs meanwhile."""
    rec = Recorder()
    async with open_cluster(3, store=store, app=make_app(rec), config=short_leases()) as cluster:
        await cluster.wait_all_admitted()
        victim, a, b = cluster.servers
        dead = victim.identity.node_rid
        found, destroyed, both = await create_on(a, "f", dead, 3)
        assert await a.actors.find(found.actor_id.value) == found  # the owner is live
        await cluster.kill(0)
        await wait_gone([a, b], dead)

        assert await a.actors.find(found.actor_id.value) is None
        assert await store.read(ObjectKey.actor(found.actor_id.value)) is None
        assert flow_count(a, FlowEvent.RECLAIMED) == 1

        assert await b.actors.destroy(destroyed) is True
        assert await store.read(ObjectKey.actor(destroyed.actor_id.value)) is None
        assert flow_count(b, FlowEvent.RECLAIMED) == 1
        assert await b.actors.destroy(destroyed) is False
        assert await a.actors.destroy(found) is False

        # a destroy and a find racing for one row: one CAS wins, both see it ended
        outcome: dict[str, object] = {}

        async def destroy() -> None:
            outcome["destroy"] = await a.actors.destroy(both)

        async def find() -> None:
            outcome["find"] = await b.actors.find(both.actor_id.value)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(destroy)
            nursery.start_soon(find)
        assert outcome["find"] is None
        assert outcome["destroy"] in (True, False)
        assert flow_count(a, FlowEvent.RECLAIMED) + flow_count(b, FlowEvent.RECLAIMED) == 3
        assert outcome["destroy"] is (flow_count(a, FlowEvent.RECLAIMED) == 2)


async def test_find_and_destroy_errors_on_a_dead_owner_are_exported(
    clock: object, store: LocationStore
) -> None:
    """With the Store unreachable from the caller, find and destroy of a dead owner's
    Actor end with the documented, exported Unavailable (never a mesh-internal error);
    once it is reachable again they reclaim as usual."""
    rec = Recorder()
    cut = CutOffStore(store)
    config = short_leases(store=lambda i: cut if i == 2 else store)
    async with open_cluster(3, store=store, app=make_app(rec), config=config) as cluster:
        await cluster.wait_all_admitted()
        victim, a, caller = cluster.servers
        dead = victim.identity.node_rid
        (ref,) = await create_on(a, "e", dead, 1)
        await cluster.kill(0)
        await wait_gone([a], dead)
        cut.cut()
        for call in (
            lambda: caller.actors.find(ref.actor_id.value),
            lambda: caller.actors.destroy(ref),
        ):
            with pytest.raises(Unavailable) as raised:
                await call()
            assert exported(raised.value), raised.value
        cut.heal()
        assert await caller.actors.destroy(ref) is True


async def test_survivors_see_a_dead_nodes_actors_gone_and_reclaim_each_row_once(
    clock: object, store: LocationStore
) -> None:
    """Three survivors race (their finds and their background sweeps)
    to reclaim the rows of a node that died hosting five Actors: exactly one winning CAS
    per row (RECLAIMED summed over the survivors == 5, one applied reclaim per row in the
    Store's history); then find is None, request and send are NotFound (a reclaimed id is
    Missing; messages never activate an Actor), get_or_create is Created with a new
    ObjectGeneration, and once a sweep removed the dead registration the Store holds no
    row of that lifecycle (its Entry claim included)."""
    rec = Recorder()
    recording = RecordingStore(store)
    async with open_cluster(
        4, store=recording, app=make_app(rec), config=short_leases(sweep=0.2)
    ) as cluster:
        await cluster.wait_all_admitted()
        victim, *survivors = cluster.servers
        dead = victim.identity.node_rid
        refs = await create_on(survivors[0], "r", dead, 5)
        assert len(await store.scan_owned(dead)) == 6  # five Actors and the Entry claim
        await cluster.kill(0)
        await wait_gone(survivors, dead)

        found: list[object] = []

        async def find_all(server: zlink_trio.Server) -> None:
            for ref in refs:
                ref_now = await server.actors.find(ref.actor_id.value)
                found.append(ref_now)

        async with trio.open_nursery() as nursery:
            for server in survivors:
                nursery.start_soon(find_all, server)
        assert found == [None] * 15
        assert sum(flow_count(s, FlowEvent.RECLAIMED) for s in survivors) == 5
        history = recording.history
        for ref in refs:
            (reclaim,) = applied(history, ObjectKey.actor(ref.actor_id.value), "reclaim")
            assert reclaim.owner is not None and reclaim.owner.node_rid == dead
        assert await rows_of(store, refs) == [None] * 5

        for server, ref in itertools.product(survivors, refs):
            name = ref.actor_id.value
            with pytest.raises(NotFound):
                await server.actors.request(name, "echo", b"").timeout(5)
            with pytest.raises(NotFound):
                await server.actors.send(name, "note", b"").timeout(5)
        for ref in refs:
            created = await survivors[1].actors.get_or_create(ref.actor_id.value, "player")
            assert isinstance(created, Created)
            assert created.actor.object_generation != ref.object_generation
            assert created.actor.node_rid != dead
        assert rec.handled == []  # no message ran (nothing was auto-activated)

        await recording.wait_for(
            lambda h: any(m.method == "remove_node" and m.node_rid == dead and m.applied for m in h)
        )
        assert await store.scan_owned(dead) == ()
        assert dead not in {r.descriptor.node_rid for r in await store.list_nodes()}
        assert sum(flow_count(s, FlowEvent.REGISTRATION_SWEPT) for s in survivors) == 1


async def test_a_request_that_resolves_a_dead_owner_is_not_found(
    clock: object, store: LocationStore
) -> None:
    """The first call to resolve a dead owner's Actor is a request (no find, no sweep):
    it reclaims the row lazily and ends NotFound, like any Missing id."""
    rec = Recorder()
    async with open_cluster(2, store=store, app=make_app(rec), config=short_leases()) as cluster:
        await cluster.wait_all_admitted()
        victim, caller = cluster.servers
        dead = victim.identity.node_rid
        (ref,) = await create_on(caller, "m", dead, 1)
        await cluster.kill(0)
        await wait_gone([caller], dead)
        with pytest.raises(NotFound):
            await caller.actors.request(ref.actor_id.value, "echo", b"").timeout(5)
        assert await store.read(ObjectKey.actor(ref.actor_id.value)) is None


async def test_a_restarted_node_reclaims_expired_lifecycles_at_startup(
    clock: object, store: LocationStore
) -> None:
    """Restart cleanup: node 0 dies hosting three Actors; once its lease expired, a new
    lifecycle at the same index (same node name, new NodeRid and NodeGeneration) starts
    on the same store. Right after ``open_server`` returned (its sweep's first round ran
    before) the dead lifecycle's rows are gone (Missing; no row of it left, Entry claim
    included) and the ids can be created again, while the rows of the live node 1 are
    untouched (same StoreVersion, still Ready). No background sweep runs, and the
    startup cleanup is not cut at one batch (2 rows): it goes on while batches are full."""
    rec = Recorder()
    config = short_leases(batch=2)
    async with open_cluster(2, store=store, app=make_app(rec), config=config) as cluster:
        await cluster.wait_all_admitted()
        victim, live = cluster.servers
        dead = victim.identity.node_rid
        refs = await create_on(live, "x", dead, 3)
        kept = await create_on(live, "k", live.identity.node_rid, 2)
        before = await rows_of(store, kept)
        owned = len(await store.scan_owned(dead)) - 1  # its Actors (not its Entry claim)
        await cluster.kill(0)
        await wait_gone([live], dead)
        assert await rows_of(store, refs) != [None] * 3  # nobody reclaimed them yet

        restarted = await cluster.start(0)
        assert restarted.identity.node_rid != dead
        assert restarted.config.node_name == victim.config.node_name
        assert await rows_of(store, refs) == [None] * 3
        assert await store.scan_owned(dead) == ()
        assert flow_count(restarted, FlowEvent.RECLAIMED) == owned >= 3
        assert flow_count(live, FlowEvent.RECLAIMED) == 0
        assert await rows_of(store, kept) == before
        assert all(row.state is AuthorityState.READY for row in before)
        for ref in refs:
            created = await restarted.actors.create(ref.actor_id.value, "player").timeout(10)
            assert isinstance(created, Created)
            assert created.actor.object_generation != ref.object_generation


async def test_the_background_sweep_is_bounded_and_dead_rows_do_not_pile_up(
    clock: object, store: LocationStore
) -> None:
    """Nobody calls: a survivor's background sweep alone reclaims the seven rows a dead
    node left, at most ``reclaim_sweep_batch`` (3) per round, rounds one interval apart
    (3 + 3 + 1), then removes the dead registration: nothing of it is left."""
    rec = Recorder()
    recording = RecordingStore(store, reads=True)
    config = short_leases(sweep=0.5, batch=3, store=lambda i: recording if i == 1 else store)
    async with open_cluster(2, store=store, app=make_app(rec), config=config) as cluster:
        await cluster.wait_all_admitted()
        victim, survivor = cluster.servers
        dead = victim.identity.node_rid
        refs = await create_on(survivor, "s", dead, 7)
        await cluster.kill(0)
        keys = {ObjectKey.actor(ref.actor_id.value) for ref in refs}
        await recording.wait_for(
            lambda h: {m.key for m in h if m.method == "reclaim" and m.applied} >= keys
        )
        await recording.wait_for(
            lambda h: any(m.method == "remove_node" and m.node_rid == dead and m.applied for m in h)
        )
        history = recording.history
        rounds: list[tuple[float, int]] = []  # (time it listed, rows it reclaimed)
        for m in history:
            if m.method == "list_reclaimable":
                rounds.append((m.at, 0))
            elif m.method == "reclaim" and m.applied:
                at, won = rounds[-1]
                rounds[-1] = (at, won + 1)
        working = [won for _, won in rounds if won]
        assert working == [3, 3, 1]
        times = [at for at, _ in rounds]
        assert all(b - a >= 0.5 * 0.9 for a, b in itertools.pairwise(times))
        assert await store.scan_owned(dead) == ()
        assert flow_count(survivor, FlowEvent.RECLAIMED) == 7


class UnknownReclaim(StoreWrapper):
    """Applies the first reclaim, then reports its outcome as unknown."""

    def __init__(self, inner: LocationStore) -> None:
        super().__init__(inner)
        self.armed = False

    async def _around(self, method: str, call: Any, *args: object) -> Any:
        result = await call()
        if method == "reclaim" and self.armed:
            self.armed = False
            raise StoreOutcomeUnknown("test: the reclaim applied, its answer was lost")
        return result


async def test_a_destroy_whose_reclaim_outcome_is_unknown_settles_by_reading(
    clock: object, store: LocationStore
) -> None:
    """The reclaim CAS of a destroy applies but its answer is lost (StoreOutcomeUnknown):
    the destroy re-reads, finds the incarnation gone and answers True (its CAS may have
    been the one); a second destroy is False."""
    rec = Recorder()
    unknown = UnknownReclaim(store)
    config = short_leases(store=lambda i: unknown if i == 1 else store)
    async with open_cluster(2, store=store, app=make_app(rec), config=config) as cluster:
        await cluster.wait_all_admitted()
        victim, caller = cluster.servers
        dead = victim.identity.node_rid
        (ref,) = await create_on(caller, "u", dead, 1)
        await cluster.kill(0)
        await wait_gone([caller], dead)
        unknown.armed = True
        assert await caller.actors.destroy(ref) is True
        assert not unknown.armed
        assert await store.read(ObjectKey.actor(ref.actor_id.value)) is None
        assert await caller.actors.destroy(ref) is False
