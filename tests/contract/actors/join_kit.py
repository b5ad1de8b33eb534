"""Shared pieces of the Join contract tests: an instrumented Actor type whose handlers
defer Joins in every allowed and forbidden way, and helpers (public surface and the
``zlink_trio.testing`` hooks only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import attrs
import trio

from zlink_trio import (
    App,
    Approve,
    DisableRelocation,
    JoinCompletion,
    JoinEvent,
    LeaveEvent,
    MeshName,
    PerActor,
    RecreateOnRelocation,
    Reject,
    Server,
    SpotCallback,
    SpotContext,
    SpotId,
    SpotKind,
    SpotWide,
    ZLinkError,
    on_join_complete,
    on_lifecycle,
    on_request,
    on_send,
)
from zlink_trio.testing import published_descriptors

MESH: Final = MeshName("test")


@attrs.define
class JoinLog:
    """What the application observed, across every node of a cluster."""

    factory_runs: dict[str, int] = attrs.field(factory=dict)
    instances: dict[str, list[Any]] = attrs.field(factory=dict)
    """Per ActorId, every instance a factory made (in order)."""
    completions: list[tuple[str, JoinCompletion, Any]] = attrs.field(factory=list)
    """(actor id, completion, the instance it ran on) in order."""
    handled: list[tuple[str, str, bytes, Any]] = attrs.field(factory=list)
    """(actor id, packet, payload, instance) in handling order."""
    errors: dict[str, object] = attrs.field(factory=dict)
    """What a Defer attempt in a named context gave: an exception, or the OperationId."""
    times: dict[str, float] = attrs.field(factory=dict)
    trace: list[str] = attrs.field(factory=list)
    """Completions and handled payloads of every Actor, in the order they ran."""
    gate: trio.Event | None = None
    entered: trio.Event = attrs.field(factory=trio.Event)
    outside: trio.Nursery | None = None
    """A nursery that outlives handlers (for the detached-task test)."""
    defer_in_factory: bool = False
    spot_events: list[tuple[str, str, object]] = attrs.field(factory=list)
    """(spot id, callback name, event) of the Spots' membership callbacks, in order."""
    spot_gate: trio.Event | None = None
    """When set, the Spot handler "hold" waits on it."""
    spot_entered: trio.Event = attrs.field(factory=trio.Event)
    _changed: trio.Event = attrs.field(factory=trio.Event)

    def _bump(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, condition: Callable[[], bool], timeout: float = 60) -> None:
        """Wait (event-driven) until ``condition()`` holds; fail after ``timeout`` s."""
        with trio.fail_after(timeout):
            while not condition():
                await self._changed.wait()

    def completions_of(self, actor_id: str) -> list[JoinCompletion]:
        return [c for a, c, _ in self.completions if a == actor_id]

    def packets(self, actor_id: str) -> list[tuple[str, bytes]]:
        return [(p, d) for a, p, d, _ in self.handled if a == actor_id]


def attempt(log: JoinLog, name: str, fn: Callable[[], object]) -> object:
    try:
        result = fn()
    except ZLinkError as exc:
        result = exc
    log.errors[name] = result
    log._bump()
    return result


def spot_events(log: JoinLog, spot_id: str) -> list[str]:
    return [name for s, name, _ in log.spot_events if s == spot_id]


def add_spot_types(app: App, log: JoinLog) -> None:
    """User Spots "hall" (SpotWide) and "lobby" (PerActor) whose JOIN rejects the request
    ``b"no"`` (reply ``b"refused"``) and approves others (reply ``b"welcome"``); an
    Instance Spot "cart"."""

    class Room:
        def __init__(self, context: SpotContext) -> None:
            self.context = context
            self.counter = 0

        def _record(self, name: str, event: object) -> None:
            log.spot_events.append((self.context.spot_id.value, name, event))
            log.trace.append(f"{name}@{self.context.stable_type.value}")
            log._bump()

        @on_lifecycle(SpotCallback.JOIN)
        async def join(self, event: JoinEvent) -> Approve | Reject:
            self._record("join", event)
            if event.request == b"no":
                return Reject(reply=b"refused")
            return Approve(reply=b"welcome")

        @on_lifecycle(SpotCallback.JOINED)
        async def joined(self, event: JoinEvent) -> None:
            self._record("joined", event)

        @on_lifecycle(SpotCallback.LEAVE)
        async def left(self, event: LeaveEvent) -> None:
            self._record("leave", event)

        @on_request("hold")
        async def hold(self, payload: bytes) -> bytes:
            log.spot_entered.set()
            if log.spot_gate is not None:
                await log.spot_gate.wait()
            self.counter += 1
            return str(self.counter).encode()

    class Cart:
        def __init__(self, context: SpotContext) -> None:
            self.context = context

    app.register_spot("hall", Room, execution=SpotWide(), relocation=DisableRelocation())
    app.register_spot("lobby", Room, execution=PerActor(), relocation=RecreateOnRelocation())
    app.register_spot("cart", Cart, kind=SpotKind.INSTANCE, relocation=DisableRelocation())


