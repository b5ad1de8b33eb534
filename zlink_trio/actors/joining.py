"""The Join transaction on the Actor's node (the source): what an activated deferred Join
does (docs/decisions.md, "Membership: Deferred Join and the Join/Leave transaction").

Activation (inside the turn of the handler that registered it, or at the end of a Spot
handler's) parks the Actor (:meth:`ActorHost.park`): nothing it had queued runs, what
arrives is parked behind. The transaction is a task of the Actor runtime's nursery,
counted as a control transaction (a clean stop lets it finish):

* the target is resolved (the first Store access of the Join happens here, after the
  handler ended); the Spot the Actor is in already → ACCEPTED, nothing changes;
* a Spot of this node → the same-node Join (the Spot host's callbacks, one
  ``set_membership`` CAS; the instance and the Context are kept, only the SpotId changes);
* a Spot of another node → the cross-node Join: command 112, replayed under one
  OperationId (:func:`~zlink_trio.objects.durable.run_durable`); ACCEPTED → this
  activation is unpublished, its Context retired, and its parked payloads travel to the
  new owner as the journal (113 … 114); no terminal → a fencing CAS settles whether it
  moved.

When the Actor stays here its lane comes back with the completion callback first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, final

import trio

from ..config import ServerConfig
from ..engine.gate import Gate
from ..engine.lane import Lane
from ..engine.oneshot import OneShot
from ..errors import (
    DeadlineExceeded,
    InvalidOperation,
    NotFound,
    ShuttingDown,
    StoreOutcomeUnknown,
    Unavailable,
    ZLinkError,
)
from ..ids import MeshName, SpotId
from ..mesh.api import (
    LinkLost,
    MeshNodeApi,
    PeerAddress,
    PeerGone,
    PeerNotAdmitted,
    PeerState,
    PendingReply,
)
from ..objects.activity import Activity
from ..objects.durable import remaining_ms, run_durable
from ..objects.policy import DisableRelocation
from ..objects.relay import relay_reply_to
from ..objects.sinks import raise_for_failure
from ..observe import FlowTrace
from ..spots.approval import Reject
from ..spots.entry import EntrySpot
from ..spots.hosted import HostedSpot
from ..spots.runtime import SpotRuntime
from ..store.api import (
    Applied,
    AuthorityRow,
    AuthorityState,
    LocationStore,
    ObjectKey,
    ObjectKind,
)
from ..wire.enums import JoinResult, MessageKind, TerminalResult
from ..wire.payloads import TypedPayload
from ..wire.records import ActorJoin, ActorJournal, ActorJournalEnd, TerminalReply
from ..wire.tails import JoinTail, ReplyPayloadTail
from . import spot_side
from .authority import Authority, actor_key
from .host import ActorHost
from .hosted import JOINING, READY, ActorItem, Deliver, HostedActor, JoinDone, fail_sink
from .join import JoinIntent, JoinRegistrar, PendingJoin
from .membership import JoinCompletion, JoinEvent, JoinOutcome, LeaveEvent

__all__ = ["JoinRunner", "JoinStatistics"]

logger = logging.getLogger("zlink_trio.actors")

_SETTLE_FIRST_DELAY = 0.05
_SETTLE_MAX_DELAY = 1.0


@final
class _Here:
    """The target Spot is hosted on this node (``spot`` None: an Entry Spot)."""

    __slots__ = ("spot",)

    def __init__(self, spot: HostedSpot | None) -> None:
        self.spot = spot


def _same_mesh(target: SpotId, spot_mesh: MeshName, actor_mesh: MeshName) -> None:
    if spot_mesh != actor_mesh:
        raise InvalidOperation(
            f"spot {target.value!r} is in mesh {spot_mesh.value!r}, the Actor in mesh "
            f"{actor_mesh.value!r}: a Join does not change the Actor's mesh"
        )


@final
class _Stay:
    """The Join ended with the Actor still here: its completion and the gate of its new
    lane."""

    __slots__ = ("completion", "gate")

    def __init__(self, completion: JoinCompletion, gate: Gate | None) -> None:
        self.completion = completion
        self.gate = gate


@final
class JoinStatistics:
    """Counters of the Joins this node ran as their source (``ActorRuntimeStatistics``
    ``joins_*``; the Joins it received are the target's ``arrived``)."""

    __slots__ = ("accepted", "failed", "moved_out", "rejected")

    def __init__(self) -> None:
        self.accepted = 0
        self.rejected = 0
        self.failed = 0
        self.moved_out = 0


@final
class JoinRunner:
    """Runs the activated Joins of this node's Actors (the source side)."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        node: MeshNodeApi,
        store: LocationStore,
        host: ActorHost,
        authority: Authority,
        entry_spots: Mapping[MeshName, EntrySpot],
        registrar: JoinRegistrar,
        nursery: trio.Nursery,
        activity: Activity,
        flow: FlowTrace,
        spots: SpotRuntime | None = None,
    ) -> None:
        self._spots = spots
        self._config = config
        self._node = node
        self._store = store
        self._host = host
        self._authority = authority
        self._entry_spots = entry_spots
        self._nursery = nursery
        self._activity = activity
        self._flow = flow
        self.stats = JoinStatistics()
        registrar.bind(self.activate, self.restore)

    # --- activation -------------------------------------------------------------------------
    def activate(self, pending: PendingJoin) -> None:
        """The handler that registered ``pending`` ended normally: activate the barrier
        and start the Join (synchronously: the Actor's next turn cannot come first)."""
        hosted = pending.hosted
        # A Spot handler's registration parked its member at defer(): it is Joining.
        expected = JOINING if pending.parked else READY
        if hosted.state is not expected or hosted.join is not pending:
            # Destroyed or fenced while the handler ran: no Join, no completion (there is
            # no activation left to run it).
            logger.info("join of %r not started: the Actor is %r", hosted.context, hosted.state)
            if hosted.join is pending:
                hosted.join = None
            if pending.parked:
                _abandon(hosted, Unavailable("the Actor stopped before its join started"))
            pending.done.set()
            return
        if not pending.parked:
            self._host.park(hosted)
        self._activity.begin()
        try:
            self._nursery.start_soon(self._run, pending, name="zlink_trio.actor.join")
        except RuntimeError:  # the runtime is stopping: its nursery takes no task
            self._activity.end()
            hosted.join = None
            pending.done.set()
            _abandon(hosted, ShuttingDown("the server stopped before the join started"))

    def restore(self, pending: PendingJoin) -> None:
        """A Spot handler's registration was discarded: its member (parked at
        ``defer()``) gets its lane back — once the turn it had in progress then (a
        PerActor member runs on its own gate) has ended, so no two turns of one Actor
        ever overlap. Its transition stays pending until then."""
        hosted = pending.hosted
        old = hosted.lane
        if old is None or old.idle:
            self._restored(pending)
            return
        self._activity.begin()
        try:
            self._nursery.start_soon(
                self._restore_later, pending, old, name="zlink_trio.actor.join"
            )
        except RuntimeError:  # the runtime is stopping
            self._activity.end()
            self._restored(pending)

    async def _restore_later(self, pending: PendingJoin, old: Lane[Any, Any]) -> None:
        try:
            await old.wait_idle()
        finally:
            self._restored(pending)
            self._activity.end()

    def _restored(self, pending: PendingJoin) -> None:
        hosted = pending.hosted
        if hosted.join is pending:
            hosted.join = None
        self._host.restore(hosted)
        pending.done.set()

    async def _run(self, pending: PendingJoin) -> None:
        hosted = pending.hosted
        intent = pending.intent
        try:
            try:
                if pending.parked and hosted.lane is not None:
                    # A Spot handler's registration: the member may have been in a turn
                    # of its own (its own gate) then; the Join starts after that turn.
                    await hosted.lane.wait_idle()
                stay = await self._transact(hosted, intent)
            except trio.Cancelled:
                _abandon(hosted, ShuttingDown("the server stopped during the join"))
                raise
            except Exception as exc:
                logger.exception("join of %r failed", hosted.context)
                stay = self._stay(
                    hosted,
                    intent,
                    intent.target,
                    JoinOutcome.FAILED,
                    error=Unavailable(f"the join failed: {type(exc).__name__}"),
                )
            if stay is not None:
                outcome = stay.completion.outcome
                if outcome is JoinOutcome.ACCEPTED:
                    self.stats.accepted += 1
                elif outcome is JoinOutcome.REJECTED:
                    self.stats.rejected += 1
                else:
                    self.stats.failed += 1
                await self._host.unpark(hosted, JoinDone(stay.completion), gate=stay.gate)
        finally:
            if hosted.join is pending:
                hosted.join = None
            pending.done.set()
            self._activity.end()

    def _stay(
        self,
        hosted: HostedActor,
        intent: JoinIntent,
        target: SpotId | None,
        outcome: JoinOutcome,
        *,
        reply: bytes | None = None,
        error: ZLinkError | None = None,
    ) -> _Stay:
        """The Actor stays on this node (its Spot is whatever its Context says now), its
        lane under the gate it had."""
        lane = hosted.lane
        gate = None if lane is None else lane.gate
        completion = JoinCompletion(
            operation_id=intent.operation_id,
            target=target,
            outcome=outcome,
            spot_id=hosted.context.spot_id,
            reply=reply,
            error=error,
        )
        return _Stay(completion, gate)

    # --- the transaction ------------------------------------------------------------------------
    async def _transact(self, hosted: HostedActor, intent: JoinIntent) -> _Stay | None:
        """The Join of ``hosted``; None when the Actor moved away (its completion runs on
        the target)."""
        refused = self._node.admission_error()
        if refused is not None:
            # The shutdown admission seal came first: draining blocks new membership.
            return self._stay(hosted, intent, intent.target, JoinOutcome.FAILED, error=refused)
        if trio.current_time() >= intent.deadline:
            # The deadline fixed at defer() passed before the Join could start (its
            # handler, or the member's turn in progress, outlasted it): it is over, never
            # admitted (04 §8.1: Unavailable), and nothing moves.
            return self._stay(
                hosted,
                intent,
                intent.target,
                JoinOutcome.FAILED,
                error=Unavailable("the join's deadline passed before it could start"),
            )
        context = hosted.context
        mesh = hosted.mesh_name
        target = intent.target
        if target is None:
            target = self._node.entry_spot_id(mesh)
        if target == context.spot_id:
            # Already there: Accepted, no Store access, no callback (04 §3.1).
            return self._stay(hosted, intent, target, JoinOutcome.ACCEPTED)
        where: _Here | AuthorityRow | None = None
        try:
            with trio.move_on_at(intent.deadline):
                where = await self._locate(mesh, target, entry=intent.entry)
        except ZLinkError as exc:
            return self._stay(hosted, intent, target, JoinOutcome.FAILED, error=exc)
        if where is None:
            return self._stay(
                hosted,
                intent,
                target,
                JoinOutcome.FAILED,
                error=Unavailable("the join could not start before its deadline"),
            )
        if isinstance(where, _Here):
            return await self._same_node(hosted, intent, target, where.spot)
        if isinstance(hosted.actor_type.relocation, DisableRelocation):
            return self._stay(
                hosted,
                intent,
                target,
                JoinOutcome.FAILED,
                error=InvalidOperation(
                    f"actor type {hosted.actor_type.stable_type.value!r} is DisableRelocation: "
                    f"it cannot join spot {target.value!r} on another node"
                ),
            )
        return await self._cross_node(hosted, intent, target, where)

    async def _locate(self, mesh: MeshName, target: SpotId, *, entry: bool) -> _Here | AuthorityRow:
        """Where the Spot ``target`` is: here (one of this node's Entry Spots, or a User
        Spot it hosts), or the authority row naming its owner (raises the typed
        refusal)."""
        for entry_spot in self._entry_spots.values():
            if entry_spot.spot_id == target:
                _same_mesh(target, entry_spot.mesh_name, mesh)
                return _Here(None)
        row = await self._store.read(ObjectKey.spot(target.value))
        if row is None or row.state is not AuthorityState.READY:
            raise NotFound(f"spot {target.value!r} does not exist (no Ready authority)")
        if row.kind is ObjectKind.INSTANCE_SPOT:
            raise InvalidOperation(f"spot {target.value!r} is an Instance Spot: it has no members")
        if entry is not (row.kind is ObjectKind.ENTRY_SPOT):
            raise InvalidOperation(f"spot {target.value!r} is a {row.kind.value}")
        _same_mesh(target, row.owner.mesh_name, mesh)
        me = self._node.identity
        owner = row.owner
        if owner.node_rid == me.node_rid and owner.node_generation == me.node_generation:
            spot = None if self._spots is None else self._spots.host.get(target)
            if spot is None or spot.generation != row.object_generation:
                raise Unavailable(f"spot {target.value!r} is not hosted on its owner right now")
            return _Here(spot)
        return row

    async def _same_node(
        self, hosted: HostedActor, intent: JoinIntent, target: SpotId, spot: HostedSpot | None
    ) -> _Stay:
        """The Spot is hosted here: the instance and the Context stay, only the SpotId
        changes at the membership commit (``spot`` None: this node's Entry Spot)."""
        context = hosted.context
        old = context.spot_id
        event = self._join_event(hosted, intent, old, hosted.instance)
        reply: bytes | None = None
        if spot is not None:
            try:
                with trio.fail_after(max(0.0, intent.deadline - trio.current_time())):
                    decision, _ = await spot_side.admit(spot, lambda _built: event)
            except trio.TooSlowError:
                return self._stay(
                    hosted,
                    intent,
                    target,
                    JoinOutcome.FAILED,
                    error=DeadlineExceeded("the Spot did not decide before the join's deadline"),
                )
            except ZLinkError as exc:
                return self._stay(hosted, intent, target, JoinOutcome.FAILED, error=exc)
            if isinstance(decision, Reject):
                return self._stay(
                    hosted, intent, target, JoinOutcome.REJECTED, reply=decision.reply
                )
            reply = decision.reply
        failed = await self._commit_membership(hosted, target, intent.deadline)
        if failed is not None:
            if spot is not None:
                await spot_side.unadmit(spot, context.actor_id)
            return self._stay(hosted, intent, target, JoinOutcome.FAILED, error=failed)
        context._move_to(target, spot.instance if spot is not None and spot.spot_wide else None)
        await self._leave(old, hosted, intent, target)
        if spot is not None:
            try:
                await spot_side.joined(spot, event)
            except Exception:
                logger.exception("the JOINED callback of %r failed", spot)
        completion = JoinCompletion(
            operation_id=intent.operation_id,
            target=target,
            outcome=JoinOutcome.ACCEPTED,
            spot_id=target,
            reply=reply,
        )
        return _Stay(completion, spot.gate if spot is not None else None)

    def _join_event(
        self, hosted: HostedActor, intent: JoinIntent, old: SpotId | None, actor: object
    ) -> JoinEvent:
        context = hosted.context
        return JoinEvent(
            actor_id=context.actor_id,
            object_generation=context.object_generation,
            stable_type=hosted.actor_type.stable_type,
            from_spot_id=old,
            request=intent.request,
            operation_id=intent.operation_id,
            actor=actor,
        )

    async def _commit_membership(
        self, hosted: HostedActor, target: SpotId, deadline: float
    ) -> ZLinkError | None:
        """The same-node membership commit: one ``set_membership`` CAS on the Actor's row
        read fresh (same generation, owned by this lifecycle, Ready); a lost CAS is read
        again, an unknown outcome is settled by the next read."""
        me = self._node.identity
        context = hosted.context
        key = actor_key(context.actor_id)
        delay = _SETTLE_FIRST_DELAY
        unsure = False
        while True:
            try:
                row = await self._authority.read(context.actor_id)
                if unsure and row is not None and row.membership == target:
                    return None  # the unknown CAS applied
                unsure = False
                if (
                    row is None
                    or row.object_generation != context.object_generation
                    or row.state is not AuthorityState.READY
                    or row.owner.node_rid != me.node_rid
                    or row.owner.node_generation != me.node_generation
                ):
                    return Unavailable("the Actor's authority changed: no membership commit")
                result = await self._store.set_membership(key, row.store_version, target)
                if isinstance(result, Applied):
                    return None
                continue  # lost to another writer: read again
            except StoreOutcomeUnknown as exc:
                unsure = True
                logger.info("membership commit of %r: %r; reading again", context, exc)
            except Unavailable as exc:
                if not unsure and trio.current_time() >= deadline:
                    return exc
                logger.info("membership commit of %r: %r; retrying", context, exc)
            await trio.sleep(delay)
            delay = min(delay * 2, _SETTLE_MAX_DELAY)

    async def _leave(
        self, old: SpotId | None, hosted: HostedActor, intent: JoinIntent, to: SpotId
    ) -> None:
        """The User Spot the Actor left (if any, hosted here) removes it and runs LEAVE."""
        if old is None or old.is_reserved_entry_shape or self._spots is None:
            return
        spot = self._spots.host.get(old)
        if spot is None:
            return
        context = hosted.context
        event = LeaveEvent(
            actor_id=context.actor_id,
            object_generation=context.object_generation,
            stable_type=hosted.actor_type.stable_type,
            to_spot_id=to,
            operation_id=intent.operation_id,
        )
        try:
            await spot_side.leave(spot, event)
        except Exception:
            logger.exception("the LEAVE callback of %r failed", spot)

    async def _cross_node(
        self, hosted: HostedActor, intent: JoinIntent, target: SpotId, row: AuthorityRow
    ) -> _Stay | None:
        node = self._node
        me = node.identity
        context = hosted.context
        owner = row.owner
        peer = PeerAddress(owner.mesh_name, owner.node_rid)
        owner_generation = hosted.owner_generation

        def record(timeout_ms: int) -> ActorJoin:
            return ActorJoin(
                correlation=0,
                operation_id=intent.operation_id,
                source_rid=me.node_rid,
                source_generation=me.node_generation,
                actor_id=context.actor_id,
                object_generation=context.object_generation,
                authority_owner_generation=owner_generation,
                spot_id=target,
                spot_object_generation=row.object_generation,
                target_rid=owner.node_rid,
                target_generation=owner.node_generation,
                request=intent.request or None,
                timeout_ms=timeout_ms,
            )

        try:
            reply = await run_durable(node, peer, record, intent.deadline)
        except ZLinkError as exc:
            # No terminal (never admitted, admitted without a reply, the target's lifecycle
            # ended, this node stopping): did it move? The fencing CAS decides for good.
            moved, to = await self._settle(hosted)
            if moved:
                self._moved(hosted, intent, target, to)
                return None
            return self._stay(hosted, intent, target, JoinOutcome.FAILED, error=exc)
        if reply.terminal_result is not TerminalResult.OK:
            try:
                raise_for_failure(reply)
            except ZLinkError as exc:
                return self._stay(hosted, intent, target, JoinOutcome.FAILED, error=exc)
        tail = reply.tail
        if not isinstance(tail, JoinTail):
            moved, to = await self._settle(hosted)
            if moved:
                self._moved(hosted, intent, target, to)
                return None
            return self._stay(
                hosted,
                intent,
                target,
                JoinOutcome.FAILED,
                error=Unavailable("the join terminal carried no join result"),
            )
        if tail.result is JoinResult.REJECTED:
            return self._stay(hosted, intent, target, JoinOutcome.REJECTED, reply=tail.reply)
        self._moved(hosted, intent, target, peer)
        return None

    async def _settle(self, hosted: HostedActor) -> tuple[bool, PeerAddress | None]:
        """Whether the Actor moved away, after a Join that got no terminal: a CAS on its
        row that changes nothing but the StoreVersion fences out a commit still in flight
        on the target. (moved, the new owner) — the owner None when the row is gone."""
        me = self._node.identity
        context = hosted.context
        key = actor_key(context.actor_id)
        delay = _SETTLE_FIRST_DELAY
        while True:
            try:
                row = await self._authority.read(context.actor_id)
                if row is None or row.object_generation != context.object_generation:
                    return True, None
                owner = row.owner
                if owner.node_rid != me.node_rid or owner.node_generation != me.node_generation:
                    return True, PeerAddress(owner.mesh_name, owner.node_rid)
                fenced = await self._store.set_membership(key, row.store_version, row.membership)
                if isinstance(fenced, Applied):
                    return False, None
            except (Unavailable, StoreOutcomeUnknown) as exc:
                logger.info("settling the join of %r: %r; reading again", context, exc)
                await trio.sleep(delay)
                delay = min(delay * 2, _SETTLE_MAX_DELAY)

    def _moved(
        self, hosted: HostedActor, intent: JoinIntent, to: SpotId, peer: PeerAddress | None
    ) -> None:
        """The Actor's row names another owner now: unpublish this activation, retire its
        Context, and send what it parked to the new owner."""
        old = hosted.context.spot_id
        items = self._host.unpublish_moved(hosted)
        self._authority.forget(hosted.actor_id)
        self.stats.moved_out += 1
        self._activity.begin()
        self._nursery.start_soon(
            self._relay, peer, hosted, intent, old, to, items, name="zlink_trio.actor.join.journal"
        )

    async def _relay(
        self,
        peer: PeerAddress | None,
        hosted: HostedActor,
        intent: JoinIntent,
        old: SpotId | None,
        to: SpotId,
        items: list[ActorItem],
    ) -> None:
        """The source's leave callback, then the journal: the parked payloads, in
        acceptance order, to the new owner (113), then 114; requests' replies are relayed
        to their callers."""
        try:
            await self._leave(old, hosted, intent, to)
            deliveries = [item for item in items if type(item) is Deliver]
            if peer is None:
                await _fail_all(deliveries, Unavailable("the Actor is gone"))
                return
            await self._send_journal(peer, intent, deliveries)
        finally:
            self._activity.end()

    async def _send_journal(
        self, peer: PeerAddress, intent: JoinIntent, items: list[Deliver]
    ) -> None:
        """Send the journal until the new owner has every item (or ``join_timeout``):
        the items (113) in order, then 114 as a request whose answer names the first
        index the new owner lacks (frames lost with a broken connection); from there on
        everything is sent again (the new owner keeps one copy per index)."""
        node = self._node
        me = node.identity
        actor_id = intent.actor_id
        entries: list[tuple[Deliver, bytes]] = []
        now = trio.current_time()
        for item in items:
            if item.deadline <= now:
                continue  # its caller was answered already (deadline) or went away
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
        pendings: dict[int, PendingReply] = {}

        def journal(index: int) -> Callable[[int], ActorJournal]:
            item, payload = entries[index]
            request = item.sink is not None

            def build(correlation: int) -> ActorJournal:
                return ActorJournal(
                    correlation=correlation,
                    operation_id=intent.operation_id,
                    source_rid=me.node_rid,
                    source_generation=me.node_generation,
                    actor_id=actor_id,
                    index=index,
                    message_kind=MessageKind.REQUEST if request else MessageKind.SEND,
                    packet_name=item.packet,
                    payload=payload,
                    timeout_ms=remaining_ms(item.deadline) if request else None,
                )

            return build

        def end(correlation: int) -> ActorJournalEnd:
            return ActorJournalEnd(
                correlation=correlation,
                operation_id=intent.operation_id,
                source_rid=me.node_rid,
                source_generation=me.node_generation,
                actor_id=actor_id,
                count=len(entries),
            )

        complete = False
        with trio.move_on_after(self._config.join_timeout):
            try:
                start = 0
                while True:
                    for index in range(start, len(entries)):
                        await self._send_entry(peer, journal(index), index, entries, pendings)
                    missing = await self._ask_end(peer, end)
                    if missing is None:
                        complete = True
                        break
                    start = missing
            except _PeerGone:
                pass
        if not complete:
            logger.info("the journal of %r was not confirmed by its new owner", actor_id)
        for index, (item, _) in enumerate(entries):
            sink = item.sink
            if sink is None:
                continue
            pending = pendings.get(index)
            if pending is None:
                await fail_sink(sink, Unavailable("the Actor moved; its new owner was not reached"))
            else:
                await relay_reply(item, pending)

    async def _admitted(self, peer: PeerAddress) -> None:
        """Wait until ``peer`` has an admitted connection (raises _PeerGone)."""
        node = self._node
        while True:
            state = node.peer_state(peer)
            if state is PeerState.ADMITTED:
                return
            if state is PeerState.GONE:
                raise _PeerGone
            await node.wait_peer_change(peer)

    async def _send_entry(
        self,
        peer: PeerAddress,
        build: Callable[[int], ActorJournal],
        index: int,
        entries: list[tuple[Deliver, bytes]],
        pendings: dict[int, PendingReply],
    ) -> None:
        node = self._node
        request = entries[index][0].sink is not None
        while True:
            await self._admitted(peer)
            try:
                if request:
                    pending = await node.request_with(peer, build)
                    old = pendings.pop(index, None)
                    if old is not None:
                        old.discard()
                    pendings[index] = pending
                else:
                    await node.send(peer, build(0))
                return
            except (PeerNotAdmitted, DeadlineExceeded):
                await trio.lowlevel.checkpoint()  # the link went away: wait and send again

    async def _ask_end(
        self, peer: PeerAddress, build: Callable[[int], ActorJournalEnd]
    ) -> int | None:
        """114: None when the new owner has every item, else the first index it lacks."""
        node = self._node
        while True:
            await self._admitted(peer)
            try:
                pending = await node.request_with(peer, build)
            except (PeerNotAdmitted, DeadlineExceeded):
                await trio.lowlevel.checkpoint()
                continue
            try:
                reply: TerminalReply = await pending.wait()
            except PeerGone:
                raise _PeerGone from None
            except LinkLost:
                pending.discard()
                continue  # ask again once the link is back
            raise_for_failure(reply)
            tail = reply.tail
            if isinstance(tail, ReplyPayloadTail) and tail.payload:
                return int(tail.payload)
            return None


class _PeerGone(Exception):
    """The new owner's lifecycle ended while its journal was being sent."""


async def relay_reply(item: Deliver, pending: PendingReply) -> None:
    """Wait for a journal request's reply and give it to the original caller (a Join's
    journal and a relocation's relay both answer their held requests through it)."""
    sink = item.sink
    assert sink is not None
    await relay_reply_to(
        sink, item.deadline, pending, "the Actor moved and its new owner did not answer"
    )


async def _fail_all(items: list[Deliver], error: ZLinkError) -> None:
    for item in items:
        if item.sink is not None:
            await fail_sink(item.sink, error)


def _abandon(hosted: HostedActor, error: ZLinkError) -> None:
    """The runtime stops with ``hosted`` parked: local callers waiting on it are told now
    (a remote caller sees its link close)."""
    for item in hosted.parked or ():
        if type(item) is Deliver and type(item.sink) is OneShot:
            item.sink.fail(error)
