"""The target side of a Spot relocation (docs/relocation.md, "Spots"): 120 prepare, 121
restore (answered by the relay-ready reply 122), 123 cutover and 124 abort, for User and
Instance Spots. The order is the Actor target's (:mod:`zlink_trio.actors.relocation_target`):

* 120: the row is checked against the source fence (Ready, same ObjectGeneration, owned
  by the source lifecycle at the named AuthorityOwnerGeneration, marked for this move)
  and the TEMPORARY QUEUE registered: the host's staging record of the id, unbounded,
  which inbound dispatch finds before any instance and which parks what arrives (the
  relay, then what follows) in arrival order, never running it. One attempt per
  RelocationId.
* 121: idempotent per RelocationId: the first one builds the shell (same SpotId and
  ObjectGeneration; its factory in a lifecycle turn, the adapter's restore for
  PreserveStateWith), its timers (restored suspended: the application never registers
  them again) and its members, and keeps it HIDDEN from the resolver and from dispatch;
  a repeat gets the same answer and builds nothing. What the factory registered with
  ``context.timers`` during that turn is replaced by the restored timers (closed).
* after the relay-ready reply: the cutover (123), or after ``cutover_fallback`` without
  it the ``cutover_timeout`` warning and the fallback; then the target-only owner CAS with
  the source fence (AuthorityOwnerGeneration + 1, ObjectGeneration unchanged, the mark
  cleared); the merge (the source lane's timer ticks, then what the temporary queue
  parked: saved work, pre-boundary relay, the rest) and the route switch in one step;
  timers resumed; 125 to the source.
* an abort (124) or ``relocation_timeout`` without a restore or a commit discards the
  temporary queue (what it held fails StaleRoute: it never ran) and the hidden shell.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, final

import attrs
import trio

from ..config import ServerConfig
from ..errors import (
    ApplicationError,
    InvalidOperation,
    NotConfigured,
    StaleRoute,
    StoreOutcomeUnknown,
    Unavailable,
    ZLinkError,
)
from ..ids import ActorId, OperationId, SpotId
from ..mesh.api import MeshNodeApi, PeerAddress, PeerIdentity, PeerNotAdmitted
from ..objects.activity import Activity
from ..objects.authority import Authority
from ..objects.follow import FollowTable
from ..objects.policy import PreserveStateWith
from ..objects.relocation import relay_ready
from ..objects.relocation_envelope import RelocationEnvelope
from ..objects.sinks import RemoteSink, failure, ok
from ..objects.timers import TimerService
from ..store.api import Applied, AuthorityState, ContentRef, LocationStore
from ..wire.codec import decode_value
from ..wire.enums import RelayReadyResult
from ..wire.relocation import (
    RelocationAbort,
    RelocationCommitted,
    RelocationCutover,
    RelocationPrepare,
    RelocationRelayReady,
    RelocationRestore,
)
from .dispatch import fail_messages
from .execution import SpotWide
from .host import SpotHost
from .hosted import HostedSpot
from .kind import spot_key
from .registry import SpotTypes
from .relocation import MEMBERS_PARTICIPANT
from .spot_kind import SpotKind
from .wide_move import WIDE_PARTICIPANT, SpotWideMembersTarget

__all__ = ["SpotRelocationTarget"]

logger = logging.getLogger("zlink_trio.relocation")


@final
class _Attempt:
    __slots__ = (
        "answer",
        "cancel",
        "cutover",
        "envelope",
        "hosted",
        "mesh",
        "record",
        "restored",
        "source",
        "spot_id",
        "wide",
    )

    def __init__(self, record: RelocationPrepare, peer: PeerIdentity) -> None:
        self.record = record
        self.spot_id = SpotId(record.object_id)
        self.mesh = peer.address.mesh_name
        self.source = (record.source_rid, record.source_generation)
        self.hosted: HostedSpot | None = None
        self.envelope: RelocationEnvelope | None = None
        self.answer: RelocationRelayReady | None = None
        self.restored = trio.Event()
        self.cutover = trio.Event()
        self.cancel = trio.CancelScope()
        self.wide: tuple[OperationId, ...] = ()
        """A SpotWide Spot's member RelocationIds (committed with it), from its envelope."""


