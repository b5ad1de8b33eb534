"""Fencing (docs/decisions.md, "Owner loss: fencing"): a node cut off from the Location
Store while its process and its mesh links live on (a zombie) runs no turn of its Actors
once its local lease deadline passed, and its Actors never have a second Ready owner while
they could still serve: every turn on the zombie happens before the survivor reclaims the
row and commits a new incarnation (checked from the Store's history and from the handler
logs, which record the Trio time and node of every turn).

Both stores; the zombie's Store calls go through a ``CutOffStore`` that starts refusing
them (Unavailable), the other node uses the store directly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from zlink_trio import (
    App,
    Created,
    RecreateOnRelocation,
    ServerConfig,
    Unavailable,
    ZLinkError,
    on_request,
    on_send,
)
from zlink_trio.ids import ActorRef, NodeRid
from zlink_trio.mesh.lease import LeaseHeld
from zlink_trio.store.api import LocationStore, ObjectKey
from zlink_trio.testing import (
    CutOffStore,
    RecordingStore,
    StoreCall,
    hosted_actors,
    node_of,
    open_cluster,
)
from zlink_trio.testing.cluster import Cluster

TTL = 1.0
RENEW = 0.3


@attrs.frozen
class Turn:
    at: float
    node: str
    actor: str
    generation: int
    packet: str
    phase: str
    """"start" when the handler began, "end" when it finished."""


@attrs.define
class TurnLog:
    turns: list[Turn] = attrs.field(factory=list)
    gate: trio.Event = attrs.field(factory=trio.Event)
    entered: trio.Event = attrs.field(factory=trio.Event)
    _changed: trio.Event = attrs.field(factory=trio.Event)

    def add(self, turn: Turn) -> None:
        self.turns.append(turn)
        changed, self._changed = self._changed, trio.Event()
        changed.set()

    async def wait(self, predicate: Any) -> None:
        while not predicate(self.turns):
            await self._changed.wait()

    def on(self, node: str) -> list[Turn]:
        return [t for t in self.turns if t.node == node]


def app_for(log: TurnLog, node: str) -> App:
    app = App()
    app.enable_actor_dispatch()

    class Player:
        def __init__(self, context: Any) -> None:
            self.context = context

        def _log(self, packet: str, phase: str) -> None:
            ctx = self.context
            log.add(
                Turn(
                    trio.current_time(),
                    node,
                    ctx.actor_id.value,
                    ctx.object_generation.value,
                    packet,
                    phase,
                )
            )

        @on_request("echo")
        async def echo(self, payload: bytes) -> bytes:
            self._log("echo", "start")
            self._log("echo", "end")
            return payload

        @on_send("note")
        async def note(self, payload: bytes) -> None:
            self._log("note", "start")
            self._log("note", "end")

        @on_request("block")
        async def block(self, payload: bytes) -> bytes:
            self._log("block", "start")
            log.entered.set()
            await log.gate.wait()
            self._log("block", "end")
            return b"unblocked"

    app.register_actor("player", Player, relocation=RecreateOnRelocation())
    return app


def zombie_config(store: LocationStore, cut: CutOffStore) -> Any:
    def config(index: int) -> ServerConfig:
        return ServerConfig(
            owner_lease_ttl=TTL,
            owner_lease_renew_interval=RENEW,
            descriptor_poll_interval=0.2,
            reclaim_sweep_interval=0.2,
            location_store=cut if index == 0 else store,
        )

    return config


async def on_node(cluster: Cluster, prefix: str, rid: NodeRid) -> ActorRef:
    """Create ``prefix<i>`` Actors (from the last node) until one is placed on ``rid``."""
    caller = cluster.servers[-1].actors
    for i in range(100):
        created = await caller.get_or_create(f"{prefix}{i}", "player").timeout(10)
        assert isinstance(created, Created)
        if created.actor.node_rid == rid:
            return created.actor
    raise AssertionError("placement never chose the node")


def local_deadline(cluster: Cluster, index: int) -> float:
    lease = node_of(cluster.servers[index]).lease
    assert isinstance(lease, LeaseHeld)
    return lease.local_deadline


def applied(history: Sequence[StoreCall], key: ObjectKey, method: str) -> list[StoreCall]:
    return [m for m in history if m.key == key and m.method == method and m.applied]


def ready_owners_never_overlap(history: Sequence[StoreCall], key: ObjectKey) -> None:
    """Folding the history of ``key``: at every moment at most one Ready owner."""
    owner = None
    for m in history:
        if m.key != key or not m.applied:
            continue
        if m.method == "commit_ready":
            assert owner is None, f"a second Ready owner at {m.at}: {m.owner} while {owner}"
            owner = m.owner
        elif m.method in ("reclaim", "release"):
            assert m.owner == owner or owner is None
            owner = None


async def test_queued_turns_of_a_node_whose_lease_was_lost_never_run(
    clock: object, store: LocationStore
) -> None:
    """A zombie (cut off from the Store, its process alive) runs no turn after its local
    lease deadline: payloads already queued in an Actor lane when the lease is lost end
    Unavailable without running, and the turn in progress is cancelled there (it never
    finishes after the deadline)."""
    log = TurnLog()
    cut = CutOffStore(store)
    names = ["zombie", "survivor"]
    async with open_cluster(
        2, app=lambda i: app_for(log, names[i]), config=zombie_config(store, cut)
    ) as cluster:
        await cluster.wait_all_admitted()
        zombie = cluster.servers[0]
        actor = await on_node(cluster, "q", zombie.identity.node_rid)
        name = actor.actor_id.value
        outcomes: dict[str, object] = {}

        async def ask(label: str, packet: str) -> None:
            try:
                outcomes[label] = await zombie.actors.request(name, packet, b"").timeout(30)
            except ZLinkError as exc:
                outcomes[label] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, "blocked", "block")
            await log.entered.wait()
            for i in range(3):  # accepted into the lane, behind the blocked turn
                await zombie.actors.send(name, "note", str(i).encode())
            nursery.start_soon(ask, "queued", "echo")
            await trio.testing.wait_all_tasks_blocked()  # the request is queued too
            assert zombie.statistics().actors is not None
            (stats,) = zombie.statistics().actors.types
            assert stats.application_backlog == 4
            deadline = local_deadline(cluster, 0)
            cut.cut()
            lost = await zombie.wait_lease_lost()
            assert lost.at >= deadline
            log.gate.set()
        assert isinstance(outcomes["queued"], Unavailable), outcomes
        assert isinstance(outcomes["blocked"], Unavailable), outcomes
        late = [t for t in log.on("zombie") if t.at >= deadline]
        assert late == [], late
        assert [t.packet for t in log.on("zombie")] == ["block"]  # its start only


async def test_a_zombie_never_serves_beside_the_new_incarnation(
    clock: object, store: LocationStore
) -> None:
    """A node cut off from the Store while its process and mesh links live on keeps no
    Actor serving once its lease expired: every turn of its Actor ran before its local
    lease deadline (before it noticed the loss), hence before the survivor's reclaim CAS
    and the new incarnation's Ready commit; the Store's history never shows two Ready
    owners of the id, and no turn of the new incarnation ran before the zombie's last."""
    log = TurnLog()
    recording = RecordingStore(store)
    cut = CutOffStore(recording)
    names = ["zombie", "survivor"]
    async with open_cluster(
        2,
        store=recording,
        app=lambda i: app_for(log, names[i]),
        config=zombie_config(recording, cut),
    ) as cluster:
        await cluster.wait_all_admitted()
        zombie, survivor = cluster.servers
        old = await on_node(cluster, "z", zombie.identity.node_rid)
        name = old.actor_id.value
        key = ObjectKey.actor(name)
        stop = trio.Event()

        async def load() -> None:  # the survivor keeps calling the id, whoever owns it
            while not stop.is_set():
                with contextlib.suppress(ZLinkError):
                    await survivor.actors.request(name, "echo", b"").timeout(0.5)
                await trio.sleep(0.05)  # pacing (virtual time on the memory store)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(load)
            await log.wait(lambda turns: len([t for t in turns if t.node == "zombie"]) >= 6)
            deadline = local_deadline(cluster, 0)
            cut.cut()
            lost = await zombie.wait_lease_lost()
            assert lost.at >= deadline
            await recording.wait_for(lambda h: bool(applied(h, key, "reclaim")))
            created = await survivor.actors.get_or_create(name, "player").timeout(10)
            assert isinstance(created, Created)
            new = created.actor
            assert new.node_rid == survivor.identity.node_rid
            assert new.object_generation != old.object_generation
            await log.wait(lambda turns: len([t for t in turns if t.node == "survivor"]) >= 6)
            stop.set()
        assert hosted_actors(zombie) == ()
        history = recording.history
        (reclaim,) = applied(history, key, "reclaim")
        assert reclaim.owner is not None and reclaim.owner.node_rid == zombie.identity.node_rid
        commits = applied(history, key, "commit_ready")
        assert [c.owner.node_rid for c in commits if c.owner is not None] == [
            zombie.identity.node_rid,
            survivor.identity.node_rid,
        ]
        assert commits[1].at >= reclaim.at
        ready_owners_never_overlap(history, key)
        on_zombie = log.on("zombie")
        on_survivor = log.on("survivor")
        assert {t.generation for t in on_zombie} == {old.object_generation.value}
        assert {t.generation for t in on_survivor} == {new.object_generation.value}
        # every turn on the zombie: before it noticed the lost lease, before the reclaim
        assert max(t.at for t in on_zombie) <= lost.at
        assert max(t.at for t in on_zombie) < reclaim.at
        assert max(t.at for t in on_zombie) < min(t.at for t in on_survivor)
        assert min(t.at for t in on_survivor) >= commits[1].at
        if clock is not None:  # virtual time: exact
            assert max(t.at for t in on_zombie) < deadline
