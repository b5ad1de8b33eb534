"""Shared pieces of the Spot direct-call and cold-activation contract tests: an
instrumented application and helpers.

Only the public surface (App, open_cluster, ``server.spots``) and the zlink_trio.testing
hooks; counts are taken by the application code itself (factory runs, handler logs), the
way a user's test would.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio

from zlink_trio import (
    App,
    DisableRelocation,
    MeshConfig,
    MessageKind,
    ObjectRole,
    RecreateOnRelocation,
    ServerConfig,
    SpotKind,
    SpotWide,
    on_request,
    on_send,
)


@attrs.define
class Recorder:
    """What the application observed, across every node of a cluster."""

    factory_runs: dict[str, int] = attrs.field(factory=dict)
    """Per SpotId (every factory run, whatever the node)."""
    handled: list[tuple[str, int, str, str, bytes]] = attrs.field(factory=list)
    """(spot id, object generation, node name, packet, payload) in handling order."""
    gate: trio.Event | None = None
    """When set, handlers of packet "block" wait on it."""
    factory_gate: trio.Event | None = None
    """When set, factories wait on it (after counting the run)."""
    entered: trio.Event = attrs.field(factory=trio.Event)
    factory_entered: trio.Event = attrs.field(factory=trio.Event)
    _changed: trio.Event = attrs.field(factory=trio.Event)

    def runs(self, spot_id: str) -> int:
        return self.factory_runs.get(spot_id, 0)

    @property
    def total_runs(self) -> int:
        return sum(self.factory_runs.values())

    def record(self, entry: tuple[str, int, str, str, bytes]) -> None:
        self.handled.append(entry)
        self._changed.set()
        self._changed = trio.Event()

    def of(self, spot_id: str) -> list[tuple[str, bytes]]:
        """(packet, payload) handled by ``spot_id``, in order."""
        return [(packet, payload) for sid, _, _, packet, payload in self.handled if sid == spot_id]

    async def wait_handled(self, count: int) -> None:
        while len(self.handled) < count:
            await self._changed.wait()


def _spot_class(rec: Recorder, node: str) -> type[Any]:
    class Cart:
        def __init__(self, context: Any) -> None:
            self.context = context
            sid = context.spot_id.value
            rec.factory_runs[sid] = rec.factory_runs.get(sid, 0) + 1
            self.items: list[bytes] = []

        def _log(self, packet: str, payload: bytes) -> None:
            context = self.context
            rec.record(
                (context.spot_id.value, context.object_generation.value, node, packet, payload)
            )

        @on_request("add")
        async def add(self, payload: bytes) -> bytes:
            self._log("add", payload)
            self.items.append(payload)
            return str(len(self.items)).encode()

        @on_request("whoami")
        async def whoami(self, payload: bytes) -> bytes:
            self._log("whoami", payload)
            return f"{node}:{self.context.object_generation.value}".encode()

        @on_send("note")
        async def note(self, payload: bytes) -> None:
            self._log("note", payload)
            self.items.append(payload)

        @on_request("block")
        async def block(self, payload: bytes) -> bytes:
            self._log("block", payload)
            rec.entered.set()
            if rec.gate is not None:
                await rec.gate.wait()
            return b"unblocked"

        @on_send("block")
        async def block_send(self, payload: bytes) -> None:
            self._log("block", payload)
            rec.entered.set()
            if rec.gate is not None:
                await rec.gate.wait()

        @on_request("close")
        async def close(self, payload: bytes) -> bytes:
            self._log("close", payload)
            self.context.close()
            return b"closing"

        @on_request("activate")
        async def activate(self, payload: bytes) -> bytes:
            """Cold-activate the "bag" Spot named by the payload from this Spot's context."""
            self._log("activate", payload)
            call = self.context.spots.request(payload.decode(), "whoami", b"activated")
            reply = await call.instance("bag")
            assert reply is not None
            return reply

        @on_request("joinable")
        async def joinable(self, payload: bytes) -> bytes:
            """Whether this handler's Spot may Defer a Join (spec 04 §3.1)."""
            self._log("joinable", payload)
            return b"1" if self.context.join_allowed else b"0"

        @on_request("relay")
        async def relay(self, payload: bytes) -> bytes:
            """Request the Spot named by the payload from this Spot's own context."""
            self._log("relay", payload)
            reply = await self.context.spots.request(payload.decode(), "whoami", b"relayed")
            assert reply is not None
            return reply

    return Cart


def _slow_factory(rec: Recorder, cls: type[Any]) -> Any:
    async def factory(context: Any) -> Any:
        spot = cls(context)
        rec.factory_entered.set()
        if rec.factory_gate is not None:
            await rec.factory_gate.wait()
        return spot

    return factory


def spot_app(
    rec: Recorder,
    node: str,
    *,
    instance_types: tuple[str, ...] = ("cart",),
    user_types: tuple[str, ...] = ("room",),
    slow_factory: bool = False,
) -> App:
    """An App hosting Instance Spot types ``instance_types`` and User Spot types
    ``user_types`` (all the same recording class)."""
    app = App()
    cls = _spot_class(rec, node)
    factory = _slow_factory(rec, cls) if slow_factory else cls
    for stable_type in instance_types:
        app.register_spot(
            stable_type, factory, kind=SpotKind.INSTANCE, relocation=DisableRelocation()
        )
    for stable_type in user_types:
        app.register_spot(
            stable_type,
            factory,
            kind=SpotKind.USER,
            execution=SpotWide(),
            relocation=RecreateOnRelocation(),
        )
    if slow_factory:  # a function factory: its handlers are registered one by one
        for stable_type in (*instance_types, *user_types):
            for kind, packet, handler in _handlers(cls):
                app.register_spot_handler(stable_type, kind, packet, handler)
    return app


def _handlers(cls: type[Any]) -> list[tuple[MessageKind, str, Any]]:
    request, send = MessageKind.REQUEST, MessageKind.SEND
    return [
        (request, "add", cls.add),
        (request, "whoami", cls.whoami),
        (send, "note", cls.note),
        (request, "block", cls.block),
        (send, "block", cls.block_send),
        (request, "close", cls.close),
        (request, "relay", cls.relay),
        (request, "joinable", cls.joinable),
        (request, "activate", cls.activate),
    ]


def client_app() -> App:
    """An App hosting no Spot type (a caller node)."""
    return App()


SECRET = b"zlink-trio spot calls test secret"
"""One cluster secret for the tests that build every node's configuration themselves."""


def server_config(**changes: Any) -> ServerConfig:
    """A hosting node (Object Server role in mesh "test")."""
    return ServerConfig(meshes=(MeshConfig(name="test"),), cluster_secret=SECRET, **changes)


def client_config(**changes: Any) -> ServerConfig:
    """A node that only calls (Object Client role in mesh "test")."""
    return ServerConfig(
        meshes=(MeshConfig(name="test", object_role=ObjectRole.CLIENT),),
        cluster_secret=SECRET,
        **changes,
    )
