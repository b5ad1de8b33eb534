"""Shared pieces of the relocation contract tests: instrumented Actor types (public
surface only) and helpers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs
import trio

from zlink_trio import (
    App,
    DisableRelocation,
    PreserveStateWith,
    RecreateOnRelocation,
    on_request,
    on_send,
    on_timer,
)
from zlink_trio.store.api import LocationStore, ObjectKey
from zlink_trio.testing import StoreWrapper

T = TypeVar("T")


@attrs.define
class RelocLog:
    """What the application observed, across every node of a cluster."""

    factory_runs: dict[str, int] = attrs.field(factory=dict)
    handled: list[tuple[str, str, bytes, str]] = attrs.field(factory=list)
    """(actor id, packet, payload, node name of the instance) in handling order."""
    restored: list[tuple[str, bytes]] = attrs.field(factory=list)
    ticks: list[tuple[str, str]] = attrs.field(factory=list)
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

    def payloads(self, actor_id: str, packet: str = "add") -> list[bytes]:
        return [d for a, p, d, _ in self.handled if a == actor_id and p == packet]


def make_reloc_app(log: RelocLog, node_name: str) -> App:
    app = App()
    app.enable_actor_dispatch()

    class Counter:
        def __init__(self, context: Any) -> None:
            self.context = context
            self.total = 0
            key = context.actor_id.value
            log.factory_runs[key] = log.factory_runs.get(key, 0) + 1
            log.bump()

        def _log(self, packet: str, payload: bytes) -> None:
            log.handled.append((self.context.actor_id.value, packet, payload, node_name))
            log.bump()

        @on_send("add")
        async def add(self, payload: bytes) -> None:
            self._log("add", payload)
            self.total += 1

        @on_request("add-req")
        async def add_req(self, payload: bytes) -> bytes:
            self._log("add-req", payload)
            self.total += 1
            return b"ok"

        @on_request("get")
        async def get(self, payload: bytes) -> bytes:
            self._log("get", payload)
            return f"{self.total}@{node_name}".encode()

        @on_request("hold")
        async def hold(self, payload: bytes) -> bytes:
            self._log("hold", payload)
            log.entered.set()
            if log.gate is not None:
                await log.gate.wait()
            self.total += 1
            return b"held"

        @on_request("tick-every")
        async def tick_every(self, payload: bytes) -> bytes:
            self.context.timers.every("beat", float(payload.decode()))
            return b"ok"

        @on_timer("beat")
        async def beat(self, payload: bytes) -> None:
            log.ticks.append((self.context.actor_id.value, node_name))
            log.bump()

    class Adapter:
        async def capture(self, actor: Counter) -> bytes:
            return str(actor.total).encode()

        async def restore(self, actor: Counter, payload: bytes) -> None:
            log.restore_entered.set()
            log.restored.append((actor.context.actor_id.value, payload))
            log.bump()
            if log.restore_gate is not None:
                await log.restore_gate.wait()
            if log.fail_restore:
                raise RuntimeError("injected restore failure")
            actor.total = int(payload.decode())

    app.register_actor("counter", Counter, relocation=PreserveStateWith(Adapter()))
    app.register_actor("fresh", Counter, relocation=RecreateOnRelocation())
    app.register_actor("pinned", Counter, relocation=DisableRelocation())
    return app


async def create_on(
    server: Any, servers: list[Any], index: int, prefix: str, stable_type: str
) -> str:
    """Create an Actor that placement put on ``servers[index]`` (others destroyed)."""
    wanted = servers[index].identity.node_rid
    for i in range(64):
        actor_id = f"{prefix}-{i}"
        result = await server.actors.create(actor_id, stable_type).timeout(30)
        ref = result.ref
        assert ref is not None
        if ref.node_rid == wanted:
            return actor_id
        await server.actors.destroy(ref)
    raise AssertionError("placement never chose the wanted node")


class HeldRead(StoreWrapper):
    """A Location Store whose next ``read`` of one armed key is held (a Store round trip
    made slow on purpose): ``before=True`` holds it before it reaches the store (it then
    reads the row as it is on release), ``before=False`` after (it returns the row as it
    was when it ran). ``held`` is set once that read is waiting; ``let_go`` lets it go."""

    def __init__(self, inner: LocationStore) -> None:
        super().__init__(inner)
        self._armed: tuple[ObjectKey, bool] | None = None
        self.held = trio.Event()
        self.let_go = trio.Event()

    def arm(self, key: ObjectKey, *, before: bool) -> None:
        self._armed = (key, before)

    async def _around(self, method: str, call: Callable[[], Awaitable[T]], *args: object) -> T:
        armed = self._armed
        if method != "read" or armed is None or args[0] != armed[0]:
            return await call()
        self._armed = None
        if armed[1]:
            self.held.set()
            await self.let_go.wait()
            return await call()
        result = await call()
        self.held.set()
        await self.let_go.wait()
        return result
