"""Shared pieces of the User Spot contract tests: an instrumented application and helpers.

Everything here uses the public surface (App, open_server via open_cluster,
server.spots) and the ``zlink_trio.testing`` hooks; counts are taken by the application
code itself (factory runs, create callbacks, requests seen) the way a user's test would,
and by ``spot_statistics`` for what only the runtime sees.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio

from zlink_trio import (
    App,
    Approve,
    DisableRelocation,
    PerActor,
    RecreateOnRelocation,
    Reject,
    SpotCallback,
    SpotContext,
    SpotKind,
    SpotWide,
    on_lifecycle,
    on_request,
)


@attrs.define
class SpotRecorder:
    """What the application observed, across every node of a cluster."""

    factory_runs: dict[str, int] = attrs.field(factory=dict)
    """Per SpotId."""
    create_callbacks: dict[str, int] = attrs.field(factory=dict)
    requests: dict[str, bytes | None] = attrs.field(factory=dict)
    """The creation request the create callback saw, per SpotId (the last one)."""
    closes: list[str] = attrs.field(factory=list)
    """SpotIds whose CLOSE callback ran, in order."""
    leaves: int = 0
    gate: trio.Event | None = None
    """When set, create callbacks wait on it (a factory in progress)."""
    entered: trio.Event = attrs.field(factory=trio.Event)

    def runs(self, spot_id: str) -> int:
        return self.factory_runs.get(spot_id, 0)

    def callbacks(self, spot_id: str) -> int:
        return self.create_callbacks.get(spot_id, 0)

    @property
    def total_runs(self) -> int:
        return sum(self.factory_runs.values())


def make_spot_class(rec: SpotRecorder) -> type:
    """A Spot class whose create callback approves with reply ``b"hi:" + request[:16]``, and
    rejects the request ``b"reject"`` with reply ``b"no"``."""

    class Room:
        def __init__(self, context: SpotContext) -> None:
            self.context = context
            key = context.spot_id.value
            rec.factory_runs[key] = rec.factory_runs.get(key, 0) + 1

        @on_lifecycle(SpotCallback.CREATE)
        async def created(self, request: bytes | None) -> Approve | Reject:
            key = self.context.spot_id.value
            rec.create_callbacks[key] = rec.create_callbacks.get(key, 0) + 1
            rec.requests[key] = request
            rec.entered.set()
            if rec.gate is not None:
                await rec.gate.wait()
            if request == b"reject":
                return Reject(reply=b"no")
            return Approve(reply=b"hi:" + (request or b"")[:16])

        @on_lifecycle(SpotCallback.LEAVE)
        async def left(self, event: object) -> None:
            rec.leaves += 1

        @on_lifecycle(SpotCallback.CLOSE)
        async def closing(self, event: object) -> None:
            rec.closes.append(self.context.spot_id.value)

        @on_request("ping")
        async def ping(self, payload: bytes) -> bytes:
            return payload

    return Room


def spot_app(
    rec: SpotRecorder, *, types: tuple[str, ...] = ("room",), per_actor: tuple[str, ...] = ()
) -> App:
    """An App hosting the User Spot ``types`` (SpotWide; ``per_actor`` ones PerActor)."""
    app = App()
    cls = make_spot_class(rec)
    for st in types:
        app.register_spot(st, cls, execution=SpotWide(), relocation=DisableRelocation())
    for st in per_actor:
        app.register_spot(st, cls, execution=PerActor(), relocation=RecreateOnRelocation())
    return app


def instance_app(
    rec: SpotRecorder, *, types: tuple[str, ...] = ("cart",), with_user: bool = True
) -> App:
    """An App hosting the Instance Spot ``types`` (and, ``with_user``, the User Spot type
    "room")."""
    app = spot_app(rec) if with_user else App()

    class Cart:
        def __init__(self, context: SpotContext) -> None:
            self.context = context

    for st in types:
        app.register_spot(st, Cart, kind=SpotKind.INSTANCE, relocation=DisableRelocation())
    return app


def caller_app() -> App:
    """An App that hosts no Spot type (a caller-only node)."""
    return App()


def hosts(rec: SpotRecorder, host: int = 0, **kwargs: Any) -> Any:
    """``app(index)`` for open_cluster: node ``host`` hosts the Spot types, the others
    only call."""

    def app(index: int) -> App:
        return spot_app(rec, **kwargs) if index == host else caller_app()

    return app


TTL = 1.0
"""Lease of the owner-loss tests (renewed every 0.3 s): a crashed owner's rows become
reclaimable one second of store time after its last renewal."""


def short_leases() -> Any:
    """``config(index)`` of a cluster with 1 s leases and no periodic sweep (only the
    startup round runs: the lazy reclaim paths are what is tested)."""
    from zlink_trio import ServerConfig

    def config(index: int) -> ServerConfig:
        return ServerConfig(
            owner_lease_ttl=TTL,
            owner_lease_renew_interval=0.3,
            descriptor_poll_interval=0.2,
            reclaim_sweep_interval=3600.0,
        )

    return config


async def wait_gone(servers: Any, rid: Any) -> None:
    """Wait until every server sees the node lifecycle ``rid`` GONE (its descriptor
    watcher dropped it: the lease expired by the Store's clock)."""
    from zlink_trio.mesh.api import PeerAddress, PeerState
    from zlink_trio.testing import node_of

    for server in servers:
        node = node_of(server)
        (mesh,) = node.meshes
        address = PeerAddress(mesh, rid)
        while node.peer_state(address) is not PeerState.GONE:
            await node.wait_peer_change(address)
    await trio.lowlevel.checkpoint()
