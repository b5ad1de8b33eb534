"""The source side of Create / GetOrCreate, for any object kind (spec 04 §6.2–§6.5,
spec 06 §3.2–§3.3).

One end-to-end deadline, fixed at submit, covers resolve, reservation, the target's
factory and approval, and the Ready barrier. Only the caller whose Store reservation CAS
wins owns the creation run; everyone else observes Creating and re-checks the authority with
bounded backoff until it is Ready (→ Existing, or AlreadyExists for an exclusive Create) or
Missing again (→ competes for a new reservation with its OWN request; no operation shares
another's Rejected state or reply).

A reservation is never left behind: an operation that ends without a terminal of its own
reservation — deadline, failure, the caller's own cancellation, a terminal of an earlier
attempt — gives it back under a bounded shield, a reserve cut short is settled by a read,
and a waiter ends a Creating row whose attempt is over (deadline + ``reservation_grace``)
or whose source or owner lifecycle is gone (:mod:`.reclaim`).

A re-submitted operation (an explicit OperationId) gets its retained terminal, and only
its own: the terminal is checked first, again after a reservation it made (a terminal
recorded meanwhile wins, and the reservation is given back), and before a Ready row found
is answered AlreadyExists/Existing (the operation that created it gets its ``Created``).

What is about one kind — its Store key, the membership a reservation records, its result
values and the command that carries the create to a remote target — comes from its
:class:`~.kind.SourceKind`.
"""

from __future__ import annotations

import logging
import math
import random
from typing import Generic, TypeVar, final

import attrs
import trio

from ..config import ServerConfig
from ..errors import (
    AlreadyExists,
    CapacityExceeded,
    DeadlineExceeded,
    InvalidOperation,
    NotFound,
    OwnerLeaseExpired,
    StoreOutcomeUnknown,
    TypeMismatch,
    Unavailable,
)
from ..ids import MeshName, OperationId, StableType
from ..mesh.api import MeshNodeApi, PeerAddress, PeerState, connect_until
from ..observe import FlowTrace
from ..store.api import (
    Applied,
    AuthorityRow,
    AuthorityState,
    Conflict,
    LocationStore,
    ObjectKey,
    OperationKey,
    OwnerFence,
    Reservation,
)
from ..wire.records import TerminalReply
from ..wire.tails import CreateTail, ReservationFence
from .authority import Authority
from .create_target import CreateTarget
from .durable import remaining_ms, run_durable
from .kind import CreateOrder, IdT, SourceKind, noun
from .owner_loss import owner_lost, reclaim_row
from .placement import choose_node
from .reclaim import Reclaimer, give_back, orphaned
from .sinks import LocalSink, decode_recorded, raise_for_failure

__all__ = ["CreateSource"]

logger = logging.getLogger("zlink_trio.objects")

ResultT = TypeVar("ResultT")


def _about(reply: TerminalReply, row: AuthorityRow) -> bool:
    """Whether ``reply`` is the terminal of the attempt on the reservation ``row`` (its
    create tail names that incarnation), which the target committed or gave back."""
    tail = reply.tail
    return isinstance(tail, CreateTail) and tail.object_generation == row.object_generation


@attrs.define
class _Placement:
    """What one create learned about its candidate targets across its placements."""

    unreachable: set[bytes] = attrs.field(factory=set)
    """NodeRids found unreachable before anything was sent to them (excluded)."""
    exhausted: bool = False
    """Every candidate was found unreachable: place no more, drive as any durable op."""

    @property
    def replaced(self) -> bool:
        """A target of this create was found unreachable (it is being placed again)."""
        return self.exhausted or bool(self.unreachable)


class _TargetUnreachable(Exception):
    """The reserved target could not be reached before anything was sent to it."""

    def __init__(self, node_rid: bytes, state: PeerState) -> None:
        super().__init__(f"target node {node_rid.hex()[:12]} cannot be reached ({state.name})")
        self.node_rid = node_rid


