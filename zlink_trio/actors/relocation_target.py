"""The target side of an Actor relocation (docs/relocation.md): 120 prepare, 121 restore
(answered by the relay-ready reply 122), the relay (113, held by :class:`JoinTarget`),
123 cutover and 124 abort.

* 120: the row is checked against the source fence (Ready, same ObjectGeneration, owned
  by the source lifecycle at the named AuthorityOwnerGeneration, marked for this move —
  a SpotWide member is fenced by its Spot's mark instead) and the TEMPORARY QUEUE
  registered (the host's staging record: inbound dispatch finds it before any instance,
  parks what arrives, never runs it). One attempt per RelocationId.
* 121: idempotent per (RelocationId, this target lifecycle, the source owner generation):
  the first one builds the instance (factory, then the adapter's restore for
  PreserveStateWith), its timers (restored suspended) and the participants' state, and
  keeps the activation HIDDEN; a repeat gets the same answer and builds nothing.
* after the relay-ready reply: the cutover (123), or after ``cutover_fallback`` without
  it the ``cutover_timeout`` warning and the fallback; then the target-only owner CAS with
  the source fence and this move's mark (AuthorityOwnerGeneration + 1, ObjectGeneration
  unchanged, the mark cleared; a source that gave up cleared the mark: discard); the
  merge (saved work and pre-boundary relay, by relay index, then the temporary queue) and
  the regular-route switch in one step; timers resumed; participants committed.
* an abort (124) or ``relocation_timeout`` without a restore or a commit discards the
  temporary queue (what it held fails StaleRoute: it never ran) and the hidden shell.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any, final

import attrs
import trio

from ..config import ServerConfig
from ..engine.gate import Gate
from ..errors import (
    ApplicationError,
    DeadlineExceeded,
    InvalidOperation,
    NotFound,
    StaleRoute,
    StoreOutcomeUnknown,
    Unavailable,
    ZLinkError,
)
from ..ids import ActorId, OperationId, SpotId, StableType
from ..mesh.api import MeshNodeApi, PeerAddress, PeerIdentity, PeerNotAdmitted
from ..objects.activity import Activity
from ..objects.policy import PreserveStateWith
from ..objects.relocation import ActorRelocationParticipant, RelocationUnit, relay_ready
from ..objects.sinks import RemoteSink, failure, ok
from ..objects.timers import TimerService
from ..store.api import (
    UNCHANGED,
    Applied,
    AuthorityRow,
    AuthorityState,
    ContentRef,
    LocationStore,
)
from ..wire.enums import RelayReadyResult
from ..wire.relocation import (
    RelocationAbort,
    RelocationCommitted,
    RelocationCutover,
    RelocationPrepare,
    RelocationRelayReady,
    RelocationRestore,
)
from .authority import Authority, actor_key
from .client import ActorClient
from .context import ActorContext
from .follow import FollowRoutes
from .host import ActorHost
from .hosted import ActorItem, HostedActor, fail_parked
from .join import HeldJoin, JoinRegistrar
from .join_target import JoinTarget
from .registry import ActorType
from .relocation_envelope import RelocationEnvelope
from .stats import DispatchStats

__all__ = ["RelocationTarget"]

logger = logging.getLogger("zlink_trio.relocation")


@final
class _Attempt:
    __slots__ = (
        "actor_type",
        "answer",
        "bound",
        "cancel",
        "cutover",
        "envelope",
        "group",
        "group_committed",
        "held",
        "hosted",
        "mesh",
        "record",
        "restored",
        "restored_by",
        "settled",
        "spot",
        "unit",
    )

    def __init__(
        self, record: RelocationPrepare, unit: RelocationUnit, actor_type: ActorType
    ) -> None:
        self.record = record
        self.unit = unit
        self.actor_type = actor_type
        self.mesh = unit.mesh_name
        self.hosted: HostedActor | None = None
        self.restored_by: list[ActorRelocationParticipant] = []
        """Participants whose ``restore`` returned (each gets ``discarded`` on a discard)."""
        self.spot: SpotId | None = None
        """The Actor's Spot here (an Entry Actor's: this node's Entry Spot)."""
        self.envelope: RelocationEnvelope | None = None
        self.answer: RelocationRelayReady | None = None
        """The relay-ready reply of the first 121 (a repeat gets it again)."""
        self.restored = trio.Event()
        self.cutover = trio.Event()
        self.cancel = trio.CancelScope()
        self.held = HeldJoin(record.relocation_id, (record.source_rid, record.source_generation))
        self.group: OperationId | None = None
        """A SpotWide Spot's member: the RelocationId of its Spot's move, which commits it
        (never alone) and settles it."""
        self.group_committed = False
        self.bound = trio.Event()
        """Its Spot's Restore accepted it: from here only its Spot's attempt ends it."""
        self.settled = trio.Event()


