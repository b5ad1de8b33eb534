"""Actor direct messaging by ActorId (spec 04 §5).

The target is always the global ActorId: the framework finds the current Ready owner in the
positive route cache or the Location Store, checks the owner fence and submits to the
target's queue. Local and remote targets run the same handler with the same completion.

* Missing, Creating and Store failures are never cached; Missing/Creating → NotFound.
* The owner found no longer owns the Actor → StaleRoute (an Unavailable); the cache entry is
  dropped, and the operation is NEVER re-sent to a freshly resolved owner.
* No automatic retry after a timeout or an unknown outcome (a broken connection): the
  request keeps waiting for its reply until its deadline, then DeadlineExceeded.
* Never admitted (no connection to the owner until the deadline, or its writer lane stayed
  full) → Unavailable.
* This node not admitting (lease lost, closing) → Unavailable / ShuttingDown at once, no
  Store call (``MeshNodeApi.admission_error``).
* An accepted send never expires (its deadline bounds the admission only).
* Direct messaging never creates or changes a session binding.
* Every remote command 24 carries a message id (``operation_id``), unique per node
  lifecycle, so the owner can drop a repeated frame instead of running it twice
  (:mod:`.dedupe`).

Fast paths (no cancel scope: nothing on them can block). When the route is cached:

* local (it names this node lifecycle and the Actor is published here): the payload is
  admitted into the Actor's queue without waiting. A send then completes; it checks for
  cancellation every time but is a schedule point only every :data:`SEND_YIELD_EVERY`
  local sends of this node (and whenever it has to wait), so a burst of tells is drained
  by the engine in batches instead of one scheduler tick per message. A request parks
  once, on its reply slot;
* remote, with the owner's connection admitted: the command 24 is written or queued
  without waiting for lane space. A request then parks on its pending reply.

A waiting request ends at its deadline through the runtime's one
:class:`~.deadlines.ReplyDeadlines` timer instead of a cancel scope per request.
Everything else (cache miss, a full queue or writer lane, an Actor being committed here,
an owner not connected) takes the general path, under the operation's cancel scope.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final, final

import trio

from ..config import ServerConfig
from ..engine.oneshot import OneShot
from ..errors import CapacityExceeded, DeadlineExceeded, NotFound, StaleRoute, Unavailable
from ..ids import ActorId, OperationId
from ..mesh.api import (
    LinkLost,
    MeshNodeApi,
    PeerAddress,
    PeerGone,
    PeerNotAdmitted,
    PeerState,
    PendingReply,
)
from ..routing.route_cache import Route, RouteCache
from ..store.api import LocationStore
from ..wire.enums import MessageKind
from ..wire.records import ActorSend, TerminalReply
from ..wire.tails import ReplyPayloadTail
from .authority import Authority
from .deadlines import ReplyDeadlines
from .durable import remaining_ms
from .host import ActorHost
from .hosted import Deliver
from .sinks import raise_for_failure

__all__ = ["NEVER", "SEND_YIELD_EVERY", "Messenger"]

NEVER: Final = math.inf
"""The run-by time of an accepted one-way send: it never expires (only a request, whose
caller has already been answered DeadlineExceeded, is skipped once its deadline passed)."""

SEND_YIELD_EVERY: Final = 64
"""A local send that needs no wait is a schedule point once per this many sends."""

_SEND: Final = MessageKind.SEND
_REQUEST: Final = MessageKind.REQUEST


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
        authority: Authority,
        deadlines: ReplyDeadlines,
    ) -> None:
        self._config = config
        self._authority = authority
        cache = authority.cache
        self._deadlines = deadlines
        self._node = node
        self._store = store
        self._host = host
        self._cache = cache
        self._message_ids = 0
        self._unyielded = 0
        self.stale_routes = 0

    @property
    def cache(self) -> RouteCache[ActorId]:
        return self._cache

    async def resolve(self, actor_id: ActorId) -> Route:
        """The current Ready owner of ``actor_id`` (cache, else one Store read)."""
        route = self._cache.get(actor_id, self._store.recovery_epoch)
        if route is not None:
            return route
        _row, route = await self._authority.resolve(actor_id)
        if route is None:
            raise NotFound(f"actor {actor_id.value!r} has no Ready authority")
        return route

    def _is_local(self, route: Route) -> bool:
        me = self._node.identity
        return route.node_rid == me.node_rid and route.node_generation == me.node_generation

    async def send(self, actor_id: ActorId, packet: str, payload: bytes, deadline: float) -> None:
        """One-way: completes once the payload was admitted. ``deadline`` bounds the
        admission only: an accepted send never expires (it runs however busy the Actor)."""
        refused = self._node.admission_error()
        if refused is not None:
            await trio.lowlevel.checkpoint()
            raise refused
        route = self._cache.get(actor_id, self._store.recovery_epoch)
        if route is not None:
            if self._is_local(route):
                hosted = self._host.ready(actor_id)
                if hosted is not None:
                    await trio.lowlevel.checkpoint_if_cancelled()
                    lane = hosted.lane
                    assert lane is not None
                    try:
                        lane.submit_nowait(Deliver(_SEND, packet, payload, None, NEVER))
                    except CapacityExceeded:
                        pass  # full: wait for space on the general path
                    else:
                        self._unyielded += 1
                        if self._unyielded >= SEND_YIELD_EVERY:
                            self._unyielded = 0
                            await trio.lowlevel.cancel_shielded_checkpoint()
                        return
            else:
                peer = PeerAddress(route.mesh_name, route.node_rid)
                if self._node.peer_state(peer) is PeerState.ADMITTED:
                    build = self._builder(actor_id, route, _SEND, packet, payload, deadline)
                    try:
                        await self._node.send(peer, build(0), wait=False)
                    except (PeerNotAdmitted, trio.WouldBlock):
                        pass  # nothing was queued: the general path waits for it
                    else:
                        return
        await self.deliver(actor_id, _SEND, packet, payload, deadline, route)

    async def request(
        self, actor_id: ActorId, packet: str, payload: bytes, deadline: float
    ) -> bytes | None:
        """Request: the handler's reply (or None), or its typed error."""
        refused = self._node.admission_error()
        if refused is not None:
            await trio.lowlevel.checkpoint()
            raise refused
        route = self._cache.get(actor_id, self._store.recovery_epoch)
        if route is not None:
            if self._is_local(route):
                hosted = self._host.ready(actor_id)
                if hosted is not None:
                    await trio.lowlevel.checkpoint_if_cancelled()
                    lane = hosted.lane
                    assert lane is not None
                    slot: OneShot[bytes | None] = OneShot()
                    try:
                        lane.submit_nowait(Deliver(_REQUEST, packet, payload, slot, deadline))
                    except CapacityExceeded:
                        pass  # full: wait for space on the general path
                    else:
                        ticket = self._deadlines.watch(slot, deadline)
                        try:
                            return await slot.wait()
                        except Unavailable:
                            self._suspect(actor_id, route)
                            raise
                        finally:
                            self._deadlines.settled(ticket)
            else:
                peer = PeerAddress(route.mesh_name, route.node_rid)
                if self._node.peer_state(peer) is PeerState.ADMITTED:
                    build = self._builder(actor_id, route, _REQUEST, packet, payload, deadline)
                    try:
                        pending = await self._node.request_with(peer, build, wait=False)
                    except (PeerNotAdmitted, trio.WouldBlock):
                        pass  # nothing was sent: the general path waits for it
                    else:
                        ticket = self._deadlines.watch(pending, deadline)
                        try:
                            return await self._remote_reply(actor_id, route, pending)
                        finally:
                            self._deadlines.settled(ticket)
        return await self.deliver(actor_id, _REQUEST, packet, payload, deadline, route)

    def _builder(
        self,
        actor_id: ActorId,
        route: Route,
        kind: MessageKind,
        packet: str,
        payload: bytes,
        deadline: float,
    ) -> Callable[[int], ActorSend]:
        """``build(correlation)``: the command 24 for this message, with a fresh message
        id (the owner's repeat filter) and the remaining deadline."""
        me = self._node.identity
        self._message_ids += 1
        message_id = OperationId(self._message_ids)
        timeout_ms = remaining_ms(deadline)

        def build(correlation: int) -> ActorSend:
            return ActorSend(
                correlation=correlation,
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
                timeout_ms=timeout_ms,
                operation_id=message_id,
            )

        return build

    async def _remote_reply(
        self, actor_id: ActorId, route: Route, pending: PendingReply
    ) -> bytes | None:
        """Wait for the terminal of a request that went out (never re-sent: after a
        broken connection its reply may still come back over the next one)."""
        while True:
            try:
                reply: TerminalReply = await pending.wait()
            except PeerGone:
                # The owner's lifecycle ended: no reply can come any more (spec 04:
                # "owner process ended" ends an operation at once, Unavailable). Unless
                # this node itself stopped admitting (lease lost, closing): every peer
                # went GONE because of that; say so.
                self._cache.invalidate(actor_id, route)
                refused = self._node.admission_error()
                if refused is not None:
                    raise refused from None
                raise Unavailable(
                    f"actor {actor_id.value!r}: its owner's lifecycle ended before the reply"
                ) from None
            except LinkLost:
                continue
            return self._checked(actor_id, route, reply)

    async def deliver(
        self,
        actor_id: ActorId,
        kind: MessageKind,
        packet: str,
        payload: bytes,
        deadline: float,
        route: Route | None = None,
    ) -> bytes | None:
        """The general path: submit one payload; for a request, wait for its terminal
        (one deadline). ``route``: the cached route the caller already looked up."""
        admitted = False
        with trio.move_on_at(deadline):
            if route is None:
                route = await self.resolve(actor_id)
            me = self._node.identity
            if route.node_rid == me.node_rid:
                if route.node_generation != me.node_generation:
                    raise self._stale(actor_id, route, "the route names an older lifecycle")
                slot: OneShot[bytes | None] | None = None
                run_by = NEVER  # an accepted send never expires
                if kind is _REQUEST:
                    slot, run_by = OneShot(), deadline
                try:
                    await self._host.admit(actor_id, Deliver(kind, packet, payload, slot, run_by))
                except StaleRoute as exc:
                    raise self._stale(actor_id, route, exc.message) from None
                admitted = True
                if slot is None:
                    await trio.lowlevel.cancel_shielded_checkpoint()
                    return None
                # Also watched by the runtime's timer: when the runtime stops, a request
                # waiting here ends ShuttingDown instead of waiting for its deadline.
                ticket = self._deadlines.watch(slot, deadline)
                try:
                    return await slot.wait()
                except Unavailable:
                    self._suspect(actor_id, route)
                    raise
                finally:
                    self._deadlines.settled(ticket)
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
                build = self._builder(actor_id, route, kind, packet, payload, deadline)
                try:
                    if kind is _SEND:
                        await self._node.send(peer, build(0))  # a send carries no correlation
                        return None
                    pending = await self._node.request_with(peer, build)
                except PeerNotAdmitted:
                    await trio.lowlevel.checkpoint()
                    continue
                except DeadlineExceeded:
                    # The writer lane to the owner stayed full: nothing was queued, the
                    # message was never admitted (spec 04 §8.1: Unavailable).
                    raise Unavailable(
                        f"actor {actor_id.value!r}: the connection to its owner stayed "
                        "congested; the message was not sent"
                    ) from None
                admitted = True
                break
            ticket = self._deadlines.watch(pending, deadline)  # as above: ShuttingDown
            try:
                return await self._remote_reply(actor_id, route, pending)
            finally:
                self._deadlines.settled(ticket)
        if admitted:
            raise DeadlineExceeded(f"no reply from actor {actor_id.value!r} before the deadline")
        raise Unavailable(f"actor {actor_id.value!r} could not be reached before the deadline")

    def _checked(self, actor_id: ActorId, route: Route, reply: TerminalReply) -> bytes | None:
        try:
            return _payload_of(reply)
        except Unavailable:
            self._suspect(actor_id, route)
            raise

    def _suspect(self, actor_id: ActorId, route: Route) -> None:
        # The owner could not serve it (no longer owns it, destroying, lease gone): the
        # cached route is suspect. The next call resolves afresh; this one is not re-sent.
        self._cache.invalidate(actor_id, route)
        self.stale_routes += 1

    def _stale(self, actor_id: ActorId, route: Route, why: str) -> StaleRoute:
        self._cache.invalidate(actor_id, route)
        self.stale_routes += 1
        return StaleRoute(f"actor {actor_id.value!r}: {why}")
