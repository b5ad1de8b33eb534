"""Live relocation of a SpotWide User Spot with its member Actors (spec 06 §6.1: the Spot
and its members move in ONE aggregate commit; spec 04 §9 A04-13, A04-15; checklist
S06-18): ``server.relocate`` of the Spot between two hosting nodes over real TCP, a real
websocket client on a third node bound to a member, on both stores."""

from __future__ import annotations

import pytest
import trio
from spot_wide_kit import LONG, hall_on, member_of, wide_cluster
from stream_kit import bind, connect, relay

from zlink_trio import ZLinkError
from zlink_trio.store.api import ObjectKey
from zlink_trio.testing import CountingStore
from zlink_trio.wire.stream import Bound, Push


async def _rows(store: CountingStore, spot: str, members: list[str]) -> dict[str, object]:
    keys = {spot: ObjectKey.spot(spot), **{m: ObjectKey.actor(m) for m in members}}
    rows = {}
    for name, key in keys.items():
        row = await store.read(key)
        assert row is not None
        rows[name] = row
    return rows


async def test_s06_18_a_spot_wide_spot_and_its_members_move_in_one_commit(
    clock: object, store: CountingStore
) -> None:
    """S06-18 / A04-13 (SpotWide, spec 06 §6.1): a SpotWide User Spot on node 0 with two
    member Actors moves to node 1 with them: ONE ``change_owners`` call (no single-row
    owner change) moves the Spot row and both member rows to node 1, each
    AuthorityOwnerGeneration + 1, each ObjectGeneration and the membership unchanged; the
    Spot's PreserveStateWith state moved; the members run on node 1 inside the moved Spot
    (their Context names it) and the Spot answers there."""
    async with wide_cluster(store) as wide:
        hall = await hall_on(wide, 0, "hall")
        spot = hall.spot_id.value
        members = ["a", "b"]
        for m in members:
            await member_of(wide, hall, m, store)
        caller = wide.session_node
        for i in range(3):
            await caller.spots.send(spot, "add", f"{i}".encode())
        assert await caller.spots.request(spot, "get").timeout(LONG) == b"3@node0"
        before = await _rows(store, spot, members)
        many, single = store.count("change_owners"), store.count("change_owner")

        result = await wide.server(0).relocate(hall, to=wide.server(1).identity.node_rid)

        assert result.committed
        assert sorted(m.value for m in result.members) == members
        assert store.count("change_owners") == many + 1
        assert store.count("change_owner") == single
        after = await _rows(store, spot, members)
        target = wide.server(1).identity.node_rid
        for name, row in after.items():
            old = before[name]
            assert row.owner.node_rid == target, name  # type: ignore[attr-defined]
            assert row.owner_generation.value == old.owner_generation.value + 1  # type: ignore[attr-defined]
            assert row.object_generation == old.object_generation  # type: ignore[attr-defined]
            assert row.membership == old.membership  # type: ignore[attr-defined]
            assert row.relocation is None  # type: ignore[attr-defined]
        assert wide.log.restored == [(1, spot, b"3")]
        assert await caller.spots.request(spot, "get").timeout(LONG) == b"3@node1"
        for m in members:
            assert await caller.actors.request(m, "whoami", b"").timeout(LONG) == spot.encode()
            assert await caller.actors.request(m, "echo", m.encode()).timeout(LONG) == m.encode()
            assert [h[0] for h in wide.rec.handled_by(m, "echo")] == [1]
        ref = await caller.spots.find(spot)
        assert ref is not None and ref.node_rid == target


async def test_a04_15_a_bound_member_keeps_its_connection_and_its_pushes(
    clock: object, store: CountingStore
) -> None:
    """A04-15 (the move) / S06-18: a real websocket client on node 2 bound to a member of
    a SpotWide Spot: the Spot moves with its members; the connection stays up, the
    binding stays bound (no Bound frame again, no OnDisconnectActor), and the member's
    pushes arrive before the move (from node 0) and after it (from node 1) through the
    same binding."""
    async with wide_cluster(store) as wide:
        hall = await hall_on(wide, 0, "hall")
        await member_of(wide, hall, "a", store)
        await member_of(wide, hall, "b", store)
        async with connect(wide.session_node, "user") as client:
            generation = await bind(client, "a")
            assert isinstance(await client.receive(), Bound)
            assert await relay(client, "a", "push_req", b"before") == b"pushed"
            push = await client.receive()
            assert isinstance(push, Push) and push.payload == b"before"

            result = await wide.server(0).relocate(hall, to=wide.server(1).identity.node_rid)
            assert result.committed

            assert await relay(client, "a", "push_req", b"after") == b"pushed"
            push = await client.receive()
            assert isinstance(push, Push)
            assert (push.actor_id.value, push.sequence, push.payload) == ("a", generation, b"after")
            assert [h[0] for h in wide.rec.handled_by("a", "push_req")] == [0, 1]
            assert await client.request("find", b"a") == b"1"
            assert client.closed is None
            assert wide.rec.disconnects == []


