"""A SpotWide User Spot moving with its member Actors to a real target process that is
SIGKILLed before the aggregate's relay-ready (spec 06 §6.1 and §8 failure rules; S06-18,
A04-07; docs/relocation.md "SpotWide"): the Spot and every member stay on the source —
their rows unchanged, the Spot's relocation mark cleared — and run what was held during
the move, in order.

The source node runs in this process; the target is tests/faults/relocation_host.py (its
"hall" and "counter" types; its adapter's restore blocks). Real time, every wait
event-driven or bounded."""

from __future__ import annotations

import pathlib
import secrets
import signal
import sys
from typing import Any

import pytest
import trio
from test_relocation_processes import admitted, source_config, target_process

from zlink_trio import (
    App,
    PreserveStateWith,
    SpotWide,
    Unavailable,
    ZLinkError,
    on_join_complete,
    on_request,
    on_send,
)
from zlink_trio.ids import NodeRid, SpotId
from zlink_trio.store.api import ObjectKey
from zlink_trio.testing import open_cluster

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "contract" / "actors"))
from process_kit import pg_schema

pytestmark = [
    pytest.mark.process,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
]


def source_app(handled: list[tuple[str, bytes]], joined: dict[str, trio.Event]) -> App:
    """The source's "counter" Actors and "hall" SpotWide Spots (same stable types as the
    target process's): every "add" is logged as (object id, payload); a Join's completion
    sets ``joined[actor id]``."""

    class Counter:
        def __init__(self, context: Any) -> None:
            self.context = context
            self.total = 0

        @on_send("add")
        async def add(self, payload: bytes) -> None:
            self.total += 1
            handled.append((self.context.actor_id.value, payload))

        @on_request("get")
        async def get(self, payload: bytes) -> bytes:
            return str(self.total).encode()

        @on_request("join")
        async def join(self, payload: bytes) -> bytes:
            return str(self.context.join_spot(payload.decode()).defer().value).encode()

        @on_join_complete
        async def completed(self, completion: Any) -> None:
            joined.setdefault(self.context.actor_id.value, trio.Event()).set()

    class Hall:
        def __init__(self, context: Any) -> None:
            self.context = context
            self.total = 0

        @on_send("add")
        async def add(self, payload: bytes) -> None:
            self.total += 1
            handled.append((self.context.spot_id.value, payload))

        @on_request("get")
        async def get(self, payload: bytes) -> bytes:
            return str(self.total).encode()

    class Adapter:
        async def capture(self, obj: Any) -> bytes:
            return str(obj.total).encode()

        async def restore(self, obj: Any, payload: bytes) -> None:
            obj.total = int(payload.decode())

    app = App()
    app.enable_actor_dispatch()
    app.register_actor("counter", Counter, relocation=PreserveStateWith(Adapter()))
    app.register_spot("hall", Hall, execution=SpotWide(), relocation=PreserveStateWith(Adapter()))
    return app


async def _hall_on_source(source: Any) -> str:
    me = source.identity.node_rid
    for i in range(64):
        created = await source.spots.get_or_create(f"hall-{i}", "hall").timeout(10)
        if created.spot.node_rid == me:
            return str(created.spot.spot_id.value)
        assert await source.spots.close(created.spot) is True
    raise AssertionError("placement never chose the source")


async def _member(
    source: Any, store: Any, actor: str, hall: str, joined: dict[str, trio.Event]
) -> None:
    """``actor`` joined ``hall`` on the source, its completion run (no Join work is left
    queued: a move would be refused Unavailable, retry later)."""
    await source.actors.get_or_create(actor, "counter").timeout(10)
    await source.actors.request(actor, "join", hall.encode()).timeout(10)
    await joined.setdefault(actor, trio.Event()).wait()
    me = source.identity.node_rid
    while True:  # bounded by the test's fail_after
        row = await store.read(ObjectKey.actor(actor))
        if row is not None and row.membership == SpotId(hall) and row.owner.node_rid == me:
            return
        await trio.sleep(0.01)


