"""Message delivery to an object's current owner: the one routing component (spec 04 §5).

An object (an Actor today; a Spot next) is addressed by its global key. Delivery finds its
current Ready owner in the positive route cache or through the authority reader, checks
the owner fence and submits to the target's queue; local and remote targets run the same
handler with the same completion. What is particular to one kind of target (how its
hosted queue is found, what the queued item is, which command carries the message to a
remote owner: 24 for an Actor, 39 for a Spot) is its :class:`DeliveryTarget` adapter.

* Missing, Creating and Store failures are never cached; Missing/Creating → NotFound.
* The owner found no longer owns the object → StaleRoute (an Unavailable); the cache
  entry is dropped, and the operation is NEVER re-sent to a freshly resolved owner.
* No automatic retry after a timeout or an unknown outcome (a broken connection): the
  request keeps waiting for its reply until its deadline, then DeadlineExceeded.
* The owner has no admitted connection: the call asks for a dial now
  (:meth:`~zlink_trio.mesh.api.MeshNodeApi.connect`) and waits for its outcome at most
  ``connect_timeout`` (less if its deadline is sooner). If the owner cannot be reached
  (the dial failed, ``connect_timeout`` passed, or its lifecycle is GONE), the call is
  never sent: the :class:`Unreachable` policy decides how it ends from a fresh look at the
  Store (the owner's lease live → Unavailable; expired → the row is reclaimed and the id
  is Missing → NotFound; the row moved on → StaleRoute). A one-way send ends the same way
  (it was not admitted, so its caller is told).
* Never admitted (no connection to the owner until the deadline, or its writer lane stayed
  full) → Unavailable.
* This node not admitting (lease lost, closing) → Unavailable / ShuttingDown at once, no
  Store call (``MeshNodeApi.admission_error``).
* An accepted send never expires (its deadline bounds the admission only).
* Every remote message carries a message id, unique per node lifecycle, so the owner can
  drop a repeated frame instead of running it twice.
* Payloads: bytes, or a :class:`~zlink_trio.wire.payloads.TypedPayload` that is handed to
  a local target as it is and encoded only when it leaves the process (an encoded payload
  over the request limit fails with InvalidOperation before anything is sent). A request's
  reply is shaped by :func:`~zlink_trio.wire.payloads.reply_value` (bytes, or the stated
  reply type), the same for local and remote replies.

Fast paths (no cancel scope: nothing on them can block). When the route is cached:

* local (it names this node lifecycle and the target is published here): the payload is
  admitted into the target's queue without waiting. A send then completes; it checks for
  cancellation every time but is a schedule point only every :data:`SEND_YIELD_EVERY`
  local sends of this node (and whenever it has to wait), so a burst of tells is drained
  by the engine in batches instead of one scheduler tick per message. A request parks
  once, on its reply slot;
* remote, with the owner's connection admitted: the command is written or queued without
  waiting for lane space. A request then parks on its pending reply.

A waiting request ends at its deadline through the runtime's one deadline timer
(:class:`Deadlines`) instead of a cancel scope per request. Everything else (cache miss, a
full queue or writer lane, a target being committed here, an owner not connected) takes
the general path, under the operation's cancel scope.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Coroutine
from typing import Any, Final, Generic, Protocol, TypeVar

import trio

from ..engine.clock import run_clock
from ..engine.oneshot import OneShot
from ..errors import (
    CapacityExceeded,
    DeadlineExceeded,
    InvalidOperation,
    NotFound,
    StaleRoute,
    Unavailable,
    ZLinkError,
)
from ..mesh.api import (
    EncodedCommand,
    LinkLost,
    MeshNodeApi,
    PeerAddress,
    PeerGone,
    PeerNotAdmitted,
    PeerState,
    PendingReply,
    connect_until,
)
from ..observe import FlowEvent, FlowTrace
from ..wire.enums import MessageKind
from ..wire.payloads import PayloadCodec, TypedPayload, reply_value
from .deadline import caller_deadline, yield_to_caller, yield_to_caller_scope
from .route_cache import Route, RouteCache

__all__ = [
    "NEVER",
    "SEND_YIELD_EVERY",
    "Deadlines",
    "Delivery",
    "DeliveryTarget",
    "Payload",
    "Resolver",
    "Unreachable",
]

K = TypeVar("K")
K_contra = TypeVar("K_contra", contravariant=True)

NEVER: Final = math.inf
"""The run-by time of an accepted one-way send: it never expires (only a request, whose
caller has already been answered DeadlineExceeded, is skipped once its deadline passed)."""

SEND_YIELD_EVERY: Final = 64
"""A local send that needs no wait is a schedule point once per this many sends."""

_SEND: Final = MessageKind.SEND
_REQUEST: Final = MessageKind.REQUEST

Payload = bytes | TypedPayload
Reply = bytes | TypedPayload | None


class _Lane(Protocol):
    def submit_nowait(self, item: Any, /) -> object: ...

    @property
    def idle(self) -> bool: ...


class DeliveryTarget(Protocol[K_contra]):
    """What delivery needs of one kind of target (an adapter per kind)."""

    def describe(self, key: K_contra) -> str:
        """How errors name the target, e.g. ``actor 'cart-1'``."""
        ...

    def ready_lane(self, key: K_contra) -> _Lane | None:
        """The queue of the target published Ready on this node, or None."""
        ...

    def item(
        self, kind: MessageKind, packet: str, payload: Payload, sink: Any, run_by: float
    ) -> Any:
        """The queued item of one message (``sink`` None for a one-way send)."""
        ...

    def abandon(self, item: Any) -> None:
        """The caller of a queued request ``item`` is gone (its cancel scope ended the
        wait): the item must never start."""
        ...

    async def admit(self, key: K_contra, item: Any) -> None:
        """Queue ``item`` on the target hosted here, waiting while it is committed here
        or its queue is full. Raises StaleRoute (not hosted here) or Unavailable."""
        ...

    def follow_route(self, key: K_contra) -> Route | None:
        """The committed Message Follow route of ``key`` from this node (it moved away),
        or None."""
        ...

    def command(
        self,
        key: K_contra,
        route: Route,
        kind: MessageKind,
        packet: str,
        payload: bytes,
        deadline: float,
        message_id: int,
    ) -> Callable[[int], Any]:
        """``build(correlation)``: the wire command carrying this message to the owner
        (a :class:`~zlink_trio.mesh.api.EncodedCommand` may also write its body without
        the record being built)."""
        ...

    def result(self, reply: Any) -> bytes | None:
        """The reply payload of a remote request's terminal; raises the error it carries."""
        ...


