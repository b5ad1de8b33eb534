"""The Actor owner's side of Session–Actor binding (spec 02 §4–§7).

An Actor has at most ONE current binding: the physical session (session owner node RID,
lifecycle generation, owner id, SessionRid) and the binding generation that session owner
gave it. This module keeps that binding for every Actor hosted here and is the one place
the owner checks it:

* **bind** (command 38 BIND, or the same record handed over in-process by a session owner
  on this node): admitted on the Actor's ObjectGeneration, this node's lifecycle
  (target NodeRid + NodeGeneration) and — when the caller knew it — the
  AuthorityOwnerGeneration; never on the OwnerLeaseGeneration copy (spec 02 §5). The new
  binding replaces the current one in the same synchronous step that builds the terminal
  (linearization point 1: once the reply exists, the push path already sees the binding).
  A bind from the physical session that is current already is an idempotent success with
  the binding generation registered before (no 51, nothing closes). Otherwise the
  previous session gets ONE command 51, after the terminal, sent one-way without retry.
* **relay ingress** (command 24 with the bound-session tail, or the local relay): admitted
  only when its (session owner, lifecycle, SessionRid, binding generation) is the current
  binding; a retired or unknown binding → Unavailable, never another target.
* **push / close** from the Actor's own handlers (``context.session``): to the current
  binding only, else SessionNotBound (an InvalidOperation: bind first). A push is command
  36; a close request and "this binding ended" (the incarnation was destroyed) are our
  command 140.
* **disconnect** (38 DISCONNECT: a physical disconnect or a NotifyDisconnected): for the
  current identity only, ONCE per identity (a second one joins the first): a framework
  item in the Actor's own queue reads the Actor's current Spot after the payloads accepted
  before it, then that Spot's OnDisconnectActor runs in one of its lifecycle turns (the
  Entry Spot's ``App.on_disconnect_actor``, a User Spot's ``SpotCallback.DISCONNECT_ACTOR``),
  its terminal awaited within the request's deadline; then the binding is tombstoned. The
  Actor is never destroyed and its membership never changes.
* **unbind** (38 UNBIND): removes exactly that identity (a later binding is untouched).

Binds are durable operations (spec 04 §8.1): every BIND/UNBIND/DISCONNECT carries an
OperationId and its terminal is retained here, keyed by (source NodeRid, source
NodeGeneration, OperationId), until the request's deadline + ``terminal_record_retention``:
a replayed 38 gets the original terminal and runs nothing again. The retention is in
memory: a binding lives in this process only, and a restarted owner is another lifecycle
(a 38 naming the old one is refused by the fence).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol, final

import attrs
import trio

from ..engine.oneshot import OneShot
from ..errors import (
    InvalidOperation,
    SessionNotBound,
    StaleRoute,
    Unavailable,
    ZLinkError,
)
from ..ids import (
    ActorId,
    ActorRef,
    AuthorityOwnerGeneration,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OperationId,
    OwnerLeaseGeneration,
    SpotId,
)
from ..mesh.api import PeerAddress, PeerIdentity
from ..objects.sinks import RemoteSink, failure, ok
from ..observe import FlowEvent, FlowTrace
from ..wire.codec import evolve
from ..wire.commands import Command
from ..wire.enums import BindAction, BoundSessionCloseAction
from ..wire.payloads import TypedPayload
from ..wire.records import (
    BoundSessionBind,
    BoundSessionClose,
    BoundSessionReplaced,
    BoundSessionSend,
    SessionRelocationRoute,
    SessionRelocationSeal,
    SessionRelocationSealed,
    TerminalReply,
)
from ..wire.tails import ActorAuthorityFence, BindTail, RetiredSessionBinding, SessionTail
from .bind_follow import BindFollow
from .follow import FollowRoute
from .hosted import JOINING, READY, ActorWork, HostedActor
from .join import PendingJoin

if TYPE_CHECKING:
    from ..mesh.node import MeshNode
    from ..spots.entry import EntrySpot
    from ..spots.runtime import SpotRuntime
    from .host import ActorHost

__all__ = [
    "ActorBindings",
    "BindingIdentity",
    "DisconnectEvent",
    "OnDisconnectActor",
    "SessionPort",
]

logger = logging.getLogger("zlink_trio.actors")

_BIND: Final = BindAction.BIND
_UNBIND: Final = BindAction.UNBIND
_DISCONNECT: Final = BindAction.DISCONNECT
_PUSH_YIELD_EVERY: Final = 64


@attrs.frozen(slots=True)
class DisconnectEvent:
    """What a Spot's OnDisconnectActor callback receives: the bound Actor incarnation and
    the connection (its 16-byte connection id) whose binding ended. The Actor is not
    destroyed and its Spot membership does not change (spec 02 §7)."""

    actor: ActorRef
    connection_id: bytes
    binding_generation: int = 0
    """Which binding of that connection ended: a connection that binds the Actor again
    after a NotifyDisconnected has a new binding, notified once in its turn."""


OnDisconnectActor = Callable[[DisconnectEvent], Awaitable[object]]
"""The Entry Spot's OnDisconnectActor callback (``App.on_disconnect_actor``)."""