@final
class RelocationTarget:
    """This node as the target of Actor relocations."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        node: MeshNodeApi,
        store: LocationStore,
        host: ActorHost,
        authority: Authority,
        types: Mapping[StableType, ActorType],
        client: ActorClient,
        registrar: JoinRegistrar,
        journal: JoinTarget,
        follow: FollowRoutes,
        participants: list[ActorRelocationParticipant],
        stats_for: Callable[[StableType], DispatchStats],
        timers: TimerService | None,
        nursery: trio.Nursery,
        activity: Activity,
    ) -> None:
        self._config = config
        self._node = node
        self._store = store
        self._host = host
        self._authority = authority
        self._types = types
        self._client = client
        self._registrar = registrar
        self._journal = journal
        self._follow = follow
        self._participants = participants
        self._stats_for = stats_for
        self._timers = timers
        self._nursery = nursery
        self._activity = activity
        self._attempts: dict[OperationId, _Attempt] = {}
        self.factory_runs = 0
        self.committed = 0
        self.discarded = 0
        self.cutover_timeouts = 0
        self.spot_wide_staging: Callable[[SpotId, object], OperationId | None] | None = None
        """The Spot target's lookup of a SpotWide Spot moving here (None: no Spots)."""

    @property
    def attempts(self) -> Mapping[OperationId, _Attempt]:
        return self._attempts

    @property
    def store(self) -> LocationStore:
        return self._store

    def has_attempt(self, relocation_id: OperationId) -> bool:
        """Whether a move of ``relocation_id`` to here is in progress."""
        return relocation_id in self._attempts

    # --- 120 ------------------------------------------------------------------------------
    async def on_prepare(self, peer: PeerIdentity, record: RelocationPrepare) -> None:
        """120, in the connection's reader: the checks and the Store read run in a task
        (the reader goes on with the next frame)."""
        self._nursery.start_soon(self._prepare, peer, record, name="zlink_trio.relocation.prepare")

    async def _prepare(self, peer: PeerIdentity, record: RelocationPrepare) -> None:
        sink = RemoteSink(self._node, peer.address, record.correlation)
        me = self._node.identity
        if (
            record.target_rid != me.node_rid
            or record.target_generation != me.node_generation
            or record.source_rid != peer.node_rid
            or record.source_generation != peer.node_generation
        ):
            await sink.deliver(failure(StaleRoute("the prepare names another node lifecycle")))
            return
        if not self._node.admitting:
            await sink.deliver(failure(Unavailable("the target does not admit relocations")))
            return
        existing = self._attempts.get(record.relocation_id)
        if existing is not None:
            await sink.deliver(ok())  # a repeated prepare: the temporary queue is there
            return
        actor_id = ActorId(record.object_id)
        if self._host.get(actor_id) is not None:
            await sink.deliver(failure(InvalidOperation("the Actor is hosted here already")))
            return
        actor_type = self._types.get(record.stable_type)
        if actor_type is None:
            await sink.deliver(
                failure(NotFound(f"actor type {record.stable_type.value!r} is not registered here"))
            )
            return
        try:
            row = await self._authority.read(actor_id)
        except ZLinkError as exc:
            await sink.deliver(failure(exc))
            return
        if (
            row is None
            or row.state is not AuthorityState.READY
            or row.object_generation != record.object_generation
            or row.owner_generation != record.authority_owner_generation
            or row.owner.node_rid != record.source_rid
            or row.owner.node_generation != record.source_generation
        ):
            await sink.deliver(failure(Unavailable("the Actor's authority is not the source's")))
            return
        if record.relocation_id in self._attempts:
            await sink.deliver(ok())
            return
        group: OperationId | None = None
        if row.membership is not None and self.spot_wide_staging is not None:
            # A member of a SpotWide Spot that stages here from the same source: it moves
            # with it, in its aggregate commit (spec 06 §6.1), fenced by the Spot's mark.
            group = self.spot_wide_staging(
                row.membership, (record.source_rid, record.source_generation)
            )
        if group is None and not _marked_for(row, record.relocation_id):
            # A move alone commits only under its own mark (the source sets it after the
            # seal turn, and clears it when it gives up).
            await sink.deliver(failure(Unavailable("the Actor's row is not marked for this move")))
            return
        unit = RelocationUnit(
            relocation_id=record.relocation_id,
            actor_id=actor_id,
            object_generation=record.object_generation,
            mesh_name=row.owner.mesh_name,
            source_rid=record.source_rid,
            source_generation=record.source_generation,
            source_owner_generation=record.authority_owner_generation,
            target_rid=me.node_rid,
            target_generation=me.node_generation,
        )
        attempt = _Attempt(record, unit, actor_type)
        attempt.group = group
        self._attempts[record.relocation_id] = attempt
        self._host.begin_staging(actor_id)  # the temporary queue, before anything looks
        self._journal.relocations[(actor_id, record.relocation_id)] = attempt.held
        self._activity.begin()
        self._nursery.start_soon(self._run, attempt, name="zlink_trio.relocation.target")
        await sink.deliver(ok())

    # --- 121 ------------------------------------------------------------------------------
    async def on_restore(self, peer: PeerIdentity, record: RelocationRestore) -> None:
        """121, in the connection's reader: the Restore (Store read, factory, adapter)
        runs in a task."""
        self._nursery.start_soon(
            self._restore_once, peer, record, name="zlink_trio.relocation.restore"
        )

    async def _restore_once(self, peer: PeerIdentity, record: RelocationRestore) -> None:
        attempt = self._attempts.get(record.relocation_id)
        if attempt is None or attempt.held.source != (peer.node_rid, peer.node_generation):
            await self._answer(peer, record, Unavailable("no prepared relocation of that id here"))
            return
        if attempt.answer is not None or attempt.envelope is not None:
            # A repeat (same RelocationId, this target lifecycle, same owner generation):
            # nothing is built again; it gets the first one's answer once there is one.
            await attempt.restored.wait()
            assert attempt.answer is not None
            await self._send(peer, attempt.answer, record.correlation)
            return
        attempt.envelope = RelocationEnvelope(None, None, (), ())  # claimed
        error: ZLinkError | None = None
        try:
            error = await self._restore(attempt, record)
        except ZLinkError as exc:
            error = exc
        except Exception as exc:
            logger.info("restore of %r failed: %r", attempt.unit.actor_id, exc)
            error = ApplicationError(f"the restore failed: {type(exc).__name__}: {exc}")
        answer = relay_ready(record.relocation_id, error)
        attempt.answer = answer
        attempt.restored.set()
        if error is not None:
            attempt.cancel.cancel(reason="the restore failed")  # discard
        await self._send(peer, answer, record.correlation)

    async def _answer(
        self, peer: PeerIdentity, record: RelocationRestore, error: ZLinkError
    ) -> None:
        await self._send(peer, relay_ready(record.relocation_id, error), record.correlation)

    async def _send(
        self, peer: PeerIdentity, answer: RelocationRelayReady, correlation: int
    ) -> None:
        try:
            await self._node.send(peer.address, attrs.evolve(answer, correlation=correlation))
        except ZLinkError as exc:
            logger.info("relay-ready reply not sent: %r", exc)

    async def _restore(self, attempt: _Attempt, record: RelocationRestore) -> ZLinkError | None:
        """Build the hidden activation (never runs anything of the temporary queue)."""
        if record.state_sha256 is None:
            return InvalidOperation("a restore names its envelope")
        data = await self._store.read_root(ContentRef(record.state_sha256, record.state_size))
        if data is None:
            return Unavailable("the relocation envelope is not in the Relocation Store")
        envelope = RelocationEnvelope.decode(data)
        attempt.envelope = envelope
        unit = attempt.unit
        actor_type = attempt.actor_type
        row = await self._authority.read(unit.actor_id)
        if row is None or row.object_generation != unit.object_generation:
            return Unavailable("the Actor's incarnation changed")
        spot = row.membership
        if spot is not None and spot.is_reserved_entry_shape:
            # An Entry Actor belongs to its node's Entry Spot: here, this node's.
            spot = self._node.entry_spot_id(unit.mesh_name)
        attempt.spot = spot
        context = ActorContext(
            unit.actor_id,
            unit.object_generation,
            unit.mesh_name,
            spot,
            self._client,
            self._registrar,
        )
        instance: Any = actor_type.factory(context)
        if inspect.isawaitable(instance):
            instance = await instance
        self.factory_runs += 1
        if getattr(instance, "context", None) is not context:
            return InvalidOperation("the factory's Actor must expose the Context it was given")
        policy = actor_type.relocation
        if isinstance(policy, PreserveStateWith) and envelope.state is not None:
            await policy.adapter.restore(instance, envelope.state)
        kind = self._host.kind(
            actor_type,
            self._node.identity.node_rid,
            self._stats_for(actor_type.stable_type),
            self._config.max_reply_bytes,
        )
        hosted = HostedActor(kind, context, instance, unit.target_owner_generation)
        if envelope.timers is not None and self._timers is not None:
            hosted.timers = self._timers.restore(hosted, envelope.timers, suspended=True)
        states = dict(envelope.participants)
        attempt.hosted = hosted
        for participant in self._participants:
            await participant.restore(unit, states.get(participant.participant_name, b""))
            attempt.restored_by.append(participant)
        return None

    # --- 123 / 124 ---------------------------------------------------------------------------
    async def on_cutover(self, peer: PeerIdentity, record: RelocationCutover) -> None:
        attempt = self._attempts.get(record.relocation_id)
        if attempt is not None and attempt.held.source == (peer.node_rid, peer.node_generation):
            attempt.cutover.set()

    async def on_abort(self, peer: PeerIdentity, record: RelocationAbort) -> None:
        attempt = self._attempts.get(record.relocation_id)
        if (
            attempt is not None
            and attempt.held.source == (peer.node_rid, peer.node_generation)
            and (
                attempt.answer is None
                or attempt.answer.result is not RelayReadyResult.ACCEPTED
                # a member's acceptance is not the aggregate's: its Spot's is
                or (attempt.group is not None and not attempt.group_committed)
            )
        ):
            attempt.cancel.cancel(reason="the source aborted the relocation")

    # --- the attempt ---------------------------------------------------------------------------
    async def _run(self, attempt: _Attempt) -> None:
        unit = attempt.unit
        committed = False
        try:
            with attempt.cancel, trio.move_on_after(self._config.relocation_timeout):
                await attempt.restored.wait()
                answer = attempt.answer
                if answer is None or answer.result is not RelayReadyResult.ACCEPTED:
                    return
                if attempt.group is not None:
                    # Committed (or discarded) by its Spot's attempt, never alone; once
                    # bound to it, not ended by its own timeout either (the Spot's
                    # attempt, bounded by its own, settles it either way).
                    await attempt.bound.wait()
                    with trio.CancelScope(shield=True):
                        await attempt.settled.wait()
                    committed = attempt.group_committed
                    return
                with trio.move_on_after(self._config.cutover_fallback) as fallback:
                    await attempt.cutover.wait()
                if fallback.cancelled_caught:
                    self.cutover_timeouts += 1
                    logger.warning(
                        "cutover_timeout: no cutover of %r within %.3f s; going on",
                        unit.actor_id.value,
                        self._config.cutover_fallback,
                    )
                committed = await self._commit(attempt)
        finally:
            self._journal.relocations.pop((unit.actor_id, unit.relocation_id), None)
            if not committed:
                with trio.CancelScope(shield=True):
                    await self._discard(attempt)
            self._attempts.pop(unit.relocation_id, None)
            self._activity.end()

    async def _commit(self, attempt: _Attempt) -> bool:
        """The target-only owner CAS with the source fence, then the merge and the switch."""
        unit = attempt.unit
        hosted = attempt.hosted
        assert hosted is not None
        key = actor_key(unit.actor_id)
        try:
            row = await self._store.read(key)
            if (
                row is None
                or row.state is not AuthorityState.READY
                or row.object_generation != unit.object_generation
                or row.owner_generation != unit.source_owner_generation
                or row.owner.node_rid != unit.source_rid
                or row.owner.node_generation != unit.source_generation
                # the mark of this move: the source cleared it when it gave up (its
                # deadline passed before this relay-ready reached it) and reopened
                or not _marked_for(row, unit.relocation_id)
            ):
                logger.warning("relocation of %r: the source fence no longer holds", unit.actor_id)
                return False
            result = await self._store.change_owner(
                key,
                row.store_version,
                self._node.owner_fence(unit.mesh_name),
                membership=attempt.spot if attempt.spot != row.membership else UNCHANGED,
            )
        except StoreOutcomeUnknown:
            current = await self._store.read(key)
            if (
                current is None
                or current.owner.node_rid != unit.target_rid
                or current.owner_generation != unit.target_owner_generation
            ):
                return False
        except ZLinkError as exc:
            logger.warning("relocation of %r: the owner CAS failed: %r", unit.actor_id, exc)
            return False
        else:
            if not isinstance(result, Applied):
                logger.warning("relocation of %r: the owner CAS lost", unit.actor_id)
                return False
        await self.publish(attempt)
        return True

    async def publish(
        self, attempt: _Attempt, *, gate: Gate | None = None, spot: object = None
    ) -> None:
        """After the owner CAS (or a SpotWide Spot's aggregate commit): the merge and the
        route switch (the lane under ``gate``, the Context given the SpotWide ``spot``'s
        object), timers resumed, participants committed (the session 44s), 125."""
        unit = attempt.unit
        hosted = attempt.hosted
        assert hosted is not None
        self._authority.forget(unit.actor_id)
        self._follow.forget(unit.actor_id)
        if spot is not None and attempt.spot is not None:
            hosted.context._move_to(attempt.spot, spot)
        envelope = attempt.envelope
        held = attempt.held
        held.released = True
        merged: list[ActorItem] = []
        if envelope is not None:
            merged.extend(envelope.lane_ticks)
        merged.extend(held.items[i] for i in sorted(held.items))
        self._host.publish_relocated(hosted, merged, gate=gate)  # merge + route switch
        self._host.end_staging(unit.actor_id)
        if hosted.timers is not None:
            hosted.timers.resume()
        self.committed += 1
        for participant in self._participants:
            try:
                await participant.committed(unit)
            except Exception:
                logger.exception("relocation participant %r: committed", participant)
        notice = RelocationCommitted(
            relocation_id=unit.relocation_id,
            authority_owner_generation=unit.target_owner_generation,
        )
        try:
            await self._node.send(PeerAddress(unit.mesh_name, unit.source_rid), notice)
        except (PeerNotAdmitted, DeadlineExceeded, ZLinkError) as exc:
            logger.info("commit notice of %r not sent: %r", unit.actor_id, exc)

    async def _discard(self, attempt: _Attempt) -> None:
        unit = attempt.unit
        self.discarded += 1
        leftover = self._host.end_staging(unit.actor_id)
        if leftover:
            await fail_parked(
                leftover, StaleRoute(f"actor {unit.actor_id.value!r} did not move here")
            )
        hosted = attempt.hosted
        if hosted is not None and hosted.timers is not None:
            hosted.timers.close()
        for participant in attempt.restored_by:
            try:
                await participant.discarded(unit)
            except Exception:
                logger.exception("relocation participant %r: discarded", participant)


def _marked_for(row: AuthorityRow, relocation_id: OperationId) -> bool:
    """Whether ``row`` carries the relocation mark of ``relocation_id``."""
    return row.relocation is not None and row.relocation.relocation_id == relocation_id
