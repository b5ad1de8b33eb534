"""The target side of a cross-node Join (command 112) and its journal (113, 114).

Order of one attempt (docs/decisions.md, "Membership"):

1. the operation's retained terminal, if any, is the answer (a replay); deliveries of an
   operation in flight join it (the factory never runs twice);
2. the Actor's row: Ready, the same ObjectGeneration and AuthorityOwnerGeneration, owned by
   the source lifecycle (a row this node owns already with that Spot: the converged
   replay, ACCEPTED);
3. the Spot must be hosted here (one of this node's Entry Spots), in the Actor's mesh, and
   the Actor type registered;
4. one lifecycle turn of the Spot runs the factory with a NEW Context (this node, the
   target Spot, the same ids);
5. one Store CAS moves the row (owner, AuthorityOwnerGeneration + 1, membership); the new
   activation is published Joining (ingress parked) and the ACCEPTED terminal recorded and
   answered;
6. the journal from the source (113 in acceptance order, then 114) goes in front of what
   arrived here since the commit; then the lane opens with the completion callback first.
   Without a 114 the hold ends ``join_timeout`` after the commit.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final, final

import trio

from ..config import ServerConfig
from ..errors import (
    ApplicationError,
    CapacityExceeded,
    DeadlineExceeded,
    InvalidOperation,
    NotFound,
    OwnerLeaseExpired,
    StaleRoute,
    StoreOutcomeUnknown,
    Unavailable,
    ZLinkError,
)
from ..ids import ActorId, MeshName, NodeRid, OperationId, SpotId, StableType
from ..mesh.api import MeshNodeApi, PeerIdentity
from ..objects.activity import Activity
from ..objects.sinks import RemoteSink, TerminalSink, decode_terminal, encode_terminal, failure, ok
from ..routing.deliver import NEVER
from ..spots.approval import Reject
from ..spots.entry import EntrySpot
from ..spots.hosted import HostedSpot
from ..spots.runtime import SpotRuntime
from ..store.api import (
    Applied,
    AuthorityRow,
    AuthorityState,
    LocationStore,
    OperationKey,
    TerminalRecord,
)
from ..wire.enums import JoinResult, MessageKind
from ..wire.records import ActorJoin, ActorJournal, ActorJournalEnd, TerminalReply
from ..wire.tails import JoinTail, ReplyPayloadTail
from . import spot_side
from .authority import Authority, actor_key
from .client import ActorClient
from .context import ActorContext
from .host import ActorHost
from .hosted import JOINING, Deliver, HostedActor, JoinDone, fail_parked
from .join import HeldJoin, JoinRegistrar
from .membership import JoinCompletion, JoinEvent, JoinOutcome
from .registry import ActorType
from .stats import DispatchStats

__all__ = ["JoinTarget"]

logger = logging.getLogger("zlink_trio.actors")

_RELEASED_KEPT: Final = 1024
"""Released journals remembered (their indices), oldest forgotten first."""

_SETTLE_FIRST_DELAY = 0.05
_SETTLE_MAX_DELAY = 1.0


@final
class _Arrived:
    """What the attempt published: the new activation, its completion, its Spot (a User
    Spot: its gate and the JOINED event to run)."""

    __slots__ = ("completion", "event", "held", "hosted", "spot")

    def __init__(
        self,
        hosted: HostedActor,
        held: HeldJoin,
        completion: JoinCompletion,
        spot: HostedSpot | None,
        event: JoinEvent | None,
    ) -> None:
        self.hosted = hosted
        self.held = held
        self.completion = completion
        self.spot = spot
        self.event = event


@final
class JoinTarget:
    """This node as the target of cross-node Joins."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        node: MeshNodeApi,
        store: LocationStore,
        host: ActorHost,
        authority: Authority,
        types: Mapping[StableType, ActorType],
        entry_spots: Mapping[MeshName, EntrySpot],
        client: ActorClient,
        registrar: JoinRegistrar,
        stats_for: Callable[[StableType], DispatchStats],
        nursery: trio.Nursery,
        activity: Activity,
        spots: SpotRuntime | None = None,
    ) -> None:
        self._spots = spots
        self._config = config
        self._node = node
        self._store = store
        self._host = host
        self._authority = authority
        self._types = types
        self._entry_spots = entry_spots
        self._client = client
        self._registrar = registrar
        self._stats_for = stats_for
        self._nursery = nursery
        self._activity = activity
        self._inflight: dict[OperationKey, list[TerminalSink]] = {}
        self._released: dict[tuple[ActorId, OperationId], HeldJoin] = {}
        self.relocations: dict[tuple[ActorId, OperationId], HeldJoin] = {}
        """Relays of relocations arriving here (keyed by ActorId and RelocationId): the
        same 113 records as a Join's journal, held for the hidden activation."""
        self.arrived = 0

    # --- 112 ------------------------------------------------------------------------------
    def handle(self, record: ActorJoin, sink: TerminalSink) -> None:
        """Start (or join) the attempt of ``record``'s operation (never blocks)."""
        key = OperationKey(record.source_rid, record.source_generation, record.operation_id)
        sinks = self._inflight.get(key)
        if sinks is not None:
            sinks.append(sink)
            return
        self._inflight[key] = [sink]
        deadline = trio.current_time() + record.timeout_ms / 1000
        self._activity.begin()
        self._nursery.start_soon(self._run, record, key, deadline, name="zlink_trio.actor.join")

    async def _run(self, record: ActorJoin, key: OperationKey, deadline: float) -> None:
        arrived: _Arrived | None = None
        try:
            try:
                reply, arrived = await self._attempt(record, key, deadline)
            except ZLinkError as exc:
                reply = failure(exc)
            except Exception as exc:
                logger.exception("join of %r failed on its target", record.actor_id)
                reply = failure(Unavailable(f"the join failed: {type(exc).__name__}"))
            sinks = self._inflight.pop(key, [])
            for sink in sinks:
                await sink.deliver(reply)
            if arrived is not None:
                await self._open(arrived)
        finally:
            self._inflight.pop(key, None)
            self._activity.end()

    async def _open(self, arrived: _Arrived) -> None:
        """JOINED (a User Spot), then wait for the journal (or the hold's bound), then open
        the new activation's lane — under the SpotWide Spot's gate — with the completion
        callback first, the journal, what arrived meanwhile."""
        held = arrived.held
        spot = arrived.spot
        if spot is not None and arrived.event is not None:
            try:
                await spot_side.joined(spot, arrived.event)
            except Exception:
                logger.exception("the JOINED callback of %r failed", spot)
        with trio.move_on_after(self._config.join_timeout):
            await held.end.wait()
        hosted = arrived.hosted
        held.released = True
        if hosted.parked is not None:
            self._host.park_journal(hosted, [held.items[i] for i in sorted(held.items)])
        self._remember(hosted.actor_id, held)
        if hosted.join is held:
            hosted.join = None
        gate = spot.gate if spot is not None else None
        await self._host.unpark(hosted, JoinDone(arrived.completion), gate=gate)
        held.done.set()

    async def _attempt(
        self, record: ActorJoin, key: OperationKey, deadline: float
    ) -> tuple[TerminalReply, _Arrived | None]:
        store = self._store
        retained = await store.read_terminal(key)
        if retained is not None:
            return decode_terminal(retained.result), None
        if not self._node.admitting:
            return failure(Unavailable("the target node does not admit new membership")), None
        me = self._node.identity
        row = await self._authority.read(record.actor_id)
        if row is None or row.object_generation != record.object_generation:
            return failure(
                Unavailable(f"actor {record.actor_id.value!r} is not that incarnation")
            ), None
        owner = row.owner
        if owner.node_rid == me.node_rid and owner.node_generation == me.node_generation:
            if row.membership == record.spot_id:
                # This operation moved it already (its terminal record was lost): converged.
                return ok(
                    JoinTail(result=JoinResult.ACCEPTED, current_spot_id=record.spot_id)
                ), None
            return failure(Unavailable("the Actor's authority changed")), None
        if (
            row.state is not AuthorityState.READY
            or owner.node_rid != record.source_rid
            or owner.node_generation != record.source_generation
            or row.owner_generation != record.authority_owner_generation
        ):
            return failure(Unavailable("the Actor's authority changed (fence)")), None
        actor_type = self._types.get(row.stable_type)
        if actor_type is None:
            return (
                failure(NotFound(f"actor type {row.stable_type.value!r} is not registered here")),
                None,
            )
        spot: EntrySpot | HostedSpot | None = self._entry_spot(record.spot_id)
        if spot is None and self._spots is not None:
            user = self._spots.host.get(record.spot_id)
            if user is not None and user.generation == record.spot_object_generation:
                spot = user
        if spot is None:
            return failure(NotFound(f"spot {record.spot_id.value!r} is not hosted here")), None
        spot_mesh = spot.mesh_name if isinstance(spot, EntrySpot) else spot.context.mesh_name
        if spot_mesh != owner.mesh_name:
            return failure(InvalidOperation("the Spot is in another mesh than the Actor")), None
        terminal, arrived = await self._arrive(record, key, row, actor_type, spot, deadline)
        retain_for = max(0.0, deadline - trio.current_time())
        retain_for += self._config.terminal_record_retention
        try:
            with trio.CancelScope(shield=True), trio.move_on_after(self._config.drain_timeout):
                await store.record_terminal(
                    TerminalRecord(key, encode_terminal(terminal)), retain_for=retain_for
                )
        except ZLinkError as exc:
            logger.info("the join terminal of %r was not recorded: %r", record.actor_id, exc)
        return terminal, arrived

    def _entry_spot(self, spot_id: SpotId) -> EntrySpot | None:
        for spot in self._entry_spots.values():
            if spot.spot_id == spot_id:
                return spot
        return None

    async def _arrive(
        self,
        record: ActorJoin,
        key: OperationKey,
        row: AuthorityRow,
        actor_type: ActorType,
        spot: EntrySpot | HostedSpot,
        deadline: float,
    ) -> tuple[TerminalReply, _Arrived | None]:
        """Steps 4–5: the factory (and a User Spot's JOIN decision) in one lifecycle turn
        of the Spot, then the one CAS."""
        actor_id = record.actor_id
        mesh = row.owner.mesh_name
        context = ActorContext(
            actor_id, row.object_generation, mesh, record.spot_id, self._client, self._registrar
        )

        async def build() -> Any:
            instance = actor_type.factory(context)
            if inspect.isawaitable(instance):
                instance = await instance
            if getattr(instance, "context", None) is not context:
                raise InvalidOperation(
                    "the factory's Actor must expose the Context it was given, unchanged"
                )
            return instance

        user = spot if isinstance(spot, HostedSpot) else None
        event: JoinEvent | None = None
        reply: bytes | None = None

        def make_event(instance: Any) -> JoinEvent:
            nonlocal event
            event = JoinEvent(
                actor_id=actor_id,
                object_generation=row.object_generation,
                stable_type=row.stable_type,
                from_spot_id=row.membership,
                request=record.request or b"",
                operation_id=record.operation_id,
                actor=instance,
            )
            return event

        try:
            if user is None:
                assert isinstance(spot, EntrySpot)
                instance = await spot.run_lifecycle(build, deadline)
            else:
                with trio.fail_after(max(0.0, deadline - trio.current_time())):
                    decision, instance = await spot_side.admit(user, make_event, before=build)
                if isinstance(decision, Reject):
                    tail = JoinTail(
                        result=JoinResult.REJECTED,
                        current_spot_id=row.membership,
                        reply=decision.reply,
                    )
                    return ok(tail), None
                reply = decision.reply
                if user.spot_wide:
                    context._move_to(record.spot_id, user.instance)
        except trio.TooSlowError:
            return failure(DeadlineExceeded("the Spot did not decide before the deadline")), None
        except ZLinkError as exc:
            return failure(exc), None
        except Exception as exc:
            logger.info("join of %r: the factory failed: %r", actor_id, exc)
            return failure(ApplicationError(f"{type(exc).__name__}: {exc}")), None
        if trio.current_time() >= deadline:
            if user is not None:
                await spot_side.unadmit(user, actor_id)
            return failure(DeadlineExceeded("the join did not finish before its deadline")), None
        host = self._host
        host.begin_staging(actor_id)
        published: HostedActor | None = None
        try:
            committed = await self._commit(row, record.spot_id)
            if isinstance(committed, ZLinkError):
                if user is not None:
                    await spot_side.unadmit(user, actor_id)
                return failure(committed), None
            kind = host.kind(
                actor_type,
                self._node.identity.node_rid,
                self._stats_for(actor_type.stable_type),
                self._config.max_reply_bytes,
            )
            published = HostedActor(kind, context, instance, committed.owner_generation)
            held = HeldJoin(record.operation_id, (record.source_rid, record.source_generation))
            published.join = held
            host.publish_held(published)
        finally:
            leftover = host.end_staging(actor_id)
            if leftover:
                self._nursery.start_soon(
                    fail_parked, leftover, StaleRoute(f"actor {actor_id.value!r} did not move")
                )
        self.arrived += 1
        completion = JoinCompletion(
            operation_id=record.operation_id,
            target=record.spot_id,
            outcome=JoinOutcome.ACCEPTED,
            spot_id=record.spot_id,
            reply=reply,
        )
        tail = JoinTail(result=JoinResult.ACCEPTED, current_spot_id=record.spot_id, reply=reply)
        return ok(tail), _Arrived(published, held, completion, user, event)

    async def _commit(self, row: AuthorityRow, spot_id: SpotId) -> AuthorityRow | ZLinkError:
        """The one CAS of the move; an unknown outcome is settled by reading the row."""
        me = self._node.identity
        key = actor_key(ActorId(row.key.object_id))
        try:
            result = await self._store.change_owner(
                key,
                row.store_version,
                self._node.owner_fence(row.owner.mesh_name),
                membership=spot_id,
            )
        except StoreOutcomeUnknown:
            return await self._settle(row, spot_id, me.node_rid)
        except OwnerLeaseExpired as exc:
            return exc
        except (CapacityExceeded, Unavailable) as exc:
            return exc
        self._authority.forget(ActorId(row.key.object_id))  # its route names the old owner
        if isinstance(result, Applied):
            return result.row
        return Unavailable("the Actor's authority changed before the move committed")

    async def _settle(
        self, row: AuthorityRow, spot_id: SpotId, me: NodeRid
    ) -> AuthorityRow | ZLinkError:
        delay = _SETTLE_FIRST_DELAY
        actor_id = ActorId(row.key.object_id)
        while True:
            try:
                current = await self._authority.read(actor_id)
            except (Unavailable, StoreOutcomeUnknown) as exc:
                logger.info("settling the move of %r: %r; reading again", actor_id, exc)
                await trio.sleep(delay)
                delay = min(delay * 2, _SETTLE_MAX_DELAY)
                continue
            if (
                current is not None
                and current.object_generation == row.object_generation
                and current.owner.node_rid == me
                and current.membership == spot_id
            ):
                return current
            return Unavailable("the move did not commit")

    # --- 113 / 114 -----------------------------------------------------------------------------
    def _remember(self, actor_id: ActorId, held: HeldJoin) -> None:
        """Keep a released journal's indices a while (a late repeat is then dropped)."""
        released = self._released
        released[(actor_id, held.operation_id)] = held
        while len(released) > _RELEASED_KEPT:
            del released[next(iter(released))]

    def _journal(
        self, peer: PeerIdentity, actor_id: ActorId, operation: OperationId
    ) -> tuple[HostedActor | None, HeldJoin | None]:
        """The activation holding this journal (None when released), and the journal."""
        source = (peer.node_rid, peer.node_generation)
        relocation = self.relocations.get((actor_id, operation))
        if relocation is not None and relocation.source == source:
            return None, relocation
        hosted = self._host.get(actor_id)
        held = None if hosted is None else hosted.join
        if isinstance(held, HeldJoin) and held.operation_id == operation and held.source == source:
            return (hosted if hosted is not None and hosted.state is JOINING else None), held
        held = self._released.get((actor_id, operation))
        if held is not None and held.source == source:
            return None, held
        return None, None

    async def on_journal(self, peer: PeerIdentity, record: ActorJournal) -> None:
        sink = (
            RemoteSink(self._node, peer.address, record.correlation)
            if record.message_kind is MessageKind.REQUEST
            else None
        )
        hosted, held = self._journal(peer, record.actor_id, record.operation_id)
        index = record.index
        if held is not None and index in held.items:
            if not held.released and sink is not None:
                held.items[index].sink = sink  # the reply goes to the newer correlation
            elif sink is not None:
                await sink.fail_nowait(Unavailable("this journal payload was relayed already"))
            return
        run_by = NEVER
        if sink is not None and record.timeout_ms is not None:
            run_by = trio.current_time() + record.timeout_ms / 1000
        item = Deliver(record.message_kind, record.packet_name, record.payload, sink, run_by)
        try:
            relocating = (record.actor_id, record.operation_id) in self.relocations
            if held is not None and not held.released and (hosted is not None or relocating):
                if hosted is not None and not self._host.journal_room(hosted, len(held.items)):
                    raise CapacityExceeded(f"actor {record.actor_id.value!r}: its queue is full")
                held.items[index] = item
            else:
                # The hold ended (its bound passed): admitted as an ordinary payload.
                if held is not None:
                    held.items[index] = item
                self._host.admit_nowait(record.actor_id, item)
        except ZLinkError as exc:
            if sink is not None:
                await sink.fail_nowait(exc)
            else:
                logger.info(
                    "journal send %r of %r not admitted: %r",
                    record.packet_name,
                    record.actor_id,
                    exc,
                )

    async def on_journal_end(self, peer: PeerIdentity, record: ActorJournalEnd) -> None:
        sink = RemoteSink(self._node, peer.address, record.correlation)
        _hosted, held = self._journal(peer, record.actor_id, record.operation_id)
        if held is None:
            await sink.deliver(failure(Unavailable("no journal of that Join is held here")))
            return
        missing = held.first_missing(record.count)
        if missing is not None and not held.released:
            await sink.deliver(ok(ReplyPayloadTail(payload=str(missing).encode())))
            return
        held.end.set()
        await sink.deliver(ok())