class Resolver(Protocol[K]):
    """The authority reader: every read teaches the route cache."""

    @property
    def cache(self) -> RouteCache[K]: ...

    async def resolve(self, key: K) -> tuple[object, Route | None]: ...


class _Epoch(Protocol):
    @property
    def recovery_epoch(self) -> int: ...


class Unreachable(Protocol[K_contra]):
    """How a call ends whose owner cannot be reached (the object layer's policy: it may
    reclaim the row of a dead owner)."""

    async def verdict(
        self, key: K_contra, route: Route, why: str, moved_from: Route | None = None
    ) -> Exception:
        """The error of a call to ``key`` that was never sent because the owner ``route``
        names cannot be reached (``why``); ``route`` is dropped from the cache already.
        ``moved_from``: the route the call had before it took this node's Message Follow
        route ``route`` (the object is moving away from here)."""
        ...


class Deadlines(Protocol):
    """The runtime's one timer of waiting replies."""

    def watch(self, waiter: Any, deadline: float) -> int: ...

    def settled(self, ticket: int) -> None: ...


def _one_way(build: Callable[[int], Any]) -> Any:
    """What a one-way send hands the mesh: the command itself when it can encode its
    body without building its record, else the record (a send carries no correlation)."""
    return build if isinstance(build, EncodedCommand) else build(0)