@final
class SpotRelocationTarget:
    """This node as the target of Spot relocations."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        node: MeshNodeApi,
        store: LocationStore,
        host: SpotHost,
        authority: Authority[SpotId],
        types: SpotTypes,
        follow: FollowTable[SpotId],
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
        self._follow = follow
        self._timers = timers
        self._nursery = nursery
        self._activity = activity
        self._attempts: dict[OperationId, _Attempt] = {}
        self.restores = 0
        self.committed = 0
        self.discarded = 0
        self.cutover_timeouts = 0
        self.members: SpotWideMembersTarget | None = None
        """The Actor runtime's side of a SpotWide Spot's move (None: refused)."""

    def spot_wide_staging(self, spot_id: SpotId, source: object) -> OperationId | None:
        """The RelocationId of the move of the SpotWide User Spot ``spot_id`` from
        ``source`` (rid, generation) staging here, or None: a member of it that is
        prepared here moves with it (spec 06 §6.1)."""
        for relocation_id, attempt in self._attempts.items():
            if (
                attempt.spot_id == spot_id
                and attempt.source == source
                and isinstance(self._types[attempt.record.stable_type].execution, SpotWide)
            ):
                return relocation_id
        return None

    def has_attempt(self, relocation_id: OperationId) -> bool:
        return relocation_id in self._attempts

    # --- 120 ------------------------------------------------------------------------------
    async def on_prepare(self, peer: PeerIdentity, record: RelocationPrepare) -> None:
        self._nursery.start_soon(
            self._prepare, peer, record, name="zlink_trio.spot_relocation.prepare"
        )

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
        if record.relocation_id in self._attempts:
            await sink.deliver(ok())  # a repeated prepare: the temporary queue is there
            return
        try:
            spot_id = SpotId(record.object_id)
        except ZLinkError as exc:
            await sink.deliver(failure(exc))
            return
        if self._host.get(spot_id) is not None or self._host.has_temporary_queue(spot_id):
            await sink.deliver(failure(InvalidOperation("the Spot is hosted or staging here")))
            return
        if record.stable_type not in self._types:
            await sink.deliver(
                failure(
                    NotConfigured(f"spot type {record.stable_type.value!r} is not registered here")
                )
            )
            return
        try:
            row = await self._store.read(spot_key(spot_id))
        except ZLinkError as exc:
            await sink.deliver(failure(exc))
            return
        if (
            row is None
            or row.state is not AuthorityState.READY
            or row.stable_type != record.stable_type
            or row.object_generation != record.object_generation
            or row.owner_generation != record.authority_owner_generation
            or row.owner.node_rid != record.source_rid
            or row.owner.node_generation != record.source_generation
            or row.relocation is None
            or row.relocation.relocation_id != record.relocation_id
        ):
            await sink.deliver(failure(Unavailable("the Spot's authority is not the source's")))
            return
        if record.relocation_id in self._attempts or self._host.has_temporary_queue(spot_id):
            await sink.deliver(failure(InvalidOperation("the Spot is staging here already")))
            return
        attempt = _Attempt(record, peer)
        self._attempts[record.relocation_id] = attempt
        self._host.begin_staging(spot_id, relay_from=attempt.source)  # before anything looks
        self._activity.begin()
        self._nursery.start_soon(self._run, attempt, name="zlink_trio.spot_relocation.target")
        await sink.deliver(ok())

    # --- 121 ------------------------------------------------------------------------------
    async def on_restore(self, peer: PeerIdentity, record: RelocationRestore) -> None:
        self._nursery.start_soon(
            self._restore_once, peer, record, name="zlink_trio.spot_relocation.restore"
        )

    async def _restore_once(self, peer: PeerIdentity, record: RelocationRestore) -> None:
        attempt = self._attempts.get(record.relocation_id)
        if attempt is None or attempt.source != (peer.node_rid, peer.node_generation):
            await self._answer(peer, record, Unavailable("no prepared relocation of that id here"))
            return
        if attempt.answer is not None or attempt.envelope is not None:
            await attempt.restored.wait()  # a repeat: nothing is built again
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
            logger.info("restore of spot %r failed: %r", attempt.spot_id.value, exc)
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
        """Build the hidden shell (never runs anything of the temporary queue)."""
        if record.state_sha256 is None:
            return InvalidOperation("a restore names its envelope")
        data = await self._store.read_root(ContentRef(record.state_sha256, record.state_size))
        if data is None:
            return Unavailable("the relocation envelope is not in the Relocation Store")
        envelope = RelocationEnvelope.decode(data)
        attempt.envelope = envelope
        prepare = attempt.record
        spot_type = self._types[prepare.stable_type]
        target_generation = prepare.authority_owner_generation.next()
        hosted = self._host.stage(
            spot_type, attempt.spot_id, prepare.object_generation, attempt.mesh, target_generation
        )
        attempt.hosted = hosted
        policy = spot_type.relocation
        state = envelope.state

        async def build(_: Any) -> None:
            # One lifecycle turn of the hidden shell: the factory (a new Context bound to
            # this owner, same SpotId and ObjectGeneration), then the adapter's restore.
            context = hosted.context
            hosted.shared.counters.factory_runs += 1
            instance = spot_type.factory(context)
            if inspect.isawaitable(instance):
                instance = await instance
            if getattr(instance, "context", None) is not context:
                raise InvalidOperation(
                    "the factory's Spot must expose the Context it was given, unchanged"
                )
            hosted.instance = instance
            if isinstance(policy, PreserveStateWith) and state is not None:
                await policy.adapter.restore(instance, state)

        await hosted.run_lifecycle_work(build)
        self.restores += 1
        # The timers are the source's (spec 06 §8: restored, never registered again). A
        # factory that registers its timers (legal: it runs in a lifecycle turn) did so
        # again just now, into a table of its own: the restored one replaces it, closed
        # (else it would stay in the timer service, firing into a backlog forever).
        built = hosted.timers
        if built is not None:
            built.close()
            hosted.timers = None
        if envelope.timers is not None and self._timers is not None:
            hosted.timers = self._timers.restore(hosted, envelope.timers, suspended=True)
        for name, blob in envelope.participants:
            if name == MEMBERS_PARTICIPANT and hosted.kind is SpotKind.USER:
                for member in _members(blob):
                    hosted.add_member(member)
            elif name == WIDE_PARTICIPANT:
                attempt.wide = _wide(blob)
                if not attempt.wide:
                    return InvalidOperation("the SpotWide move names no valid member moves")
        if attempt.wide:
            # The aggregate's relay-ready: every member is restored here, with the Spot.
            if self.members is None:
                return InvalidOperation("this node runs no Actor dispatch for the members")
            why = self.members.accepted(attempt.wide, attempt.source)
            if why is not None:
                return Unavailable(f"the SpotWide move's members are not ready: {why}")
        return None

    # --- 123 / 124 ---------------------------------------------------------------------------
    async def on_cutover(self, peer: PeerIdentity, record: RelocationCutover) -> None:
        attempt = self._attempts.get(record.relocation_id)
        if attempt is not None and attempt.source == (peer.node_rid, peer.node_generation):
            attempt.cutover.set()

    async def on_abort(self, peer: PeerIdentity, record: RelocationAbort) -> None:
        attempt = self._attempts.get(record.relocation_id)
        if (
            attempt is not None
            and attempt.source == (peer.node_rid, peer.node_generation)
            and (attempt.answer is None or attempt.answer.result is not RelayReadyResult.ACCEPTED)
        ):
            attempt.cancel.cancel(reason="the source aborted the relocation")

    # --- the attempt ---------------------------------------------------------------------------
    async def _run(self, attempt: _Attempt) -> None:
        committed = False
        try:
            with attempt.cancel, trio.move_on_after(self._config.relocation_timeout):
                await attempt.restored.wait()
                answer = attempt.answer
                if answer is None or answer.result is not RelayReadyResult.ACCEPTED:
                    return
                with trio.move_on_after(self._config.cutover_fallback) as fallback:
                    await attempt.cutover.wait()
                    if attempt.wide and self.members is not None:
                        await self.members.cutovers(attempt.wide)
                if fallback.cancelled_caught:
                    self.cutover_timeouts += 1
                    logger.warning(
                        "cutover_timeout: no cutover of spot %r within %.3f s; going on",
                        attempt.spot_id.value,
                        self._config.cutover_fallback,
                    )
                committed = await self._commit(attempt)
        finally:
            if not committed:
                if attempt.wide and self.members is not None:
                    self.members.discard(attempt.wide)
                with trio.CancelScope(shield=True):
                    await self._discard(attempt)
            self._attempts.pop(attempt.record.relocation_id, None)
            self._activity.end()

    async def _commit(self, attempt: _Attempt) -> bool:
        """The target-only owner CAS with the source fence, then the merge and the switch."""
        prepare = attempt.record
        hosted = attempt.hosted
        assert hosted is not None
        key = spot_key(attempt.spot_id)
        target_generation = prepare.authority_owner_generation.next()
        try:
            row = await self._store.read(key)
            if (
                row is None
                or row.state is not AuthorityState.READY
                or row.object_generation != prepare.object_generation
                or row.owner_generation != prepare.authority_owner_generation
                or row.owner.node_rid != prepare.source_rid
                or row.owner.node_generation != prepare.source_generation
                # the mark of this move: the source cleared it when it gave up (its
                # deadline passed before this relay-ready reached it) and reopened
                or row.relocation is None
                or row.relocation.relocation_id != prepare.relocation_id
            ):
                logger.warning(
                    "relocation of spot %r: the source fence no longer holds",
                    attempt.spot_id.value,
                )
                return False
            fence = self._node.owner_fence(attempt.mesh)
            if attempt.wide:
                # ONE aggregate commit: the Spot row and every member row (spec 06 §6.1).
                assert self.members is not None
                rows = await self.members.rows(attempt.wide)
                if rows is None:
                    logger.warning(
                        "relocation of spot %r: a member's source fence no longer holds",
                        attempt.spot_id.value,
                    )
                    return False
                result: object = await self._store.change_owners(
                    [(key, row.store_version), *rows], fence
                )
            else:
                result = await self._store.change_owner(key, row.store_version, fence)
        except StoreOutcomeUnknown:
            current = await self._store.read(key)
            if (
                current is None
                or current.owner.node_rid != prepare.target_rid
                or current.owner_generation != target_generation
            ):
                return False
        except ZLinkError as exc:
            logger.warning("relocation of spot %r: the owner CAS failed: %r", attempt.spot_id, exc)
            return False
        else:
            if not isinstance(result, Applied):
                logger.warning("relocation of spot %r: the owner CAS lost", attempt.spot_id)
                return False
        self._authority.forget(attempt.spot_id)
        self._follow.forget(attempt.spot_id)
        envelope = attempt.envelope
        first = list(envelope.lane_ticks) if envelope is not None else []
        # merge + route switch, one step; then the two staging records end (nothing is
        # parked any more: the published Spot took it).
        self._host.publish_relocated(hosted, target_generation, list(first))
        self._host.end_staging(hosted)
        self._host.end_staging_of(attempt.spot_id)
        self.committed += 1
        if attempt.wide and self.members is not None:
            # The members: published under the Spot's new gate (merge, route switch,
            # timers, session 44s, 125 each), after the Spot's own publish.
            await self.members.committed(attempt.wide, hosted)
        notice = RelocationCommitted(
            relocation_id=prepare.relocation_id, authority_owner_generation=target_generation
        )
        try:
            await self._node.send(PeerAddress(attempt.mesh, prepare.source_rid), notice)
        except (PeerNotAdmitted, ZLinkError) as exc:
            logger.info("commit notice of spot %r not sent: %r", attempt.spot_id, exc)
        return True

    async def _discard(self, attempt: _Attempt) -> None:
        self.discarded += 1
        leftover = []
        hosted = attempt.hosted
        if hosted is not None:
            leftover.extend(self._host.end_staging(hosted))
        leftover.extend(self._host.end_staging_of(attempt.spot_id))
        if leftover:
            await fail_messages(
                leftover, StaleRoute(f"spot {attempt.spot_id.value!r} did not move here")
            )


def _members(blob: bytes) -> list[ActorId]:
    try:
        values = decode_value(blob)
        return [ActorId(value) for value in values if isinstance(value, str)]
    except (ZLinkError, TypeError, ValueError):
        logger.warning("a relocated Spot's member list is malformed: ignored")
        return []


def _wide(blob: bytes) -> tuple[OperationId, ...]:
    try:
        values = decode_value(blob)
        return tuple(OperationId.from_bytes(raw) for _, raw in values)
    except (ZLinkError, TypeError, ValueError):
        logger.warning("a relocated SpotWide Spot's member moves are malformed")
        return ()
