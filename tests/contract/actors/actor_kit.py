"""Shared pieces of the Actor contract tests: an instrumented application and helpers.

Everything here uses the public surface (App, open_server via open_cluster, server.actors)
and the zlink_trio.testing hooks; counts are taken by the application code itself (factory
runs, callbacks, handler logs) the way a user's test would.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import attrs
import trio

from zlink_trio import App, StoreOutcomeUnknown, Unavailable
from zlink_trio.actors.handlers import on_request, on_send
from zlink_trio.actors.policy import RecreateOnRelocation
from zlink_trio.spots.approval import ActorCreateEvent, Approve, CreateDecision
from zlink_trio.store.api import LocationStore
from zlink_trio.testing import node_of


class Wrapped:
    """A LocationStore delegating to ``inner``; tests replace single methods on it."""

    def __init__(self, inner: LocationStore) -> None:
        self._inner = inner

    @property
    def recovery_epoch(self) -> int:
        return self._inner.recovery_epoch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


Matcher = Callable[[str, tuple[Any, ...], dict[str, Any]], bool]
"""Whether a Store call ``(method, args, kwargs)`` is one a test watches."""

FAULTS: Final = ("unavailable", "unknown-applied", "unknown-lost")
"""How :class:`StoreFaults` fails a call: ``Unavailable`` without running it (the Store
was not reached), or ``StoreOutcomeUnknown`` after running it or without running it (the
answer was lost)."""


def about_id(object_id: str) -> Matcher:
    """A matcher for the Store calls of one create of ``object_id``: the calls naming its
    key, the placement read (``list_nodes`` of one mesh) and the calls only creates make
    (terminal records, creation request roots, reclaim checks)."""

    def matches(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        if method in ("read_terminal", "put_root", "read_root", "owner_live", "now"):
            return True
        if method == "list_nodes":
            return bool(args) or "mesh_name" in kwargs
        if method == "reserve":
            return bool(args[0].key.object_id == object_id)
        if method in ("read", "commit_ready", "abort_creation", "reclaim"):
            return bool(args[0].object_id == object_id)
        return False

    return matches


class StoreFaults:
    """A LocationStore delegating to ``inner`` that records the calls a :data:`Matcher`
    selects (once :meth:`watch` armed it) and fails exactly one of them: the
    ``fail_at``-th (0-based), the way ``fault`` (one of :data:`FAULTS`) says. ``results``
    keeps what each watched ``abort_creation`` answered, with whether it carried a
    terminal record."""

    def __init__(self, inner: LocationStore) -> None:
        self._inner = inner
        self._matches: Matcher | None = None
        self._fail_at: int | None = None
        self._fault = "unavailable"
        self.calls: list[str] = []
        self.fired: str | None = None
        self.aborts: list[tuple[bool, object]] = []

    @property
    def recovery_epoch(self) -> int:
        return self._inner.recovery_epoch

    def watch(self, matches: Matcher, *, fail_at: int | None = None, fault: str = "") -> None:
        self._matches = matches
        self._fail_at = fail_at
        self._fault = fault or "unavailable"
        self.calls = []
        self.fired = None
        self.aborts = []

    def stop(self) -> None:
        self._matches = None

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._inner, name)
        if name.startswith("_") or not callable(real):
            return real

        async def call(*args: Any, **kwargs: Any) -> Any:
            matches = self._matches
            if matches is None or not matches(name, args, kwargs):
                return await real(*args, **kwargs)
            index = len(self.calls)
            self.calls.append(name)
            if index == self._fail_at:
                self.fired = f"{name}#{index}:{self._fault}"
                if self._fault == "unknown-applied":
                    await real(*args, **kwargs)
                    raise StoreOutcomeUnknown(f"test: the answer of {name} was lost")
                await trio.lowlevel.checkpoint()
                if self._fault == "unknown-lost":
                    raise StoreOutcomeUnknown(f"test: {name} was cut short")
                raise Unavailable(f"test: the Store did not answer {name}")
            result = await real(*args, **kwargs)
            if name == "abort_creation":
                self.aborts.append((kwargs.get("terminal") is not None, result))
            return result

        return call


@attrs.define
class Recorder:
    """What the application observed, across every node of a cluster."""

    factory_runs: dict[str, int] = attrs.field(factory=dict)
    """Per ActorId."""
    on_create_calls: int = 0
    handled: list[tuple[str, int, str, bytes]] = attrs.field(factory=list)
    """(actor id, object generation, packet, payload) in handling order."""
    gate: trio.Event | None = None
    """When set, handlers of packet "block" wait on it."""
    entered: trio.Event = attrs.field(factory=trio.Event)
    _changed: trio.Event = attrs.field(factory=trio.Event)

    def runs(self, actor_id: str) -> int:
        return self.factory_runs.get(actor_id, 0)

    def record(self, entry: tuple[str, int, str, bytes]) -> None:
        self.handled.append(entry)
        self._changed.set()
        self._changed = trio.Event()

    async def wait_handled(self, count: int) -> None:
        """Wait until at least ``count`` payloads were handled (event-driven)."""
        while len(self.handled) < count:
            await self._changed.wait()


OnCreate = Callable[[ActorCreateEvent], Awaitable[CreateDecision]]


def make_app(
    rec: Recorder,
    *,
    types: tuple[str, ...] = ("player",),
    on_create: OnCreate | None = None,
) -> App:
    """An App with Actor dispatch and the given stable types, all sharing one class."""
    app = App()
    app.enable_actor_dispatch()

    class Player:
        def __init__(self, context: Any) -> None:
            self.context = context
            key = context.actor_id.value
            rec.factory_runs[key] = rec.factory_runs.get(key, 0) + 1

        def _log(self, packet: str, payload: bytes) -> None:
            ctx = self.context
            rec.record((ctx.actor_id.value, ctx.object_generation.value, packet, payload))

        @on_request("echo")
        async def echo(self, payload: bytes) -> bytes:
            self._log("echo", payload)
            return payload

        @on_send("note")
        async def note(self, payload: bytes) -> None:
            self._log("note", payload)

        @on_request("block")
        async def block(self, payload: bytes) -> bytes:
            self._log("block", payload)
            rec.entered.set()
            if rec.gate is not None:
                await rec.gate.wait()
            return b"unblocked"

        @on_send("forward")
        async def forward(self, payload: bytes) -> None:
            # Actor-to-Actor: payload is b"<target id>|<data>"
            target, _, data = payload.partition(b"|")
            self._log("forward", payload)
            await self.context.actors.send(target.decode(), "note", data)

        @on_request("whoami")
        async def whoami(self, payload: bytes) -> bytes:
            return self.context.spot_id.value.encode() if self.context.spot_id else b""

        @on_request("fail")
        async def fail(self, payload: bytes) -> bytes:
            raise RuntimeError("handler failed on purpose")

    for st in types:
        app.register_actor(st, Player, relocation=RecreateOnRelocation())

    async def counting(event: ActorCreateEvent) -> CreateDecision:
        rec.on_create_calls += 1
        if on_create is not None:
            return await on_create(event)
        return Approve()

    app.on_create_actor(counting)
    return app


def client_app() -> App:
    """An App with Actor dispatch that hosts no Actor type (a caller-only node)."""
    app = App()
    app.enable_actor_dispatch()
    return app


async def blackout(cluster: Any, plan: Any, source: int, target: int) -> None:
    """Partition node ``source`` from node ``target`` (no connection between them is
    admitted until ``plan.heal``/``plan.clear``) and return once ``source`` sees the peer
    as no longer admitted. The connection intent stays: the peer is CONNECTING, not GONE."""
    from zlink_trio.mesh.api import PeerAddress, PeerState
    from zlink_trio.wire.peer import PeerPing

    node = node_of(cluster.servers[source])
    host = cluster.servers[target].identity.node_rid
    (mesh,) = {m.name for m in cluster.servers[target].config.meshes}
    address = PeerAddress(mesh, host)
    plan.partition(cluster.servers[source].identity.node_rid, host)
    if node.peer_state(address) is PeerState.ADMITTED:
        await node.send(address, PeerPing(token=1))  # its link is cut at this frame
    while node.peer_state(address) is PeerState.ADMITTED:
        await node.wait_peer_change(address)
