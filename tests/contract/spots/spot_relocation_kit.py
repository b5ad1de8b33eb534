"""Shared pieces of the Spot relocation contract tests: instrumented Spot types (public
surface only) and helpers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import trio

from zlink_trio import (
    App,
    PerActor,
    PreserveStateWith,
    RecreateOnRelocation,
    SpotContext,
    SpotKind,
    SpotWide,
    on_request,
    on_send,
    on_timer,
)
from zlink_trio.store.api import ObjectKey

LONG = 30.0


@attrs.define
class SpotLog:
    """What the application observed, across every node of a cluster."""

    factory_runs: dict[str, int] = attrs.field(factory=dict)
    handled: list[tuple[str, str, bytes, str]] = attrs.field(factory=list)
    """(spot id, packet, payload, node name of the instance) in handling order."""
    restored: list[tuple[str, bytes]] = attrs.field(factory=list)
    ticks: list[tuple[str, str, bytes]] = attrs.field(factory=list)
    """(spot id, node name, timer payload) per timer handler run."""
    gate: trio.Event | None = None
    entered: trio.Event = attrs.field(factory=trio.Event)
    restore_gate: trio.Event | None = None
    restore_entered: trio.Event = attrs.field(factory=trio.Event)
    fail_restore: bool = False
    _changed: trio.Event = attrs.field(factory=trio.Event)

    def bump(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, condition: Callable[[], bool], timeout: float = 60) -> None:
        with trio.fail_after(timeout):
            while not condition():
                await self._changed.wait()

    def payloads(self, spot_id: str, packet: str = "add") -> list[bytes]:
        return [d for s, p, d, _ in self.handled if s == spot_id and p == packet]

    def nodes(self, spot_id: str, packet: str = "add") -> set[str]:
        return {n for s, p, _, n in self.handled if s == spot_id and p == packet}


def make_spot_reloc_app(log: SpotLog, node_name: str) -> App:
    """Instance Spot types "bag" (PreserveStateWith: its total moves) and "fresh"
    (RecreateOnRelocation); User Spot types "lobby" (PerActor, RecreateOnRelocation) and
    "hall" (SpotWide, PreserveStateWith)."""
    app = App()

    class Bag:
        def __init__(self, context: SpotContext) -> None:
            self.context = context
            self.total = 0
            key = context.spot_id.value
            log.factory_runs[key] = log.factory_runs.get(key, 0) + 1
            log.bump()

        def _log(self, packet: str, payload: bytes) -> None:
            log.handled.append((self.context.spot_id.value, packet, payload, node_name))
            log.bump()

        @on_send("add")
        async def add(self, payload: bytes) -> None:
            self._log("add", payload)
            self.total += 1

        @on_request("add-req")
        async def add_req(self, payload: bytes) -> bytes:
            self._log("add-req", payload)
            self.total += 1
            return payload

        @on_request("get")
        async def get(self, payload: bytes) -> bytes:
            return f"{self.total}@{node_name}:{self.context.object_generation.value}".encode()

        @on_request("hold")
        async def hold(self, payload: bytes) -> bytes:
            self._log("hold", payload)
            log.entered.set()
            if log.gate is not None:
                await log.gate.wait()
            self.total += 1
            return b"held"

        @on_request("once")
        async def once(self, payload: bytes) -> bytes:
            self.context.timers.once("ding", float(payload.decode()), b"ding")
            return b"ok"

        @on_request("timers")
        async def timers(self, payload: bytes) -> bytes:
            names = sorted(r.name for r in self.context.timers.registrations())
            return ",".join(names).encode()

        @on_timer("ding")
        async def ding(self, payload: bytes) -> None:
            log.ticks.append((self.context.spot_id.value, node_name, payload))
            log.bump()

    class Adapter:
        async def capture(self, spot: Bag) -> bytes:
            return str(spot.total).encode()

        async def restore(self, spot: Bag, payload: bytes) -> None:
            log.restore_entered.set()
            log.restored.append((spot.context.spot_id.value, payload))
            log.bump()
            if log.restore_gate is not None:
                await log.restore_gate.wait()
            if log.fail_restore:
                raise RuntimeError("injected restore failure")
            spot.total = int(payload.decode())

    app.register_spot("bag", Bag, kind=SpotKind.INSTANCE, relocation=PreserveStateWith(Adapter()))
    app.register_spot("fresh", Bag, kind=SpotKind.INSTANCE, relocation=RecreateOnRelocation())
    app.register_spot("lobby", Bag, execution=PerActor(), relocation=RecreateOnRelocation())
    app.register_spot("hall", Bag, execution=SpotWide(), relocation=PreserveStateWith(Adapter()))
    return app


def apps(log: SpotLog) -> Callable[[int], App]:
    return lambda i: make_spot_reloc_app(log, f"node{i}")


async def instance_on(
    caller: Any, servers: list[Any], index: int, prefix: str, stable_type: str, store: Any
) -> str:
    """An Instance Spot activated (by a first "add-req") on ``servers[index]``, once its
    row no longer carries the activation's recovery pointer (a move waits for that)."""
    wanted = servers[index].identity.node_rid
    for i in range(64):
        spot_id = f"{prefix}-{i}"
        await caller.spots.request(spot_id, "add-req", b"first").instance(stable_type).timeout(LONG)
        ref = await caller.spots.find(spot_id)
        assert ref is not None
        if ref.node_rid == wanted:
            with trio.fail_after(LONG):
                while True:
                    row = await store.read(ObjectKey.spot(spot_id))
                    if row is not None and row.recovery is None:
                        return spot_id
                    await trio.sleep(0.01)
    raise AssertionError("placement never chose the wanted node")


async def user_spot_on(
    caller: Any, servers: list[Any], index: int, prefix: str, stable_type: str
) -> Any:
    """A User Spot created on ``servers[index]`` (others closed); its SpotRef."""
    wanted = servers[index].identity.node_rid
    for i in range(64):
        created = await caller.spots.get_or_create(f"{prefix}-{i}", stable_type).timeout(LONG)
        ref = created.spot
        if ref.node_rid == wanted:
            return ref
        assert await caller.spots.close(ref) is True
    raise AssertionError("placement never chose the wanted node")


async def owner_row(store: Any, spot_id: str, server: Any, generation: int) -> Any:
    """Wait until the Spot's row names ``server`` at AuthorityOwnerGeneration
    ``generation``; the row."""
    key = ObjectKey.spot(spot_id)
    with trio.fail_after(LONG):
        while True:
            row = await store.read(key)
            assert row is not None
            if row.owner_generation.value == generation:
                assert row.owner.node_rid == server.identity.node_rid
                return row
            await trio.sleep(0.01)