async def _refuse(error: ZLinkError) -> Any:
    """A call refused before it started (this node does not admit it): raised when
    awaited, after a checkpoint."""
    await trio.lowlevel.checkpoint()
    raise error


class Delivery(Generic[K]):
    """Send to / request one kind of target by its key (see the module docstring)."""

    def __init__(
        self,
        *,
        target: DeliveryTarget[K],
        node: MeshNodeApi,
        store: _Epoch,
        resolver: Resolver[K],
        deadlines: Deadlines,
        max_payload: int,
        flow: FlowTrace,
        connect_timeout: float,
        unreachable: Unreachable[K],
    ) -> None:
        self._target = target
        self._ready_lane = target.ready_lane
        self._item = target.item
        self._resolver = resolver
        self._cache = resolver.cache
        self._deadlines = deadlines
        self._node = node
        self._store = store
        self._max_payload = max_payload
        self._message_ids = 0
        self._unyielded = 0
        self._flow = flow
        self._connect_timeout = connect_timeout
        self._unreachable = unreachable
        self.now: Callable[[], float] = run_clock()
        """``trio.current_time()`` in one call (this run's clock)."""

    @property
    def cache(self) -> RouteCache[K]:
        return self._cache

    def next_message_id(self) -> int:
        """A fresh message id of this node lifecycle (the owner's repeat filter), for a
        command this component does not build itself (a session's relay, spec 02 §5)."""
        self._message_ids += 1
        return self._message_ids

    async def resolve(self, key: K) -> Route:
        """The current Ready owner of ``key`` (cache, else one authority read)."""
        route = self._cache.get(key, self._store.recovery_epoch)
        if route is not None:
            return route
        _row, route = await self._resolver.resolve(key)
        if route is None:
            raise NotFound(f"{self._target.describe(key)} has no Ready authority")
        return route

    def _is_local(self, route: Route) -> bool:
        me = self._node.identity
        # (The ids' values: one comparison each, without the generated ``__eq__`` calls.)
        return (
            route.node_rid.value == me.node_rid.value
            and route.node_generation.value == me.node_generation.value
        )

    def _wire_payload(self, payload: Payload) -> bytes:
        """The bytes a typed payload travels as: encoded now, and checked against the
        request limit (nothing has been sent yet)."""
        assert type(payload) is TypedPayload
        data = payload.encode()
        if len(data) > self._max_payload:
            raise InvalidOperation(
                f"payload {payload.codec.name!r} encodes to {len(data)} bytes, "
                f"over {self._max_payload}"
            )
        return data

    async def send(self, key: K, packet: str, payload: Payload, deadline: float) -> None:
        """One-way: completes once the payload was admitted. ``deadline`` bounds the
        admission only: an accepted send never expires (it runs however busy the target)."""
        refused = self._node.admission_error()
        if refused is not None:
            await trio.lowlevel.checkpoint()
            raise refused
        route = self._cache.get(key, self._store.recovery_epoch)
        if route is not None:
            if self._is_local(route):
                lane = self._ready_lane(key)
                if lane is not None:
                    await trio.lowlevel.checkpoint_if_cancelled()
                    try:
                        lane.submit_nowait(self._item(_SEND, packet, payload, None, NEVER))
                    except CapacityExceeded:
                        pass  # full: wait for space on the general path
                    else:
                        self._unyielded += 1
                        if self._unyielded >= SEND_YIELD_EVERY:
                            self._unyielded = 0
                            await trio.lowlevel.cancel_shielded_checkpoint()
                        return
            else:
                build = self._builder(key, route, _SEND, packet, payload, deadline)
                try:
                    await self._node.send(route.peer, _one_way(build), wait=False)
                except (PeerNotAdmitted, trio.WouldBlock):
                    pass  # nothing was queued: the general path waits for it
                else:
                    return
        await self.deliver(key, _SEND, packet, payload, deadline, route)

    def request(
        self,
        key: K,
        packet: str,
        payload: Payload,
        deadline: float,
        reply: PayloadCodec[Any] | None = None,
    ) -> Coroutine[Any, Any, Any]:
        """Request: the handler's reply (bytes or None; with ``reply``, an object of its
        class), or its typed error.

        ``deadline`` is the call's own (submit + timeout): the caller's effective deadline
        is not looked up yet (see :mod:`zlink_trio.routing.deadline`). Only a local request
        to an idle target goes without it; every other path is bounded by it first.

        A plain function that returns the operation's coroutine (the call's submit): the
        admission check and the cache lookup run now, and a request to a cached remote
        owner is the routed request's own coroutine, without a coroutine frame around it
        (one frame less per step on the hottest cross-node path)."""
        refused = self._node.admission_error()
        if refused is not None:
            return _refuse(refused)
        route = self._cache.get(key, self._store.recovery_epoch)
        if route is not None and not self._is_local(route):
            return self._bounded(key, packet, payload, deadline, reply, route, False)
        return self._request(key, packet, payload, deadline, reply, route)

    def _bounded(
        self,
        key: K,
        packet: str,
        payload: Payload,
        deadline: float,
        reply: PayloadCodec[Any] | None,
        route: Route | None,
        local: bool,
    ) -> Coroutine[Any, Any, Any]:
        """The routed request, bounded by ``deadline`` or by the caller's effective
        deadline when that is not later (then the caller's scope ends it: see
        :func:`~.deadline.yield_to_caller`)."""
        callers = caller_deadline()
        if callers <= deadline:
            return yield_to_caller(
                self._routed_request(key, packet, payload, callers, reply, route, local),
                callers,
            )
        return self._routed_request(key, packet, payload, deadline, reply, route, local)

    async def _request(
        self,
        key: K,
        packet: str,
        payload: Payload,
        deadline: float,
        reply: PayloadCodec[Any] | None,
        route: Route | None,
    ) -> Any:
        """:meth:`request` for a local route or a cache miss (``route``: the cached local
        route, or None)."""
        local = route is not None
        if route is not None:
            lane = self._ready_lane(key)
            if lane is not None and lane.idle:
                await trio.lowlevel.checkpoint_if_cancelled()
                waiter: OneShot[Reply] = OneShot()
                item = self._item(_REQUEST, packet, payload, waiter, deadline)
                try:
                    lane.submit_nowait(item)
                except CapacityExceeded:
                    pass  # (not while idle; the general path below waits for space)
                else:
                    # The caller's scope may end the wait first: the request is then
                    # abandoned, and it never starts.
                    ticket = self._deadlines.watch(waiter, deadline)
                    try:
                        result = await waiter.wait()
                    except Unavailable:
                        self._suspect(key, route)
                        raise
                    except DeadlineExceeded:
                        await yield_to_caller_scope(deadline)
                        raise
                    except trio.Cancelled:
                        self._target.abandon(item)
                        raise
                    finally:
                        self._deadlines.settled(ticket)
                    if reply is None and type(result) is not TypedPayload:
                        return result
                    return reply_value(result, reply)
        return await self._bounded(key, packet, payload, deadline, reply, route, local)

    async def _routed_request(
        self,
        key: K,
        packet: str,
        payload: Payload,
        deadline: float,
        reply: PayloadCodec[Any] | None,
        route: Route | None,
        local: bool,
    ) -> Any:
        """:meth:`request` once admission was checked and the cache consulted
        (``route``: the cached route, None on a miss; ``local``: it names this node
        lifecycle); ``deadline`` is final."""
        if route is not None:
            if local:
                lane = self._ready_lane(key)
                if lane is not None:
                    await trio.lowlevel.checkpoint_if_cancelled()
                    slot: OneShot[Reply] = OneShot()
                    try:
                        lane.submit_nowait(self._item(_REQUEST, packet, payload, slot, deadline))
                    except CapacityExceeded:
                        pass  # full: wait for space on the general path
                    else:
                        ticket = self._deadlines.watch(slot, deadline)
                        try:
                            result = await slot.wait()
                        except Unavailable:
                            self._suspect(key, route)
                            raise
                        finally:
                            self._deadlines.settled(ticket)
                        if reply is None and type(result) is not TypedPayload:
                            return result
                        return reply_value(result, reply)
            else:
                build = self._builder(key, route, _REQUEST, packet, payload, deadline)
                try:
                    pending = await self._node.request_with(route.peer, build, wait=False)
                except (PeerNotAdmitted, trio.WouldBlock):
                    pass  # nothing was sent: the general path waits for it
                else:
                    ticket = self._deadlines.watch(pending, deadline)
                    try:
                        # (the reply's first wait inline: no coroutine of its own on the
                        # hottest cross-node path; after a broken link, _remote_reply)
                        try:
                            terminal = await pending.wait()
                        except PeerGone:
                            raise self._owner_gone(key, route) from None
                        except LinkLost:
                            data = await self._remote_reply(key, route, pending)
                        else:
                            try:
                                data = self._target.result(terminal)
                            except Unavailable:
                                self._suspect(key, route)
                                raise
                    finally:
                        self._deadlines.settled(ticket)
                    return data if reply is None else reply_value(data, reply)
        result = await self.deliver(key, _REQUEST, packet, payload, deadline, route)
        if reply is None and type(result) is not TypedPayload:
            return result
        return reply_value(result, reply)

    def _builder(
        self,
        key: K,
        route: Route,
        kind: MessageKind,
        packet: str,
        payload: Payload,
        deadline: float,
    ) -> Callable[[int], Any]:
        """``build(correlation)``: the wire command of this message, with a fresh message
        id (the owner's repeat filter)."""
        data = payload if type(payload) is bytes else self._wire_payload(payload)
        self._message_ids += 1
        return self._target.command(key, route, kind, packet, data, deadline, self._message_ids)

    async def _remote_reply(self, key: K, route: Route, pending: PendingReply) -> bytes | None:
        """Wait for the terminal of a request that went out (never re-sent: after a
        broken connection its reply may still come back over the next one)."""
        while True:
            try:
                terminal = await pending.wait()
            except PeerGone:
                raise self._owner_gone(key, route) from None
            except LinkLost:
                continue
            try:
                return self._target.result(terminal)
            except Unavailable:
                self._suspect(key, route)
                raise

    def _owner_gone(self, key: K, route: Route) -> ZLinkError:
        """The error of a request whose owner's lifecycle ended before the reply: no
        reply can come any more (spec 04: "owner process ended" ends an operation at once,
        Unavailable). Unless this node itself stopped admitting (lease lost, closing):
        every peer went GONE because of that; say so."""
        self._cache.invalidate(key, route)
        refused = self._node.admission_error()
        if refused is not None:
            return refused
        return Unavailable(
            f"{self._target.describe(key)}: its owner's lifecycle ended before the reply"
        )

    async def deliver(
        self,
        key: K,
        kind: MessageKind,
        packet: str,
        payload: Payload,
        deadline: float,
        route: Route | None = None,
    ) -> Reply:
        """The general path: submit one payload; for a request, wait for its terminal
        (one deadline). ``route``: the cached route the caller already looked up."""
        admitted = False
        target = self._target
        moved_from: Route | None = None  # set when the call takes a Message Follow route
        with trio.move_on_at(deadline):
            if route is None:
                route = await self.resolve(key)
            me = self._node.identity
            if route.node_rid == me.node_rid:
                if route.node_generation != me.node_generation:
                    raise self._stale(key, route, "the route names an older lifecycle")
                slot: OneShot[Reply] | None = None
                run_by = NEVER  # an accepted send never expires
                if kind is _REQUEST:
                    slot, run_by = OneShot(), deadline
                try:
                    await target.admit(key, self._item(kind, packet, payload, slot, run_by))
                except StaleRoute as exc:
                    # Moved away from here: the committed Message Follow route, if any
                    # (no Store read), else the stale route ends the call.
                    followed = target.follow_route(key)
                    if followed is None:
                        raise self._stale(key, route, exc.message) from None
                    moved_from, route = route, followed
                else:
                    admitted = True
                    if slot is None:
                        await trio.lowlevel.cancel_shielded_checkpoint()
                        return None
                    # Also watched by the runtime's timer: when the runtime stops, a
                    # request waiting here ends ShuttingDown instead of at its deadline.
                    ticket = self._deadlines.watch(slot, deadline)
                    try:
                        return await slot.wait()
                    except Unavailable:
                        self._suspect(key, route)
                        raise
                    finally:
                        self._deadlines.settled(ticket)
            peer = route.peer
            refreshed = False
            data = payload if type(payload) is bytes else self._wire_payload(payload)
            while True:
                state = self._node.peer_state(peer)
                if state is PeerState.GONE and not refreshed:
                    refreshed = True  # the route came from the Store: our peer view may lag
                    await self._node.refresh_peers()
                    continue
                if state is PeerState.GONE:
                    raise await self._cannot_reach(
                        key, route, "its owner's lifecycle ended", moved_from
                    )
                if state is PeerState.CONNECTING:
                    if await self._connect(peer, deadline) is PeerState.CONNECTING:
                        raise await self._cannot_reach(
                            key, route, "its owner cannot be dialed", moved_from
                        )
                    continue
                build = self._builder(key, route, kind, packet, data, deadline)
                try:
                    if kind is _SEND:
                        await self._node.send(peer, _one_way(build))
                        return None
                    pending = await self._node.request_with(peer, build)
                except PeerNotAdmitted:
                    await trio.lowlevel.checkpoint()
                    continue
                except DeadlineExceeded:
                    # The writer lane to the owner stayed full: nothing was queued, the
                    # message was never admitted (spec 04 §8.1: Unavailable).
                    raise Unavailable(
                        f"{target.describe(key)}: the connection to its owner stayed "
                        "congested; the message was not sent"
                    ) from None
                admitted = True
                break
            ticket = self._deadlines.watch(pending, deadline)  # as above: ShuttingDown
            try:
                return await self._remote_reply(key, route, pending)
            finally:
                self._deadlines.settled(ticket)
        if admitted:
            raise DeadlineExceeded(f"no reply from {target.describe(key)} before the deadline")
        raise Unavailable(f"{target.describe(key)} could not be reached before the deadline")

    async def _connect(self, peer: PeerAddress, deadline: float) -> PeerState:
        """The outcome of a dial to the CONNECTING ``peer``, waited for at most
        ``connect_timeout`` (the call's deadline, when sooner, ends the call instead):
        CONNECTING means it cannot be reached now."""
        give_up = trio.current_time() + self._connect_timeout
        if deadline <= give_up:
            return await self._node.connect(peer)  # the call's own scope ends it
        return await connect_until(self._node, peer, give_up)

    async def _cannot_reach(
        self, key: K, route: Route, why: str, moved_from: Route | None
    ) -> Exception:
        """The call was never sent: its owner cannot be reached. The route goes; the
        Store tells how the call ends (:class:`Unreachable`)."""
        self._cache.invalidate(key, route)
        return await self._unreachable.verdict(key, route, why, moved_from)

    def _suspect(self, key: K, route: Route) -> None:
        # The owner could not serve it (no longer owns it, destroying, lease gone): the
        # cached route is suspect. The next call resolves afresh; this one is not re-sent.
        self._cache.invalidate(key, route)
        self._flow.emit(FlowEvent.STALE_ROUTE_RESULT, "%s", self._target.describe(key))

    def _stale(self, key: K, route: Route, why: str) -> StaleRoute:
        self._cache.invalidate(key, route)
        self._flow.emit(FlowEvent.STALE_ROUTE_RESULT, "%s: %s", self._target.describe(key), why)
        return StaleRoute(f"{self._target.describe(key)}: {why}")
