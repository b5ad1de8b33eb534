"""Actor direct messaging by ActorId (spec 04 §5).

The target is always the global ActorId: the framework finds the current Ready owner in the
positive route cache or the Location Store, checks the owner fence and submits to the
target's queue. Local and remote targets run the same handler with the same completion.

* Missing, Creating and Store failures are never cached; Missing/Creating → NotFound.
* The owner found no longer owns the Actor → StaleRoute (an Unavailable); the cache entry is
  dropped, and the operation is NEVER re-sent to a freshly resolved owner.
* No automatic retry after a timeout or an unknown outcome (a broken connection): the
  request keeps waiting for its reply until its deadline, then DeadlineExceeded.
* Never admitted (no connection to the owner until the deadline) → Unavailable.
* Direct messaging never creates or changes a session binding.
"""

from __future__ import annotations

from typing import final

import trio

from ..config import ServerConfig
from ..errors import DeadlineExceeded, NotFound, StaleRoute, Unavailable
from ..ids import ActorId
from ..mesh.api import LinkLost, MeshNodeApi, PeerAddress, PeerNotAdmitted, PeerState
from ..routing.route_cache import Route, RouteCache
from ..store.api import AuthorityState, LocationStore, ObjectKey
from ..wire.enums import MessageKind
from ..wire.records import ActorSend, TerminalReply
from ..wire.tails import ReplyPayloadTail
from .durable import remaining_ms
from .host import ActorHost
from .hosted import Deliver
from .sinks import LocalSink, raise_for_failure

__all__ = ["Messenger"]


def _payload_of(reply: TerminalReply) -> bytes | None:
    raise_for_failure(reply)
    tail = reply.tail
    if isinstance(tail, ReplyPayloadTail):
        return tail.payload
    return None


@final
class Messenger:
    def __init__(
        self,
        *,
        config: ServerConfig,
        node: MeshNodeApi,
        store: LocationStore,
        host: ActorHost,
        cache: RouteCache[ActorId],
    ) -> None:
        self._config = config
        self._node = node
        self._store = store
        self._host = host
        self._cache = cache
        self.stale_routes = 0

    @property
    def cache(self) -> RouteCache[ActorId]:
        return self._cache

    async def resolve(self, actor_id: ActorId) -> Route:
        """The current Ready owner of ``actor_id`` (cache, else one Store read)."""
        epoch = self._store.recovery_epoch
        route = self._cache.get(actor_id, epoch)
        if route is not None:
            return route
        read_at = trio.current_time()
        row = await self._store.read(ObjectKey.actor(actor_id.value))
        if row is None or row.state is not AuthorityState.READY:
            self._cache.invalidate(actor_id)
            raise NotFound(f"actor {actor_id.value!r} has no Ready authority")
        route = Route(
            mesh_name=row.owner.mesh_name,
            node_rid=row.owner.node_rid,
            node_generation=row.owner.node_generation,
            lease_generation=row.owner.lease_generation,
            object_generation=row.object_generation,
            owner_generation=row.owner_generation,
            store_version=row.store_version,
        )
        self._cache.observe_version(actor_id, row.store_version)
        self._cache.put(actor_id, route, epoch, read_at=read_at)
        return route

    async def deliver(
        self,
        actor_id: ActorId,
        kind: MessageKind,
        packet: str,
        payload: bytes,
        deadline: float,
    ) -> bytes | None:
        """Submit one payload; for a request, wait for its terminal (one deadline)."""
        admitted = False
        with trio.move_on_at(deadline):
            route = await self.resolve(actor_id)
            me = self._node.identity
            if route.node_rid == me.node_rid:
                if route.node_generation != me.node_generation:
                    raise self._stale(actor_id, route, "the route names an older lifecycle")
                sink = LocalSink() if kind is MessageKind.REQUEST else None
                try:
                    await self._host.admit(actor_id, Deliver(kind, packet, payload, sink, deadline))
                except StaleRoute as exc:
                    raise self._stale(actor_id, route, exc.message) from None
                admitted = True
                if sink is None:
                    return None
                return self._checked(actor_id, route, await sink.wait())
            peer = PeerAddress(route.mesh_name, route.node_rid)
            refreshed = False
            while True:
                state = self._node.peer_state(peer)
                if state is PeerState.GONE and not refreshed:
                    refreshed = True  # the route came from the Store: our peer view may lag
                    await self._node.refresh_peers()
                    continue
                if state is PeerState.GONE:
                    raise self._stale(actor_id, route, "the owner node is gone")
                if state is PeerState.CONNECTING:
                    await self._node.wait_peer_change(peer)
                    continue
                record = ActorSend(
                    # node.request() stamps the real correlation; a send carries none
                    correlation=1 if kind is MessageKind.REQUEST else 0,
                    source_rid=me.node_rid,
                    source_generation=me.node_generation,
                    target_rid=route.node_rid,
                    target_generation=route.node_generation,
                    actor_id=actor_id,
                    route_object_generation=route.object_generation,
                    expected_owner_generation=route.owner_generation,
                    owner_lease_generation=route.lease_generation,
                    message_kind=kind,
                    packet_name=packet,
                    payload=payload,
                    timeout_ms=remaining_ms(deadline),
                )
                try:
                    if kind is MessageKind.SEND:
                        await self._node.send(peer, record)
                        return None
                    pending = await self._node.request(peer, record)
                except PeerNotAdmitted:
                    await trio.lowlevel.checkpoint()
                    continue
                admitted = True
                break
            while True:
                try:
                    reply: TerminalReply = await pending.wait()
                except LinkLost:
                    # Unknown outcome: never re-sent; the reply may still come back.
                    continue
                return self._checked(actor_id, route, reply)
        if admitted:
            raise DeadlineExceeded(f"no reply from actor {actor_id.value!r} before the deadline")
        raise Unavailable(f"actor {actor_id.value!r} could not be reached before the deadline")

    def _checked(self, actor_id: ActorId, route: Route, reply: TerminalReply) -> bytes | None:
        try:
            return _payload_of(reply)
        except Unavailable:
            # The owner could not serve it (no longer owns it, destroying, lease gone): the
            # cached route is suspect. The next call resolves afresh; this one is not re-sent.
            self._cache.invalidate(actor_id, route)
            self.stale_routes += 1
            raise

    def _stale(self, actor_id: ActorId, route: Route, why: str) -> StaleRoute:
        self._cache.invalidate(actor_id, route)
        self.stale_routes += 1
        return StaleRoute(f"actor {actor_id.value!r}: {why}")
