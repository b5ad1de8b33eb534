"""The source side of an Actor relocation and its coordinator (docs/relocation.md).

``ActorRelocator.relocate`` runs one move in a child nursery of its own (one per
relocation in flight) inside the Actor runtime's nursery: the seal turn, the row's
relocation mark (by CAS), the participants' seal, the capture, 120 prepare, 121 restore
and its relay-ready reply (122). Before the reply is accepted every failure aborts: the
mark is cleared by CAS (the target commits only under it, so a late relay-ready can never
make it a second owner) and the Actor reopens here with its work in order — unless that
CAS lost to the target's commit, which then goes on as an acceptance (a clear that keeps
failing holds the Actor sealed, not reopened, while the target could still commit under
the mark: ``_hold``; ``relocate`` raises at its own deadline). Once accepted the
move never comes back: the activation is unpublished, a Message Follow
route installed, the saved work and the held ingress relayed (113 … 114, requests' replies
relayed back to their callers) and the one-way cutover (123) sent.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Callable, Sequence
from typing import final

import attrs
import trio

from .._exceptions import raise_single_error
from ..config import ServerConfig
from ..errors import (
    ApplicationError,
    DeadlineExceeded,
    InvalidOperation,
    NotFound,
    Unavailable,
    ZLinkError,
)
from ..ids import (
    ActorId,
    AuthorityOwnerGeneration,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OperationId,
    OwnerLeaseGeneration,
    StableType,
)
from ..mesh.api import (
    LinkLost,
    MeshNodeApi,
    PeerAddress,
    PeerGone,
    PeerIdentity,
    PeerNotAdmitted,
)
from ..objects.durable import remaining_ms
from ..objects.policy import DisableRelocation, PreserveStateWith
from ..objects.relocation import (
    ActorRelocationParticipant,
    MarkClear,
    RelocationUnit,
    clear_mark,
    hold_until_cleared,
    live_target,
    refuse_unless_relocatable,
    relay_ready_error,
    release_unconfirmed,
    set_mark,
    wait_committed_in_store,
)
from ..objects.sinks import raise_for_failure
from ..objects.timers import TimerTick
from ..observe import FlowTrace
from ..store.api import (
    AuthorityRow,
    AuthorityState,
    LocationStore,
    ObjectKey,
    OwnerFence,
    RelocationMark,
)
from ..wire.enums import MessageKind, ObjectKind, RelocationPolicy
from ..wire.payloads import TypedPayload
from ..wire.records import ActorJournal, TerminalReply
from ..wire.relocation import (
    RelocationAbort,
    RelocationCommitted,
    RelocationCutover,
    RelocationPrepare,
    RelocationRestore,
)
from .authority import actor_key
from .follow import FollowRoutes
from .host import ActorHost
from .hosted import READY, RELOCATING, ActorWork, Deliver, HostedActor, fail_sink
from .joining import relay_reply
from .relocation_envelope import RelocationEnvelope
from .spot_wide_moves import MemberMoves

__all__ = ["ActorRelocator", "RelocationResult"]

logger = logging.getLogger("zlink_trio.relocation")

_COMMIT_ALLOWANCE = 1.0
"""Seconds added to the target attempt's bound before a source that could not clear its
mark reopens: a target owner CAS cancelled by its attempt's timeout while in flight may
still land in the Store a little later."""


@attrs.frozen
class RelocationResult:
    """A relocation whose relay-ready reply was accepted: the Actor belongs to the target
    from now on (its owner CAS makes it AuthorityOwnerGeneration ``owner_generation``)."""

    relocation_id: OperationId
    actor_id: ActorId
    object_generation: ObjectGeneration
    source_rid: NodeRid
    target_rid: NodeRid
    owner_generation: AuthorityOwnerGeneration
    relayed: int
    """Payloads relayed to the target (saved work and held ingress)."""
    committed: bool
    """The target reported its commit (125) within ``relocation_timeout``; False: it did
    not (it may still have committed, or died: the Store row tells)."""


@attrs.frozen
class _Hold:
    """What a move's abort needs to hold the Actor sealed after a failed clear."""

    lease: OwnerLeaseGeneration
    draining: bool
    restored_at: list[float]
    """The Trio time the 121 was sent (empty: never sent; the target cannot commit)."""


