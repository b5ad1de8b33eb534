"""Cold activation of an Instance Spot: the target side (spec 06 §4.1 steps 13–16, §4.2;
docs/decisions.md "Spot direct calls and Instance Spot cold activation").

A route-kind-2 envelope (from a peer's command 39, or handed over by this node's own call)
is handled by one task of the Spot runtime's nursery:

1. a fresh Store read of the authority, compared with this node's hosted Spots:
   Ready here with that incarnation hosted → the message joins its queue; Ready elsewhere
   (a local Spot of that id is stale and never runs it) → forwarded ONCE to the owner;
   Creating here → parked behind the activation's first message; Creating or Closing
   elsewhere → wait for that activation (re-read with backoff) until Ready or Missing;
   another kind or type → TypeMismatch;
2. Missing → the complete envelope is stored as an immutable recovery root
   (``instance-activation-recovery-v1``) and checked; Reserve Missing → Creating records
   the recovery receipt (the root, cursor 0) with the reservation fence and the pending
   capacity; a lost race deletes the root and goes back to 1;
3. the first message is parked in the staging Spot before its factory runs (it is the
   first thing the Spot runs), with a :class:`~.first_record.FirstRecord` sink that makes
   its completion durable before the reply and removes the recovery pointer after it;
4. the shared attempt steps (:meth:`~zlink_trio.objects.create_target.CreateTarget.
   run_reserved`): factory and initialize, the Ready commit (keeping the pointer), publish.
   A failed or rejected attempt was aborted with the exact fence; the message ends with
   its error and the root is deleted.

The source wrote nothing to the Store; capacity is taken here, by the reservation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final, final

import trio

from ..config import ServerConfig
from ..engine.oneshot import OneShot
from ..errors import (
    CapacityExceeded,
    DeadlineExceeded,
    InvalidOperation,
    NotFound,
    OwnerLeaseExpired,
    StaleRoute,
    StoreOutcomeUnknown,
    TypeMismatch,
    Unavailable,
    ZLinkError,
    error_from_kind,
)
from ..ids import SpotId
from ..mesh.api import MeshNodeApi, PeerAddress, PeerIdentity
from ..objects.activity import Activity
from ..objects.authority import Authority, route_of
from ..objects.create_target import CreateTarget
from ..objects.durable import remaining_ms
from ..objects.kind import Commit, CreateOrder
from ..objects.sinks import LocalReply, RemoteSink, ReplySink, public_error
from ..observe import FlowEvent, FlowTrace
from ..routing.deliver import NEVER, Deadlines
from ..store.api import (
    Applied,
    AuthorityRow,
    AuthorityState,
    ContentRef,
    LocationStore,
    ObjectKind,
    OperationKey,
    RecoveryPointer,
    Reservation,
)
from ..wire.activation import encode_activation_root
from ..wire.enums import CreateState, MessageKind, TerminalResult
from ..wire.payloads import TypedPayload
from ..wire.records import SpotDirectRoute, TerminalReply
from ..wire.tails import ColdActivation, CreateTail, ReadyFence, ReservationFence
from .dispatch import SpotMessage, fail_messages
from .first_record import FirstRecord
from .host import SpotHost
from .kind import SpotTargetKind, reserved_shape_error, spot_key
from .submit import TargetUnreachable, reply_payload, submit, terminal_of

__all__ = ["Activation"]

logger = logging.getLogger("zlink_trio.spots")

_SEND: Final = MessageKind.SEND
_INSTANCE: Final = ObjectKind.INSTANCE_SPOT
WAIT_FIRST: Final = 0.005
"""First re-read delay while another node's activation of the id is in progress."""
WAIT_MAX: Final = 0.2
"""Longest re-read delay (it doubles up to this)."""

Payload = bytes | TypedPayload
Sink = LocalReply | ReplySink | None


async def _fail(sink: Sink, error: ZLinkError) -> None:
    if sink is None:
        return
    if type(sink) is OneShot:
        sink.fail(public_error(error))
    else:
        await sink.fail(error)


