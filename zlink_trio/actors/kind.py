"""The Actor kind adapter of the shared object layer (:mod:`zlink_trio.objects`).

What create convergence, replay and reclaim cannot know about Actors:

* :class:`ActorSourceKind` — an Actor's Store key, the Entry Spot its reservation records
  as membership, the public results (:mod:`.results`, ref named ``actor``) and
  command 110 (:class:`~zlink_trio.wire.records.ActorCreate`);
* :class:`ActorTargetKind` — the factory and its staging: the Actor type must be
  registered here, one lifecycle turn of the mesh's Entry Spot builds the staging Actor
  (Context only; the Actor must expose that Context unchanged) and asks OnCreateActor, and
  an approved Actor is published on the host once its Ready commit applied.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, final

import trio

from ..config import ServerConfig
from ..errors import InvalidOperation, NotFound, StaleRoute, Unavailable, ZLinkError
from ..ids import ActorId, ActorRef, MeshName, NodeRid, SpotId, StableType
from ..objects.activity import Activity
from ..objects.kind import Commit, CreateOrder, Decision, Refuse
from ..spots.approval import ActorCreateEvent, Approve
from ..store.api import AuthorityRow, NodeDescriptor, ObjectKey, ObjectKind, OperationKey
from ..wire.enums import CreateState
from ..wire.records import ActorCreate
from ..wire.tails import CreateTail
from .authority import actor_key
from .context import ActorContext
from .host import ActorHost
from .hosted import HostedActor, fail_parked
from .registry import ActorType
from .results import ActorCreateResult, Created, Existing, Rejected

if TYPE_CHECKING:
    from ..spots.entry import EntrySpot
    from .client import ActorClient
    from .join import JoinRegistrar
    from .stats import DispatchStats

__all__ = ["ActorSourceKind", "ActorTargetKind", "actor_order"]


def actor_order(record: ActorCreate) -> CreateOrder[ActorId]:
    """The creation attempt a command 110 carries."""
    return CreateOrder(
        operation=OperationKey(record.source_rid, record.source_generation, record.operation_id),
        object_id=record.actor_id,
        key=actor_key(record.actor_id),
        stable_type=record.stable_type,
        fence=record.reservation,
        timeout_ms=record.timeout_ms,
    )


@final
class ActorSourceKind:
    """The caller side of Actor Create / GetOrCreate."""

    __slots__ = ()

    @property
    def kind(self) -> ObjectKind:
        return ObjectKind.ACTOR

    def key(self, object_id: ActorId) -> ObjectKey:
        return actor_key(object_id)

    def membership(self, descriptor: NodeDescriptor) -> SpotId | None:
        return descriptor.entry_spot_id

    def existing(self, row: AuthorityRow) -> ActorCreateResult:
        owner = row.owner
        actor_id = ActorId(row.key.object_id)
        return Existing(ActorRef(actor_id, row.object_generation, owner.mesh_name, owner.node_rid))

    def outcome(self, tail: CreateTail) -> ActorCreateResult:
        if tail.state is CreateState.REJECTED:
            return Rejected(tail.reply)
        ref = tail.actor_ref()
        if tail.state is CreateState.EXISTING:
            return Existing(ref)
        return Created(ref, tail.reply)

    def record(self, order: CreateOrder[ActorId]) -> ActorCreate:
        operation = order.operation
        return ActorCreate(
            correlation=0,
            operation_id=operation.operation_id,
            source_rid=operation.source_rid,
            source_generation=operation.source_generation,
            actor_id=order.object_id,
            stable_type=order.stable_type,
            reservation=order.fence,
            timeout_ms=order.timeout_ms,
        )


@final
class ActorTargetKind:
    """The owner side of an Actor creation attempt: the factory and its staging."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        host: ActorHost,
        types: Mapping[StableType, ActorType],
        entry_spots: Mapping[MeshName, EntrySpot],
        client: ActorClient,
        stats_for: Callable[[StableType], DispatchStats],
        node_rid: Callable[[], NodeRid],
        nursery: trio.Nursery,
        activity: Activity | None = None,
        joins: JoinRegistrar | None = None,
    ) -> None:
        self._joins = joins
        self._config = config
        self._host = host
        self._types = types
        self._entry_spots = entry_spots
        self._client = client
        self._stats_for = stats_for
        self._node_rid = node_rid
        self._nursery = nursery
        self._activity = Activity() if activity is None else activity
        """Attempts between their staging and its end (a clean stop lets them finish)."""

    def refuse(self, order: CreateOrder[ActorId], row: AuthorityRow) -> ZLinkError | None:
        if order.stable_type not in self._types or row.stable_type != order.stable_type:
            return NotFound(f"actor type {order.stable_type.value!r} is not registered here")
        return None

    def begin(
        self, order: CreateOrder[ActorId], row: AuthorityRow, request: bytes | None
    ) -> _ActorStaging | ZLinkError:
        entry = self._entry_spots.get(row.owner.mesh_name)
        if entry is None:
            return Unavailable("no Entry Spot for that mesh here")
        actor_id = order.object_id
        context = ActorContext(
            actor_id,
            row.object_generation,
            row.owner.mesh_name,
            row.membership,
            self._client,
            self._joins,
        )
        self._host.begin_staging(actor_id)
        self._activity.begin()
        return _ActorStaging(self, self._types[order.stable_type], entry, context, row, request)

    def publish(
        self, actor_type: ActorType, context: ActorContext, instance: Any, committed: AuthorityRow
    ) -> None:
        """Host the approved, committed Actor (it is reachable from now on)."""
        host = self._host
        hosted_kind = host.kind(
            actor_type,
            self._node_rid(),
            self._stats_for(actor_type.stable_type),
            self._config.max_reply_bytes,
        )
        host.publish(HostedActor(hosted_kind, context, instance, committed.owner_generation))

    def end_staging(self, actor_id: ActorId) -> None:
        """The attempt is over: frames parked for the staging Actor fail unless it was
        published (they are then its queue)."""
        self._activity.end()
        parked = self._host.end_staging(actor_id)
        if parked:  # frames admitted for it while it was staging; it was not published
            self._nursery.start_soon(
                fail_parked, parked, StaleRoute(f"actor {actor_id.value!r} was not created")
            )


