"""Remote User Spot creation (spec 06 §3.3; checklist S06-08), on two and three nodes,
through both stores: the source reserves, then sends command 47 with the reservation
fence and the target lifecycle and no request bytes; the target reads the Pending
creation content from the Store (checking it) before its factory runs; exactly one
command 20 answers each 47."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs
import pytest
from spot_kit import SpotRecorder, hosts

from zlink_trio import InvalidOperation, SpotCreated, SpotRejected
from zlink_trio.store.api import AuthorityState, ContentRef, ObjectKey
from zlink_trio.testing import (
    CountingStore,
    StoreWrapper,
    TapDirection,
    WireTap,
    open_cluster,
    spot_statistics,
)
from zlink_trio.wire.commands import Command
from zlink_trio.wire.records import TerminalReply, UserSpotCreate
from zlink_trio.wire.tails import CreateTail

T = TypeVar("T")


class RootWatch(StoreWrapper):
    """Logs every ``read_root`` into ``log``; with ``tamper``, a root read answers as a
    root whose bytes no longer match their reference (None: changed or missing)."""

    def __init__(self, inner: Any, log: list[str]) -> None:
        super().__init__(inner)
        self.log = log
        self.tamper = False

    async def _around(self, method: str, call: Callable[[], Awaitable[T]], *args: object) -> T:
        result = await call()
        if method == "read_root":
            self.log.append("read_root")
            if self.tamper:
                return None  # type: ignore[return-value]
        return result

    async def read_root(self, ref: ContentRef) -> bytes | None:
        return await self._around("read_root", lambda: self.inner.read_root(ref), ref)


@pytest.mark.parametrize("nodes", [2, 3])
async def test_s06_08_command_47_carries_the_fence_and_no_request_bytes(
    clock: object, store: CountingStore, nodes: int
) -> None:
    """S06-08: a create placed on another node: the source's reservation is in the Store
    before the 47 leaves; the 47 names the operation, the source lifecycle, the SpotId,
    the type, one deadline and the reservation fence (expected StoreVersion,
    ObjectGeneration, owner generation, target RID + lifecycle + lease, pending delta)
    and holds none of the request bytes; the target read the content from the Store
    before its factory ran; exactly one 20 (a Created CreateTail) answers it."""
    log: list[str] = []
    watched = RootWatch(store, log)
    rec = SpotRecorder()
    tap = WireTap()
    request = b"THE-CREATION-REQUEST-" + b"z" * 64
    async with open_cluster(nodes, store=watched, app=hosts(rec), tap=tap) as cluster:
        await cluster.wait_all_admitted()
        host, source = cluster.servers[0], cluster.servers[nodes - 1]

        factory_seen_root_reads: list[int] = []
        real = rec.factory_runs

        class Spy(dict[str, int]):
            def __setitem__(self, key: str, value: int) -> None:
                factory_seen_root_reads.append(log.count("read_root"))
                super().__setitem__(key, value)

        rec.factory_runs = Spy(real)
        tap.clear()
        result = await source.spots.get_or_create("remote-1", "room").request(request).timeout(10)
        assert isinstance(result, SpotCreated) and result.reply == b"hi:" + request[:16]
        assert result.spot.node_rid == host.identity.node_rid
        sent = tap.select(
            node=source.identity.node_rid,
            direction=TapDirection.SENT,
            command=Command.USER_SPOT_CREATE,
        )
        assert len(sent) == 1
        record = sent[0].record
        assert isinstance(record, UserSpotCreate)
        assert record.source_rid == source.identity.node_rid
        assert record.source_generation == source.identity.node_generation
        assert record.spot_id.value == "remote-1" and record.stable_type.value == "room"
        fence = record.reservation
        assert fence.target_rid == host.identity.node_rid
        assert fence.target_generation == host.identity.node_generation
        assert fence.object_generation == result.spot.object_generation
        assert fence.pending_capacity_delta == 1
        assert 0 < record.timeout_ms <= 10_000
        assert b"THE-CREATION-REQUEST" not in repr(attrs.asdict(record)).encode()
        assert all(
            not isinstance(v, bytes) or b"THE-CREATION" not in v
            for v in attrs.astuple(record, recurse=True)
        )
        # The target read the Pending content before the factory ran (exactly once).
        assert factory_seen_root_reads == [1]
        assert rec.requests["remote-1"] == request
        replies = [
            e
            for e in tap.select(node=host.identity.node_rid, direction=TapDirection.SENT)
            if isinstance(e.record, TerminalReply) and e.record.correlation == record.correlation
        ]
        assert len(replies) == 1
        tail = replies[0].record.tail
        assert isinstance(tail, CreateTail) and tail.spot_ref() == result.spot
        row = await store.read(ObjectKey.spot("remote-1"))
        assert row is not None and row.state is AuthorityState.READY
        assert row.pending_content is None  # kept only until Ready
        assert sum(spot_statistics(s).creates for s in cluster.servers) == 1


async def test_s06_08_rejected_remote_create_answers_once(
    clock: object, store: CountingStore
) -> None:
    """S06-08: a remote create the target's create callback rejects is answered by one 20
    whose tail says REJECTED with the callback's reply; the reservation is given back
    (the id is Missing, no capacity held)."""
    rec = SpotRecorder()
    tap = WireTap()
    async with open_cluster(2, store=store, app=hosts(rec), tap=tap) as cluster:
        await cluster.wait_all_admitted()
        result = await cluster.servers[1].spots.get_or_create("no", "room").request(b"reject")
        assert isinstance(result, SpotRejected) and result.reply == b"no"
        assert result.spot.node_rid == cluster.servers[0].identity.node_rid
        assert await store.read(ObjectKey.spot("no")) is None
        assert [(n.active, n.pending) for n in await store.list_nodes()] == [(0, 0), (0, 0)]
        creates = tap.count(
            node=cluster.servers[1].identity.node_rid,
            direction=TapDirection.SENT,
            command=Command.USER_SPOT_CREATE,
        )
        terminals = [
            e
            for e in tap.select(
                node=cluster.servers[0].identity.node_rid, direction=TapDirection.SENT
            )
            if isinstance(e.record, TerminalReply) and isinstance(e.record.tail, CreateTail)
        ]
        assert creates == 1 and len(terminals) == 1


async def test_s06_08_changed_content_runs_no_factory(clock: object, store: CountingStore) -> None:
    """S06-08: when the creation content the Store holds does not match its reference
    (read back as changed), the target runs no factory: the create fails
    (InvalidOperation) and the reservation is given back."""
    log: list[str] = []
    watched = RootWatch(store, log)
    rec = SpotRecorder()
    async with open_cluster(2, store=watched, app=hosts(rec)) as cluster:
        await cluster.wait_all_admitted()
        watched.tamper = True
        with pytest.raises(InvalidOperation, match="content is missing or changed"):
            await cluster.servers[1].spots.get_or_create("t", "room").request(b"data").timeout(10)
        assert log == ["read_root"]
        assert rec.runs("t") == 0
        assert await store.read(ObjectKey.spot("t")) is None
        watched.tamper = False
        again = await cluster.servers[1].spots.get_or_create("t", "room").request(b"data")
        assert isinstance(again, SpotCreated) and rec.runs("t") == 1