class SessionPort(Protocol):
    """A session owner on THIS node (the STREAM package implements it): what command 36,
    51, 140 and the relocation's 42 / 44 carry, handed over in-process without encoding.
    Each call only checks and queues (it never waits); ``seal`` returns its 43."""

    def deliver_push(self, record: BoundSessionSend) -> None: ...

    def push_local(
        self,
        identity: BindingIdentity,
        actor_id: ActorId,
        object_generation: ObjectGeneration,
        source_rid: NodeRid,
        source_generation: NodeGeneration,
        owner_generation: AuthorityOwnerGeneration,
        packet: str,
        payload: bytes,
    ) -> None:
        """``deliver_push`` of the record with these fields (``identity``: the session
        fields), which it builds only when it needs one."""
        ...

    def replaced(self, record: BoundSessionReplaced) -> None: ...

    def control(self, record: BoundSessionClose) -> None: ...

    def seal(self, record: SessionRelocationSeal) -> SessionRelocationSealed: ...

    def route(self, record: SessionRelocationRoute) -> None: ...


@attrs.frozen(slots=True)
class BindingIdentity:
    """One binding as the Actor owner knows it: the physical session and its generation."""

    owner_rid: NodeRid
    owner_generation: NodeGeneration
    owner_id: int
    owner_lease_generation: OwnerLeaseGeneration
    session_rid: bytes
    binding_generation: int

    @classmethod
    def of(cls, record: BoundSessionBind) -> BindingIdentity:
        owner_rid, owner_generation = record.session_owner  # a followed bind names it
        return cls(
            owner_rid,
            owner_generation,
            record.session_owner_id,
            record.session_owner_lease_generation,
            record.session_rid,
            record.binding_generation,
        )

    def same_session(self, other: BindingIdentity) -> bool:
        """Whether both name the same physical session (whatever the generation; the lease
        generation is a derived copy and decides nothing)."""
        return (
            self.session_rid == other.session_rid
            and self.owner_rid == other.owner_rid
            and self.owner_generation == other.owner_generation
            and self.owner_id == other.owner_id
        )

    def matches_tail(self, tail: SessionTail) -> bool:
        return self.matches(
            tail.session_owner_rid,
            tail.session_owner_generation,
            tail.session_rid,
            tail.binding_generation,
        )

    def matches(
        self,
        owner_rid: NodeRid,
        owner_generation: NodeGeneration,
        session_rid: bytes,
        binding_generation: int,
    ) -> bool:
        """:meth:`matches_tail` of a tail's four identity fields (no tail to build)."""
        # (``is`` first: the same value object needs no attrs ``__eq__`` call.)
        return (
            binding_generation == self.binding_generation
            and session_rid == self.session_rid
            and (owner_rid is self.owner_rid or owner_rid == self.owner_rid)
            and (
                owner_generation is self.owner_generation
                or owner_generation == self.owner_generation
            )
        )