async def test_s06_18_spot_wide_target_sigkilled_before_relay_ready_all_stay_on_the_source(
    pg_dsn: str,
) -> None:
    """S06-18 / A04-07 (SpotWide, a dead target before the aggregate's relay-ready): a
    SpotWide Spot and its two members move to a target process that blocks in a member's
    Restore and is SIGKILLed there. relocate raises Unavailable; the Spot row and both
    member rows name the source with the same AuthorityOwnerGeneration (the Spot's mark
    cleared); what was sent to the Spot and to the members during the move runs at the
    source, in arrival order, then later messages too; their state is intact."""
    secret = secrets.token_bytes(32)
    handled: list[tuple[str, bytes]] = []
    joined: dict[str, trio.Event] = {}
    with trio.fail_after(60):
        async with (
            pg_schema(pg_dsn, "zlink_swreloc", connections=2) as (schema, store),
            target_process(pg_dsn, schema, secret, block_restore=True) as target,
            open_cluster(
                1, store=store, app=source_app(handled, joined), config=source_config(secret)
            ) as cluster,
        ):
            (source,) = cluster.servers
            rid = NodeRid.from_hex((await target.wait_line(event="ready"))["rid"])
            await admitted(source, rid)
            hall = await _hall_on_source(source)
            members = ["m-0", "m-1"]
            for m in members:
                await _member(source, store, m, hall, joined)
            objects = [hall, *members]
            keys = [ObjectKey.spot(hall), *(ObjectKey.actor(m) for m in members)]
            for name in objects:
                send = source.spots.send if name == hall else source.actors.send
                await send(name, "add", b"before")
            # every lane has run what it had queued (the Joins' callbacks included)
            assert await source.spots.request(hall, "get").timeout(10) == b"1"
            for m in members:
                assert await source.actors.request(m, "get").timeout(10) == b"1"
            before = [await store.read(key) for key in keys]
            failure: list[BaseException] = []
            ended = trio.Event()
            async with trio.open_nursery() as nursery:

                async def move() -> None:
                    try:
                        await source.relocate(SpotId(hall), to=rid)
                    except ZLinkError as exc:
                        failure.append(exc)
                    finally:
                        ended.set()

                nursery.start_soon(move)
                async with trio.open_nursery() as race:  # the Restore, or the move's end

                    async def restoring() -> None:
                        await target.wait_line(event="restoring")  # the first member's
                        race.cancel_scope.cancel()

                    async def move_ended() -> None:
                        await ended.wait()
                        race.cancel_scope.cancel()

                    race.start_soon(restoring)
                    race.start_soon(move_ended)
                assert not ended.is_set(), failure  # still blocked in the target's Restore
                for i in range(3):
                    for name in objects:
                        send = source.spots.send if name == hall else source.actors.send
                        await send(name, "add", f"held-{i}".encode())
                target.process.send_signal(signal.SIGKILL)
            assert await target.process.wait() == -signal.SIGKILL
            assert len(failure) == 1 and isinstance(failure[0], Unavailable), failure
            for name in objects:
                send = source.spots.send if name == hall else source.actors.send
                await send(name, "add", b"after")
            assert await source.spots.request(hall, "get").timeout(10) == b"5"
            for m in members:
                assert await source.actors.request(m, "get").timeout(10) == b"5"
            expected = [b"before", b"held-0", b"held-1", b"held-2", b"after"]
            for name in objects:
                assert [p for n, p in handled if n == name] == expected, name
            for key, old in zip(keys, before, strict=True):
                row = await store.read(key)
                assert row is not None and old is not None
                assert row.owner.node_rid == source.identity.node_rid
                assert row.owner_generation == old.owner_generation
                assert row.relocation is None
            ran = [line for line in target.lines if line["event"] == "handled"]
            assert ran == []
