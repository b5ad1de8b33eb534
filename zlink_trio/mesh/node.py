"""MeshNode: one node process lifecycle on the mesh (implements :class:`.api.MeshNodeApi`).

Lifecycle: :meth:`MeshNode.serve` (started with ``nursery.start``) binds the listener,
registers one descriptor per mesh (with its Entry Spot claim) in ONE ``register_node``
call, starts the lease renewer, polls descriptors once (intents for every live peer),
starts accepting and reports started. :meth:`MeshNode.aclose` is the graceful exit:
stop admitting, ``remove_node`` (fenced by lifecycle and lease generation), a goodbye on
every connection, then cancel. Task tree::

    serve                         the node's nursery
    ├─ lease renewer              LeaseKeeper.run
    └─ network                    cancelled as a whole when the lease is lost
       ├─ descriptor watcher      the logical owner of connection intents
       ├─ listener                one task per accepted connection (handshake, then Connection.run)
       └─ dialers                 one per intent; dials while the peer is not admitted

Without any configured mesh the node is *detached*: an identity, no listener, no Store
registration, no peers (a STREAM-only server needs no MeshNode, spec 02 §3).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final, final

import trio

from ..config import ServerConfig
from ..engine.inline import TurnHost
from ..errors import (
    InvalidOperation,
    NotFound,
    ProtocolError,
    ShuttingDown,
    Unavailable,
    ZLinkError,
)
from ..ids import MeshName, NodeGeneration, NodeRid, SpotId, StableType, new_entry_spot_id
from ..store.api import Endpoint, LocationStore, OwnerFence
from ..wire import Command, evolve
from ..wire.templates import encode_fast
from .acceptor import serve_inbound
from .api import (
    EncodedCommand,
    InboundHandler,
    NodeIdentity,
    PeerAddress,
    PeerIdentity,
    PeerNotAdmitted,
    PeerState,
)
from .connection import ENCODED as _ENCODED
from .descriptors import advertised_host, build_descriptors
from .dialer import dial_loop
from .faults import FaultPlan
from .instrumented import Instrumentation
from .lease import LeaseDeadline, LeaseExpired, LeaseHeld, LeaseKeeper, LeaseState, NoLease
from .links import Link
from .reasons import CloseReason
from .replies import Pending
from .state import TransportState
from .stats import MeshNodeStatistics, NodePhase, frozen_counts
from .tap import WireTap
from .watcher import DescriptorView, DescriptorWatcher

__all__ = ["TRANSPORT_COMMANDS", "MeshNode"]

logger = logging.getLogger("zlink_trio.mesh")

TRANSPORT_COMMANDS: Final = frozenset(
    {
        Command.TERMINAL_REPLY,
        Command.SESSION_RELOCATION_SEALED,
        Command.RELOCATION_RELAY_READY,
        Command.PEER_HELLO,
        Command.PEER_HELLO_ACK,
        Command.PEER_PING,
        Command.PEER_PONG,
        Command.PEER_GOODBYE,
        Command.PEER_HELLO_CONFIRM,
    }
)
"""Commands the transport handles itself: no ``on`` handler may claim them."""


@final
class MeshNode:
    """One MeshNode lifecycle. Made by ``open_server``; see the module docstring."""

    def __init__(
        self,
        config: ServerConfig,
        store: LocationStore | None,
        *,
        actor_types: frozenset[StableType] = frozenset(),
        spot_types: frozenset[StableType] = frozenset(),
        instance_types: frozenset[StableType] = frozenset(),
        fault_plan: FaultPlan | None = None,
        tap: WireTap | None = None,
    ) -> None:
        self.config: Final = config
        self._store = store
        self._actor_types: Final = actor_types
        self._spot_types: Final = spot_types
        self._instance_types: Final = instance_types
        self._rid = NodeRid.new()
        self._identity: Final = NodeIdentity(self._rid, NodeGeneration.new())
        self.identity: Final = self._identity
        """This lifecycle's NodeRid and NodeGeneration (an attribute: read per message)."""
        self._meshes: Final = frozenset(m.name for m in config.meshes)
        self._entry_ids: Final[Mapping[MeshName, SpotId]] = {
            m.name: new_entry_spot_id(config.node_name) for m in config.meshes
        }
        # What the connections, the acceptor and the dialer share (mesh/state.py):
        state = self._state = TransportState.for_config(self._identity, self._meshes, config)
        self._handlers: dict[int, InboundHandler] = state.handlers
        self._replies: Final = state.replies
        self._links: Final = state.links
        self._counters: Final = state.counters
        self._instrumentation: Instrumentation | None = None
        if fault_plan is not None or tap is not None:
            self.instrument(fault_plan=fault_plan, tap=tap)
        self._keeper: LeaseKeeper | None = None
        self._watcher: DescriptorWatcher | None = None
        self._endpoint: Endpoint | None = None
        self._nursery: trio.Nursery | None = None
        self._net: trio.Nursery | None = None
        self._lease_lost = trio.Event()
        self._fences: list[Callable[[], None]] = []
        self._lease_deadline: Final = LeaseDeadline()
        self._abandoned = False  # testing: exit like a crash (no Store cleanup, no goodbye)
        self._closing = False  # aclose began

    def __repr__(self) -> str:
        return f"<MeshNode {self._rid.hex[:12]} {self._phase.value}>"

    @property
    def _phase(self) -> NodePhase:
        return self._state.phase

    @_phase.setter
    def _phase(self, phase: NodePhase) -> None:
        self._state.phase = phase

    # --- MeshNodeApi ------------------------------------------------------------------------
    @property
    def phase(self) -> NodePhase:
        return self._phase

    @property
    def endpoint(self) -> Endpoint | None:
        """Advertised host and bound port (None before start or without meshes)."""
        return self._endpoint

    @property
    def meshes(self) -> frozenset[MeshName]:
        return self._meshes

    @property
    def lease(self) -> LeaseState:
        return NoLease() if self._keeper is None else self._keeper.state

    def owner_fence(self, mesh_name: MeshName) -> OwnerFence:
        if mesh_name not in self._meshes:
            raise NotFound(f"this node is not in mesh {mesh_name}")
        state = self.lease
        if isinstance(state, NoLease):
            raise Unavailable("the node is not registered yet")
        return OwnerFence(
            mesh_name, self._rid, self._identity.node_generation, state.lease_generation
        )

    def entry_spot_id(self, mesh_name: MeshName) -> SpotId:
        try:
            return self._entry_ids[mesh_name]
        except KeyError:
            raise NotFound(f"this node is not in mesh {mesh_name}") from None

    @property
    def entry_spot_ids(self) -> Mapping[MeshName, SpotId]:
        return dict(self._entry_ids)

    @property
    def admitting(self) -> bool:
        if self._state.phase is not NodePhase.RUNNING:  # (as TransportState.admitting())
            return False
        keeper = self._keeper
        return keeper is None or keeper.check()

    @property
    def lease_deadline(self) -> LeaseDeadline:
        """The lease's local deadline as a cell (``at``: Trio time, ``-inf`` when no lease
        is held): for a hot path that already read the clock. Compare with ``<``; on
        ``now >= at`` call :meth:`lease_live` (it expires the lease on the spot)."""
        return self._lease_deadline

    def lease_live(self) -> bool:
        """True while this lifecycle holds its owner lease and its local admission deadline
        has not passed, whatever the phase (a closing node's lease is still live until it
        is released). What fences the objects this lifecycle owns: once False it never
        becomes True again."""
        keeper = self._keeper
        return keeper is not None and keeper.check()

    def admission_error(self) -> ZLinkError | None:
        state = self._state  # (not the _phase property: this runs once per call)
        phase = state.phase
        if phase is NodePhase.RUNNING:
            keeper = self._keeper
            if keeper is None or keeper.check():
                return None
            phase = state.phase
        if phase is NodePhase.EXPIRED or phase is NodePhase.RUNNING:
            return Unavailable("this node's owner lease was lost: it is fail-stopped")
        if phase is NodePhase.CREATED:
            return Unavailable("this node has not started")
        return ShuttingDown("this node is shutting down")

    def on(self, command: int, handler: InboundHandler, *, draining: bool = False) -> None:
        if self._phase is not NodePhase.CREATED:
            raise InvalidOperation("handlers are registered before the node starts")
        try:
            number = Command(command)
        except ValueError:
            raise InvalidOperation(f"no such command {command!r}") from None
        if number in TRANSPORT_COMMANDS:
            raise InvalidOperation(f"command {int(number)} is handled by the transport")
        if number in self._handlers:
            raise InvalidOperation(f"command {int(number)} already has a handler")
        self._handlers[int(number)] = handler
        if draining:
            self._state.draining.add(int(number))

    async def send(
        self, peer: PeerAddress, record: Any, *, flush: bool = True, wait: bool = True
    ) -> PeerIdentity:
        conn = self._links.admitted.get(peer)
        if conn is None:
            await trio.lowlevel.checkpoint()
            raise PeerNotAdmitted(f"no admitted connection to {peer.node_rid} in {peer.mesh_name}")
        if isinstance(record, EncodedCommand):
            if conn.plain:
                await conn.send(_ENCODED, self._checked(record.body(0)), flush=flush, wait=wait)
                return conn.peer
            record = record(0)
        await conn.send(record, self._encode(record), flush=flush, wait=wait)
        return conn.peer

    async def request(self, peer: PeerAddress, record: Any) -> Pending:
        conn = self._links.admitted.get(peer)
        if conn is None:
            await trio.lowlevel.checkpoint()
            raise PeerNotAdmitted(f"no admitted connection to {peer.node_rid} in {peer.mesh_name}")
        if not hasattr(record, "correlation"):
            raise InvalidOperation(f"{type(record).__name__} has no correlation: not a request")
        pending = self._replies.register(conn.peer, conn)
        try:
            record = evolve(record, correlation=pending.correlation)
            await conn.send(record, self._encode(record), checkpoint=False)
        except BaseException:
            pending.discard()
            raise
        return pending

    async def request_with(
        self, peer: PeerAddress, build: Callable[[int], Any], *, wait: bool = True
    ) -> Pending:
        conn = self._links.admitted.get(peer)
        if conn is None:
            await trio.lowlevel.checkpoint()
            raise PeerNotAdmitted(f"no admitted connection to {peer.node_rid} in {peer.mesh_name}")
        pending = self._replies.register(conn.peer, conn)
        try:
            if conn.plain and isinstance(build, EncodedCommand):
                body = self._checked(build.body(pending.correlation))
                await conn.send(_ENCODED, body, checkpoint=False, wait=wait)
            else:
                record = build(pending.correlation)
                await conn.send(record, self._encode(record), checkpoint=False, wait=wait)
        except BaseException:
            pending.discard()
            raise
        return pending

    def admitted_peer(self, peer: PeerAddress) -> PeerIdentity | None:
        """The proven identity (with its NodeGeneration) of the admitted connection to
        ``peer`` now, or None when none is admitted."""
        conn = self._links.admitted.get(peer)
        return None if conn is None else conn.peer

    def peer_state(self, peer: PeerAddress) -> PeerState:
        return self._links.state(peer)

    def reader_handoff(self) -> TurnHost | None:
        """For an inbound handler, before it first waits: the connection reader running
        it, when that reader handles a lone frame and may run the frame's lane turn itself
        (``Lane.run_here(item, host)``: the reading goes on in a new task if the turn
        waits); None otherwise (a burst of frames, or not called from a reader)."""
        reading = self._state.reading
        if reading is None or reading.task is not trio.lowlevel.current_task():
            return None
        return reading

    async def connect(self, peer: PeerAddress) -> PeerState:
        links = self._links
        link = links.link(peer)
        if link is None or link.state is not PeerState.CONNECTING:
            await trio.lowlevel.checkpoint()
            return links.state(peer)
        fresh = trio.current_time() - link.failed_at < self._state.reconnect_backoff_initial
        if fresh and not link.dialing:
            await trio.lowlevel.checkpoint()
            return PeerState.CONNECTING  # a dial just failed: that is the answer
        failures = link.failures
        if not link.dialing:
            links.want_dial(link)
        while True:
            state = await links.wait_attempt(peer)
            current = links.link(peer)
            if state is not PeerState.CONNECTING or current is None:
                return state
            if current is not link or link.failures != failures:
                return PeerState.CONNECTING

    async def wait_peer_change(self, peer: PeerAddress) -> PeerState:
        return await self._links.wait_change(peer)

    def peers(self) -> Mapping[PeerAddress, PeerState]:
        return self._links.snapshot()

    async def wait_peers_change(self) -> None:
        await self._links.wait_any_change()

    async def refresh_peers(self) -> None:
        """Re-read the peer descriptors now and apply them (intents added or removed),
        instead of waiting for the next poll; concurrent callers share one read."""
        watcher = self._watcher
        if watcher is None or self._phase is not NodePhase.RUNNING:
            await trio.lowlevel.checkpoint()
            return
        await watcher.refresh()

    # --- more than the protocol ---------------------------------------------------------------
    async def wait_lease_lost(self) -> LeaseExpired:
        """Wait until this lifecycle's owner lease is lost (it is then fail-stopped)."""
        await self._lease_lost.wait()
        state = self.lease
        assert isinstance(state, LeaseExpired)  # terminal: nothing follows it
        return state

    @property
    def lease_held(self) -> bool:
        """The owner lease is held and its local deadline has not passed: this lifecycle
        may still write to the Store (also while it closes, unlike :attr:`admitting`)."""
        keeper = self._keeper
        return keeper is not None and keeper.check()

    @property
    def graceful(self) -> bool:
        """The coming exit is a clean stop: not a (simulated) crash, and the lease is held
        (an expired node is fail-stopped: no drain, no Store call)."""
        return not self._abandoned and self.lease_held

    def stop_admitting(self) -> None:
        """The first step of a clean stop: admit nothing more (new calls end ShuttingDown,
        inbound commands are refused, new hellos too) while connections, replies and the
        lease go on until :meth:`aclose`. Idempotent."""
        if self._phase is NodePhase.RUNNING or self._phase is NodePhase.CREATED:
            self._phase = NodePhase.CLOSING

    def on_lease_lost(self, fence: Callable[[], None]) -> None:
        """Call ``fence()`` synchronously the moment this lifecycle's owner lease is lost
        (before :meth:`wait_lease_lost` waiters wake, so nothing scheduled in between runs
        first): what stops every turn of a fail-stopped node. It must not block."""
        self._fences.append(fence)

    def _abandon(self) -> None:
        """Testing: make the coming exit look like a crash: no ``remove_node``, no
        goodbye (sockets just close); the descriptor stays until its lease expires."""
        self._abandoned = True

    def instrument(
        self, *, fault_plan: FaultPlan | None = None, tap: WireTap | None = None
    ) -> None:
        """Install (or with None, remove) a fault plan and a wire tap, at any time (test
        plumbing, :mod:`.instrumented`). A node made with neither runs uninstrumented
        connections; instrumenting it later applies to connections admitted from then
        on (``open_server`` hooks and ``open_cluster`` install it before the node starts)."""
        instrumentation = self._instrumentation
        if instrumentation is None:
            instrumentation = self._instrumentation = Instrumentation()
            instrumentation.install(self._state)
        instrumentation.plan = fault_plan
        instrumentation.tap = tap

    def statistics(self) -> MeshNodeStatistics:
        counters = self._counters
        keeper, watcher = self._keeper, self._watcher
        return MeshNodeStatistics(
            identity=self._identity,
            phase=self._phase,
            lease=self.lease,
            admitting=self.admitting,
            endpoint=self._endpoint,
            peers_admitted=len(self._links.admitted),
            peers_connecting=self._links.count(PeerState.CONNECTING),
            frames_in=counters.frames_in,
            frames_out=counters.frames_out,
            writes_out=counters.writes_out,
            bytes_in=counters.bytes_in,
            bytes_out=counters.bytes_out,
            frames_dropped=frozen_counts(counters.dropped),
            connections_opened=counters.connections_opened,
            connections_closed=frozen_counts(counters.closes),
            requests_pending=len(self._replies),
            lease_renewals=0 if keeper is None else keeper.renewals,
            lease_renew_failures=0 if keeper is None else keeper.renew_failures,
            descriptor_polls=0 if watcher is None else watcher.polls,
            descriptor_poll_failures=0 if watcher is None else watcher.failures,
        )

    # --- lifecycle ------------------------------------------------------------------------------
    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Bind, register, renew, watch, accept; report started when admitting.

        Raises:
            ConfigurationError: DescriptorConflict (nothing is left registered or bound),
                or no address to advertise.
            OSError: the listen address cannot be bound.
        """
        if self._phase is not NodePhase.CREATED:
            raise InvalidOperation("a MeshNode serves once")
        if not self._meshes:
            self._phase = NodePhase.RUNNING
            task_status.started()
            await trio.sleep_forever()
        store = self._store
        if store is None:
            raise InvalidOperation("a MeshNode with meshes needs a Location Store")
        config = self.config
        host = advertised_host(config)
        listeners = await self._open_listeners()
        try:
            self._endpoint = Endpoint(host, listeners[0].socket.getsockname()[1])
            descriptors = build_descriptors(
                config,
                self._actor_types,
                self._rid,
                self._identity.node_generation,
                self._endpoint,
                self._entry_ids,
                self._spot_types,
                self._instance_types,
            )
            sent = trio.current_time()
            lease = await store.register_node(
                self._rid,
                self._identity.node_generation,
                descriptors,
                capacity=config.node_capacity,
                lease_ttl=config.owner_lease_ttl,
            )
        except BaseException:
            with trio.CancelScope(shield=True):
                for listener in listeners:
                    await trio.aclose_forcefully(listener)
            raise
        self._keeper = LeaseKeeper(
            store,
            self._rid,
            LeaseHeld(
                lease.lease_generation, sent + config.owner_lease_ttl, lease.expires_at, sent
            ),
            ttl=config.owner_lease_ttl,
            interval=config.owner_lease_renew_interval,
            on_expired=self._lease_expired,
            deadline=self._lease_deadline,
        )
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._keeper.run, name="zlink_trio.mesh.lease")
                await nursery.start(self._run_network, listeners, name="zlink_trio.mesh.network")
                if self._phase is NodePhase.CREATED:
                    self._phase = NodePhase.RUNNING
                task_status.started()
                await trio.sleep_forever()  # a lost lease leaves the node fail-stopped here
        finally:
            if not self._abandoned and isinstance(self._keeper.state, LeaseHeld):
                with trio.CancelScope(shield=True), trio.move_on_after(config.hello_timeout):
                    await self._release()

    async def aclose(self) -> None:
        """Graceful exit (idempotent): stop admitting (if :meth:`stop_admitting` has not
        already), remove the registration, say goodbye on every connection, wait (up to
        ``drain_timeout``) for them to close, then cancel the node's tasks. Runs shielded:
        call it from a ``finally``."""
        if self._closing:
            return
        self._closing = True
        if self._phase is not NodePhase.CLOSED:
            self._phase = NodePhase.CLOSING
        with trio.CancelScope(shield=True):
            if self._nursery is not None and not self._abandoned:
                with trio.move_on_after(self.config.drain_timeout):
                    await self._release()
                    for conn in self._links.connections():
                        conn.say_goodbye()
                    while self._links.admitted:
                        await self._links.wait_any_change()
            if self._nursery is not None:
                self._nursery.cancel_scope.cancel(reason="zlink_trio MeshNode closed")
        self._phase = NodePhase.CLOSED

    async def _open_listeners(self) -> list[trio.SocketListener]:
        config = self.config
        host = None if config.listen_host in ("", "*") else config.listen_host
        try:
            listeners = await trio.open_tcp_listeners(config.listen_port, host=host)
        except ValueError as exc:  # a host name the resolver refuses (UnicodeError)
            raise OSError(f"cannot listen on {config.listen_host!r}: {exc}") from exc
        # A port-0 bind on a host with several addresses gets a different port per
        # address: keep one listener so the advertised port is the only one.
        for extra in listeners[1:]:
            await trio.aclose_forcefully(extra)
        return listeners[:1]

    async def _run_network(
        self,
        listeners: list[trio.SocketListener],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        assert self._store is not None
        try:
            async with trio.open_nursery() as net:
                self._net = net
                watcher = self._watcher = DescriptorWatcher(
                    self._store,
                    self._meshes,
                    self._rid,
                    self.config.descriptor_poll_interval,
                    self._apply_view,
                    lambda: self._links.serial,
                )
                state = self._state
                state.readers = net  # connection readers: see connection.py
                state.live, state.refresh, state.peer_left = (
                    watcher.live,
                    watcher.refresh,
                    watcher.kick,
                )
                await net.start(watcher.run, name="zlink_trio.mesh.watcher")
                await net.start(
                    functools.partial(
                        trio.serve_listeners,
                        functools.partial(serve_inbound, state),
                        listeners,
                        handler_nursery=net,
                    ),
                    name="zlink_trio.mesh.listener",
                )
                task_status.started()
        finally:
            with trio.CancelScope(shield=True):
                for listener in listeners:
                    await trio.aclose_forcefully(listener)

    async def _release(self) -> None:
        keeper, store = self._keeper, self._store
        if keeper is None or store is None:
            return
        state = keeper.state
        if not isinstance(state, LeaseHeld):
            return  # an expired node makes no Store call at all, cleanup included
        try:
            removed = await store.remove_node(
                self._rid, self._identity.node_generation, state.lease_generation
            )
        except Exception:
            logger.exception("removing the node registration failed")
            removed = False
        keeper.release(removed)

    # --- lease loss ---------------------------------------------------------------------------
    def _lease_expired(self, expired: LeaseExpired) -> None:
        """Fail-stop: no admission, no connection, no intent, no Store update."""
        if self._phase is NodePhase.RUNNING or self._phase is NodePhase.CREATED:
            self._phase = NodePhase.EXPIRED
        for conn in self._links.connections():
            conn.close(CloseReason.LEASE_LOST)
        for link in self._links.links():
            self._links.remove_intent(link.address)
        if self._net is not None:
            self._net.cancel_scope.cancel(reason="zlink_trio owner lease lost")
        for fence in self._fences:
            try:
                fence()
            except Exception:
                logger.exception("a lease-loss fence failed")
        self._lease_lost.set()

    # --- intents and dialing --------------------------------------------------------------------
    def _apply_view(self, view: DescriptorView, mark: int) -> None:
        if self._phase is not NodePhase.RUNNING and self._phase is not NodePhase.CREATED:
            return
        for (mesh, rid), descriptor in view.items():
            address = PeerAddress(mesh, rid)
            existing = self._links.link(address)
            if (
                existing is not None
                and existing.intent is not None
                and existing.intent.node_generation != descriptor.node_generation
            ):
                self._links.remove_intent(address)
            link = self._links.add_intent(descriptor)
            if link.dialer is None:
                self._start_dialer(link)
        for link in self._links.links():
            intent = link.intent
            if (
                intent is not None
                and (intent.mesh_name, intent.node_rid) not in view
                and link.intent_since <= mark
            ):
                self._links.remove_intent(link.address)

    def _start_dialer(self, link: Link) -> None:
        assert self._net is not None
        scope = trio.CancelScope()
        link.dialer = scope
        self._net.start_soon(
            dial_loop, self._state, link, scope, name=f"zlink_trio.mesh.dialer {link.address}"
        )

    def _encode(self, record: Any) -> bytes:
        body = encode_fast(record)
        if len(body) > self.config.max_frame_bytes:
            raise ProtocolError(
                f"command {int(record.COMMAND)}: {len(body)} bytes exceed max_frame_bytes"
            )
        return body

    def _checked(self, body: bytes) -> bytes:
        """An encoded command's body, within ``max_frame_bytes``."""
        if len(body) > self.config.max_frame_bytes:
            raise ProtocolError(f"an encoded command: {len(body)} bytes exceed max_frame_bytes")
        return body