@final
class _Notice:
    """The disconnect notification of one binding identity (at most one callback)."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = trio.Event()


@final
class _Binding:
    __slots__ = ("generation", "identity", "mesh", "notice", "owner_generation")

    def __init__(
        self,
        identity: BindingIdentity,
        generation: ObjectGeneration,
        owner_generation: AuthorityOwnerGeneration,
        mesh: MeshName | None,
    ) -> None:
        self.identity = identity
        self.generation = generation
        self.owner_generation = owner_generation
        self.mesh = mesh
        """The mesh the session owner reached us through (None: it is this node)."""
        self.notice: _Notice | None = None


@final
class _Retained:
    __slots__ = ("expires", "reply")

    def __init__(self, reply: TerminalReply, expires: float) -> None:
        self.reply = reply
        self.expires = expires


_TerminalKey = tuple[NodeRid, NodeGeneration, OperationId]


@final
class ActorBindings:
    """The current binding of every Actor hosted here (see the module docstring)."""

    __slots__ = (
        "_bindings",
        "_entry_spots",
        "_expiry",
        "_flow",
        "_host",
        "_host_actors",
        "_max_payload",
        "_me",
        "_node",
        "_nursery",
        "_on_disconnect",
        "_retention",
        "_spot_runtime",
        "_terminals",
        "_unyielded",
        "follow",
        "local_sessions",
    )

    def __init__(
        self,
        *,
        node: MeshNode,
        host: ActorHost,
        flow: FlowTrace,
        nursery: trio.Nursery,
        entry_spots: Mapping[MeshName, EntrySpot],
        spot_runtime: SpotRuntime | None,
        on_disconnect_actor: OnDisconnectActor | None,
        retention: float,
        max_payload: int,
    ) -> None:
        self._node = node
        self._me = node.identity
        """(A node's identity never changes: read once, not per push.)"""
        self._host = host
        self._host_actors = host.by_id
        self._flow = flow
        self._nursery = nursery
        self._entry_spots = entry_spots
        self._spot_runtime = spot_runtime
        self._on_disconnect = on_disconnect_actor
        self._retention = retention
        self._max_payload = max_payload
        self._bindings: dict[ActorId, _Binding] = {}
        self._terminals: dict[_TerminalKey, _Retained] = {}
        self._expiry: deque[tuple[float, _TerminalKey]] = deque()
        self._unyielded = 0
        self.local_sessions: SessionPort | None = None
        """The session owner of this node (set by the STREAM server when it starts)."""
        self.follow: BindFollow | None = None
        """Message Follow of a bind whose Actor moved away from here (set by the runtime)."""

    def register(self) -> None:
        self._node.on(Command.BOUND_SESSION_BIND, self._on_bind)

    # --- queries ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._bindings)

    def current(self, actor_id: ActorId) -> BindingIdentity | None:
        """The current binding of ``actor_id`` hosted here (any generation), or None."""
        binding = self._bindings.get(actor_id)
        return None if binding is None else binding.identity

    def bound(self, actor_id: ActorId, generation: ObjectGeneration) -> bool:
        binding = self._bindings.get(actor_id)
        return binding is not None and binding.generation == generation

    # --- relocation (the sessions participant, actors/session_moves.py) ----------------------
    def carry(
        self, actor_id: ActorId, generation: ObjectGeneration
    ) -> tuple[BindingIdentity, MeshName | None] | None:
        """The current binding of that incarnation and the mesh its session owner reached
        this node through (None: the session owner is this node), or None."""
        binding = self._bindings.get(actor_id)
        if binding is None or binding.generation != generation:
            return None
        return binding.identity, binding.mesh

    def adopt(
        self,
        actor_id: ActorId,
        identity: BindingIdentity,
        generation: ObjectGeneration,
        owner_generation: AuthorityOwnerGeneration,
        mesh: MeshName | None,
    ) -> None:
        """A relocation target: the moved incarnation's binding is registered here (relays
        of that binding are admitted, the Actor's pushes go to its session)."""
        self._bindings[actor_id] = _Binding(identity, generation, owner_generation, mesh)

    def release(self, actor_id: ActorId, identity: BindingIdentity) -> None:
        """Forget that binding of ``actor_id`` (its Actor moved away, or the move's hidden
        activation here was discarded); a later binding is untouched."""
        binding = self._bindings.get(actor_id)
        if binding is not None and binding.identity == identity:
            del self._bindings[actor_id]

    # --- command 38 ---------------------------------------------------------------------------
    async def _on_bind(self, peer: PeerIdentity, record: BoundSessionBind) -> None:
        """A peer session owner's 38. The state changes here, in the connection reader, in
        arrival order; only the terminal (and a DISCONNECT's wait) is a task's."""
        sink = RemoteSink(self._node, peer.address, record.correlation)
        key = (*record.session_owner, record.operation_id)
        retained = self._retained(key)
        if retained is not None:
            self._nursery.start_soon(sink.deliver, retained, name="zlink_trio.actors.bind")
            return
        follow = self.follow
        if follow is not None and (route := follow.route_for(record)) is not None:
            self._nursery.start_soon(
                self._follow_remote, key, record, route, sink, name="zlink_trio.actors.bind"
            )
            return
        me = self._node.identity
        # The session owner reached us through that mesh; a followed bind of a session
        # owned by this very node is a local binding (its pushes are handed over here).
        mesh = (
            None if record.session_owner == (me.node_rid, me.node_generation) else (peer.mesh_name)
        )
        if record.action is _DISCONNECT:
            wait = self._disconnect(record, mesh)
            self._nursery.start_soon(
                self._finish_disconnect, key, record, wait, sink, name="zlink_trio.actors.bind"
            )
            return
        reply, replaced = self._transition(record, mesh)
        self._retain(key, reply, record.timeout_ms)
        # The terminal goes on the connection NOW (never waiting: this is its reader), so
        # a push an Actor turn sends after the registration follows it on the wire.
        try:
            await self._node.send(
                peer.address, evolve(reply, correlation=record.correlation), wait=False
            )
        except trio.WouldBlock:
            self._nursery.start_soon(sink.deliver, reply, name="zlink_trio.actors.bind")
        except ZLinkError as exc:
            logger.info("the terminal of a bind of %r was not sent: %r", record.actor_id, exc)
        if replaced is not None:
            self._nursery.start_soon(
                self._send_replaced, record, replaced, name="zlink_trio.actors.replaced"
            )

    async def handle_local(self, record: BoundSessionBind, deadline: float) -> TerminalReply:
        """A 38 from the session owner of this node, in-process (same checks and
        transitions as a peer's; ``deadline`` bounds a DISCONNECT's wait)."""
        key = (*record.session_owner, record.operation_id)
        retained = self._retained(key)
        if retained is not None:
            await trio.lowlevel.checkpoint()
            return retained
        follow = self.follow
        if follow is not None and (route := follow.route_for(record)) is not None:
            reply = await self._followed(record, route)
            self._retain(key, reply, record.timeout_ms)
            return reply
        if record.action is _DISCONNECT:
            wait = self._disconnect(record, None)
            if wait is not None:
                with trio.move_on_at(deadline):
                    await wait.done.wait()
            else:
                await trio.lowlevel.checkpoint()
            reply = ok()
            self._retain(key, reply, record.timeout_ms)
            return reply
        reply, replaced = self._transition(record, None)
        self._retain(key, reply, record.timeout_ms)
        if replaced is not None:
            # After the terminal: the caller commits its route before this task runs.
            self._nursery.start_soon(
                self._send_replaced, record, replaced, name="zlink_trio.actors.replaced"
            )
        await trio.lowlevel.cancel_shielded_checkpoint()
        return reply

    async def _followed(
        self, record: BoundSessionBind, route: FollowRoute[ActorId] | ZLinkError
    ) -> TerminalReply:
        """The terminal of a bind that is not decided here: its Message Follow relay's,
        or the refusal of a route that does not fit it."""
        follow = self.follow
        assert follow is not None
        if isinstance(route, ZLinkError):
            await trio.lowlevel.checkpoint()
            return failure(route)
        return await follow.relay(record, route)

    async def _follow_remote(
        self,
        key: _TerminalKey,
        record: BoundSessionBind,
        route: FollowRoute[ActorId] | ZLinkError,
        sink: RemoteSink,
    ) -> None:
        reply = await self._followed(record, route)
        self._retain(key, reply, record.timeout_ms)
        await sink.deliver(reply)

    async def _finish_disconnect(
        self,
        key: _TerminalKey,
        record: BoundSessionBind,
        wait: _Notice | None,
        sink: RemoteSink,
    ) -> None:
        if wait is not None:
            with trio.move_on_after(record.timeout_ms / 1000):
                await wait.done.wait()
        reply = ok()
        self._retain(key, reply, record.timeout_ms)
        await sink.deliver(reply)

    def _transition(
        self, record: BoundSessionBind, mesh: MeshName | None
    ) -> tuple[TerminalReply, _Binding | None]:
        """BIND or UNBIND, synchronously: the terminal and the replaced binding (51)."""
        identity = BindingIdentity.of(record)
        actor_id = record.actor_id
        if record.action is _UNBIND:
            current = self._bindings.get(actor_id)
            if current is not None and current.identity == identity:
                del self._bindings[actor_id]
            return ok(), None
        me = self._node.identity
        if record.target_rid != me.node_rid or record.target_node_generation != me.node_generation:
            return failure(StaleRoute("the bind names another node lifecycle")), None
        hosted = self._host.get(actor_id)
        if hosted is None or (hosted.state is not READY and not _join_not_started(hosted)):
            # No Message Follow route exists (BindFollow relays the bind when one does),
            # or the Actor is sealed for a move or not committed here yet: the bind ends
            # Unavailable, never re-sent to an owner found in the Store.
            return failure(
                Unavailable(f"actor {actor_id.value!r} is not hosted Ready at this owner")
            ), None
        if hosted.generation != record.object_generation:
            return failure(
                InvalidOperation(
                    f"actor {actor_id.value!r}: generation {record.object_generation.value} "
                    f"is not the current incarnation ({hosted.generation.value})"
                )
            ), None
        expected = record.authority_owner_generation
        if expected is not None and expected != hosted.owner_generation:
            return failure(StaleRoute("the bind's owner generation is stale")), None
        lease = self._node.owner_fence(hosted.mesh_name).lease_generation
        current = self._bindings.get(actor_id)
        if current is not None and current.generation != hosted.generation:
            current = None  # a leftover of an earlier incarnation
        if (
            current is not None
            and current.notice is not None
            and current.identity.same_session(identity)
        ):
            # The session binds again while its binding's disconnect notification runs:
            # that binding is dying (the notification tombstones it), so this bind gets a
            # new one, which the tombstone does not touch; the session is not sent a 51
            # about itself.
            self._bindings[hosted.actor_id] = _Binding(
                identity, hosted.generation, hosted.owner_generation, mesh
            )
            tail = self._tail(record, identity.binding_generation, hosted, lease)
            return ok(tail), None
        if current is not None and current.identity.same_session(identity):
            tail = self._tail(record, current.identity.binding_generation, hosted, lease)
            return ok(tail), None
        # (keyed by the hosted Actor's own ActorId object, which its pushes and the local
        # relays look it up with: the same object needs no attrs ``__eq__`` call)
        self._bindings[hosted.actor_id] = _Binding(
            identity, hosted.generation, hosted.owner_generation, mesh
        )
        tail = self._tail(record, identity.binding_generation, hosted, lease)
        return ok(tail), current

    def _tail(
        self,
        record: BoundSessionBind,
        binding_generation: int,
        hosted: HostedActor,
        lease: OwnerLeaseGeneration,
    ) -> BindTail:
        """The terminal's binding; a followed bind's also names this owner node (the
        session owner routes the binding here, not to the node its ActorRef named)."""
        if record.follow_hops == 0:
            return BindTail(
                binding_generation=binding_generation,
                authority_owner_generation=hosted.owner_generation,
                owner_lease_generation=lease,
            )
        me = self._node.identity
        return BindTail(
            binding_generation=binding_generation,
            authority_owner_generation=hosted.owner_generation,
            owner_lease_generation=lease,
            node_rid=me.node_rid,
            node_generation=me.node_generation,
        )

    def _disconnect(self, record: BoundSessionBind, mesh: MeshName | None) -> _Notice | None:
        """Start (or join) the disconnect notification of that identity; None when it is
        not the current binding (nothing to notify: replaced, tombstoned, unknown)."""
        identity = BindingIdentity.of(record)
        binding = self._bindings.get(record.actor_id)
        if binding is None or binding.identity != identity:
            return None
        notice = binding.notice
        if notice is None:
            notice = binding.notice = _Notice()
            deadline = trio.current_time() + record.timeout_ms / 1000
            self._nursery.start_soon(
                self._notify, record.actor_id, binding, notice, deadline,
                name="zlink_trio.actors.disconnect",
            )  # fmt: skip
        return notice

    async def _notify(
        self, actor_id: ActorId, binding: _Binding, notice: _Notice, deadline: float
    ) -> None:
        """One disconnect notification: the Actor's order, then its current Spot's
        callback (all failures are diagnostics), then the tombstone."""
        try:
            with trio.move_on_at(deadline):
                hosted = self._host.get(actor_id)
                if hosted is not None and hosted.generation == binding.generation:
                    await self._run_callback(hosted, binding)
        except Exception:
            logger.exception("OnDisconnectActor of %r failed", actor_id.value)
        finally:
            if self._bindings.get(actor_id) is binding:
                del self._bindings[actor_id]
            notice.done.set()

    async def _run_callback(self, hosted: HostedActor, binding: _Binding) -> None:
        lane = hosted.lane
        spot_id: SpotId | None = hosted.context.spot_id
        if lane is not None:
            slot: OneShot[SpotId | None] = OneShot()

            def current_spot(actor: HostedActor) -> None:
                slot.set(actor.context.spot_id)  # the Spot it is in after what came before

            lane_ok = True
            try:
                await lane.submit(ActorWork(current_spot))
            except ZLinkError:
                lane_ok = False  # the Actor runs no turn any more: no callback
            if not lane_ok:
                return
            spot_id = await slot.wait()
        if spot_id is None:
            return
        event = DisconnectEvent(
            hosted.ref(), binding.identity.session_rid, binding.identity.binding_generation
        )
        callback = self._on_disconnect
        for entry in self._entry_spots.values():
            if entry.spot_id == spot_id:
                if callback is not None:

                    async def work(fn: OnDisconnectActor = callback) -> None:
                        await fn(event)

                    await entry.run_lifecycle_turn(work)
                return
        runtime = self._spot_runtime
        if runtime is not None:
            spot = runtime.host.get(spot_id)
            if spot is not None:
                from ..spots.lifecycle import SpotCallback

                await spot.run_callback(SpotCallback.DISCONNECT_ACTOR, event)

    # --- 51 ---------------------------------------------------------------------------------
    async def _send_replaced(self, record: BoundSessionBind, previous: _Binding) -> None:
        """Command 51 to the replaced binding's session owner: one-way, at most once, no
        retry; a full writer lane waits ``peer_send_timeout`` and the failure is logged
        (the new binding stands either way)."""
        me = self._node.identity
        old = previous.identity
        replaced = BoundSessionReplaced(
            source=ActorAuthorityFence(
                actor_id=record.actor_id,
                object_generation=previous.generation,
                authority_owner_generation=previous.owner_generation,
                node_rid=me.node_rid,
                node_generation=me.node_generation,
            ),
            previous=RetiredSessionBinding(
                node_rid=old.owner_rid,
                node_generation=old.owner_generation,
                owner_id=old.owner_id,
                owner_lease_generation=old.owner_lease_generation,
                session_rid=old.session_rid,
                retired_binding_generation=old.binding_generation,
            ),
        )
        if old.owner_rid == me.node_rid and old.owner_generation == me.node_generation:
            port = self.local_sessions
            if port is not None:
                port.replaced(replaced)
            await trio.lowlevel.checkpoint()
            return
        if previous.mesh is None:
            await trio.lowlevel.checkpoint()
            return
        try:
            await self._node.send(PeerAddress(previous.mesh, old.owner_rid), replaced)
        except ZLinkError as exc:
            self._flow.emit(
                FlowEvent.SESSION_REPLACED_NOT_SENT,
                "boundSessionReplaced (51) for %r not sent: %r",
                record.actor_id.value,
                exc,
            )

    # --- relay ingress (24 with the bound-session tail, or local) -----------------------------
    def check_relay(self, actor_id: ActorId, tail: SessionTail) -> ZLinkError | None:
        """None when ``tail`` is the current binding of ``actor_id``; else the error the
        relay ends with (Unavailable: a retired or unknown binding, never re-targeted)."""
        binding = self._bindings.get(actor_id)
        if binding is not None and binding.identity.matches_tail(tail):
            return None
        return Unavailable(
            f"actor {actor_id.value!r}: binding {tail.binding_generation} of this session "
            "is not current (replaced or ended)"
        )

    def relay_current(
        self,
        actor_id: ActorId,
        owner_rid: NodeRid,
        owner_generation: NodeGeneration,
        session_rid: bytes,
        binding_generation: int,
    ) -> bool:
        """Whether :meth:`check_relay` of a tail with these identity fields would be None
        (the session owner's local fast path: no SessionTail built per frame)."""
        binding = self._bindings.get(actor_id)
        if binding is None:
            return False
        # (``BindingIdentity.matches``, inline: one Python call fewer per relayed frame)
        identity = binding.identity
        return (
            binding_generation == identity.binding_generation
            and session_rid == identity.session_rid
            and (owner_rid is identity.owner_rid or owner_rid == identity.owner_rid)
            and (
                owner_generation is identity.owner_generation
                or owner_generation == identity.owner_generation
            )
        )

    # --- push and close (the Actor's bound-session capability) -------------------------------
    async def push(
        self, actor_id: ActorId, generation: ObjectGeneration, packet: str, payload: object
    ) -> None:
        """Command 36 to the current binding: completes once admitted (handed to the local
        session owner, or queued on its connection).

        Raises:
            SessionNotBound: no current binding (bind first, then the same call succeeds).
            InvalidOperation: the payload is neither bytes nor a typed payload, or too big.
            Unavailable: the session owner cannot be reached now.
        """
        # (``_current_for`` and ``_bytes``' common case inline: two Python calls fewer)
        binding = self._bindings.get(actor_id)
        hosted = self._host_actors.get(actor_id)
        if (
            binding is None
            or (binding.generation is not generation and binding.generation != generation)
            or hosted is None
            or (
                (hosted_generation := hosted.context._generation) is not generation
                and hosted_generation != generation
            )
        ):
            raise SessionNotBound(f"actor {actor_id.value!r} has no bound session")
        if type(payload) is bytes and len(payload) <= self._max_payload:
            data = payload
        else:
            data = self._bytes(payload)
        identity = binding.identity
        me = self._me
        if binding.mesh is None:
            port = self.local_sessions
            if port is None:
                await trio.lowlevel.checkpoint()
                raise Unavailable("no session owner on this node")
            await trio.lowlevel.checkpoint_if_cancelled()
            # The record's fields, handed over in-process (no record built for a push the
            # session owner queues at once); queued for the connection: never waits.
            port.push_local(
                identity, actor_id, binding.generation, me.node_rid, me.node_generation,
                hosted.owner_generation, packet, data,
            )  # fmt: skip
            self._unyielded += 1
            if self._unyielded >= _PUSH_YIELD_EVERY:
                # A burst of local pushes is a schedule point once per this many (as
                # local sends are: the engine drains the burst in batches).
                self._unyielded = 0
                await trio.lowlevel.cancel_shielded_checkpoint()
            return
        record = BoundSessionSend(
            actor_id=actor_id,
            object_generation=binding.generation,
            source_rid=me.node_rid,
            source_node_generation=me.node_generation,
            authority_owner_generation=hosted.owner_generation,
            session_owner_rid=identity.owner_rid,
            session_owner_generation=identity.owner_generation,
            session_rid=identity.session_rid,
            expected_binding_generation=identity.binding_generation,
            packet_name=packet,
            payload=data,
        )
        await self._node.send(PeerAddress(binding.mesh, identity.owner_rid), record)

    async def close(self, actor_id: ActorId, generation: ObjectGeneration) -> None:
        """Ask the current binding's session owner to close the physical connection
        (one-way, command 140). Raises SessionNotBound / Unavailable like :meth:`push`."""
        binding, hosted = self._current_for(actor_id, generation)
        record = self._control(actor_id, binding, hosted, BoundSessionCloseAction.CLOSE_CONNECTION)
        if binding.mesh is None:
            port = self.local_sessions
            if port is None:
                await trio.lowlevel.checkpoint()
                raise Unavailable("no session owner on this node")
            port.control(record)
            await trio.lowlevel.checkpoint()
            return
        await self._node.send(PeerAddress(binding.mesh, binding.identity.owner_rid), record)

    def _current_for(
        self, actor_id: ActorId, generation: ObjectGeneration
    ) -> tuple[_Binding, HostedActor]:
        binding = self._bindings.get(actor_id)
        hosted = self._host.get(actor_id)
        if (
            binding is None
            or (binding.generation is not generation and binding.generation != generation)
            or hosted is None
            # (the context's slot, not ``hosted.generation``: two Python calls fewer)
            or (
                (hosted_generation := hosted.context._generation) is not generation
                and hosted_generation != generation
            )
        ):
            raise SessionNotBound(f"actor {actor_id.value!r} has no bound session")
        return binding, hosted

    def _control(
        self,
        actor_id: ActorId,
        binding: _Binding,
        hosted: HostedActor,
        action: BoundSessionCloseAction,
    ) -> BoundSessionClose:
        me = self._node.identity
        identity = binding.identity
        return BoundSessionClose(
            source_rid=me.node_rid,
            source_generation=me.node_generation,
            actor_id=actor_id,
            object_generation=binding.generation,
            authority_owner_generation=hosted.owner_generation,
            session_owner_rid=identity.owner_rid,
            session_owner_generation=identity.owner_generation,
            session_rid=identity.session_rid,
            binding_generation=identity.binding_generation,
            action=action,
        )

    def _bytes(self, payload: object) -> bytes:
        if type(payload) is bytes:
            data = payload
        elif isinstance(payload, bytearray | memoryview):
            data = bytes(payload)
        elif type(payload) is TypedPayload:
            data = payload.encode()
        else:
            raise InvalidOperation(
                f"a push payload is bytes or a registered payload, got {type(payload).__name__}"
            )
        if len(data) > self._max_payload:
            raise InvalidOperation(f"push payload of {len(data)} bytes exceeds {self._max_payload}")
        return data

    # --- destroy ----------------------------------------------------------------------------
    def ended(self, hosted: HostedActor) -> None:
        """The incarnation ``hosted`` is being destroyed (its admission is closed): its
        binding ends; the session owner is told (command 140 BINDING_ENDED, one-way, best
        effort: a relay after it finds no binding here anyway)."""
        binding = self._bindings.get(hosted.actor_id)
        if binding is None or binding.generation != hosted.generation:
            return
        del self._bindings[hosted.actor_id]
        record = self._control(
            hosted.actor_id, binding, hosted, BoundSessionCloseAction.BINDING_ENDED
        )
        if binding.mesh is None:
            port = self.local_sessions
            if port is not None:
                port.control(record)
            return
        address = PeerAddress(binding.mesh, binding.identity.owner_rid)
        self._nursery.start_soon(self._send_quietly, address, record)

    async def _send_quietly(self, address: PeerAddress, record: Any) -> None:
        try:
            await self._node.send(address, record)
        except ZLinkError as exc:
            logger.info("command %d to %r not sent: %r", int(record.COMMAND), address, exc)

    # --- terminal records -------------------------------------------------------------------
    def _retained(self, key: _TerminalKey) -> TerminalReply | None:
        self._purge()
        retained = self._terminals.get(key)
        return None if retained is None else retained.reply

    def _retain(self, key: _TerminalKey, reply: TerminalReply, timeout_ms: int) -> None:
        expires = trio.current_time() + timeout_ms / 1000 + self._retention
        self._terminals[key] = _Retained(reply, expires)
        self._expiry.append((expires, key))

    def _purge(self) -> None:
        expiry = self._expiry
        if not expiry:
            return
        now = trio.current_time()
        terminals = self._terminals
        while expiry and expiry[0][0] <= now:
            _, key = expiry.popleft()
            retained = terminals.get(key)
            if retained is not None and retained.expires <= now:
                del terminals[key]


def _join_not_started(hosted: HostedActor) -> bool:
    """``hosted`` is Joining only because a User Spot handler that Deferred its Join
    still runs (parked at ``defer()``, the Join not started): binding is independent of
    membership (04 §2.3), so a bind is taken as for a Ready Actor."""
    pending = hosted.join
    return (
        hosted.state is JOINING
        and isinstance(pending, PendingJoin)
        and pending.parked
        and not pending.scope.closed
    )
