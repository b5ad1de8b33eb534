"""The Spot kind adapters of the shared object layer (:mod:`zlink_trio.objects`).

What create convergence, replay and reclaim cannot know about Spots:

* :class:`UserSpotSourceKind` — a User Spot's Store key (the Spot namespace), no
  membership, the public results (:mod:`.results`, ref named ``spot``) and command 47
  (:class:`~zlink_trio.wire.records.UserSpotCreate`);
* :class:`SpotTargetKind` — the factory and its staging, for User AND Instance Spots (the
  cold-activation path runs ``CreateTarget.run_reserved`` with it after its own reserve):
  the type must be registered here with the row's kind; the staging Spot is a lane whose
  first lifecycle turn runs the factory (Context only; the Spot must expose that Context
  unchanged) and the type's CREATE callback with the creation request read from the
  Store; an approved Spot is published on the host once its Ready commit applied.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, final

import trio

from ..errors import DeadlineExceeded, InvalidOperation, NotFound, StaleRoute, ZLinkError
from ..ids import SpotId, SpotRef
from ..objects.activity import Activity
from ..objects.kind import Commit, CreateOrder, Decision, Refuse
from ..store.api import AuthorityRow, NodeDescriptor, ObjectKey, ObjectKind, OperationKey
from ..wire.enums import CreateState
from ..wire.records import UserSpotCreate
from ..wire.tails import CreateTail
from .approval import Approve, Reject
from .dispatch import fail_messages
from .host import SpotHost
from .hosted import HostedSpot
from .lifecycle import SpotCallback
from .registry import SpotType, SpotTypes
from .results import SpotCreated, SpotCreateResult, SpotExisting, SpotRejected
from .spot_kind import SpotKind

__all__ = [
    "SpotTargetKind",
    "UserSpotSourceKind",
    "reserved_shape_error",
    "spot_key",
    "spot_ref",
    "user_spot_order",
]


def spot_key(spot_id: SpotId) -> ObjectKey:
    """The Location Store key of a Spot (one namespace for Entry, User, Instance)."""
    return ObjectKey.spot(spot_id.value)


def reserved_shape_error(spot_id: SpotId) -> InvalidOperation | None:
    """InvalidOperation when a caller-given User or Instance Spot id has the reserved
    Entry shape ``<prefix>-entry-<lowercase uuid4>`` (spec 06 §2.1): refused before any
    reservation or factory. None for any other id."""
    if not spot_id.is_reserved_entry_shape:
        return None
    return InvalidOperation(
        f"spot id {spot_id.value!r} has the reserved Entry Spot shape "
        "(<prefix>-entry-<uuid4>): only the framework issues such ids"
    )


def spot_ref(row: AuthorityRow) -> SpotRef:
    """The SpotRef of a Spot authority row (its owner at the time of the read)."""
    owner = row.owner
    return SpotRef(
        SpotId(row.key.object_id), row.object_generation, owner.mesh_name, owner.node_rid
    )


def user_spot_order(record: UserSpotCreate) -> CreateOrder[SpotId]:
    """The creation attempt a command 47 carries."""
    return CreateOrder(
        operation=OperationKey(record.source_rid, record.source_generation, record.operation_id),
        object_id=record.spot_id,
        key=spot_key(record.spot_id),
        stable_type=record.stable_type,
        fence=record.reservation,
        timeout_ms=record.timeout_ms,
    )


@final
class UserSpotSourceKind:
    """The caller side of User Spot Create / GetOrCreate (the manager creates no other
    kind: an Instance Spot comes into being only by cold activation)."""

    __slots__ = ()

    @property
    def kind(self) -> ObjectKind:
        return ObjectKind.USER_SPOT

    def key(self, object_id: SpotId) -> ObjectKey:
        return spot_key(object_id)

    def membership(self, descriptor: NodeDescriptor) -> SpotId | None:
        return None  # a Spot is nobody's member

    def existing(self, row: AuthorityRow) -> SpotCreateResult:
        return SpotExisting(spot_ref(row))

    def outcome(self, tail: CreateTail) -> SpotCreateResult:
        ref = tail.spot_ref()
        if tail.state is CreateState.REJECTED:
            return SpotRejected(ref, tail.reply)
        if tail.state is CreateState.EXISTING:
            return SpotExisting(ref)
        return SpotCreated(ref, tail.reply)

    def record(self, order: CreateOrder[SpotId]) -> UserSpotCreate:
        operation = order.operation
        return UserSpotCreate(
            correlation=0,
            operation_id=operation.operation_id,
            source_rid=operation.source_rid,
            source_generation=operation.source_generation,
            spot_id=order.object_id,
            stable_type=order.stable_type,
            reservation=order.fence,
            timeout_ms=order.timeout_ms,
        )


@final
class SpotTargetKind:
    """The owner side of a Spot creation attempt (User or Instance): factory and staging."""

    def __init__(
        self,
        *,
        host: SpotHost,
        types: SpotTypes,
        nursery: trio.Nursery,
        activity: Activity | None = None,
    ) -> None:
        self._host = host
        self._types = types
        self._nursery = nursery
        self._activity = Activity() if activity is None else activity
        """Attempts between their staging and its end (a clean stop lets them finish)."""

    def refuse(self, order: CreateOrder[SpotId], row: AuthorityRow) -> ZLinkError | None:
        spot_type = self._types.get(order.stable_type)
        if (
            spot_type is None
            or row.stable_type != order.stable_type
            or spot_type.kind is not SpotKind.of(row.kind)
        ):
            kind = SpotKind.of(row.kind)
            noun = "spot" if kind is None else f"{kind.value} spot"
            return NotFound(f"{noun} type {order.stable_type.value!r} is not registered here")
        return None

    def begin(
        self, order: CreateOrder[SpotId], row: AuthorityRow, request: bytes | None
    ) -> _SpotStaging | ZLinkError:
        spot_type = self._types[order.stable_type]
        hosted = self._host.stage(
            spot_type,
            order.object_id,
            row.object_generation,
            row.owner.mesh_name,
            row.owner_generation,
        )
        self._activity.begin()
        return _SpotStaging(self, spot_type, hosted, request)

    def publish(self, hosted: HostedSpot, committed: AuthorityRow) -> None:
        self._host.publish(hosted, committed.owner_generation)

    def end_staging(self, hosted: HostedSpot) -> None:
        """The attempt is over: messages parked for the id fail unless a published Spot
        took them (they are then its queue)."""
        self._activity.end()
        parked = self._host.end_staging(hosted)
        if parked:
            self._nursery.start_soon(
                fail_messages,
                parked,
                StaleRoute(f"spot {hosted.spot_id.value!r} was not created"),
                name="zlink_trio.spots.parked",
            )


async def _decide(instance: Any, spot_type: SpotType, request: bytes | None) -> Decision:
    """The type's CREATE callback on ``request`` (default: approve)."""
    fn: Callable[[Any, Any], Any] | None = spot_type.callbacks.get(SpotCallback.CREATE)
    if fn is None:
        return Commit()
    decision = await fn(instance, request)
    if decision is None or isinstance(decision, Approve):
        return Commit(None if decision is None else decision.reply)
    if isinstance(decision, Reject):
        return Refuse(decision.reply)
    raise TypeError(f"the create callback must return Approve, Reject or None, got {decision!r}")