async def test_s06_18_numbered_streams_to_the_spot_and_members_cross_the_move_once_in_order(
    clock: object, store: CountingStore
) -> None:
    """S06-18 / A04-15: numbered messages to the Spot (by SpotId) and to both members (one
    by its bound session, one by ActorId) sent before, during and after the move: each is
    handled exactly once, in the order sent; the later ones on node 1 only; the session
    stays connected."""
    async with wide_cluster(store) as wide:
        hall = await hall_on(wide, 0, "hall")
        spot = hall.spot_id.value
        await member_of(wide, hall, "a", store)
        await member_of(wide, hall, "b", store)
        caller = wide.session_node
        rec, log = wide.rec, wide.log
        total = 60
        async with connect(caller, "user") as client:
            await bind(client, "a")

            async def stream(start: int, stop: int) -> None:
                for i in range(start, stop):
                    await caller.spots.send(spot, "add", str(i).encode())
                    await client.send("relay", f"a|note|{i}".encode())
                    await caller.actors.send("b", "note", str(i).encode())
                    await trio.sleep(0.001)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(stream, 0, 40)
                await trio.sleep(0.01)
                await wide.server(0).relocate(hall, to=wide.server(1).identity.node_rid)
            await stream(40, total)
            expected = [str(i).encode() for i in range(total)]

            def done() -> bool:
                return (
                    len(log.notes(spot)) >= total
                    and len(rec.handled_by("a", "note")) >= total
                    and len(rec.handled_by("b", "note")) >= total
                )

            with trio.fail_after(LONG):
                await rec.wait_until(done)
            assert log.notes(spot) == expected
            assert [h[3] for h in rec.handled_by("a", "note")] == expected
            assert [h[3] for h in rec.handled_by("b", "note")] == expected
            late = [h for h in log.handled if int(h[3]) >= 40]
            assert {h[0] for h in late} == {1}
            assert {h[0] for h in rec.handled_by("b", "note") if int(h[3]) >= 40} == {1}
            assert client.closed is None


async def test_s06_18_a_member_follows_its_old_route_after_the_commit(
    clock: object, store: CountingStore
) -> None:
    """S06-18 (follow routes for the Spot AND its members at the commit): node 2's route
    caches name node 0 for the Spot and a member; after the move its request to the
    member and its request to the Spot go to node 0 and reach node 1 through node 0's
    follow routes (node 0 counts one Actor follow and one Spot follow), and node 0 runs
    no handler of either."""
    async with wide_cluster(store) as wide:
        hall = await hall_on(wide, 0, "hall")
        spot = hall.spot_id.value
        await member_of(wide, hall, "a", store)
        caller, old = wide.session_node, wide.server(0)
        assert await caller.actors.request("a", "echo", b"cache").timeout(LONG) == b"cache"
        assert await caller.spots.request(spot, "get").timeout(LONG) == b"0@node0"
        actors, spots = old.statistics().actors, old.statistics().spots
        assert actors is not None and spots is not None
        actor_follows, spot_follows = actors.relocation.followed, spots.relocation.followed
        await old.relocate(hall, to=wide.server(1).identity.node_rid)
        assert await caller.actors.request("a", "echo", b"follow").timeout(LONG) == b"follow"
        assert await caller.spots.request(spot, "get").timeout(LONG) == b"0@node1"
        actors, spots = old.statistics().actors, old.statistics().spots
        assert actors is not None and spots is not None
        assert actors.relocation.followed == actor_follows + 1
        assert spots.relocation.followed == spot_follows + 1
        assert [h[0] for h in wide.rec.handled_by("a", "echo")] == [0, 1]


async def test_s06_18_a_member_type_missing_on_the_target_leaves_all_on_the_source(
    clock: object, store: CountingStore
) -> None:
    """S06-18 (failure before relay-ready: all stay on the source): node 1 hosts "hall"
    but not the members' Actor type: ``relocate`` fails, no row changed (Spot and
    members: same owner, same AuthorityOwnerGeneration, the Spot's relocation mark
    cleared), no ``change_owners`` ran, what was sent meanwhile runs on node 0 in order,
    and the Spot and its members answer on node 0."""
    async with wide_cluster(store, players_on=lambda i: i == 0) as wide:
        hall = await hall_on(wide, 0, "hall")
        spot = hall.spot_id.value
        await member_of(wide, hall, "a", store)
        await member_of(wide, hall, "b", store)
        caller = wide.session_node
        before = await _rows(store, spot, ["a", "b"])
        many = store.count("change_owners")
        with pytest.raises(ZLinkError):
            await wide.server(0).relocate(hall, to=wide.server(1).identity.node_rid)
        after = await _rows(store, spot, ["a", "b"])
        for name, row in after.items():
            old = before[name]
            assert row.owner == old.owner, name  # type: ignore[attr-defined]
            assert row.owner_generation == old.owner_generation  # type: ignore[attr-defined]
            assert row.relocation is None  # type: ignore[attr-defined]
        assert store.count("change_owners") == many
        for i in range(3):
            await caller.spots.send(spot, "add", str(i).encode())
            await caller.actors.send("a", "note", str(i).encode())
        assert await caller.spots.request(spot, "get").timeout(LONG) == b"3@node0"
        assert await caller.actors.request("a", "echo", b"e").timeout(LONG) == b"e"
        assert [h[3] for h in wide.rec.handled_by("a", "note")] == [b"0", b"1", b"2"]
        assert {h[0] for h in wide.rec.handled_by("a")} == {0}
        assert await caller.actors.request("b", "whoami", b"").timeout(LONG) == spot.encode()
        assert wide.log.restored == []