async def _answer(sink: Sink, terminal: TerminalReply) -> None:
    """Relay a forwarded request's terminal to the original caller."""
    if sink is None:
        return
    if isinstance(sink, RemoteSink):
        await sink.deliver(terminal)  # re-stamped with the source's correlation
        return
    try:
        payload = reply_payload(terminal)
    except ZLinkError as exc:
        await _fail(sink, exc)
        return
    if type(sink) is OneShot:
        sink.set(payload)
    else:
        await sink.reply(payload)


@final
class _Pending:
    """This node's activations of one id in progress, from their reserve to their end
    (other envelopes of the id wait for ``finished``, then read the authority again)."""

    __slots__ = ("count", "finished")

    def __init__(self) -> None:
        self.count = 0
        self.finished = trio.Event()


def _error_of(terminal: TerminalReply) -> ZLinkError:
    tail = terminal.tail
    if terminal.terminal_result is TerminalResult.OK:
        assert isinstance(tail, CreateTail) and tail.state is CreateState.REJECTED
        return InvalidOperation("the instance spot's create callback rejected its activation")
    kind = terminal.failure_code
    assert kind is not None
    return error_from_kind(kind, terminal.failure_message or "the activation failed")


def created(terminal: TerminalReply) -> bool:
    tail = terminal.tail
    return (
        terminal.terminal_result is TerminalResult.OK
        and isinstance(tail, CreateTail)
        and tail.state is CreateState.CREATED
    )