@final
class _SpotStaging:
    """One attempt's staging Spot (see :class:`~zlink_trio.objects.kind.Staging`)."""

    __slots__ = ("_hosted", "_kind", "_request", "_spot_type")

    def __init__(
        self,
        kind: SpotTargetKind,
        spot_type: SpotType,
        hosted: HostedSpot,
        request: bytes | None,
    ) -> None:
        self._kind = kind
        self._spot_type = spot_type
        self._hosted = hosted
        self._request = request

    async def stage(self, deadline: float) -> Decision:
        hosted = self._hosted
        spot_type = self._spot_type
        request = self._request

        async def build(_: Any) -> Decision | None:
            # One lifecycle turn of the staging Spot: the factory, then the create
            # callback; bounded by the attempt's deadline (a slow factory never holds the
            # lane past the attempt it serves).
            with trio.move_on_at(deadline):
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
                if SpotCallback.CREATE in spot_type.callbacks:
                    hosted.shared.counters.callbacks[SpotCallback.CREATE] += 1
                return await _decide(instance, spot_type, request)
            return None

        decision = await hosted.run_lifecycle_work(build)
        if decision is None:
            raise DeadlineExceeded("the Spot's factory did not finish before the deadline")
        return decision

    def publish(self, committed: AuthorityRow) -> None:
        self._kind.publish(self._hosted, committed)

    def end(self) -> None:
        self._kind.end_staging(self._hosted)
