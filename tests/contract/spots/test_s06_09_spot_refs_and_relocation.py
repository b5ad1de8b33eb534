"""S06-09 (the SpotRef half) and the Spot relocation checks of spec 06 §8, on two nodes
over real TCP, through both stores.

What is pinned here: a SpotRef keeps a non-zero public ObjectGeneration written as a
decimal JSON string and is never a messaging target (messaging goes by SpotId from any
node); ``server.relocate`` of a Spot honours its type's relocation policy
(DisableRelocation refuses, the Spot stays Ready where it is); after a relocation a stale
SpotRef still shows the old NodeRid while messaging by SpotId reaches the new owner (the
relocation half of S06-09; the move itself: ``test_spot_relocation.py``).
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from call_kit import Recorder, server_config, spot_app

sys.path.insert(0, str(Path(__file__).parents[1] / "actors"))

from join_kit import JoinLog, create_on, make_join_app, spot_on

from zlink_trio import (
    InvalidId,
    InvalidOperation,
    JoinOutcome,
    NotFound,
    SpotCreated,
)
from zlink_trio.ids import ActorId, ObjectGeneration, SpotId
from zlink_trio.store.api import ObjectKey
from zlink_trio.testing import CountingStore, open_cluster

LONG = 30.0


def two_apps(rec: Recorder) -> object:
    """Both nodes host the Instance Spot type "cart" (DisableRelocation) and the SpotWide
    User Spot type "room" (RecreateOnRelocation)."""
    return lambda index: spot_app(rec, f"n{index}")


async def test_s06_09_spot_ref_generation_is_a_decimal_string_and_not_a_target(
    clock: object, store: CountingStore
) -> None:
    """S06-09: the SpotRef of a User Spot created from node 1 carries ObjectGeneration > 0,
    serialized as a decimal JSON string (a JSON number is refused, InvalidId); the same
    ref is found from the other node; the direct-call API takes a SpotId (a SpotRef is
    InvalidId), and a request by SpotId from either node reaches the incarnation the ref
    names."""
    rec = Recorder()
    async with open_cluster(
        2, store=store, app=two_apps(rec), config=lambda _: server_config()
    ) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        created = await b.spots.get_or_create("r1", "room").timeout(LONG)
        assert isinstance(created, SpotCreated)
        ref = created.spot
        generation = ref.object_generation.value
        assert generation > 0
        wire = json.loads(json.dumps(ref.to_json()))
        assert wire["objectGeneration"] == str(generation)
        assert isinstance(wire["objectGeneration"], str)
        assert ObjectGeneration.from_json(wire["objectGeneration"]) == ref.object_generation
        with pytest.raises(InvalidId):
            ObjectGeneration.from_json(generation)
        assert await a.spots.find("r1") == ref
        for method in (a.spots.send, a.spots.request):
            assert list(inspect.signature(method).parameters) == ["spot_id", "packet", "payload"]
        with pytest.raises(InvalidId):
            a.spots.request(ref, "whoami")  # type: ignore[arg-type]
        owner = "n0" if ref.node_rid == a.identity.node_rid else "n1"
        assert ref.node_rid in (a.identity.node_rid, b.identity.node_rid)
        for server in (a, b):
            reply = await server.spots.request(SpotId("r1"), "whoami").timeout(LONG)
            assert reply == f"{owner}:{generation}".encode()


async def test_s06_09_spot_relocation_honours_the_policy_and_a_stale_ref_is_no_target(
    clock: object, store: CountingStore
) -> None:
    """S06-09 (relocation half) and spec 06 §8: ``server.relocate`` of a DisableRelocation
    Instance Spot is InvalidOperation (by SpotId or SpotRef); a target that is the owner
    itself is InvalidOperation; a Spot not hosted on the node asked is NotFound; after
    every refusal each Spot is still Ready on its owner, same incarnation. Then the
    RecreateOnRelocation User Spot moves (by SpotRef): the SpotRef taken before the move
    still shows the old NodeRid (a snapshot, not a target), a fresh find shows the new
    one with the same ObjectGeneration, and requests by SpotId from both nodes reach the
    new owner."""
    rec = Recorder()
    async with open_cluster(
        2, store=store, app=two_apps(rec), config=lambda _: server_config()
    ) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        assert await a.spots.request("c1", "add", b"x").instance("cart").timeout(LONG) == b"1"
        created = await a.spots.get_or_create("r1", "room").timeout(LONG)
        assert isinstance(created, SpotCreated)
        room = created.spot
        cart = await a.spots.find("c1")
        assert cart is not None
        owners = {server.identity.node_rid: server for server in (a, b)}
        cart_owner, room_owner = owners[cart.node_rid], owners[room.node_rid]
        cart_other = b if cart_owner is a else a
        room_other = b if room_owner is a else a

        with pytest.raises(InvalidOperation, match="DisableRelocation"):
            await cart_owner.relocate(SpotId("c1"), to=cart_other.identity.node_rid)
        with pytest.raises(InvalidOperation, match="DisableRelocation"):
            await cart_owner.relocate(cart, to=cart_other.identity.node_rid)
        with pytest.raises(InvalidOperation, match="this node"):
            await room_owner.relocate(room, to=room_owner.identity.node_rid)
        with pytest.raises(NotFound):
            await room_other.relocate(room, to=room_owner.identity.node_rid)
        with pytest.raises(NotFound):
            await a.relocate(SpotId("nowhere"), to=b.identity.node_rid)
        assert await a.spots.find("c1") == cart
        assert await b.spots.find("r1") == room
        for server in (a, b):
            assert await server.spots.request("c1", "add", b"y").timeout(LONG) is not None

        result = await room_owner.relocate(room, to=room_other.identity.node_rid)
        assert result.committed
        assert room.node_rid == room_owner.identity.node_rid  # the stale ref is unchanged
        fresh = await a.spots.find("r1")
        assert fresh is not None and fresh != room
        assert fresh.node_rid == room_other.identity.node_rid
        assert fresh.object_generation == room.object_generation
        name = "n0" if room_other is a else "n1"
        for server in (a, b):
            reply = await server.spots.request(SpotId("r1"), "whoami").timeout(LONG)
            assert reply == f"{name}:{room.object_generation.value}".encode()


async def _joined(cluster: Any, log: Any, spot_type: str) -> tuple[str, str]:
    """An Actor on node 0 that joined a User Spot of ``spot_type`` on node 0."""
    servers = cluster.servers
    first = servers[0]
    member = await create_on(first, servers, 0, "m")
    spot = await spot_on(first, servers, 0, spot_type)
    await first.actors.request(member, "join-spot", f"{spot}|in".encode()).timeout(LONG)
    await log.wait_for(lambda: len(log.completions_of(member)) == 1)
    assert log.completions_of(member)[0].outcome is JoinOutcome.ACCEPTED
    return member, spot


async def test_a_spot_wide_member_does_not_move_without_its_spot(
    clock: object, store: CountingStore
) -> None:
    """Spec 06 §6.1 (SpotWide: the Spot and its members move in one aggregate commit): an
    Actor that joined a SpotWide User Spot is not relocated alone — InvalidOperation —
    and stays Ready in its Spot on its owner, answering; its authority row is unchanged
    (owner, AuthorityOwnerGeneration, membership)."""
    log = JoinLog()
    async with open_cluster(2, store=store, app=make_join_app(log, spots=True)) as cluster:
        await cluster.wait_all_admitted()
        first, second = cluster.servers
        member, hall = await _joined(cluster, log, "hall")
        key = ObjectKey.actor(member)
        row = await store.read(key)
        assert row is not None and row.membership == SpotId(hall)
        with pytest.raises(InvalidOperation, match="SpotWide"):
            await first.relocate(ActorId(member), to=second.identity.node_rid)
        assert await store.read(key) == row
        assert await second.actors.request(member, "echo", b"still").timeout(LONG) == b"still"


async def test_a_per_actor_member_moves_alone_and_keeps_its_spot(
    clock: object, store: CountingStore
) -> None:
    """Spec 06 §6.1 (PerActor: Spot and Actor routes are separate): an Actor that joined a
    PerActor User Spot relocates alone; its row then names the target with
    AuthorityOwnerGeneration + 1, the same ObjectGeneration and the same Spot, which
    stays Ready on its own owner and still counts the moved Actor as a member (its Close
    is False, S06-20); the Actor answers by its id from both nodes."""
    log = JoinLog()
    async with open_cluster(2, store=store, app=make_join_app(log, spots=True)) as cluster:
        await cluster.wait_all_admitted()
        first, second = cluster.servers
        member, lobby = await _joined(cluster, log, "lobby")
        key = ObjectKey.actor(member)
        row = await store.read(key)
        assert row is not None
        result = await first.relocate(ActorId(member), to=second.identity.node_rid)
        assert result.committed
        moved = await store.read(key)
        assert moved is not None
        assert moved.owner.node_rid == second.identity.node_rid
        assert moved.owner_generation.value == row.owner_generation.value + 1
        assert moved.object_generation == row.object_generation
        assert moved.membership == SpotId(lobby)
        spot = await first.spots.find(lobby)
        assert spot is not None and spot.node_rid == first.identity.node_rid
        for server in (first, second):
            assert await server.actors.request(member, "echo", b"moved").timeout(LONG) == b"moved"
        assert await second.spots.close(spot) is False
        assert await first.spots.find(lobby) == spot
        assert (await store.read(key)) == moved


async def test_a04_13_a_per_actor_spot_moves_alone_and_keeps_its_members(
    clock: object, store: CountingStore
) -> None:
    """A04-13 (RecreateOnRelocation, a PerActor User Spot) and spec 06 §6.1 (PerActor: the
    Spot's and its members' routes are separate): a PerActor Spot with a member Actor on
    node 0 relocates to node 1 alone: its row names node 1 with AuthorityOwnerGeneration
    + 1 and the same ObjectGeneration; the member Actor's row is unchanged (owner,
    generations, membership) and it still answers from both nodes; the moved Spot still
    counts the member (its Close is False, S06-20, and keeps it Ready)."""
    log = JoinLog()
    async with open_cluster(2, store=store, app=make_join_app(log, spots=True)) as cluster:
        await cluster.wait_all_admitted()
        first, second = cluster.servers
        member, lobby = await _joined(cluster, log, "lobby")
        spot_key = ObjectKey.spot(lobby)
        actor_key = ObjectKey.actor(member)
        spot_row = await store.read(spot_key)
        actor_row = await store.read(actor_key)
        assert spot_row is not None and actor_row is not None
        assert spot_row.owner.node_rid == first.identity.node_rid
        result = await first.relocate(SpotId(lobby), to=second.identity.node_rid)
        assert result.committed
        moved = await store.read(spot_key)
        assert moved is not None
        assert moved.owner.node_rid == second.identity.node_rid
        assert moved.owner_generation.value == spot_row.owner_generation.value + 1
        assert moved.object_generation == spot_row.object_generation
        assert await store.read(actor_key) == actor_row
        for server in (first, second):
            assert await server.actors.request(member, "echo", b"here").timeout(LONG) == b"here"
        ref = await first.spots.find(lobby)
        assert ref is not None and ref.node_rid == second.identity.node_rid
        assert await first.spots.close(ref) is False
        assert await second.spots.find(lobby) == ref
