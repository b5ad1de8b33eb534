"""Close of User Spots (spec 06 §7, §7.1; checklist S06-19 (the parts without a
relocation), S06-20, S06-21), on two and three nodes, through both stores: the
incarnation a SpotRef names and no other; False when gone or while members remain;
command 48 to a remote owner with its fence, answered by one 20 whose single bool is the
result."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
import trio
from spot_kit import SpotRecorder, hosts

from zlink_trio import InvalidOperation, OperationId, ServerConfig, SpotCreated, Unavailable
from zlink_trio.store.api import Applied, AuthorityState, ObjectKey, RelocationMark
from zlink_trio.testing import (
    CountingStore,
    StoreWrapper,
    TapDirection,
    WireTap,
    forget_spot_member,
    hosted_spots,
    open_cluster,
    record_spot_member,
    spot_members,
    spot_statistics,
)
from zlink_trio.wire.commands import Command
from zlink_trio.wire.records import TerminalReply, UserSpotClose
from zlink_trio.wire.tails import CloseTail

T = TypeVar("T")


@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote"])
async def test_s06_19_close_names_one_incarnation(
    clock: object, store: CountingStore, remote: bool
) -> None:
    """S06-19: close(ref) closes that incarnation (True), runs its CLOSE callback once and
    frees its capacity; a second close of it is False; after a recreate, close(old ref)
    is InvalidOperation and the new incarnation stays Ready and findable."""
    rec = SpotRecorder()
    async with open_cluster(3, store=store, app=hosts(rec)) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[1 if remote else 0]
        first = await caller.spots.get_or_create("hall", "room").timeout(10)
        assert isinstance(first, SpotCreated)
        assert await caller.spots.close(first.spot) is True
        assert rec.closes == ["hall"]
        assert await caller.spots.find("hall") is None
        assert hosted_spots(cluster.servers[0]) == ()
        assert [(n.active, n.pending) for n in await store.list_nodes()] == [(0, 0)] * 3
        assert await caller.spots.close(first.spot) is False
        second = await cluster.servers[2].spots.get_or_create("hall", "room").timeout(10)
        assert isinstance(second, SpotCreated)
        assert second.spot.object_generation != first.spot.object_generation
        with pytest.raises(InvalidOperation, match="generation"):
            await caller.spots.close(first.spot)
        assert await caller.spots.find("hall") == second.spot
        assert rec.closes == ["hall"]
        assert spot_statistics(cluster.servers[0]).closes == 1


async def test_s06_19_close_while_sealed_for_a_move_is_unavailable(
    clock: object, store: CountingStore
) -> None:
    """S06-19: a close of an incarnation whose authority is sealed for a move is
    Unavailable and changes nothing (the row is still Ready; the close callback never
    ran). (The seal is the Store's relocation mark, set as a relocation would.)"""
    rec = SpotRecorder()
    async with open_cluster(2, store=store, app=hosts(rec)) as cluster:
        await cluster.wait_all_admitted()
        created = await cluster.servers[1].spots.get_or_create("moving", "room").timeout(10)
        assert isinstance(created, SpotCreated)
        row = await store.read(ObjectKey.spot("moving"))
        assert row is not None
        for sealed in (True, False):
            current = await store.read(ObjectKey.spot("moving"))
            assert current is not None
            marked = await store.set_relocation(
                current.key,
                current.store_version,
                RelocationMark(OperationId.new(), current.owner, sealed=sealed),
            )
            assert isinstance(marked, Applied)
            for caller in cluster.servers:
                with pytest.raises(Unavailable, match="mov"):
                    await caller.spots.close(created.spot)
        after = await store.read(ObjectKey.spot("moving"))
        assert after is not None and after.state is AuthorityState.READY
        assert rec.closes == []


@pytest.mark.parametrize("nodes", [2, 3])
@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote"])
async def test_s06_20_close_keeps_a_spot_with_members(
    clock: object, store: CountingStore, remote: bool, nodes: int
) -> None:
    """S06-20: while the User Spot has a current Actor membership, close is False and
    keeps admission and authority: find still returns it, its members are unchanged, no
    leave or close callback ran; once the member left, the close is True."""
    rec = SpotRecorder()
    async with open_cluster(nodes, store=store, app=hosts(rec)) as cluster:
        await cluster.wait_all_admitted()
        host = cluster.servers[0]
        caller = cluster.servers[-1 if remote else 0]
        created = await caller.spots.get_or_create("club", "room").timeout(10)
        assert isinstance(created, SpotCreated)
        await record_spot_member(host, "club", "alice")
        await record_spot_member(host, "club", "bob")
        assert await caller.spots.close(created.spot) is False
        assert await caller.spots.find("club") == created.spot
        assert {m.value for m in spot_members(host, "club")} == {"alice", "bob"}
        assert rec.leaves == 0 and rec.closes == []
        row = await store.read(ObjectKey.spot("club"))
        assert row is not None and row.state is AuthorityState.READY
        assert hosted_spots(host) == (created.spot,)
        await forget_spot_member(host, "club", "alice")
        assert await caller.spots.close(created.spot) is False
        await forget_spot_member(host, "club", "bob")
        assert await caller.spots.close(created.spot) is True
        assert rec.closes == ["club"] and rec.leaves == 0


class ReadAfter(StoreWrapper):
    """Counts authority reads after ``arm()``; with ``bump`` armed, the first read of
    the watched key returns the row as read and then changes its StoreVersion in the
    Store (what a concurrent field update would do) before the caller can act on it."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.reads = 0
        self.armed = False
        self.bump: ObjectKey | None = None

    async def _around(self, method: str, call: Callable[[], Awaitable[T]], *args: object) -> T:
        result = await call()
        if method == "read" and self.armed:
            self.reads += 1
        if method == "read" and self.bump is not None and args and args[0] == self.bump:
            key, self.bump = self.bump, None
            row: Any = result
            await self.inner.set_recovery(key, row.store_version, None)
        return result


@pytest.mark.parametrize("nodes", [2, 3])
async def test_s06_21_remote_close_is_command_48_and_its_bool(
    clock: object, store: CountingStore, nodes: int
) -> None:
    """S06-21: a close of a Spot owned by another node sends one command 48 carrying the
    SpotRef, the source and target lifecycles, the expected owner generation and
    StoreVersion and a deadline; one 20 answers it with a CloseTail (one bool) -- the
    result -- and the source reads no Location row after sending it."""
    rec = SpotRecorder()
    tap = WireTap()
    source_store = ReadAfter(store)

    def config(index: int) -> ServerConfig:
        return ServerConfig(location_store=source_store) if index == 1 else ServerConfig()

    async with open_cluster(nodes, store=store, app=hosts(rec), tap=tap, config=config) as cluster:
        await cluster.wait_all_admitted()
        host, source = cluster.servers[:2]
        created = await source.spots.get_or_create("far", "room").timeout(10)
        assert isinstance(created, SpotCreated)
        row = await store.read(ObjectKey.spot("far"))
        assert row is not None
        tap.clear()

        async def arm_at_send() -> None:
            await tap.wait_for(node=source.identity.node_rid, command=Command.USER_SPOT_CLOSE)
            source_store.armed = True

        async with trio.open_nursery() as nursery:
            nursery.start_soon(arm_at_send)
            closed = await source.spots.close(created.spot)
        assert closed is True
        assert source_store.reads == 0  # the 20's bool is the answer, not a row read
        (sent,) = tap.select(
            node=source.identity.node_rid,
            direction=TapDirection.SENT,
            command=Command.USER_SPOT_CLOSE,
        )
        record = sent.record
        assert isinstance(record, UserSpotClose)
        assert record.spot == created.spot
        assert record.source_rid == source.identity.node_rid
        assert record.source_generation == source.identity.node_generation
        assert record.target_rid == host.identity.node_rid
        assert record.target_generation == host.identity.node_generation
        assert record.expected_authority_owner_generation == row.owner_generation
        assert record.expected_store_version == row.store_version
        assert 0 < record.timeout_ms <= source.config.default_request_timeout * 1000
        (answer,) = [
            e
            for e in tap.select(node=host.identity.node_rid, direction=TapDirection.SENT)
            if isinstance(e.record, TerminalReply) and e.record.correlation == record.correlation
        ]
        assert answer.record.tail == CloseTail(closed=True)
        # A member keeps it: the 20 says False, and so does the close.
        again = await source.spots.get_or_create("far", "room").timeout(10)
        assert isinstance(again, SpotCreated)
        await record_spot_member(host, "far", "carol")
        tap.clear()
        assert await source.spots.close(again.spot) is False
        (answer,) = [
            e
            for e in tap.select(node=host.identity.node_rid, direction=TapDirection.SENT)
            if isinstance(e.record, TerminalReply) and isinstance(e.record.tail, CloseTail)
        ]
        assert answer.record.tail == CloseTail(closed=False)


async def test_s06_21_the_target_checks_the_fence_before_the_closing_cas(
    clock: object, store: CountingStore
) -> None:
    """S06-21: the target reads the authority itself and checks it against the 48's
    fence before any Closing CAS: a StoreVersion that changed since the source read it
    is a typed failure (Unavailable) and nothing is closed; the source never re-targets
    (a retry reads afresh and closes)."""
    rec = SpotRecorder()
    source_store = ReadAfter(store)

    def config(index: int) -> ServerConfig:
        return ServerConfig(location_store=source_store) if index == 1 else ServerConfig()

    async with open_cluster(2, store=store, app=hosts(rec), config=config) as cluster:
        await cluster.wait_all_admitted()
        source = cluster.servers[1]
        created = await source.spots.get_or_create("fenced", "room").timeout(10)
        assert isinstance(created, SpotCreated)
        store.reset()
        source_store.bump = ObjectKey.spot("fenced")
        with pytest.raises(Unavailable, match="changed since the close read it"):
            await source.spots.close(created.spot)
        assert store.count("begin_closing") == 0 and rec.closes == []
        row = await store.read(ObjectKey.spot("fenced"))
        assert row is not None and row.state is AuthorityState.READY
        assert await source.spots.close(created.spot) is True
        assert rec.closes == ["fenced"]
