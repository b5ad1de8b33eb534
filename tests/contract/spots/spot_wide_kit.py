"""Shared pieces of the SpotWide relocation contract tests (spec 06 §6.1, S06-18; spec 04
§9 A04-13, A04-15): three nodes — nodes 0 and 1 host the Actor type "player" (the stream
kit's, RecreateOnRelocation) and the SpotWide User Spot type "hall" (PreserveStateWith:
its running total moves), node 2 is the session owner (hosts nothing) with a real
websocket client. Everything goes through the public surface and ``zlink_trio.testing``.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import attrs
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "stream"))

from stream_kit import MESH, SECRET, Record, stream_app, stream_cluster

from zlink_trio import (
    App,
    MeshConfig,
    ObjectRole,
    PreserveStateWith,
    ServerConfig,
    SpotContext,
    SpotWide,
    on_request,
    on_send,
)
from zlink_trio.config import StreamConfig
from zlink_trio.ids import ActorRef, SpotRef
from zlink_trio.store.api import LocationStore, ObjectKey
from zlink_trio.testing import Cluster, FaultPlan, WireTap

LONG: Final = 30.0
SESSION_NODE: Final = 2


@attrs.define
class HallLog:
    """What the Spot side of the application observed."""

    handled: list[tuple[int, str, str, bytes]] = attrs.field(factory=list)
    """(node, spot id, packet, payload) of every Spot handler run."""
    restored: list[tuple[int, str, bytes]] = attrs.field(factory=list)
    fail_restore: set[int] = attrs.field(factory=set)
    """Nodes whose Spot adapter's restore raises."""
    restore_gate: trio.Event | None = None
    restore_entered: trio.Event = attrs.field(factory=trio.Event)

    def notes(self, spot: str) -> list[bytes]:
        return [h[3] for h in self.handled if h[1] == spot and h[2] == "add"]


def _hall(log: HallLog, rec: Record, node: int) -> type:
    class Hall:
        def __init__(self, context: SpotContext) -> None:
            self.context = context
            self.total = 0

        @on_send("add")
        async def add(self, payload: bytes) -> None:
            log.handled.append((node, self.context.spot_id.value, "add", payload))
            self.total += 1
            rec.changed()

        @on_request("get")
        async def get(self, payload: bytes) -> bytes:
            return f"{self.total}@node{node}".encode()

    return Hall


def _adapter(log: HallLog, node: int) -> Any:
    class Adapter:
        async def capture(self, spot: Any) -> bytes:
            return str(spot.total).encode()

        async def restore(self, spot: Any, payload: bytes) -> None:
            log.restored.append((node, spot.context.spot_id.value, payload))
            log.restore_entered.set()
            if log.restore_gate is not None:
                await log.restore_gate.wait()
            if node in log.fail_restore:
                raise RuntimeError("injected Spot restore failure")
            spot.total = int(payload.decode())

    return Adapter()


def wide_app(rec: Record, log: HallLog, node: int, *, host: bool, players: bool = True) -> App:
    """Node ``node``'s application: the stream kit's (``players``: with the Actor type)
    plus, on a hosting node, the SpotWide User Spot type "hall"."""
    app = stream_app(rec, node, host=host and players)
    if host:
        app.register_spot(
            "hall",
            _hall(log, rec, node),
            execution=SpotWide(),
            relocation=PreserveStateWith(_adapter(log, node)),
        )
    return app


@attrs.define
class Wide:
    cluster: Cluster
    rec: Record
    log: HallLog

    @property
    def session_node(self) -> Any:
        return self.cluster.servers[-1]

    def server(self, i: int) -> Any:
        return self.cluster.servers[i]


@asynccontextmanager
async def wide_cluster(
    store: LocationStore,
    *,
    tap: WireTap | None = None,
    fault_plan: FaultPlan | None = None,
    players_on: Callable[[int], bool] = lambda i: True,
) -> AsyncIterator[Wide]:
    """Nodes 0 and 1 host (``players_on(i)``: with the Actor type), node 2 owns sessions."""
    rec = Record()
    log = HallLog()
    hosts: Callable[[int], bool] = lambda i: i != SESSION_NODE  # noqa: E731

    def config(i: int) -> ServerConfig:
        role = ObjectRole.SERVER if hosts(i) else ObjectRole.CLIENT
        return ServerConfig(
            meshes=(MeshConfig(name=MESH, object_role=role),),
            cluster_secret=SECRET,
            stream=StreamConfig(),
        )

    def app(i: int) -> App:
        return wide_app(rec, log, i, host=hosts(i), players=players_on(i))

    async with stream_cluster(
        3, rec, store=store, hosts=hosts, config=config, app=app, tap=tap, fault_plan=fault_plan
    ) as cluster:
        yield Wide(cluster, rec, log)


async def hall_on(wide: Wide, index: int, prefix: str) -> SpotRef:
    """A "hall" created on node ``index`` (placement retried; the others closed)."""
    caller = wide.session_node
    wanted = wide.server(index).identity.node_rid
    for i in range(64):
        created = await caller.spots.get_or_create(f"{prefix}-{i}", "hall").timeout(LONG)
        ref: SpotRef = created.spot
        if ref.node_rid == wanted:
            return ref
        assert await caller.spots.close(ref) is True
    raise AssertionError("placement never chose the wanted node")


async def member_of(wide: Wide, hall: SpotRef, actor_id: str, store: LocationStore) -> ActorRef:
    """Create the player ``actor_id``, join it to ``hall`` (it lands on the hall's node)
    and keep its current ref for the stream kit's ``bind``."""
    caller = wide.session_node
    created = await caller.actors.get_or_create(actor_id, "player").timeout(LONG)
    assert created.actor is not None
    await caller.actors.request(actor_id, "join_spot", hall.spot_id.value.encode()).timeout(LONG)
    rec = wide.rec
    await rec.wait_until(lambda: any(a == actor_id for a, _ in rec.joins))
    with trio.fail_after(LONG):
        while True:
            row = await store.read(ObjectKey.actor(actor_id))
            if (
                row is not None
                and row.membership == hall.spot_id
                and row.owner.node_rid == hall.node_rid
            ):
                break
            await trio.sleep(0.01)
    ref = await caller.actors.find(actor_id)
    assert ref is not None and ref.node_rid == hall.node_rid
    rec.refs[actor_id] = ref
    # Both lanes ran what the Join queued (its callbacks): a move would be refused
    # Unavailable ("framework work is pending", retry later) while it is queued.
    await caller.spots.request(hall.spot_id, "get").timeout(LONG)
    reply = await caller.actors.request(actor_id, "whoami", b"").timeout(LONG)
    assert reply == hall.spot_id.value.encode()
    return ref