def make_join_app(
    log: JoinLog, *, stable_type: str = "mover", disable: bool = False, spots: bool = False
) -> App:
    app = App()
    app.enable_actor_dispatch()
    if spots:
        add_spot_types(app, log)

    class Mover:
        def __init__(self, context: Any) -> None:
            self.context = context
            key = context.actor_id.value
            log.factory_runs[key] = log.factory_runs.get(key, 0) + 1
            log.instances.setdefault(key, []).append(self)
            self.later: Any = None
            if log.defer_in_factory:
                attempt(log, "factory", lambda: context.join_entry_spot().defer())
            log._bump()

        def _log(self, packet: str, payload: bytes) -> None:
            log.handled.append((self.context.actor_id.value, packet, payload, self))
            log.trace.append(f"{packet}:{payload.decode(errors='replace')}")
            log._bump()

        def _target(self, payload: bytes) -> SpotId | None:
            return SpotId(payload.decode()) if payload else None

        @on_join_complete
        async def joined(self, completion: JoinCompletion) -> None:
            log.completions.append((self.context.actor_id.value, completion, self))
            log.trace.append(f"complete:{completion.outcome.value}")
            log.times[f"complete:{completion.operation_id.value}"] = trio.current_time()
            attempt(log, "completion", lambda: self.context.join_entry_spot().defer())
            log._bump()

        @on_request("join")
        async def join(self, payload: bytes) -> bytes:
            """Defer a Join to the Entry Spot ``payload`` (empty: this node's)."""
            self._log("join", payload)
            op = self.context.join_entry_spot(self._target(payload)).defer()
            log.times[f"defer:{op.value}"] = trio.current_time()
            return str(op.value).encode()

        @on_request("join-timeout")
        async def join_timeout(self, payload: bytes) -> bytes:
            """``<seconds>|<entry id>``: a Join with an explicit timeout."""
            seconds, _, target = payload.partition(b"|")
            op = self.context.join_entry_spot(self._target(target)).timeout(float(seconds)).defer()
            log.times[f"defer:{op.value}"] = trio.current_time()
            return str(op.value).encode()

        @on_request("join-block")
        async def join_block(self, payload: bytes) -> bytes:
            """Defer, then wait for the test's gate before returning."""
            self._log("join-block", payload)
            op = self.context.join_entry_spot(self._target(payload)).defer()
            log.entered.set()
            if log.gate is not None:
                await log.gate.wait()
            return str(op.value).encode()

        @on_request("join-fail")
        async def join_fail(self, payload: bytes) -> bytes:
            self.context.join_entry_spot(self._target(payload)).defer()
            raise RuntimeError("the handler fails after its defer")

        @on_request("join-big-reply")
        async def join_big_reply(self, payload: bytes) -> bytes:
            self.context.join_entry_spot(self._target(payload)).defer()
            return b"x" * (2 * 1024 * 1024)

        @on_request("join-checks")
        async def join_checks(self, payload: bytes) -> bytes:
            """The same-call and same-Actor rules, then one valid Join."""
            call = self.context.join_entry_spot()
            first = call.defer()
            attempt(log, "second-defer", call.defer)
            attempt(log, "other-transition", lambda: self.context.join_entry_spot().defer())
            return str(first.value).encode()

        @on_request("join-size")
        async def join_size(self, payload: bytes) -> bytes:
            """A request of ``int(payload)`` bytes, then (after a refusal) an empty one."""
            size = int(payload)
            attempt(
                log,
                f"size:{size}",
                lambda: self.context.join_entry_spot(request=b"r" * size).defer(),
            )
            if isinstance(log.errors[f"size:{size}"], ZLinkError):
                attempt(log, f"after:{size}", lambda: self.context.join_entry_spot().defer())
            return b""

        @on_request("join-self-request")
        async def join_self_request(self, payload: bytes) -> bytes:
            me = self.context.actor_id
            self.context.join_entry_spot(self._target(payload)).defer()
            try:
                await self.context.actors.request(me, "echo", b"to myself")
            except ZLinkError as exc:
                log.errors["self-request"] = exc
            await self.context.actors.send(me, "note", b"after-join")
            return b""

        @on_request("join-thread")
        async def join_thread(self, payload: bytes) -> bytes:
            def in_thread() -> object:
                try:
                    return self.context.join_entry_spot().defer()
                except ZLinkError as exc:
                    return exc

            log.errors["thread"] = await trio.to_thread.run_sync(in_thread)
            return b""

        @on_request("join-detached")
        async def join_detached(self, payload: bytes) -> bytes:
            done = trio.Event()

            async def detached() -> None:
                attempt(log, "detached", lambda: self.context.join_entry_spot().defer())
                done.set()

            assert log.outside is not None
            log.outside.start_soon(detached)
            await done.wait()
            return b""

        @on_request("join-child")
        async def join_child(self, payload: bytes) -> bytes:
            """A child task the handler awaits (its own nursery) may defer."""

            async def child() -> None:
                await trio.lowlevel.checkpoint()
                attempt(log, "child", lambda: self.context.join_entry_spot().defer())

            async with trio.open_nursery() as nursery:
                nursery.start_soon(child)
            return b""

        @on_request("join-later")
        async def join_later(self, payload: bytes) -> bytes:
            self.later = self.context.join_entry_spot()
            return b""

        @on_request("join-spot")
        async def join_spot(self, payload: bytes) -> bytes:
            """``<spot id>|<request>``: a Join of the User Spot."""
            spot, _, request = payload.partition(b"|")
            self._log("join-spot", payload)
            op = self.context.join_spot(spot.decode(), request).defer()
            log.times[f"defer:{op.value}"] = trio.current_time()
            return str(op.value).encode()

        @on_request("block")
        async def block(self, payload: bytes) -> bytes:
            self._log("block", payload)
            log.entered.set()
            if log.gate is not None:
                await log.gate.wait()
            return b"unblocked"

        @on_request("spot-state")
        async def spot_state(self, payload: bytes) -> bytes:
            """SpotWide: the containing Spot's state, used inside the shared gate."""
            spot = self.context.spot
            if spot is None:
                return b"none"
            spot.counter += 100
            return str(spot.counter).encode()

        @on_request("echo")
        async def echo(self, payload: bytes) -> bytes:
            self._log("echo", payload)
            return payload

        @on_send("note")
        async def note(self, payload: bytes) -> None:
            self._log("note", payload)

        @on_request("whoami")
        async def whoami(self, payload: bytes) -> bytes:
            spot = self.context.spot_id
            return spot.value.encode() if spot else b""

    policy = DisableRelocation() if disable else RecreateOnRelocation()
    app.register_actor(stable_type, Mover, relocation=policy)

    async def on_create(event: Any) -> Any:
        from zlink_trio import Approve

        attempt(log, "on-create", lambda: event.actor.context.join_entry_spot().defer())
        return Approve()

    app.on_create_actor(on_create)
    return app


async def entry_id(server: Server) -> SpotId:
    """The Entry Spot id ``server`` published in the test mesh."""
    for descriptor in await published_descriptors(server):
        if descriptor.mesh_name == MESH:
            return descriptor.entry_spot_id
    raise AssertionError("no descriptor for the test mesh")


async def create_on(
    server: Server, servers: list[Server], index: int, prefix: str, stable_type: str = "mover"
) -> str:
    """Create an Actor (through ``server``) that placement put on ``servers[index]``; the
    ones placed elsewhere are destroyed again. Returns its id."""
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


async def spot_on(server: Server, servers: list[Server], index: int, stable_type: str) -> str:
    """Create a Spot of ``stable_type`` (through ``server``) that placement put on
    ``servers[index]``; the ones placed elsewhere are closed again. Returns its id."""
    wanted = servers[index].identity.node_rid
    for _ in range(64):
        result = await server.spots.create(stable_type).timeout(30)
        ref = result.ref
        assert ref is not None
        if ref.node_rid == wanted:
            return ref.spot_id.value
        assert await server.spots.close(ref)
    raise AssertionError("placement never chose the wanted node")