@final
class _ActorStaging:
    """One attempt's staging Actor (see :class:`~zlink_trio.objects.kind.Staging`)."""

    __slots__ = ("_actor_type", "_context", "_entry", "_instance", "_kind", "_request", "_row")

    def __init__(
        self,
        kind: ActorTargetKind,
        actor_type: ActorType,
        entry: EntrySpot,
        context: ActorContext,
        row: AuthorityRow,
        request: bytes | None,
    ) -> None:
        self._kind = kind
        self._actor_type = actor_type
        self._entry = entry
        self._context = context
        self._row = row
        self._request = request
        self._instance: Any = None

    async def _build(self) -> ActorCreateEvent:
        """The factory, inside the Entry Spot's lifecycle turn."""
        context = self._context
        instance = self._actor_type.factory(context)
        if inspect.isawaitable(instance):
            instance = await instance
        if getattr(instance, "context", None) is not context:
            raise InvalidOperation(
                "the factory's Actor must expose the Context it was given, unchanged"
            )
        self._instance = instance
        return ActorCreateEvent(
            actor_id=context.actor_id,
            stable_type=self._row.stable_type,
            object_generation=self._row.object_generation,
            entry_spot_id=self._entry.spot_id,
            request=self._request,
            actor=instance,
        )

    async def stage(self, deadline: float) -> Decision:
        # CreateTarget.run_reserved calls this inside its scope ending at ``deadline``.
        _event, decision = await self._entry.approve(self._build, deadline, caller_bounded=True)
        if isinstance(decision, Approve):
            return Commit(decision.reply)
        return Refuse(decision.reply)

    def publish(self, committed: AuthorityRow) -> None:
        self._kind.publish(self._actor_type, self._context, self._instance, committed)

    def end(self) -> None:
        self._kind.end_staging(self._context.actor_id)