class _Abort(Exception):
    def __init__(self, error: ZLinkError, *, reopen: bool = True) -> None:
        super().__init__(error)
        self.error = error
        self.reopen = reopen
        """False: this relocation did not seal the Actor (nothing of it to reopen)."""


@final
class ActorRelocator:
    """This node's relocation coordinator for its Actors."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        node: MeshNodeApi,
        store: LocationStore,
        host: ActorHost,
        participants: list[ActorRelocationParticipant],
        follow: FollowRoutes,
        nursery: trio.Nursery,
        flow: FlowTrace,
    ) -> None:
        self._config = config
        self._node = node
        self._store = store
        self._host = host
        self._participants = participants
        self._follow = follow
        self._nursery = nursery
        self._flow = flow
        self.in_flight: dict[ActorId, OperationId] = {}
        self._commits: dict[OperationId, trio.Event] = {}
        self._holding: set[OperationId] = set()
        """Moves whose mark could not be cleared: the Actor stays sealed in a task of the
        runtime's nursery (``_hold``), which ends them (``in_flight``, ``_commits``)."""
        self.moved_out = 0
        self.aborted = 0

    async def relocate(
        self, actor_id: ActorId, to: NodeRid, *, draining: bool = False
    ) -> RelocationResult:
        """Move the Actor ``actor_id`` hosted here to node ``to`` (a live peer of its mesh).

        Raises:
            NotFound: the Actor is not hosted here.
            InvalidOperation: its type is DisableRelocation, ``to`` is this node, or it is
                a member of a SpotWide User Spot (it moves only with its Spot).
            Unavailable: it is already moving or joining, the target refused or could not
                be reached before relay-ready (the Actor stays here, nothing lost).
        """
        refused = self._node.admission_error()
        if refused is not None and not draining:
            raise refused
        hosted = self._host.get(actor_id)
        if hosted is None or hosted.state is not READY:
            raise NotFound(f"actor {actor_id.value!r} is not hosted (Ready) on this node")
        policy = hosted.actor_type.relocation
        me = self._node.identity
        refuse_unless_relocatable(
            policy, "actor", hosted.actor_type.stable_type, to=to, me=me.node_rid
        )
        if actor_id in self.in_flight or hosted.join is not None:
            raise Unavailable(f"actor {actor_id.value!r} is already moving or joining")
        _refuse_spot_wide_member(hosted)
        generation, lease = await live_target(self._store, hosted.mesh_name, to, "Actor")
        # Re-checked after the await: a concurrent relocate of the same Actor may have
        # started meanwhile (the check above and the reservation below must not be split).
        if actor_id in self.in_flight or hosted.join is not None or hosted.state is not READY:
            raise Unavailable(f"actor {actor_id.value!r} is already moving or joining")
        unit = RelocationUnit(
            relocation_id=OperationId(secrets.randbits(128) or 1),
            actor_id=actor_id,
            object_generation=hosted.generation,
            mesh_name=hosted.mesh_name,
            source_rid=me.node_rid,
            source_generation=me.node_generation,
            source_owner_generation=hosted.owner_generation,
            target_rid=to,
            target_generation=generation,
        )
        self.in_flight[actor_id] = unit.relocation_id
        self._commits[unit.relocation_id] = trio.Event()
        try:
            result: list[RelocationResult] = []
            try:
                async with trio.open_nursery() as nursery:  # this relocation's own nursery
                    result.append(await self._run(hosted, unit, policy, lease, nursery, draining))
            except BaseExceptionGroup as group:
                raise_single_error(group)  # one error leaves as itself
            return result[0]
        finally:
            if unit.relocation_id not in self._holding:
                self.in_flight.pop(actor_id, None)
                self._commits.pop(unit.relocation_id, None)

    # --- a SpotWide Spot's members (driven by the Spot's move: .spot_wide_moves) --------
    @property
    def node(self) -> MeshNodeApi:
        return self._node

    @property
    def host(self) -> ActorHost:
        return self._host

    @property
    def commits(self) -> dict[OperationId, trio.Event]:
        """The moves away from here that wait for their commit notice (125)."""
        return self._commits

    def plan(
        self,
        members: Sequence[ActorId],
        to: NodeRid,
        target_generation: NodeGeneration,
        lease: OwnerLeaseGeneration,
    ) -> MemberMoves:
        """The members of a SpotWide User Spot that moves (``SpotWideMembers.plan``)."""
        return MemberMoves(self, members, to, target_generation, lease)

    async def to_relay_ready(
        self,
        hosted: HostedActor,
        unit: RelocationUnit,
        policy: object,
        sealed: list[ActorRelocationParticipant],
        deadline: float,
    ) -> bool:
        """A member's seal turn, participants, capture, 120, 121 (see ``_run``)."""
        try:
            return await self._to_relay_ready(hosted, unit, policy, sealed, deadline, member=True)
        except _Abort as abort:
            raise abort.error from None

    async def abort(
        self,
        hosted: HostedActor,
        unit: RelocationUnit,
        sealed: list[ActorRelocationParticipant],
        error: ZLinkError,
        *,
        reopen: bool,
    ) -> None:
        """A member's abort (see ``_abort``)."""
        await self._abort(hosted, unit, sealed, error, reopen=reopen)

    async def after_accepted(
        self,
        hosted: HostedActor,
        unit: RelocationUnit,
        peer: PeerAddress,
        sealed: list[ActorRelocationParticipant],
        lease: OwnerLeaseGeneration,
        nursery: trio.Nursery,
        draining: bool,
    ) -> RelocationResult:
        """A member's part after the aggregate's relay-ready (see ``_after_accepted``)."""
        return await self._after_accepted(hosted, unit, peer, sealed, lease, nursery, draining)

    def awaits_commit(self, relocation_id: OperationId) -> bool:
        """Whether a move of ``relocation_id`` away from here waits for its commit."""
        return relocation_id in self._commits

    async def on_committed(self, peer: PeerIdentity, record: RelocationCommitted) -> None:
        """125 from a target: the move of ``record.relocation_id`` committed there."""
        event = self._commits.get(record.relocation_id)
        if event is not None:
            event.set()

    # --- the move ------------------------------------------------------------------------
    async def _run(
        self,
        hosted: HostedActor,
        unit: RelocationUnit,
        policy: object,
        lease: OwnerLeaseGeneration,
        nursery: trio.Nursery,
        draining: bool,
    ) -> RelocationResult:
        sealed: list[ActorRelocationParticipant] = []
        marked: list[AuthorityRow] = []
        restored_at: list[float] = []  # when the 121 was sent (the target's bound)
        hold = _Hold(lease, draining, restored_at)
        peer = PeerAddress(unit.mesh_name, unit.target_rid)
        timeout = self._config.relocation_timeout
        deadline = trio.current_time() + timeout
        accepted = False
        try:
            with trio.move_on_at(deadline) as scope:
                accepted = await self._to_relay_ready(
                    hosted, unit, policy, sealed, deadline, mark=(lease, marked, restored_at)
                )
            if scope.cancelled_caught and not accepted:
                raise _Abort(DeadlineExceeded("the relocation did not reach relay-ready in time"))
        except _Abort as abort:
            if await self._abort(
                hosted, unit, sealed, abort.error, reopen=abort.reopen, marked=marked, hold=hold
            ):
                return await self._after_accepted(
                    hosted, unit, peer, sealed, lease, nursery, draining
                )
            raise abort.error from None
        except ZLinkError as exc:
            if accepted:
                raise
            if await self._abort(hosted, unit, sealed, exc, marked=marked, hold=hold):
                return await self._after_accepted(
                    hosted, unit, peer, sealed, lease, nursery, draining
                )
            raise
        except BaseException:
            if not accepted:
                with trio.CancelScope(shield=True):
                    taken = await self._abort(
                        hosted,
                        unit,
                        sealed,
                        Unavailable("the relocation was cancelled"),
                        marked=marked,
                        hold=hold,
                    )
                    if taken:
                        await self._after_accepted(
                            hosted, unit, peer, sealed, lease, nursery, draining
                        )
            raise
        return await self._after_accepted(hosted, unit, peer, sealed, lease, nursery, draining)

    async def _to_relay_ready(
        self,
        hosted: HostedActor,
        unit: RelocationUnit,
        policy: object,
        sealed: list[ActorRelocationParticipant],
        deadline: float,
        *,
        member: bool = False,
        mark: tuple[OwnerLeaseGeneration, list[AuthorityRow], list[float]] | None = None,
    ) -> bool:
        """The seal turn, the relocation mark, the participants' seal, the capture, 120,
        121: True once the relay-ready reply is accepted (raises _Abort or ZLinkError
        otherwise). ``member``: a SpotWide Spot's member moving with its Spot (its row
        gets no mark: the target commits it only in its Spot's aggregate CAS, fenced by
        the Spot's mark). ``mark``: the target's lease generation, the list the marked
        row is appended to (the abort clears the mark) and the one the time of the 121 is
        appended to (the target's attempt, started before its 120 reply, is bounded by its
        ``relocation_timeout`` from before then)."""
        peer = PeerAddress(unit.mesh_name, unit.target_rid)
        await self._seal(hosted, member=member)
        if mark is not None:
            lease, marked, _ = mark
            marked.append(await self._mark(unit, lease))
        states: list[tuple[str, bytes]] = []
        for participant in self._participants:
            state = await participant.seal(unit)
            sealed.append(participant)
            states.append((participant.participant_name, state))
        envelope = self._capture_framework(hosted, states)
        if isinstance(policy, PreserveStateWith):
            try:
                state = await policy.adapter.capture(hosted.instance)
            except Exception as exc:  # the application's adapter: typed here
                raise _Abort(
                    ApplicationError(f"the relocation adapter's capture raised: {exc!r}")
                ) from None
            if not isinstance(state, bytes):
                raise _Abort(InvalidOperation("the relocation adapter's capture must return bytes"))
            envelope = attrs.evolve(envelope, state=state)
        data = envelope.encode()
        ref = await self._store.put_root(data, retain_for=self._config.relocation_timeout * 2)
        await self._prepare(peer, unit, policy, deadline)
        if mark is not None:
            mark[2].append(trio.current_time())
        return await self._restore(peer, unit, ref.sha256, ref.size, deadline)

    async def _seal(self, hosted: HostedActor, *, member: bool = False) -> None:
        """The seal turn: a lifecycle item of the Actor's lane (after the running handler
        and before its queued work; a SpotWide member's under its Spot's gate); raises
        _Abort when the Actor cannot be sealed."""
        sealed = trio.Event()
        live = [True]  # a seal item that runs after this relocation gave up does nothing
        mine: list[bool] = []  # this relocation's seal item sealed the Actor

        def seal(actor: HostedActor) -> None:
            # (a SpotWide member is never sealed alone: a Join may have made it one)
            if (
                live[0]
                and actor.state is READY
                and actor.join is None
                and (actor.context.spot is not None) is member
            ):
                self._host.seal_relocation(actor)
                mine.append(True)
            sealed.set()

        lane = hosted.lane
        if lane is None:
            raise _Abort(Unavailable("the Actor runs no turn any more"))
        try:
            lane.submit_nowait(ActorWork(seal), lifecycle=True)
        except ZLinkError as exc:
            raise _Abort(Unavailable(f"the Actor cannot be sealed: {exc}")) from None
        try:
            await sealed.wait()
        finally:
            live[0] = False
        if not mine or hosted.state is not RELOCATING:
            raise _Abort(
                Unavailable(f"actor {hosted.actor_id.value!r} is joining, moving or destroyed"),
                reopen=False,
            )
        for item in hosted.parked or ():
            if type(item) is not Deliver and type(item) is not TimerTick:
                raise _Abort(Unavailable("framework work is pending for the Actor: retry later"))

    async def _mark(self, unit: RelocationUnit, lease: OwnerLeaseGeneration) -> AuthorityRow:
        """The relocation mark on the Actor's row, by CAS, right after the seal turn: the
        target commits only while the row carries the mark of this RelocationId, and the
        abort clears it before the Actor reopens here (so a relay-ready reply that comes
        after this source gave up can never make the target a second owner). A mark left
        by an earlier move of this lifecycle (its clear failed) is replaced: that move's
        target can then never commit either."""
        row = await self._store.read(actor_key(unit.actor_id))
        if (
            row is None
            or row.state is not AuthorityState.READY
            or row.object_generation != unit.object_generation
            or row.owner_generation != unit.source_owner_generation
            or row.owner.node_rid != unit.source_rid
            or row.owner.node_generation != unit.source_generation
        ):
            raise _Abort(Unavailable("the Actor's authority changed before its move"))
        mark = RelocationMark(
            relocation_id=unit.relocation_id,
            target=OwnerFence(unit.mesh_name, unit.target_rid, unit.target_generation, lease),
            sealed=True,
        )
        try:
            return await set_mark(
                self._store, row, mark, source_owner_generation=unit.source_owner_generation
            )
        except Unavailable:
            raise _Abort(Unavailable("the Actor's authority changed before its move")) from None

    def _capture_framework(
        self, hosted: HostedActor, states: list[tuple[str, bytes]]
    ) -> RelocationEnvelope:
        timers = None if hosted.timers is None else hosted.timers.capture()
        ticks = tuple(item for item in hosted.parked or () if type(item) is TimerTick)
        return RelocationEnvelope(None, timers, ticks, tuple(states))

    async def _request(self, peer: PeerAddress, build: Callable[[int], object]) -> object:
        """One request (120/121) to the target; its reply, or _Abort when it cannot be
        reached (not admitted, link lost, lifecycle gone)."""
        node = self._node
        try:
            pending = await node.request_with(peer, build)
            return await pending.wait()
        except (PeerNotAdmitted, PeerGone, LinkLost, DeadlineExceeded) as exc:
            raise _Abort(
                Unavailable(f"the relocation target could not be reached: {exc!r}")
            ) from None

    async def _prepare(
        self, peer: PeerAddress, unit: RelocationUnit, policy: object, deadline: float
    ) -> None:
        stable_type = self._host_copy(unit)
        wire_policy = (
            RelocationPolicy.PRESERVE_STATE
            if isinstance(policy, PreserveStateWith)
            else RelocationPolicy.RECREATE
        )

        def build(correlation: int) -> RelocationPrepare:
            return RelocationPrepare(
                correlation=correlation,
                relocation_id=unit.relocation_id,
                source_rid=unit.source_rid,
                source_generation=unit.source_generation,
                target_rid=unit.target_rid,
                target_generation=unit.target_generation,
                object_kind=ObjectKind.ACTOR,
                object_id=unit.actor_id.value,
                stable_type=stable_type,
                object_generation=unit.object_generation,
                authority_owner_generation=unit.source_owner_generation,
                policy=wire_policy,
                timeout_ms=remaining_ms(deadline),
            )

        reply = await self._request(peer, build)
        if not isinstance(reply, TerminalReply):
            raise _Abort(Unavailable("the target answered 120 with something else"))
        try:
            raise_for_failure(reply)
        except ZLinkError as exc:
            raise _Abort(exc) from None

    def _host_copy(self, unit: RelocationUnit) -> StableType:
        hosted = self._host.get(unit.actor_id)
        assert hosted is not None
        return hosted.actor_type.stable_type

    async def _restore(
        self, peer: PeerAddress, unit: RelocationUnit, sha: bytes, size: int, deadline: float
    ) -> bool:
        def build(correlation: int) -> RelocationRestore:
            return RelocationRestore(
                correlation=correlation,
                relocation_id=unit.relocation_id,
                state_sha256=sha,
                state_size=size,
                timeout_ms=remaining_ms(deadline),
            )

        error = relay_ready_error(await self._request(peer, build))
        if error is not None:
            raise _Abort(error)
        return True

    async def _abort(
        self,
        hosted: HostedActor,
        unit: RelocationUnit,
        sealed: list[ActorRelocationParticipant],
        error: ZLinkError,
        *,
        reopen: bool = True,
        marked: Sequence[AuthorityRow] = (),
        hold: _Hold | None = None,
    ) -> bool:
        """Before relay-ready acceptance: the source stays owner. The durable abort (the
        row's relocation mark cleared by CAS, ``marked``) comes first, then the held work
        returns to a fresh lane in arrival order, then the participants hear the abort,
        then the target is told one-way to drop its temporary queue.

        Returns True, reopening nothing, when the durable abort lost to the target's
        commit (its relay-ready reply came too late here, but its owner CAS, fenced by
        this move's mark, won): the Actor is the target's and the caller goes on as after
        an acceptance (never back to the source).

        When the mark cannot be cleared (the Store unreachable) after the 121 was sent,
        the target may still commit under it: the Actor is not reopened here but stays
        sealed (its ingress held, nothing run) in ``_hold``, a task of the runtime's
        nursery, and this returns False at once (the caller gets its error at its own
        deadline)."""
        if marked:
            outcome = await clear_mark(
                self._store,
                marked[0].key,
                relocation_id=unit.relocation_id,
                target_rid=unit.target_rid,
                target_owner_generation=unit.target_owner_generation,
                what=repr(unit.actor_id.value),
            )
            if outcome is MarkClear.TAKEN:
                return True
            if outcome is MarkClear.UNKNOWN and hold is not None and hold.restored_at:
                until = hold.restored_at[0] + self._config.relocation_timeout + _COMMIT_ALLOWANCE
                self._holding.add(unit.relocation_id)
                self._nursery.start_soon(
                    self._hold,
                    hosted,
                    unit,
                    sealed,
                    error,
                    reopen,
                    marked[0].key,
                    until,
                    hold,
                    name="zlink_trio.relocation.hold",
                )
                return False
        await self._reopen(hosted, unit, sealed, error, reopen=reopen)
        return False

    async def _hold(
        self,
        hosted: HostedActor,
        unit: RelocationUnit,
        sealed: list[ActorRelocationParticipant],
        error: ZLinkError,
        reopen: bool,
        key: ObjectKey,
        until: float,
        hold: _Hold,
    ) -> None:
        """A move whose mark could not be cleared: the Actor stays sealed while the
        clear is retried, until it is cleared (reopen here), the row names the target or
        its commit notice comes (go on as accepted: the held work is relayed there), or
        ``until`` passed (the target's attempt can no longer commit: reopen here)."""
        try:
            taken = await hold_until_cleared(
                self._store,
                key,
                relocation_id=unit.relocation_id,
                target_rid=unit.target_rid,
                target_owner_generation=unit.target_owner_generation,
                committed=self._commits[unit.relocation_id],
                until=until,
                what=repr(unit.actor_id.value),
            )
            if taken:
                peer = PeerAddress(unit.mesh_name, unit.target_rid)
                async with trio.open_nursery() as nursery:  # the relay's reply tasks
                    await self._after_accepted(
                        hosted, unit, peer, sealed, hold.lease, nursery, hold.draining
                    )
            else:
                await self._reopen(hosted, unit, sealed, error, reopen=reopen)
        except ZLinkError as exc:
            logger.warning("relocation of %r: after its held abort: %r", unit.actor_id, exc)
        finally:
            self._holding.discard(unit.relocation_id)
            if self.in_flight.get(unit.actor_id) == unit.relocation_id:
                del self.in_flight[unit.actor_id]
            self._commits.pop(unit.relocation_id, None)

    async def _reopen(
        self,
        hosted: HostedActor,
        unit: RelocationUnit,
        sealed: list[ActorRelocationParticipant],
        error: ZLinkError,
        *,
        reopen: bool,
    ) -> None:
        """The abort after its durable part: reopen here, participants, 124."""
        self.aborted += 1
        logger.info("relocation of %r aborted: %r", unit.actor_id, error)
        if reopen and hosted.state is RELOCATING:
            self._host.unseal_relocation(hosted)
        for participant in sealed:
            try:
                await participant.aborted(unit)
            except Exception:
                logger.exception("relocation participant %r: aborted", participant)
        peer = PeerAddress(unit.mesh_name, unit.target_rid)
        # One-way; the target drops its temporary queue by its own timeout otherwise.
        with contextlib.suppress(PeerNotAdmitted, DeadlineExceeded, trio.WouldBlock, ZLinkError):
            await self._node.send(
                peer,
                RelocationAbort(relocation_id=unit.relocation_id, reason=error.kind),
                wait=False,
            )

    async def _after_accepted(
        self,
        hosted: HostedActor,
        unit: RelocationUnit,
        peer: PeerAddress,
        sealed: list[ActorRelocationParticipant],
        lease: OwnerLeaseGeneration,
        nursery: trio.Nursery,
        draining: bool,
    ) -> RelocationResult:
        """Relay-ready accepted: never back. Unpublish here, install the follow route,
        relay what was held, send the cutover."""
        # The point of no return: the held work is unpublished here and only this task
        # relays it; a cancelled caller must not drop it (nor the cutover) half-way. The
        # wait for the commit below stays cancellable.
        with trio.CancelScope(
            shield=True, deadline=trio.current_time() + self._config.relocation_timeout
        ):
            items = self._host.unpublish_relocated(hosted)
            self._follow.install(unit, lease)
            self.moved_out += 1
            for participant in sealed:
                try:
                    await participant.departed(unit)
                except Exception:
                    logger.exception("relocation participant %r: departed", participant)
            deliveries = [item for item in items if type(item) is Deliver]
            relayed = await self._relay(peer, unit, deliveries, nursery)
            try:
                await self._node.send(
                    peer, RelocationCutover(relocation_id=unit.relocation_id, relayed_count=relayed)
                )
            except (PeerNotAdmitted, DeadlineExceeded, ZLinkError) as exc:
                # The target's 1,000 ms fallback goes on without it (spec 02 §8.1).
                logger.info("cutover of %r not sent: %r", unit.actor_id, exc)
        committed = self._commits[unit.relocation_id]
        with trio.move_on_after(self._config.relocation_timeout):
            if draining:
                # A closing node drops inbound commands (125 too): the Store tells.
                await wait_committed_in_store(
                    self._store,
                    actor_key(unit.actor_id),
                    target_rid=unit.target_rid,
                    target_owner_generation=unit.target_owner_generation,
                    committed=committed,
                    what=repr(unit.actor_id.value),
                )
            else:
                await committed.wait()
        if not committed.is_set():
            await self._clean_up_unconfirmed(unit)
        return RelocationResult(
            relocation_id=unit.relocation_id,
            actor_id=unit.actor_id,
            object_generation=unit.object_generation,
            source_rid=unit.source_rid,
            target_rid=unit.target_rid,
            owner_generation=unit.target_owner_generation,
            relayed=relayed,
            committed=committed.is_set(),
        )

    async def relocate_out(self) -> int:
        """Drain by relocation (a clean stop, after the settle): every Ready Actor hosted
        here whose type may relocate moves to a live peer of its mesh that registers its
        type (spread round-robin, 16 at a time); what cannot move stays for the release
        step. Returns the number moved."""
        me = self._node.identity
        plans: list[tuple[ActorId, NodeRid]] = []
        peers: dict[tuple[object, object], list[NodeRid]] = {}
        turn: dict[tuple[object, object], int] = {}
        for hosted in list(self._host):
            if (
                hosted.state is not READY
                or isinstance(hosted.actor_type.relocation, DisableRelocation)
                or hosted.context.spot is not None  # a SpotWide member moves with its Spot
            ):
                continue
            key = (hosted.mesh_name, hosted.actor_type.stable_type)
            if key not in peers:
                try:
                    records = await self._store.list_nodes(hosted.mesh_name)
                except ZLinkError as exc:
                    logger.info("drain by relocation: no node list: %r", exc)
                    return 0
                peers[key] = [
                    r.descriptor.node_rid
                    for r in records
                    if r.live
                    and r.descriptor.node_rid != me.node_rid
                    and hosted.actor_type.stable_type in r.descriptor.actor_types
                ]
            candidates = peers[key]
            if not candidates:
                continue
            index = turn.get(key, 0)
            turn[key] = index + 1
            plans.append((hosted.actor_id, candidates[index % len(candidates)]))
        moved = 0
        limiter = trio.CapacityLimiter(16)

        async def move(actor_id: ActorId, to: NodeRid) -> None:
            nonlocal moved
            async with limiter:
                try:
                    await self.relocate(actor_id, to, draining=True)
                    moved += 1
                except ZLinkError as exc:
                    logger.info("drain by relocation: %r stays: %r", actor_id, exc)

        async with trio.open_nursery() as nursery:
            for actor_id, to in plans:
                nursery.start_soon(move, actor_id, to)
        return moved

    async def _clean_up_unconfirmed(self, unit: RelocationUnit) -> None:
        """No commit within ``relocation_timeout`` after acceptance
        (:func:`~zlink_trio.objects.relocation.release_unconfirmed`)."""
        await release_unconfirmed(
            self._store,
            actor_key(unit.actor_id),
            object_generation=unit.object_generation,
            source_rid=unit.source_rid,
            source_generation=unit.source_generation,
            source_owner_generation=unit.source_owner_generation,
            what=repr(unit.actor_id.value),
            waited=self._config.relocation_timeout,
        )

    async def _relay(
        self,
        peer: PeerAddress,
        unit: RelocationUnit,
        items: list[Deliver],
        nursery: trio.Nursery,
    ) -> int:
        """The saved work and held ingress, in order (113 each, then 114); a request's
        reply is relayed back to its caller by a task of this relocation's nursery."""
        node = self._node
        me = node.identity
        entries: list[tuple[Deliver, bytes]] = []
        now = trio.current_time()
        for item in items:
            if item.deadline <= now:
                continue
            payload = item.payload
            if type(payload) is TypedPayload:
                try:
                    payload = payload.encode()
                except ZLinkError as exc:
                    if item.sink is not None:
                        await fail_sink(item.sink, exc)
                    continue
            assert type(payload) is bytes
            entries.append((item, payload))
        for index, (item, payload) in enumerate(entries):
            request = item.sink is not None

            def build(
                correlation: int, index: int = index, item: Deliver = item, payload: bytes = payload
            ) -> ActorJournal:
                return ActorJournal(
                    correlation=correlation,
                    operation_id=unit.relocation_id,
                    source_rid=me.node_rid,
                    source_generation=me.node_generation,
                    actor_id=unit.actor_id,
                    index=index,
                    message_kind=MessageKind.REQUEST if item.sink is not None else MessageKind.SEND,
                    packet_name=item.packet,
                    payload=payload,
                    timeout_ms=remaining_ms(item.deadline) if item.sink is not None else None,
                )

            try:
                if request:
                    pending = await node.request_with(peer, build)
                    # The coordinator's nursery, not this relocation's: the reply must
                    # reach its caller even when the relocate caller is cancelled (bounded
                    # by the request's own deadline).
                    self._nursery.start_soon(relay_reply, item, pending)
                else:
                    await node.send(peer, build(0))
            except (PeerNotAdmitted, DeadlineExceeded, ZLinkError) as exc:
                if item.sink is not None:
                    await fail_sink(
                        item.sink, Unavailable(f"the Actor moved; relay failed: {exc!r}")
                    )

        return len(entries)


def _refuse_spot_wide_member(hosted: HostedActor) -> None:
    """A member of a SpotWide User Spot runs its turns under its Spot's gate and moves only
    with its Spot, in one aggregate commit (spec 06 §6.1): never alone. (A PerActor
    member moves alone; its Spot stays.)

    Raises:
        InvalidOperation: ``hosted`` is a member of a SpotWide User Spot.
    """
    if hosted.context.spot is not None:
        spot = hosted.context.spot_id
        raise InvalidOperation(
            f"actor {hosted.actor_id.value!r} is a member of the SpotWide User Spot "
            f"{spot and spot.value!r}: it moves only with its Spot"
        )
