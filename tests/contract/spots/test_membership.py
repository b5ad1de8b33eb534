"""Actors joining and leaving User Spots (spec 04 §2.3, §3.1, §4, §5.2, §6.8; 06 §2.3,
§6.1, §7): the Spot's JOIN / JOINED / LEAVE callbacks on its lifecycle lane, same-node
and cross-node Joins, SpotWide sharing the Spot's gate, a member's destroy refused, and
the refusals (Instance Spot, missing Spot, Entry id to join_spot)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).parents[1] / "actors"))

from join_kit import (
    MESH,
    JoinLog,
    create_on,
    entry_id,
    make_join_app,
    spot_events,
    spot_on,
)

from zlink_trio import (
    ActorId,
    AuthorityOwnerGeneration,
    InvalidOperation,
    JoinEvent,
    JoinOutcome,
    LeaveEvent,
    NotFound,
    SpotId,
    StableType,
)
from zlink_trio.store.api import (
    Applied,
    ObjectKey,
    ObjectKind,
    Reservation,
)
from zlink_trio.testing import CountingStore, node_of, open_cluster, spot_members

JOIN_STORE_METHODS = ("read", "set_membership", "change_owner", "read_terminal", "record_terminal")


def _join_calls(store: CountingStore) -> dict[str, int]:
    return {m: store.count(m) for m in JOIN_STORE_METHODS if store.count(m)}


async def test_a04_13_same_node_join_keeps_the_instance_and_moves_only_the_spot(
    clock: object, store: CountingStore
) -> None:
    """A04-13 (same node) / 04 §4: an Actor joins a SpotWide User Spot of its own node:
    the Spot's JOIN callback decides (it sees the Actor, its Entry Spot and the request)
    on the Spot's lifecycle lane, JOINED follows the commit, the completion carries the
    JOIN reply; the instance and the Context are kept (no factory run), only the SpotId
    changes, the ObjectGeneration and the AuthorityOwnerGeneration stay; re-joining the
    Spot is Accepted with no Store access and no callback; a member's destroy is
    InvalidOperation (A04-26, Join part) and a Close keeps the Spot (False); after the
    leave (join_entry_spot) LEAVE ran, the Close and the destroy succeed."""
    log = JoinLog()
    app = make_join_app(log, spots=True)
    async with open_cluster(2, store=store, app=app) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "member")
        hall = await spot_on(b, cluster.servers, 0, "hall")
        home = await entry_id(a)
        before = await store.read(ObjectKey.actor(actor))
        assert before is not None
        await b.actors.request(actor, "join-spot", f"{hall}|hello".encode()).timeout(10)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 1)
        (done,) = log.completions_of(actor)
        assert done.outcome is JoinOutcome.ACCEPTED and done.reply == b"welcome"
        assert done.spot_id == SpotId(hall) and done.target == SpotId(hall)
        assert spot_events(log, hall) == ["join", "joined"]
        join_event = log.spot_events[0][2]
        assert isinstance(join_event, JoinEvent)
        assert join_event.actor_id.value == actor and join_event.request == b"hello"
        assert join_event.from_spot_id == home
        (instance,) = log.instances[actor]
        assert join_event.actor is instance and log.factory_runs[actor] == 1
        assert instance.context.spot_id == SpotId(hall)
        row = await store.read(ObjectKey.actor(actor))
        assert row is not None and row.membership == SpotId(hall)
        assert row.owner == before.owner and row.owner_generation == AuthorityOwnerGeneration(1)
        assert row.object_generation == before.object_generation
        # SpotWide: the Actor's handler uses the Spot's state inside the shared gate
        assert await b.actors.request(actor, "spot-state") == b"100"
        # already a member: Accepted, nothing read or written, no callback
        store.reset()
        await b.actors.request(actor, "join-spot", f"{hall}|again".encode()).timeout(10)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 2)
        assert log.completions_of(actor)[1].outcome is JoinOutcome.ACCEPTED
        assert _join_calls(store) == {} and spot_events(log, hall) == ["join", "joined"]
        # a member cannot be destroyed, its Spot not closed
        ref = await b.actors.find(actor)
        assert ref is not None
        with pytest.raises(InvalidOperation):
            await b.actors.destroy(ref)
        hall_ref = await b.spots.find(hall)
        assert hall_ref is not None
        assert await b.spots.close(hall_ref) is False
        # S06-20 with a joined Actor: the refused close left it where it was
        assert await b.actors.request(actor, "whoami") == hall.encode()
        # leave: back to the node's Entry Spot
        await b.actors.request(actor, "join").timeout(10)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 3)
        left = log.completions_of(actor)[2]
        assert left.outcome is JoinOutcome.ACCEPTED and left.spot_id == home
        assert spot_events(log, hall) == ["join", "joined", "leave"]
        leave_event = log.spot_events[-1][2]
        assert isinstance(leave_event, LeaveEvent) and leave_event.to_spot_id == home
        assert await b.actors.request(actor, "spot-state") == b"none"
        row = await store.read(ObjectKey.actor(actor))
        assert row is not None and row.membership == home
        assert await b.spots.close(hall_ref) is True
        assert await b.actors.destroy(ref) is True


async def test_a_rejected_join_changes_nothing(clock: object, store: CountingStore) -> None:
    """04 §4: the JOIN callback's Reject ends the Join REJECTED with its reply; the Actor
    stays in its Spot (Store and Context), the Spot has no member (its Close succeeds)."""
    log = JoinLog()
    async with open_cluster(2, store=store, app=make_join_app(log, spots=True)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "refused")
        lobby = await spot_on(b, cluster.servers, 0, "lobby")
        await b.actors.request(actor, "join-spot", f"{lobby}|no".encode()).timeout(10)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 1)
        (done,) = log.completions_of(actor)
        assert done.outcome is JoinOutcome.REJECTED and done.reply == b"refused"
        assert done.spot_id == await entry_id(a)
        assert spot_events(log, lobby) == ["join"]
        row = await store.read(ObjectKey.actor(actor))
        assert row is not None and row.membership == await entry_id(a)
        ref = await b.spots.find(lobby)
        assert ref is not None and await b.spots.close(ref) is True


async def test_a04_13_cross_node_join_to_a_user_spot_and_back(
    clock: object, store: CountingStore
) -> None:
    """A04-13 (cross-node, User Spots) on 3 nodes: an Actor of node 0 joins a PerActor
    User Spot of node 1: the target factory makes a new instance (the JOIN callback sees
    it), the Store row moves owner and Spot in one CAS (owner generation + 1, same
    ObjectGeneration); then it joins a SpotWide Spot of node 2: node 1's Spot runs LEAVE
    (the source leave), node 2's JOIN and JOINED; each completion runs once, on the
    activation that hosts the Actor afterwards."""
    log = JoinLog()
    async with open_cluster(3, store=store, app=make_join_app(log, spots=True)) as cluster:
        await cluster.wait_all_admitted()
        _a, b, c = cluster.servers
        actor = await create_on(c, cluster.servers, 0, "traveller")
        lobby = await spot_on(c, cluster.servers, 1, "lobby")
        hall = await spot_on(c, cluster.servers, 2, "hall")
        first = await store.read(ObjectKey.actor(actor))
        assert first is not None
        await c.actors.request(actor, "join-spot", f"{lobby}|in".encode()).timeout(10)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 1)
        (done,) = log.completions_of(actor)
        assert done.outcome is JoinOutcome.ACCEPTED and done.reply == b"welcome"
        assert spot_events(log, lobby) == ["join", "joined"]
        old, new = log.instances[actor]
        assert log.spot_events[0][2].actor is new  # type: ignore[attr-defined]
        assert log.completions[0][2] is new and old.context.retired
        row = await store.read(ObjectKey.actor(actor))
        assert row is not None
        assert row.owner.node_rid == b.identity.node_rid and row.membership == SpotId(lobby)
        assert row.owner_generation == AuthorityOwnerGeneration(2)
        assert row.object_generation == first.object_generation
        assert await c.actors.find(actor) is not None
        assert await c.actors.request(actor, "spot-state") == b"none"  # PerActor: no Spot object
        # on to node 2's SpotWide hall: the lobby (node 1) runs LEAVE
        await c.actors.request(actor, "join-spot", f"{hall}|on".encode()).timeout(10)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 2)
        assert log.completions_of(actor)[1].outcome is JoinOutcome.ACCEPTED
        assert spot_events(log, lobby) == ["join", "joined", "leave"]
        assert spot_events(log, hall) == ["join", "joined"]
        _, _, newest = log.instances[actor]
        assert log.completions[1][2] is newest
        row = await store.read(ObjectKey.actor(actor))
        assert row is not None
        assert row.owner.node_rid == c.identity.node_rid and row.membership == SpotId(hall)
        assert row.owner_generation == AuthorityOwnerGeneration(3)
        assert row.object_generation == first.object_generation
        await c.actors.find(actor)
        assert await c.actors.request(actor, "spot-state") == b"100"
        lobby_ref = await c.spots.find(lobby)
        assert lobby_ref is not None and await c.spots.close(lobby_ref) is True


async def test_a04_14_a_spot_wide_member_shares_the_spots_gate(
    clock: object, store: CountingStore
) -> None:
    """A04-14 (SpotWide part): the members of a SpotWide Spot share its gate — while one
    member's handler runs, another member's handler waits, then uses the Spot's state
    (``context.spot``) inside the gate; a PerActor member's handler runs meanwhile and has
    no Spot object (it must use explicit Spot calls). The Spots record their members."""
    log = JoinLog()
    async with open_cluster(2, store=store, app=make_join_app(log, spots=True)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        one = await create_on(b, cluster.servers, 0, "wide-a")
        two = await create_on(b, cluster.servers, 0, "wide-b")
        per = await create_on(b, cluster.servers, 0, "per")
        hall = await spot_on(b, cluster.servers, 0, "hall")
        lobby = await spot_on(b, cluster.servers, 0, "lobby")
        for actor, spot in ((one, hall), (two, hall), (per, lobby)):
            await b.actors.request(actor, "join-spot", f"{spot}|x".encode()).timeout(10)
        await log.wait_for(lambda: len(log.completions) == 3)
        assert spot_members(a, hall) == {ActorId(one), ActorId(two)}
        assert spot_members(a, lobby) == {ActorId(per)}
        log.gate = trio.Event()
        results: dict[str, bytes | None] = {}
        async with trio.open_nursery() as nursery:

            async def hold() -> None:
                results["one"] = await b.actors.request(one, "block").timeout(20)

            async def other() -> None:
                results["two"] = await b.actors.request(two, "spot-state").timeout(20)

            nursery.start_soon(hold)
            await log.entered.wait()
            nursery.start_soon(other)
            assert await b.actors.request(per, "spot-state").timeout(5) == b"none"
            await trio.testing.wait_all_tasks_blocked()
            assert "two" not in results  # behind the other member's turn (one gate)
            log.gate.set()
        assert results == {"one": b"unblocked", "two": b"100"}


async def test_refused_targets(clock: object, store: CountingStore) -> None:
    """06 §2.3 / 04 §3.1: an Instance Spot has no members (FAILED InvalidOperation); a
    missing Spot is FAILED NotFound; an Entry Spot id given to join_spot is refused
    synchronously (InvalidOperation: use join_entry_spot)."""
    log = JoinLog()
    async with open_cluster(2, store=store, app=make_join_app(log, spots=True)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "picky")
        # an Instance Spot's authority (made the way a cold activation makes it)
        fence = node_of(a).owner_fence(MESH)
        reserved = await store.reserve(
            Reservation(
                key=ObjectKey.spot("cart-1"),
                kind=ObjectKind.INSTANCE_SPOT,
                stable_type=StableType("cart"),
                owner=fence,
            )
        )
        assert isinstance(reserved, Applied)
        assert isinstance(
            await store.commit_ready(reserved.row.key, reserved.row.store_version), Applied
        )
        await b.actors.request(actor, "join-spot", b"cart-1|x").timeout(10)
        await b.actors.request(actor, "join-spot", b"nowhere|x").timeout(10)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 2)
        instance, missing = log.completions_of(actor)
        assert instance.outcome is JoinOutcome.FAILED
        assert isinstance(instance.error, InvalidOperation)
        assert missing.outcome is JoinOutcome.FAILED and isinstance(missing.error, NotFound)
        entry = (await entry_id(a)).value.encode()
        with pytest.raises(InvalidOperation):
            await b.actors.request(actor, "join-spot", entry + b"|x").timeout(10)