async def test_s06_18_the_spots_restore_failing_after_its_members_were_restored_leaves_all(
    clock: object, store: CountingStore
) -> None:
    """S06-18 (failure before the aggregate's relay-ready; A04-07): the target restores
    both members (each ACCEPTED there) and then the Spot's Restore raises: ``relocate``
    fails; the target discards the Spot's attempt AND both member attempts (none commits
    alone: node 1 counts 0 commits, 2 Actor and 1 Spot discards); no member row changed,
    the Spot row has its owner and generation and no mark; the
    bound websocket session stays connected and the member's pushes still arrive from
    node 0; a later move (the Restore fixed) takes all of them."""
    async with wide_cluster(store) as wide:
        hall = await hall_on(wide, 0, "hall")
        spot = hall.spot_id.value
        await member_of(wide, hall, "a", store)
        await member_of(wide, hall, "b", store)
        before = await _rows(store, spot, ["a", "b"])
        target = wide.server(1)
        wide.log.fail_restore.add(1)
        async with connect(wide.session_node, "user") as client:
            await bind(client, "a")
            assert isinstance(await client.receive(), Bound)
            with pytest.raises(ZLinkError):
                await wide.server(0).relocate(hall, to=target.identity.node_rid)

            def counts() -> tuple[int, int, int, int]:
                actors, spots = target.statistics().actors, target.statistics().spots
                assert actors is not None and spots is not None
                return (
                    actors.relocation.committed,
                    actors.relocation.discarded,
                    spots.relocation.committed,
                    spots.relocation.discarded,
                )

            with trio.fail_after(LONG):  # (the target's attempts end after the abort)
                while True:
                    if counts() == (0, 2, 0, 1):
                        break
                    await trio.sleep(0.01)
            after = await _rows(store, spot, ["a", "b"])
            assert after["a"] == before["a"] and after["b"] == before["b"]
            moved = after[spot]
            assert moved.owner == before[spot].owner  # type: ignore[attr-defined]
            assert moved.owner_generation == before[spot].owner_generation  # type: ignore[attr-defined]
            assert moved.relocation is None  # type: ignore[attr-defined]
            assert await relay(client, "a", "push_req", b"stayed") == b"pushed"
            push = await client.receive()
            assert isinstance(push, Push) and push.payload == b"stayed"
            assert [h[0] for h in wide.rec.handled_by("a", "push_req")] == [0]
            assert client.closed is None and wide.rec.disconnects == []

            wide.log.fail_restore.clear()
            result = await wide.server(0).relocate(hall, to=target.identity.node_rid)
            assert result.committed and len(result.members) == 2
            assert await relay(client, "a", "push_req", b"moved") == b"pushed"
            push = await client.receive()
            assert isinstance(push, Push) and push.payload == b"moved"
            assert [h[0] for h in wide.rec.handled_by("a", "push_req")] == [0, 1]
            assert client.closed is None


async def test_s06_18_drain_by_relocation_moves_a_spot_wide_spot_with_its_members(
    clock: object, store: CountingStore
) -> None:
    """S06-18 / A04-15 (drain by relocation, a clean stop's step 3): stopping node 0 moves
    its SpotWide Spot together with both members to node 1 (one ``change_owners``, each
    AuthorityOwnerGeneration + 1, ObjectGeneration unchanged); a websocket client bound
    to a member stays connected and gets its pushes from node 1."""
    async with wide_cluster(store) as wide:
        hall = await hall_on(wide, 0, "hall")
        spot = hall.spot_id.value
        await member_of(wide, hall, "a", store)
        await member_of(wide, hall, "b", store)
        await wide.session_node.spots.send(spot, "add", b"1")
        before = await _rows(store, spot, ["a", "b"])
        many = store.count("change_owners")
        async with connect(wide.session_node, "user") as client:
            await bind(client, "a")
            assert isinstance(await client.receive(), Bound)
            await wide.cluster.stop(0)
            assert store.count("change_owners") == many + 1
            after = await _rows(store, spot, ["a", "b"])
            for name, row in after.items():
                old = before[name]
                assert row.owner.node_rid == wide.server(1).identity.node_rid, name  # type: ignore[attr-defined]
                assert row.owner_generation.value == old.owner_generation.value + 1  # type: ignore[attr-defined]
                assert row.object_generation == old.object_generation  # type: ignore[attr-defined]
            assert await relay(client, "a", "push_req", b"drained") == b"pushed"
            push = await client.receive()
            assert isinstance(push, Push) and push.payload == b"drained"
            assert [h[0] for h in wide.rec.handled_by("a", "push_req")] == [1]
            assert await wide.server(1).spots.request(spot, "get").timeout(LONG) == b"1@node1"
            assert client.closed is None and wide.rec.disconnects == []