@final
class Activation:
    """This node as the target of cold activations (see the module docstring)."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        node: MeshNodeApi,
        store: LocationStore,
        host: SpotHost,
        authority: Authority[SpotId],
        target: CreateTarget[SpotId],
        target_kind: SpotTargetKind,
        deadlines: Deadlines,
        activity: Activity,
        nursery: trio.Nursery,
        flow: FlowTrace,
        lease_live: Callable[[], bool],
    ) -> None:
        self._lease_live = lease_live
        self._config = config
        self._node = node
        self._store = store
        self._host = host
        self._authority = authority
        self._target = target
        self._target_kind = target_kind
        self._pending: dict[SpotId, _Pending] = {}
        self._deadlines = deadlines
        self._activity = activity
        self._nursery = nursery
        self._flow = flow
        self.envelopes = 0
        """Envelopes this node handled as a target."""
        self.reserved = 0
        """Reservations this node won for an envelope (factory runs follow)."""
        self.forwarded = 0
        """Messages this node forwarded once to the Ready owner (it lost the race)."""

    def _expect(self, spot_id: SpotId) -> _Pending:
        pending = self._pending.get(spot_id)
        if pending is None:
            pending = self._pending[spot_id] = _Pending()
        pending.count += 1
        return pending

    def _done(self, spot_id: SpotId, pending: _Pending) -> None:
        pending.count -= 1
        if pending.count <= 0:
            pending.finished.set()
            if self._pending.get(spot_id) is pending:
                del self._pending[spot_id]

    async def _end_staging(self, spot_id: SpotId) -> None:
        """This activation's staging of ``spot_id`` ended: what was parked for it and no
        published Spot took fails (StaleRoute: it was not created)."""
        leftovers = self._host.end_staging_of(spot_id)
        if leftovers:
            await fail_messages(leftovers, StaleRoute(f"spot {spot_id.value!r} was not created"))

    # --- ingress ----------------------------------------------------------------------------
    def start(
        self, envelope: SpotDirectRoute, payload: Payload, sink: LocalReply | None, deadline: float
    ) -> None:
        """An envelope of this node's own call (``payload`` as the caller gave it)."""
        self._spawn(envelope, payload, sink, deadline)

    def resume(self, envelope: SpotDirectRoute, deadline: float) -> None:
        """Activate ``envelope`` again here (recovery of a dead owner's aborted
        reservation): its message is the first one, with no reply route left."""
        self._spawn(envelope, envelope.payload, None, deadline)

    def rehost(self, row: AuthorityRow, envelope: SpotDirectRoute) -> None:
        """Build again, here, the Ready incarnation ``row`` (just moved to this node by
        its recovery) whose first message ``envelope`` did not complete: the first record
        is restored at the head of its queue before the Spot is published."""
        self._nursery.start_soon(
            self._rehost, row, envelope, name="zlink_trio.spots.activation.rehost"
        )

    async def _rehost(self, row: AuthorityRow, envelope: SpotDirectRoute) -> None:
        spot_id = SpotId(row.key.object_id)
        assert row.recovery is not None
        root = row.recovery.root
        first = FirstRecord(
            store=self._store,
            key=row.key,
            root=root,
            inner=None,
            lease_live=self._lease_live,
            flow=self._flow,
            bound=self._config.drain_timeout,
        )
        first.bind(row.object_generation)
        item = SpotMessage(
            envelope.message_kind, envelope.packet_name, envelope.payload, first, NEVER
        )
        order = CreateOrder(
            operation=OperationKey(
                envelope.source_rid, envelope.source_generation, envelope.operation_id
            ),
            object_id=spot_id,
            key=row.key,
            stable_type=row.stable_type,
            fence=ReservationFence(
                expected_store_version=row.store_version,
                object_generation=row.object_generation,
                authority_owner_generation=row.owner_generation,
                target_rid=row.owner.node_rid,
                target_generation=row.owner.node_generation,
                target_owner_lease_generation=row.owner.lease_generation,
                pending_capacity_delta=0,
            ),
            timeout_ms=remaining_ms(trio.current_time() + self._config.default_create_timeout),
        )
        deadline = trio.current_time() + self._config.default_create_timeout
        self._activity.begin()
        self._host.begin_staging(spot_id)
        try:
            # restored at the head of its queue
            self._host.park_first(spot_id, row.object_generation, item)
            staging = self._target_kind.begin(order, row, None)
            if isinstance(staging, ZLinkError):
                raise staging
            try:
                decision = await staging.stage(deadline)
                if not isinstance(decision, Commit):
                    raise InvalidOperation("the create callback rejected the recovered Spot")
                staging.publish(row)  # the serving gate opens only now
            finally:
                staging.end()
        except Exception as exc:
            # The incarnation cannot be built here: it ends (its row released, the root
            # deleted); the message is dropped.
            logger.warning("recovery of instance spot %r failed: %r", spot_id.value, exc)
            self._flow.emit(
                FlowEvent.ACTIVATION_ABORTED,
                "instance spot %r: its recovery failed (%r); its first message is dropped",
                spot_id.value,
                exc,
            )
            await first.abandon(Unavailable("the recovery failed"))
            try:
                current = await self._authority.read(spot_id)
                if current is not None and current.object_generation == row.object_generation:
                    await self._store.release(current.key, current.store_version)
                await self._drop_root(root)
            except (ZLinkError, OSError) as err:
                logger.info("ending the unrecoverable %r failed: %r", spot_id.value, err)
        finally:
            await self._end_staging(spot_id)
            self._activity.end()

    async def on_envelope(self, peer: PeerIdentity, envelope: SpotDirectRoute) -> None:
        """A peer's command 39 with route kind 2 (the connection's reader: never blocks
        beyond a refusal)."""
        route = envelope.route
        assert isinstance(route, ColdActivation)
        sink: RemoteSink | None = None
        if envelope.message_kind is not _SEND:
            sink = RemoteSink(self._node, peer.address, envelope.correlation)
        refused = self._fence_error(route)
        if refused is not None:
            self._flow.emit(
                FlowEvent.STALE_ROUTE_INGRESS, "activation of %r: %r", route.spot_id, refused
            )
            if sink is not None:
                await sink.fail_nowait(refused)
            return
        deadline = trio.current_time() + route.timeout_ms / 1000
        self._spawn(envelope, envelope.payload, sink, deadline)

    def _fence_error(self, route: ColdActivation) -> ZLinkError | None:
        me = self._node.identity
        if route.target_rid != me.node_rid or route.target_generation != me.node_generation:
            return Unavailable("the activation names another node lifecycle")
        refused = self._node.admission_error()
        if refused is not None:
            return Unavailable(f"this node admits nothing now ({refused.message})")
        try:
            fence = self._node.owner_fence(route.target_mesh)
        except ZLinkError:
            return Unavailable(f"this node serves no mesh {route.target_mesh.value!r}")
        if fence.lease_generation.value != route.descriptor_version:
            return Unavailable("the activation names another descriptor version of this node")
        return None

    def _spawn(
        self, envelope: SpotDirectRoute, payload: Payload, sink: Sink, deadline: float
    ) -> None:
        self.envelopes += 1
        self._nursery.start_soon(
            self._run, envelope, payload, sink, deadline, name="zlink_trio.spots.activation"
        )

    # --- one envelope -------------------------------------------------------------------------
    async def _run(
        self, envelope: SpotDirectRoute, payload: Payload, sink: Sink, deadline: float
    ) -> None:
        # A task of the runtime's nursery: every end is the message's one terminal (or, for
        # a send, a counted log line), never an exception that would stop the runtime.
        route = envelope.route
        assert isinstance(route, ColdActivation)
        self._activity.begin()
        try:
            await self._deliver(envelope, route, payload, sink, deadline)
        except ZLinkError as exc:
            self._not_delivered(route.spot_id, envelope, exc)
            await _fail(sink, exc)
        except Exception as exc:
            logger.exception("cold activation of %r failed", route.spot_id)
            error = Unavailable(f"cold activation failed: {type(exc).__name__}")
            self._not_delivered(route.spot_id, envelope, error)
            await _fail(sink, error)
        finally:
            self._activity.end()

    def _not_delivered(self, spot_id: SpotId, envelope: SpotDirectRoute, error: ZLinkError) -> None:
        if envelope.message_kind is _SEND:
            self._flow.emit(
                FlowEvent.ACTIVATION_FAILED,
                "send %r to %r (cold activation): %r",
                envelope.packet_name,
                spot_id.value,
                error,
            )

    async def _deliver(
        self,
        envelope: SpotDirectRoute,
        route: ColdActivation,
        payload: Payload,
        sink: Sink,
        deadline: float,
    ) -> None:
        spot_id = route.spot_id
        me = self._node.identity
        delay = WAIT_FIRST
        while True:
            if trio.current_time() >= deadline:
                raise DeadlineExceeded("the cold activation did not finish before its deadline")
            read: list[AuthorityRow | None] = []
            with trio.move_on_at(deadline):
                read.append(await self._authority.read(spot_id))  # fresh: never the cache
            if not read:
                continue
            row = read[0]
            if row is None:
                # Not under the deadline scope: the attempt honours the deadline itself,
                # and its Store steps (commit, abort) must not be cut short.
                if await self._activate(envelope, route, payload, sink, deadline):
                    return
                continue
            if row.kind is not _INSTANCE or row.stable_type != route.stable_type:
                what = (
                    f"an instance spot of type {row.stable_type.value!r}"
                    if row.kind is _INSTANCE
                    else f"a {row.kind.value.replace('_', ' ')}"
                )
                raise TypeMismatch(
                    f"spot {spot_id.value!r} is {what}, not an instance spot of type "
                    f"{route.stable_type.value!r}"
                )
            mine = (
                row.owner.node_rid == me.node_rid
                and row.owner.node_generation == me.node_generation
            )
            with trio.move_on_at(deadline):
                if mine and row.state is not AuthorityState.CLOSING:
                    if await self._admit_here(envelope, row, payload, sink, deadline):
                        return
                    continue
                if row.state is AuthorityState.READY:
                    self._stale_local(row)
                    await self._forward(envelope, row, payload, sink, deadline)
                    return
                # Creating or Closing elsewhere: wait for that activation (or close).
                await trio.sleep(delay)
                delay = min(delay * 2, WAIT_MAX)

    async def _retire_stale(self, spot_id: SpotId, reserved: AuthorityRow) -> None:
        """This node just reserved a new incarnation of ``spot_id``: a Spot of that id
        still published here is stale (the Store names another incarnation) and never
        runs a message again; what it had queued fails."""
        stale = self._host.get(spot_id)
        if stale is None or stale.generation == reserved.object_generation:
            return
        self._stale_local(reserved)
        self._host.retire(stale)
        await stale.fail_orphans(
            Unavailable(
                f"spot {spot_id.value!r} here was stale: the Store names another incarnation"
            )
        )

    def _stale_local(self, row: AuthorityRow) -> None:
        hosted = self._host.get(SpotId(row.key.object_id))
        if hosted is not None:
            # The Store points elsewhere: this Spot is stale and never runs the message.
            self._flow.emit(
                FlowEvent.STALE_ROUTE_INGRESS,
                "spot %r here is stale (the Store names another owner or generation)",
                row.key.object_id,
            )

    def _message(
        self, envelope: SpotDirectRoute, payload: Payload, sink: Sink, deadline: float
    ) -> SpotMessage:
        run_by = NEVER if envelope.message_kind is _SEND else deadline
        return SpotMessage(envelope.message_kind, envelope.packet_name, payload, sink, run_by)

    async def _admit_here(
        self,
        envelope: SpotDirectRoute,
        row: AuthorityRow,
        payload: Payload,
        sink: Sink,
        deadline: float,
    ) -> bool:
        """The Store says this lifecycle owns the id (Ready or Creating): into the hosted
        Spot's queue, or parked behind the activation in progress here. False: that
        activation ended without a Spot (read the authority again)."""
        spot_id = SpotId(row.key.object_id)
        hosted = self._host.get(spot_id)
        if hosted is not None and hosted.generation != row.object_generation:
            self._stale_local(row)
            raise Unavailable(f"spot {spot_id.value!r} here is not the Store's incarnation")
        if row.state is AuthorityState.CREATING:
            # An activation of this node is in progress: wait for its end (bounded by the
            # caller's deadline scope), then read again — Ready: this message queues
            # behind its first message; Missing: it competes with its own.
            pending = self._pending.get(spot_id)
            if pending is not None:
                await pending.finished.wait()
            else:
                await trio.sleep(WAIT_FIRST)
            return False
        try:
            await self._host.admit(spot_id, self._message(envelope, payload, sink, deadline))
        except StaleRoute:
            raise Unavailable(
                f"spot {spot_id.value!r}: the Store names this node, which does not host it"
            ) from None
        return True

    async def _forward(
        self,
        envelope: SpotDirectRoute,
        row: AuthorityRow,
        payload: Payload,
        sink: Sink,
        deadline: float,
    ) -> None:
        """Forward the message ONCE to the Ready owner (it keeps its operation id, packet,
        payload and deadline; the owner's one terminal is relayed to the caller)."""
        spot_id = SpotId(row.key.object_id)
        route = route_of(row)
        me = self._node.identity
        fence = ReadyFence(
            spot_id=spot_id,
            object_generation=route.object_generation,
            authority_owner_generation=route.owner_generation,
            target_rid=route.node_rid,
            target_generation=route.node_generation,
            owner_lease_generation=route.lease_generation,
            timeout_ms=None if envelope.message_kind is _SEND else remaining_ms(deadline),
        )
        data = envelope.payload

        def build(correlation: int) -> SpotDirectRoute:
            return SpotDirectRoute(
                correlation=correlation,
                operation_id=envelope.operation_id,
                source_rid=me.node_rid,
                source_generation=me.node_generation,
                source_spot_id=envelope.source_spot_id,
                route=fence,
                message_kind=envelope.message_kind,
                packet_name=envelope.packet_name,
                metadata_present=envelope.metadata_present,
                metadata=envelope.metadata,
                payload=data,
            )

        what = f"spot {spot_id.value!r}"
        try:
            pending = await submit(
                self._node,
                PeerAddress(route.mesh_name, route.node_rid),
                build,
                envelope.message_kind,
                deadline=deadline,
                connect_timeout=self._config.connect_timeout,
                what=what,
            )
        except TargetUnreachable as exc:
            raise Unavailable(f"{what}: its owner cannot be reached ({exc.why})") from None
        self.forwarded += 1
        self._flow.emit(FlowEvent.ACTIVATION_FORWARDED, "%s to its owner %s", what, route.node_rid)
        if pending is None:
            return
        ticket = self._deadlines.watch(pending, deadline)
        try:
            terminal = await terminal_of(self._node, pending, what)
        finally:
            self._deadlines.settled(ticket)
        await _answer(sink, terminal)

    async def _activate(
        self,
        envelope: SpotDirectRoute,
        route: ColdActivation,
        payload: Payload,
        sink: Sink,
        deadline: float,
    ) -> bool:
        """Steps 2–4 for a Missing id. False: another reservation won the race (read the
        authority again)."""
        spot_id = route.spot_id
        reserved_shape = reserved_shape_error(spot_id)
        if reserved_shape is not None:
            raise reserved_shape  # never reserved, whoever sent it
        key = spot_key(spot_id)
        store = self._store
        data = encode_activation_root(envelope)
        expected = ContentRef.of(data)
        left = max(0.0, deadline - trio.current_time())
        root = await store.put_root(data, retain_for=left + self._config.terminal_record_retention)
        if root != expected:
            raise Unavailable("the Relocation Store returned another reference for the root")
        owner = self._node.owner_fence(route.target_mesh)
        operation = OperationKey(
            envelope.source_rid, envelope.source_generation, envelope.operation_id
        )
        pending = self._expect(spot_id)
        # From now on a message admitted here for the id is parked (and runs after the
        # first one) instead of being refused: nothing can overtake the first message.
        self._host.begin_staging(spot_id)
        try:
            try:
                result = await store.reserve(
                    Reservation(
                        key=key,
                        kind=_INSTANCE,
                        stable_type=route.stable_type,
                        owner=owner,
                        operation=operation,
                        recovery=RecoveryPointer(root, 0),
                        attempt_ttl=max(0.0, deadline - trio.current_time()),
                    )
                )
            except (CapacityExceeded, NotFound, OwnerLeaseExpired):
                await self._drop_root(root)
                raise
            except StoreOutcomeUnknown:
                current = await self._authority.read(spot_id)
                if not _ours(current, root):
                    if current is None or current.recovery is None or current.recovery.root != root:
                        await self._drop_root(root)
                    return False
                assert current is not None
                reserved = current
            else:
                if not isinstance(result, Applied):
                    current_row = result.current
                    if (
                        current_row is None
                        or current_row.recovery is None
                        or (current_row.recovery.root != root)
                    ):
                        await self._drop_root(root)
                    return False
                reserved = result.row
            self.reserved += 1
            await self._retire_stale(spot_id, reserved)
            first = FirstRecord(
                store=store,
                key=key,
                root=root,
                inner=sink,
                lease_live=self._lease_live,
                flow=self._flow,
                bound=self._config.drain_timeout,
            )
            first.bind(reserved.object_generation)
            self._host.park_first(
                spot_id,
                reserved.object_generation,
                SpotMessage(envelope.message_kind, envelope.packet_name, payload, first, NEVER),
            )
            order = CreateOrder(
                operation=operation,
                object_id=spot_id,
                key=key,
                stable_type=route.stable_type,
                fence=ReservationFence(
                    expected_store_version=reserved.store_version,
                    object_generation=reserved.object_generation,
                    authority_owner_generation=reserved.owner_generation,
                    target_rid=owner.node_rid,
                    target_generation=owner.node_generation,
                    target_owner_lease_generation=owner.lease_generation,
                    pending_capacity_delta=1,
                ),
                timeout_ms=remaining_ms(deadline),
            )
            terminal = await self._target.run_reserved(order, reserved, deadline)
            if not created(terminal):
                await first.abandon(_error_of(terminal))  # before the leftovers fail
                await self._drop_root(root)
            return True
        finally:
            await self._end_staging(spot_id)
            self._done(spot_id, pending)

    async def _drop_root(self, root: ContentRef) -> None:
        try:
            await self._store.delete_root(root)
        except (Unavailable, OSError) as exc:  # it expires with its retention
            logger.info("deleting an activation root failed: %r", exc)


def _ours(row: AuthorityRow | None, root: ContentRef) -> bool:
    return (
        row is not None
        and row.state is AuthorityState.CREATING
        and row.recovery is not None
        and row.recovery.root == root
    )
