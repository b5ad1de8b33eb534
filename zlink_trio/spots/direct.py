"""Spot direct messaging to a Ready owner: the Spot adapter of the routing component
(:mod:`zlink_trio.routing.deliver`, where the delivery rules are written down) and command
39 route kind 1 (spec 06 §4.1, §5).

The target is always the global SpotId. What is particular to Spots lives here: the hosted
Spot's queue (:class:`~.host.SpotHost`), its queued item (:class:`~.hosted.SpotMessage`)
and command 39 with a :class:`~zlink_trio.wire.tails.ReadyFence` (the owner fence of the
Ready authority plus the route snapshot's ObjectGeneration, which the owner never
compares: a Spot closed and created again on the same owner after the resolve handles the
message). Every 39 carries a fresh random OperationId (the owner's repeat filter).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, final

from ..config import ServerConfig
from ..engine.lane import Lane
from ..errors import InvalidOperation
from ..ids import OperationId, SpotId
from ..mesh.api import MeshNodeApi
from ..objects.authority import Authority
from ..objects.durable import remaining_ms
from ..objects.follow import FollowTable
from ..objects.sinks import raise_for_failure
from ..objects.unreachable import OwnerUnreachable
from ..observe import FlowTrace
from ..routing.deliver import NEVER, Deadlines, Delivery
from ..routing.route_cache import Route
from ..store.api import LocationStore, ObjectKind
from ..wire.enums import MessageKind
from ..wire.payloads import TypedPayload
from ..wire.records import SpotDirectRoute, TerminalReply
from ..wire.tails import ReadyFence, ReplyPayloadTail
from .host import SpotHost
from .hosted import SpotMessage

__all__ = ["NEVER", "SpotDelivery", "SpotTarget", "describe", "spot_route_error"]


def describe(spot_id: SpotId) -> str:
    return f"spot {spot_id.value!r}"


def spot_route_error(spot_id: SpotId, route: Route) -> InvalidOperation | None:
    """Why a Ready row of this kind takes no direct call (an Entry Spot claim: its packet
    handlers belong to the STREAM sessions), or None."""
    if route.kind is ObjectKind.ENTRY_SPOT:
        return InvalidOperation(f"{describe(spot_id)} is an Entry Spot: it takes no direct call")
    return None


@final
class SpotTarget:
    """The :class:`~zlink_trio.routing.deliver.DeliveryTarget` of User and Instance Spots."""

    __slots__ = ("_host", "_node", "follow", "item")

    def __init__(self, node: MeshNodeApi, host: SpotHost) -> None:
        self._node = node
        self._host = host
        self.item = SpotMessage
        self.follow: FollowTable[SpotId] | None = None
        """The Message Follow routes of the Spots that moved away from here."""

    def describe(self, key: SpotId) -> str:
        return describe(key)

    def ready_lane(self, key: SpotId) -> Lane[Any, Any] | None:
        hosted = self._host.ready(key)
        return None if hosted is None else hosted.lane

    async def admit(self, key: SpotId, item: Any) -> None:
        await self._host.admit(key, item)

    def follow_route(self, key: SpotId) -> Route | None:
        follow = self.follow
        return None if follow is None else follow.route(key)

    def abandon(self, item: Any) -> None:
        # Its turn skips a request whose deadline passed (counted as expired).
        item.deadline = -math.inf

    def command(
        self,
        key: SpotId,
        route: Route,
        kind: MessageKind,
        packet: str,
        payload: bytes,
        deadline: float,
        message_id: int,
    ) -> Callable[[int], SpotDirectRoute]:
        me = self._node.identity
        fence = ReadyFence(
            spot_id=key,
            object_generation=route.object_generation,
            authority_owner_generation=route.owner_generation,
            target_rid=route.node_rid,
            target_generation=route.node_generation,
            owner_lease_generation=route.lease_generation,
            timeout_ms=remaining_ms(deadline) if kind is MessageKind.REQUEST else None,
        )
        operation_id = OperationId.new()

        def build(correlation: int) -> SpotDirectRoute:
            return SpotDirectRoute(
                correlation=correlation,
                operation_id=operation_id,
                source_rid=me.node_rid,
                source_generation=me.node_generation,
                route=fence,
                message_kind=kind,
                packet_name=packet,
                payload=payload,
            )

        return build

    def result(self, reply: TerminalReply) -> bytes | None:
        raise_for_failure(reply)
        tail = reply.tail
        if isinstance(tail, ReplyPayloadTail):
            return tail.payload
        return None


@final
class SpotDelivery(Delivery[SpotId]):
    """Delivery to Ready Spots: the routing component with the Spot adapter. A resolve
    that finds an Entry Spot claim ends InvalidOperation (:func:`spot_route_error`)."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        node: MeshNodeApi,
        store: LocationStore,
        host: SpotHost,
        authority: Authority[SpotId],
        deadlines: Deadlines,
        flow: FlowTrace,
    ) -> None:
        target = SpotTarget(node, host)
        super().__init__(
            target=target,
            node=node,
            store=store,
            resolver=authority,
            deadlines=deadlines,
            max_payload=config.max_request_bytes,
            flow=flow,
            connect_timeout=config.connect_timeout,
            unreachable=OwnerUnreachable(
                store=store,
                authority=authority,
                kind=ObjectKind.USER_SPOT,
                grace=config.reservation_grace,
                flow=flow,
                name="spot",
            ),
        )
        self.target_adapter = target

    def wire_payload(self, payload: bytes | TypedPayload) -> bytes:
        """The bytes ``payload`` travels as (a typed one encoded now and checked against
        the request limit: InvalidOperation before anything is sent)."""
        return payload if type(payload) is bytes else self._wire_payload(payload)

    async def resolve(self, key: SpotId) -> Route:
        route = await super().resolve(key)
        refused = spot_route_error(key, route)
        if refused is not None:
            raise refused
        return route
