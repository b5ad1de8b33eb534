"""The direct-call side of the Spot runtime: delivery to Ready Spots (command 39 route kind
1), cold activation of Instance Spots (route kind 2) as source and target, the recovery of
activations whose owner died, the inbound 39 and the client (``server.spots.send/request``,
``context.spots``).

Built by :class:`~zlink_trio.spots.runtime.SpotRuntime` from its parts (host, authority,
route cache, create target) and owned by its nursery: the activation tasks, the recovery
tasks and the one request-deadline timer (:meth:`serve`) are tasks of that nursery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import trio

from ..config import ServerConfig
from ..ids import SpotId
from ..objects.activity import Activity
from ..objects.authority import Authority
from ..objects.create_target import CreateTarget
from ..objects.follow import FollowTable
from ..observe import FlowTrace
from ..routing.reply_deadlines import ReplyDeadlines
from ..store.api import LocationStore
from ..wire.payloads import EMPTY_REGISTRY, PayloadRegistry
from .activation import Activation
from .call_stats import SpotCallStatistics
from .calls import SpotCalls
from .client import SpotClient
from .direct import SpotDelivery
from .host import SpotHost
from .ingress import SpotIngress
from .kind import SpotTargetKind
from .recovery import ActivationRecovery
from .registry import SpotTypes

if TYPE_CHECKING:
    from ..mesh.node import MeshNode

__all__ = ["SpotMessaging"]


@final
class SpotMessaging:
    def __init__(
        self,
        *,
        config: ServerConfig,
        node: MeshNode,
        store: LocationStore,
        host: SpotHost,
        types: SpotTypes,
        authority: Authority[SpotId],
        target: CreateTarget[SpotId],
        target_kind: SpotTargetKind,
        activity: Activity,
        nursery: trio.Nursery,
        flow: FlowTrace,
        payloads: PayloadRegistry = EMPTY_REGISTRY,
    ) -> None:
        self.deadlines = ReplyDeadlines()
        self.delivery = SpotDelivery(
            config=config,
            node=node,
            store=store,
            host=host,
            authority=authority,
            deadlines=self.deadlines,
            flow=flow,
        )
        self.activation = Activation(
            config=config,
            node=node,
            store=store,
            host=host,
            authority=authority,
            target=target,
            target_kind=target_kind,
            deadlines=self.deadlines,
            activity=activity,
            nursery=nursery,
            flow=flow,
            lease_live=node.lease_live,
        )
        self.calls = SpotCalls(
            config=config,
            node=node,
            store=store,
            authority=authority,
            delivery=self.delivery,
            activation=self.activation,
            deadlines=self.deadlines,
        )
        self.client = SpotClient(
            self.calls,
            max_request=config.max_request_bytes,
            default_timeout=config.default_request_timeout,
            payloads=payloads,
        )
        self.recovery = ActivationRecovery(
            config=config,
            node=node,
            store=store,
            types=types,
            activation=self.activation,
            nursery=nursery,
            flow=flow,
        )
        self.ingress = SpotIngress(node, host, self.activation, flow)
        host.spots_client = self.client

    def statistics(self) -> SpotCallStatistics:
        cache = self.delivery.cache.statistics()
        activation = self.activation
        return SpotCallStatistics(
            route_cache_entries=cache.entries,
            route_cache_hits=cache.hits,
            route_cache_misses=cache.misses,
            route_cache_invalidations=cache.invalidations,
            activations_sent=self.calls.activations,
            envelopes=activation.envelopes,
            reservations=activation.reserved,
            forwarded=activation.forwarded,
            recovered=self.recovery.recovered,
            aborted=self.recovery.aborted,
        )

    def follow(self, routes: FollowTable[SpotId], max_hops: int, nursery: trio.Nursery) -> None:
        """Spots that moved away from here: local callers and inbound 39 follow
        ``routes`` (spec 06 §6; at most ``max_hops`` hops, never more than 8)."""
        self.delivery.target_adapter.follow = routes
        self.ingress.follow = routes
        self.ingress.max_hops = min(max_hops, 8)
        self.ingress.nursery = nursery

    def register(self) -> None:
        """Register the inbound command 39 (before the node serves)."""
        self.ingress.register()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The request-deadline timer of Spot calls (until cancelled)."""
        await self.deadlines.serve(task_status=task_status)
