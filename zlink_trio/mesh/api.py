"""What the rest of the runtime needs from a MeshNode (the contract ``node.py`` implements).

A MeshNode is one process lifecycle: a fresh NodeRid and NodeGeneration, one descriptor
(with its own Entry Spot id) per configured mesh, an owner lease, a TCP listener and one task
group per admitted peer. Actors, Spots and sessions talk to other nodes ONLY through this
protocol:

* ``on(command, handler)`` registers the one inbound handler of a command (before start).
  The transport validates frame format, peer admission and the record's source identity
  ONCE at ingress; handlers receive only well-formed records from admitted peers whose
  stamped (rid, generation) match the connection. Handlers are awaited by the peer's reader
  task: they must only admit work (e.g. ``await lane.submit(...)``), never run application
  code inline. Awaiting there is backpressure on that peer's connection.
* ``send`` puts one record on an ADMITTED peer's writer lane (bounded; a full lane waits up
  to ``peer_send_timeout`` and then raises DeadlineExceeded). A peer that is not admitted
  raises :class:`PeerNotAdmitted` (an ``Unavailable``); nothing is queued for later.
* ``request`` assigns a correlation, sends, and returns a :class:`PendingReply` whose
  ``wait()`` yields the reply with that correlation from that peer: a TerminalReply
  (command 20), or the 43 / 122 that answer a 42 / 121. Replies are matched on (peer rid,
  correlation): a reply from another peer or with an unknown correlation is dropped and
  counted. Reply records (20, 43, 122) never reach an ``on`` handler.
* ``peer_state`` tells "transport blip" (CONNECTING: the intent is there, no admitted
  connection right now) from "peer gone for good" (GONE: the logical owner removed the
  connection intent AND no admitted connection is left). ``wait_peer_change`` wakes on
  any transition of that peer. Durable-operation replay consults exactly this transition
  and keeps no monitor of its own (spec 04 §8.1).
* ``peers`` and ``wait_peers_change`` are the same states for every known peer at once
  (placement, harnesses, operators).
* ``connect`` is how a caller that needs a CONNECTING peer now learns whether it can be
  reached: it asks for a dial at once (ending the dialer's backoff pause) and returns
  with that dial's outcome; CONNECTING after it means "cannot be reached now" (the fast
  failure of a message whose owner crashed, docs/decisions.md).

The decisions behind these rules are in docs/decisions.md ("MeshNode and transport").
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

import attrs
import trio

from ..errors import Unavailable, ZLinkError
from ..ids import MeshName, NodeGeneration, NodeRid, SpotId
from ..store.api import OwnerFence

__all__ = [
    "EncodedCommand",
    "InboundHandler",
    "LinkLost",
    "MeshNodeApi",
    "NodeIdentity",
    "PeerAddress",
    "PeerIdentity",
    "PeerNotAdmitted",
    "PeerState",
    "PendingReply",
    "connect_until",
    "peer_address",
]


class PeerNotAdmitted(Unavailable):
    """No admitted connection to that peer right now (never queued for later)."""


class LinkLost(Unavailable):
    """The connection a request went out on broke before its reply arrived. The request
    may or may not have run; a reply can still arrive after a reconnect."""


class PeerGone(LinkLost):
    """The peer's lifecycle ended (its connection intent was removed and no connection to
    it is admitted) before the reply arrived: no reply can come any more. The request may
    or may not have run. Raised once by ``PendingReply.wait()``; the request is forgotten."""


@attrs.frozen(slots=True)
class NodeIdentity:
    node_rid: NodeRid
    node_generation: NodeGeneration


@attrs.frozen(slots=True, cache_hash=True)
class PeerAddress:
    """Where to send: a node in a mesh. Resolved from the Location Store, never parsed.
    Hot paths keep one instance per peer (a route, a connection) rather than make one per
    call: its hash is computed once."""

    mesh_name: MeshName
    node_rid: NodeRid


_ADDRESSES: dict[tuple[str, bytes], PeerAddress] = {}
_ADDRESSES_MAX: Final = 4096


def peer_address(mesh_name: MeshName, node_rid: NodeRid) -> PeerAddress:
    """The :class:`PeerAddress` of ``node_rid`` in ``mesh_name``, one instance per peer
    (remembered, up to :data:`_ADDRESSES_MAX` peers): a route's address and its
    connection's are then the same object, and looking the connection up by it is one
    identity check instead of the generated ``__eq__`` of the address and its ids."""
    key = (mesh_name.value, node_rid.value)
    address = _ADDRESSES.get(key)
    if address is None:
        if len(_ADDRESSES) >= _ADDRESSES_MAX:
            _ADDRESSES.clear()
        address = _ADDRESSES[key] = PeerAddress(mesh_name, node_rid)
    return address


def _address_of(identity: PeerIdentity) -> PeerAddress:
    return peer_address(identity.mesh_name, identity.node_rid)


@attrs.frozen(slots=True, cache_hash=True)
class PeerIdentity:
    """An admitted peer, as proven by its hello."""

    mesh_name: MeshName
    node_rid: NodeRid
    node_generation: NodeGeneration
    address: PeerAddress = attrs.field(
        init=False, eq=False, repr=False, default=attrs.Factory(_address_of, takes_self=True)
    )
    """Where it is (made once: every inbound frame of the peer's link names it)."""


class PeerState(enum.Enum):
    ADMITTED = "admitted"
    """An admitted connection exists now."""
    CONNECTING = "connecting"
    """The connection intent exists but no admitted connection right now (a blip)."""
    GONE = "gone"
    """No intent and no admitted connection: the peer's lifecycle ended (or never was)."""


InboundHandler = Callable[[PeerIdentity, Any], Awaitable[None]]


class EncodedCommand:
    """What :meth:`MeshNodeApi.request_with` / :meth:`~MeshNodeApi.send` take instead of a
    record (or of a record builder): a command that can write its body without the record
    being built (hot paths: the constant part of a request encoded once per route, and
    the reply that answers it). Calling it builds the equivalent record (what an
    instrumented connection — fault plan, wire tap — and the checked encoder see).

    Subclasses implement both, with the same correlation (0 for a one-way send)."""

    __slots__ = ()

    def __call__(self, correlation: int) -> Any:
        """The record."""
        raise NotImplementedError

    def body(self, correlation: int) -> bytes:
        """``wire.encode(self(correlation))`` (raises ProtocolError as it does)."""
        raise NotImplementedError


class PendingReply(Protocol):
    """One request in flight. Wait for it exactly once (or discard it): a registration
    lives until its reply arrives, a ``wait()`` is cancelled, or ``discard()``."""

    @property
    def correlation(self) -> int: ...

    @property
    def peer(self) -> PeerIdentity: ...

    async def wait(self) -> Any:
        """The reply record (TerminalReply, or 43 / 122 for a 42 / 121).

        Raises LinkLost (once) when the connection the request went out on broke before
        the reply arrived; the request stays registered, so the caller may ``wait()``
        again and still get a reply that arrives later over a new connection, or replay
        (consulting ``peer_state``). Raises PeerGone (a LinkLost) when the peer's lifecycle
        ended (``peer_state`` GONE): no reply can come; the request is forgotten.
        Cancelling ``wait()`` abandons the request (a later
        reply is dropped and counted). Only one task may wait at a time.
        """
        ...

    def discard(self) -> None:
        """Forget the request without waiting (idempotent)."""
        ...

    def expire(self, error: BaseException) -> None:
        """End the request now unless its reply already arrived: ``wait()`` raises
        ``error`` (at once if a task waits) and the request is forgotten (a late reply is
        dropped and counted). For a caller that owns the deadline without a cancel scope
        around ``wait()``. Idempotent."""
        ...


class MeshNodeApi(Protocol):
    @property
    def identity(self) -> NodeIdentity: ...

    def owner_fence(self, mesh_name: MeshName) -> OwnerFence:
        """This node as an owner in ``mesh_name`` (with the current lease generation).
        NotFound for a mesh this node is not in; Unavailable before registration."""
        ...

    def entry_spot_id(self, mesh_name: MeshName) -> SpotId:
        """The Entry Spot id this lifecycle published in ``mesh_name`` (NotFound if none)."""
        ...

    @property
    def admitting(self) -> bool:
        """False once the owner lease expired (or the node is shutting down): an expired
        owner admits no message and performs no location update."""
        ...

    def admission_error(self) -> ZLinkError | None:
        """None while this node admits; otherwise the error a new operation started here
        ends with at once (no Store call, no wait): ``Unavailable`` once the owner lease
        was lost (fail-stopped) or before the node started, ``ShuttingDown`` while it
        closes or after it closed."""
        ...

    def on(self, command: int, handler: InboundHandler, *, draining: bool = False) -> None:
        """Register the one handler of ``command``. Only before the node accepts
        connections; InvalidOperation for a second handler, for a transport-owned command
        (20, 43, 122, 100-105) or after start. ``draining``: the handler still runs while
        the node closes (after :meth:`stop_admitting`, until :meth:`aclose`), for what a
        clean stop's drain must still finish; other inbound commands are refused then."""
        ...

    async def send(
        self, peer: PeerAddress, record: Any, *, flush: bool = True, wait: bool = True
    ) -> PeerIdentity:
        """Queue ``record`` on the admitted connection to ``peer``; return who it went to.

        ``flush=False``: the caller expects to send more right away (a burst of replies),
        so the frame is never written directly: it waits in the connection's writer lane
        and leaves with whatever else is queued before the writer runs, in one write.
        ``wait=False``: never wait for lane space (``trio.WouldBlock`` instead, nothing
        queued), for callers that own a deadline without a cancel scope around the call.

        Raises:
            PeerNotAdmitted: no admitted connection now (nothing is queued).
            DeadlineExceeded: the writer lane stayed full for ``peer_send_timeout``.
            trio.WouldBlock: ``wait=False`` and the writer lane is full.
            ProtocolError: ``record`` cannot be encoded or exceeds ``max_frame_bytes``.
        """
        ...

    async def request(self, peer: PeerAddress, record: Any) -> PendingReply:
        """``record`` must have a ``correlation`` field; it is replaced by a fresh one."""
        ...

    async def request_with(
        self, peer: PeerAddress, build: Callable[[int], Any], *, wait: bool = True
    ) -> PendingReply:
        """Like :meth:`request`, for a record built by ``build(correlation)`` with the fresh
        correlation (no copy of a record built only to be re-stamped); ``wait`` as for
        :meth:`send`."""
        ...

    def peer_state(self, peer: PeerAddress) -> PeerState: ...

    async def connect(self, peer: PeerAddress) -> PeerState:
        """For a CONNECTING ``peer``: dial it now (or join the dial in flight) and return
        once that dial's outcome is known: ADMITTED, GONE (its lifecycle ended
        meanwhile), or CONNECTING when the dial ended without an admission (refused,
        unreachable, the hello failed or timed out): the peer cannot be reached now. A
        dial that failed less than ``reconnect_backoff_initial`` ago is that answer at
        once (callers never make a dial storm). Any other state is returned at once.
        Unbounded: callers bound it (``connect_timeout``)."""
        ...

    async def wait_peer_change(self, peer: PeerAddress) -> PeerState:
        """Wait for the next transition of ``peer``'s state; return the new state."""
        ...

    def peers(self) -> Mapping[PeerAddress, PeerState]:
        """Every peer that is not GONE, with its state (a snapshot)."""
        ...

    async def wait_peers_change(self) -> None:
        """Wait for the next transition of any peer's state."""
        ...

    async def refresh_peers(self) -> None:
        """Re-read the peer descriptors from the Store now (the logical owner's view is
        polled every ``descriptor_poll_interval``): a node just placed from the Store may
        not have an intent yet, and reads GONE until this or the next poll. Returns at
        once (no Store call) unless the node is running: an expired, closing or closed
        node has no watcher to wait for."""
        ...


async def connect_until(node: MeshNodeApi, peer: PeerAddress, until: float) -> PeerState:
    """:meth:`MeshNodeApi.connect` given up at Trio time ``until`` (a caller's
    ``connect_timeout``, or its deadline when sooner): CONNECTING then — the peer cannot
    be reached now."""
    with trio.move_on_at(until):
        return await node.connect(peer)
    return PeerState.CONNECTING