def _ttl(deadline: float) -> float | None:
    """Seconds from now to ``deadline`` (None for a call without one)."""
    left = deadline - trio.current_time()
    return max(0.0, left) if math.isfinite(left) else None


@final
class CreateSource(Generic[IdT, ResultT]):
    def __init__(
        self,
        *,
        kind: SourceKind[IdT, ResultT],
        config: ServerConfig,
        node: MeshNodeApi,
        store: LocationStore,
        target: CreateTarget[IdT],
        authority: Authority[IdT],
        reclaimer: Reclaimer,
        flow: FlowTrace,
        reserve_first: bool = False,
    ) -> None:
        self._kind = kind
        self._reserve_first = reserve_first
        """An exclusive create of a fresh operation without a request reserves before it
        reads (see :meth:`_probe`). Off for Spots: a Spot create whose issued id is taken
        must make no reservation call at all (S06-03)."""
        self._flow = flow
        self._noun = noun(kind.kind)
        self._config = config
        self._authority = authority
        self._reclaimer = reclaimer
        self._node = node
        self._store = store
        self._target = target
        self._rng = random.Random()
        self.creates = 0
        self.replays = 0

    def _checked(
        self, reply: TerminalReply, object_key: ObjectKey, subject: ObjectKey | None = None
    ) -> TerminalReply:
        """``reply``, the retained terminal of this operation; InvalidOperation when it
        names another object (an OperationId re-used for another id, or for an object of
        another kind -- Actors and Spots are separate namespaces -- in its retention).
        ``subject`` is the object the terminal record names (None: it names none)."""
        if subject is not None and subject != object_key:
            same_kind = subject.namespace is object_key.namespace
            what = self._noun if same_kind else subject.namespace.value
            raise InvalidOperation(
                f"operation id already used for {what} {subject.object_id!r} (retained "
                "until its deadline + the terminal retention)"
            )
        tail = reply.tail
        if isinstance(tail, CreateTail) and tail.object_id != object_key.object_id:
            raise InvalidOperation(
                f"operation id already used for {self._noun} {tail.object_id!r} (retained "
                "until its deadline + the terminal retention)"
            )
        return reply

    def _recorded(self, result: bytes, object_key: ObjectKey) -> TerminalReply:
        """This operation's retained terminal record ``result``, checked to be about
        ``object_key``."""
        recorded = decode_recorded(result)
        return self._checked(recorded.reply, object_key, recorded.subject)

    def _retained(self, result: bytes, object_key: ObjectKey) -> ResultT:
        """The result of this operation's retained terminal ``result``."""
        return self._result(self._recorded(result, object_key))

    def _result(self, reply: TerminalReply) -> ResultT:
        raise_for_failure(reply)
        tail = reply.tail
        if not isinstance(tail, CreateTail):
            raise Unavailable("the create terminal carries no create tail")
        return self._kind.outcome(tail)

    async def run(
        self,
        object_id: IdT,
        stable_type: StableType,
        mesh: MeshName,
        request: bytes | None,
        deadline: float,
        *,
        exclusive: bool,
        operation_id: OperationId | None,
    ) -> ResultT:
        # A target that cannot be reached before anything was sent to it (its process
        # died, its lease not expired yet) never got the order: its reservation is given
        # back and the create is placed again, on another node, within the same deadline.
        placement = _Placement()
        op = operation_id or OperationId.new()
        while True:
            try:
                return await self._run_once(
                    object_id,
                    stable_type,
                    mesh,
                    request,
                    deadline,
                    exclusive=exclusive,
                    op=op,
                    explicit=operation_id is not None,
                    placement=placement,
                )
            except _TargetUnreachable as exc:
                logger.info("create of %r: %s; placing it again", object_id, exc)
                placement.unreachable.add(exc.node_rid)

    async def _run_once(
        self,
        object_id: IdT,
        stable_type: StableType,
        mesh: MeshName,
        request: bytes | None,
        deadline: float,
        *,
        exclusive: bool,
        op: OperationId,
        explicit: bool,
        placement: _Placement,
    ) -> ResultT:
        me = self._node.identity
        key = OperationKey(me.node_rid, me.node_generation, op)
        object_key = self._kind.key(object_id)
        kind = self._kind.kind
        reserved: AuthorityRow | None = None
        reply: TerminalReply | None = None
        local = False  # a fresh local reservation, driven under the resolve scope
        fresh = False  # ``reserved`` is what our own reserve CAS just returned (Applied)
        unsure = False  # a reserve may have committed without our learning it
        # This scope covers resolve and reservation (and the wait for a fresh local
        # reservation's terminal, which has no typed ending of its own): the durable
        # operation that follows owns the same deadline itself (nested cancel scopes with
        # one deadline would let the outer one swallow the inner one's typed ending).
        try:
            with trio.move_on_at(deadline):
                if explicit:
                    # A re-submitted operation gets its retained terminal (until
                    # deadline + 5 min).
                    retained = await self._store.read_terminal(key)
                    if retained is not None:
                        return self._retained(retained.result, object_key)
                backoff = self._config.create_backoff_initial
                stuck: int | None = None  # the version of a Creating row seen last round
                # An exclusive create of a fresh operation without a creation request
                # reserves before it reads: the reservation CAS answers with the current
                # row when there is one (then handled as the read would be), so a create
                # that wins costs no read. Anything else goes the read-first way.
                probe = self._reserve_first and exclusive and not explicit and request is None
                while reserved is None:
                    row: AuthorityRow | None
                    if probe:
                        probe = False
                        unsure = True
                        probed = await self._probe(
                            key, object_id, object_key, stable_type, mesh, deadline, placement
                        )
                        if isinstance(probed, Conflict):
                            unsure = False
                            if probed.current is None:
                                continue  # gone meanwhile: read as usual
                            row = probed.current
                        elif probed is None:
                            continue  # refused, unknown or not placeable: read as usual
                        else:
                            unsure = False
                            fresh = True
                            reserved = probed
                            break
                    else:
                        row = await self._authority.read(object_id)
                    if row is not None and row.operation == key:
                        if row.state is AuthorityState.CREATING:
                            # Our own reservation, made by a reserve whose outcome was
                            # unknown (or cut short): drive it, never orphan it.
                            self.creates += 1
                            reserved = row
                            break
                    else:
                        unsure = False  # that read settled our last reserve: not committed
                    if row is not None:
                        if row.kind is not kind or row.stable_type != stable_type:
                            raise TypeMismatch(
                                f"{self._noun} {object_key.object_id!r} exists with type "
                                f"{row.stable_type.value!r}"
                            )
                        if row.state is not AuthorityState.CREATING and await owner_lost(
                            self._store, row, me.node_rid
                        ):
                            # Its owner's lease expired: the incarnation ended with it.
                            # Reclaim it (one fenced CAS) and compete for a new one.
                            await reclaim_row(
                                self._store,
                                row,
                                grace=self._config.reservation_grace,
                                flow=self._flow,
                            )
                            continue
                        if row.state is AuthorityState.READY:
                            if explicit:
                                # Maybe made by this very operation (its terminal was
                                # recorded after our first check): its Created, then.
                                retained = await self._store.read_terminal(key)
                                if retained is not None:
                                    return self._retained(retained.result, object_key)
                            if exclusive:
                                raise AlreadyExists(
                                    f"{self._noun} {object_key.object_id!r} already exists"
                                )
                            return self._kind.existing(row)
                        if (
                            row.state is AuthorityState.CREATING
                            and stuck == row.store_version
                            and await orphaned(
                                self._store,
                                row,
                                grace=self._config.reservation_grace,
                                flow=self._flow,
                            )
                        ):
                            stuck = None
                            continue  # ended (attempt over, lifecycle gone): compete again
                        stuck = row.store_version if row.state is AuthorityState.CREATING else None
                        # Creating or Closing: wait for the authority to settle (bounded
                        # backoff).
                        await trio.sleep(backoff * (0.5 + self._rng.random()))
                        backoff = min(backoff * 2, self._config.create_backoff_max)
                        continue
                    # Missing: compete for the reservation (None: lost the race, the node
                    # moved, or the outcome is unknown: read again).
                    unsure = True
                    got = await self._reserve(
                        key, object_key, stable_type, mesh, request, deadline, placement
                    )
                    if isinstance(got, AuthorityRow):
                        reserved = got
                        unsure = False
                        fresh = True
                if (
                    reserved is not None
                    and fresh
                    and not explicit
                    and reserved.owner.node_rid == me.node_rid
                ):
                    # A fresh reservation on this node: its attempt runs under this same
                    # deadline scope (one scope for the whole create, not two).
                    local = True
                    reply = await self._drive_here(key, object_id, reserved, deadline)
        finally:
            if reserved is None:
                if unsure:
                    # Cancelled, timed out or failed right after a reserve whose outcome
                    # we never learned: if it committed, give it back now (never orphan).
                    await self._settle_unsure(object_id, object_key, key)
            elif local and reply is None:
                # As below: no terminal, give the reservation back unless committed.
                await self._give_back(reserved.key, reserved.store_version)
        if reserved is None or (local and reply is None):
            raise DeadlineExceeded(
                f"create of {object_key.object_id!r} did not finish before its deadline"
            )
        if not local:
            try:
                if explicit:
                    # The operation may have ended between our first check and this
                    # reservation (a re-submission overlapping an earlier one): its
                    # terminal is the answer, and this reservation is given back below.
                    with trio.move_on_at(deadline):
                        retained = await self._store.read_terminal(key)
                        if retained is not None:
                            reply = self._recorded(retained.result, object_key)
                if reply is None:
                    reply = await self._drive(
                        key, object_id, reserved, deadline, placement, fresh=fresh
                    )
            finally:
                if reply is None:
                    # No terminal (deadline, the caller's cancellation, a transport
                    # failure, anything): give the reservation back unless the target
                    # committed it.
                    await self._give_back(reserved.key, reserved.store_version)
        assert reply is not None
        if not _about(reply, reserved):
            # A terminal, but not of this reservation: the operation's terminal recorded
            # for an earlier one (a replay that raced its give-back, or a fence the target
            # refused). The target never touched this row: give it back, never orphan it.
            await self._give_back(reserved.key, reserved.store_version)
            reply = self._checked(reply, reserved.key)
        return self._result(reply)

    async def _probe(
        self,
        key: OperationKey,
        object_id: IdT,
        object_key: ObjectKey,
        stable_type: StableType,
        mesh: MeshName,
        deadline: float,
        placement: _Placement,
    ) -> AuthorityRow | Conflict | None:
        """A reservation made before any read: the reserved row (Applied), the Conflict
        (its current row: what a read would have shown, taught to the route cache the
        same way), or None when it was refused, its outcome is unknown, or no node could
        be chosen (the caller then reads and goes on as usual; any error the read-first
        way would raise is raised from there, after the row was seen)."""
        authority = self._authority
        epoch = self._store.recovery_epoch
        read_at = trio.current_time()
        try:
            result = await self._reserve(
                key, object_key, stable_type, mesh, None, deadline, placement, probe=True
            )
        except (NotFound, CapacityExceeded) as exc:
            logger.debug("probing reservation of %r not placed (%r); reading", object_key, exc)
            return None
        if isinstance(result, Conflict):
            authority.observe(object_id, result.current, epoch, read_at)
        return result

    async def _reserve(
        self,
        key: OperationKey,
        object_key: ObjectKey,
        stable_type: StableType,
        mesh: MeshName,
        request: bytes | None,
        deadline: float,
        placement: _Placement,
        *,
        probe: bool = False,
    ) -> AuthorityRow | Conflict | None:
        """The reserved row (Applied); None when the reservation was refused (after a
        backoff, unless ``probe``) or its outcome is unknown; a lost CAS is None too,
        or its Conflict when ``probe``."""
        store = self._store
        nodes = await store.list_nodes(mesh)
        kind = self._kind.kind
        try:
            target = choose_node(
                nodes,
                stable_type,
                kind=kind,
                rng=self._rng,
                exclude=frozenset(placement.unreachable),
            )
        except NotFound:
            if not placement.replaced:
                raise
            # The node we had placed it on went away and no other live node hosts the
            # type: the operation's target lifecycle ended (A04-24), not a NotFound.
            raise Unavailable(
                f"the target node's lifecycle ended and no other live node hosts "
                f"{self._noun} type {stable_type.value!r}"
            ) from None
        except CapacityExceeded:
            if not placement.replaced:
                raise
            # Every candidate left could not be reached: no re-placement any more; the
            # operation is driven as any durable one (replayed to its target until its
            # deadline: never admitted -> Unavailable at the deadline, A04-23).
            placement.unreachable.clear()
            placement.exhausted = True
            target = choose_node(nodes, stable_type, kind=kind, rng=self._rng)
        content = None
        if request is not None:
            retain = (
                max(0.0, deadline - trio.current_time()) + self._config.terminal_record_retention
            )
            content = await store.put_root(request, retain_for=retain)
        descriptor = target.descriptor
        owner = OwnerFence(
            descriptor.mesh_name,
            descriptor.node_rid,
            descriptor.node_generation,
            target.lease_generation,
        )
        try:
            result = await store.reserve(
                Reservation(
                    key=object_key,
                    kind=kind,
                    stable_type=stable_type,
                    owner=owner,
                    membership=self._kind.membership(descriptor),
                    content=content,
                    operation=key,
                    # The reservation lives at most until the operation's deadline (+ the
                    # reclaimers' grace); its terminal is retained until it + retention.
                    attempt_ttl=_ttl(deadline),
                )
            )
        except (OwnerLeaseExpired, CapacityExceeded) as exc:
            logger.debug("reservation on %s refused (%r); choosing again", descriptor.node_rid, exc)
            if not probe:
                await trio.sleep(self._config.create_backoff_initial)
            return None
        except StoreOutcomeUnknown as exc:
            # It may have committed: the caller's next read finds our reservation (its
            # operation is ``key``) or Missing, and goes on from there.
            logger.info(
                "reservation of %r has an unknown outcome (%r); re-reading", object_key, exc
            )
            return None
        if isinstance(result, Applied):
            self.creates += 1
            return result.row
        return result if probe else None

    async def _settle_unsure(
        self, object_id: IdT, object_key: ObjectKey, key: OperationKey
    ) -> None:
        """A reserve of ``key`` may have committed unseen: read (bounded, shielded) and
        give the reservation back if it is there."""
        row: AuthorityRow | None = None
        with trio.CancelScope(shield=True), trio.move_on_after(self._config.drain_timeout):
            try:
                row = await self._authority.read(object_id)
            except Unavailable as exc:
                logger.info("settling the reservation of %r: %r", object_key, exc)
                # Unknown still; the waiters' backstop (orphaned) covers a dead source,
                # and a read later cannot be made from here: leave it to them.
                return
        if row is not None and row.state is AuthorityState.CREATING and row.operation == key:
            await self._give_back(object_key, row.store_version)

    async def _give_back(self, object_key: ObjectKey, version: int) -> None:
        """The operation ended without a terminal: if the reservation it made is still
        untouched (the target never started committing it), abort it so the id and the
        pending capacity are free again. A target that got there first wins the CAS.
        Bounded and shielded; what the Store could not settle in time is retried in the
        background (:class:`~.reclaim.Reclaimer`)."""
        settled = await give_back(
            self._store, object_key, version, bound=self._config.drain_timeout
        )
        if not settled:
            self._reclaimer.later(object_key, version)

    async def _reach(self, peer: PeerAddress, deadline: float) -> None:
        """Before the first send: a target with no admitted connection is dialed now and
        waited for at most ``connect_timeout``. One that cannot be reached raises
        :class:`_TargetUnreachable` (nothing was sent: the create is placed again, on
        another node; once no other candidate is left, it is driven as any durable
        operation). Once admitted, run_durable replays the operation under its
        OperationId through transport failures (A04-24)."""
        node = self._node
        state = node.peer_state(peer)
        if state is PeerState.ADMITTED:
            return
        if state is PeerState.GONE:
            await node.refresh_peers()  # our view may predate the target's registration
            state = node.peer_state(peer)
        if state is PeerState.CONNECTING:
            give_up = trio.current_time() + self._config.connect_timeout
            state = await connect_until(node, peer, min(deadline, give_up))
        if state is not PeerState.ADMITTED and trio.current_time() < deadline:
            raise _TargetUnreachable(peer.node_rid.value, state)
        # Admitted, or the deadline passed: run_durable gives the typed ending.

    def _order(
        self, key: OperationKey, object_id: IdT, row: AuthorityRow, deadline: float
    ) -> CreateOrder[IdT]:
        """The creation attempt on the reservation ``row`` (its fence) as a target runs it."""
        owner = row.owner
        fence = ReservationFence(
            expected_store_version=row.store_version,
            object_generation=row.object_generation,
            authority_owner_generation=row.owner_generation,
            target_rid=owner.node_rid,
            target_generation=owner.node_generation,
            target_owner_lease_generation=owner.lease_generation,
            pending_capacity_delta=1,
        )
        return CreateOrder(
            operation=key,
            object_id=object_id,
            key=row.key,
            stable_type=row.stable_type,
            fence=fence,
            timeout_ms=remaining_ms(deadline),
        )

    async def _drive_here(
        self, key: OperationKey, object_id: IdT, row: AuthorityRow, deadline: float
    ) -> TerminalReply:
        """Hand this node's target the fresh reservation ``row`` (the Store's own answer
        to our reserve CAS: its fence) of an operation whose id never left this call (no
        explicit OperationId: ``private``) and wait for the terminal. The caller's scope
        bounds the wait by ``deadline``."""
        sink = LocalSink()
        order = self._order(key, object_id, row, deadline)
        self._target.handle(order, sink, reserved=row, private=True)
        return await sink.wait()

    async def _drive(
        self,
        key: OperationKey,
        object_id: IdT,
        row: AuthorityRow,
        deadline: float,
        placement: _Placement,
        *,
        fresh: bool,
    ) -> TerminalReply:
        """Send the create to the reserved target and wait for its terminal (replaying it
        under the same OperationId on transient transport failures).

        ``fresh``: ``row`` is what this operation's own reserve CAS just returned. A
        local target is then handed that row as its fence (no replay can reach a local
        attempt: the target skips the reads that guard against one, see
        :meth:`~.create_target.CreateTarget.handle`)."""
        me = self._node.identity
        order = self._order(key, object_id, row, deadline)
        if row.owner.node_rid == me.node_rid:
            sink = LocalSink()
            self._target.handle(order, sink, reserved=row if fresh else None)
            with trio.move_on_at(deadline):
                return await sink.wait()
            raise DeadlineExceeded("create did not finish before its deadline")
        kind = self._kind
        peer = PeerAddress(row.owner.mesh_name, row.owner.node_rid)
        if not placement.exhausted:
            await self._reach(peer, deadline)

        def record(timeout_ms: int) -> object:
            return kind.record(attrs.evolve(order, timeout_ms=timeout_ms))

        attempts = 0

        def counted() -> None:
            nonlocal attempts
            attempts += 1
            if attempts > 1:
                self.replays += 1

        return await run_durable(
            self._node,
            peer,
            record,
            deadline,
            on_attempt=counted,
        )
