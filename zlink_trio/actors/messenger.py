"""Actor direct messaging by ActorId (spec 04 §5): the Actor adapter of the routing
component (:mod:`zlink_trio.routing.deliver`, where the delivery rules are written down).

The target is always the global ActorId. What is particular to Actors lives here: the
hosted Actor's queue (:class:`~.host.ActorHost`), its queued item (:class:`~.hosted.Deliver`)
and command 24, which carries a message to a remote owner with the route's fences, the
remaining deadline and a message id (``operation_id``, unique per node lifecycle, so the
owner drops a repeated frame, :mod:`.dedupe`). Direct messaging never creates or changes a
session binding. An owner that cannot be reached ends the call as
:class:`~zlink_trio.objects.unreachable.OwnerUnreachable` decides (a dead owner's row is
reclaimed lazily: the id is then Missing, NotFound).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final, final

from ..config import ServerConfig
from ..engine.clock import run_clock
from ..engine.lane import Lane
from ..engine.lanes import ActorDeliveryLane
from ..ids import ActorId
from ..mesh.api import EncodedCommand, MeshNodeApi
from ..objects.durable import remaining_ms
from ..objects.sinks import raise_for_failure
from ..objects.unreachable import OwnerUnreachable
from ..observe import FlowTrace
from ..routing.deliver import NEVER, SEND_YIELD_EVERY, Delivery
from ..routing.reply_deadlines import ReplyDeadlines
from ..routing.route_cache import Route
from ..store.api import LocationStore, ObjectKind
from ..wire.enums import MessageKind, TerminalResult
from ..wire.records import ActorSend, TerminalReply
from ..wire.tails import ReplyPayloadTail
from ..wire.templates import ActorSendTemplate
from .authority import Authority
from .follow import FollowRoutes
from .host import ActorHost
from .hosted import ActorItem, Deliver

__all__ = ["NEVER", "SEND_YIELD_EVERY", "ActorTarget", "Messenger"]


_OK: Final = TerminalResult.OK
_TEMPLATES_MAX: Final = 4096
"""Routes whose command-24 template is kept (cleared when full, as the client's caches)."""


@final
class _ActorCommand(EncodedCommand):
    """One remote message: its 24 as a body from the route's template (or as a record,
    for an instrumented connection)."""

    __slots__ = ("_kind", "_message_id", "_packet", "_payload", "_template", "_timeout_ms")

    def __init__(
        self,
        template: ActorSendTemplate,
        kind: MessageKind,
        packet: str,
        payload: bytes,
        timeout_ms: int,
        message_id: int,
    ) -> None:
        self._template = template
        self._kind = kind
        self._packet = packet
        self._payload = payload
        self._timeout_ms = timeout_ms
        self._message_id = message_id

    def __call__(self, correlation: int) -> ActorSend:
        return self._template.record(
            correlation, self._kind, self._packet, self._payload, self._timeout_ms, self._message_id
        )

    def body(self, correlation: int) -> bytes:
        return self._template.body(
            correlation, self._kind, self._packet, self._payload, self._timeout_ms, self._message_id
        )


@final
class ActorTarget:
    """The :class:`~zlink_trio.routing.deliver.DeliveryTarget` of Actors."""

    __slots__ = ("_host", "_node", "_now", "_templates", "follow", "item", "ready_lane")

    def __init__(self, node: MeshNodeApi, host: ActorHost) -> None:
        self._node = node
        self._host = host
        self._templates: dict[int, tuple[Route, ActorId, ActorSendTemplate]] = {}
        self._now = run_clock()
        self.ready_lane: Callable[[ActorId], Lane[ActorDeliveryLane, ActorItem] | None] = (
            host.ready_lane
        )
        self.item = Deliver
        self.follow: FollowRoutes | None = None
        """Message Follow routes of the Actors that moved away (set by the runtime)."""

    def describe(self, key: ActorId) -> str:
        return f"actor {key.value!r}"

    async def admit(self, key: ActorId, item: Any) -> None:
        await self._host.admit(key, item)

    def follow_route(self, key: ActorId) -> Route | None:
        follow = self.follow
        return None if follow is None else follow.route(key)

    def abandon(self, item: Any) -> None:
        # Its turn skips a request whose deadline passed (counted as request_expired).
        item.deadline = -math.inf

    def command(
        self,
        key: ActorId,
        route: Route,
        kind: MessageKind,
        packet: str,
        payload: bytes,
        deadline: float,
        message_id: int,
    ) -> Callable[[int], ActorSend]:
        # The constant part of the 24 (source, target, id, fences) is encoded once per
        # route (one template per route, kept while the route is among the last ones).
        templates = self._templates
        memo = templates.get(id(route))
        if memo is None or memo[0] is not route or (memo[1] is not key and memo[1] != key):
            me = self._node.identity
            template = ActorSendTemplate(
                source_rid=me.node_rid,
                source_generation=me.node_generation,
                target_rid=route.node_rid,
                target_generation=route.node_generation,
                actor_id=key,
                route_object_generation=route.object_generation,
                expected_owner_generation=route.owner_generation,
                owner_lease_generation=route.lease_generation,
            )
            if len(templates) >= _TEMPLATES_MAX:
                templates.clear()
            templates[id(route)] = memo = (route, key, template)
        return _ActorCommand(
            memo[2], kind, packet, payload, remaining_ms(deadline, self._now()), message_id
        )

    def result(self, reply: TerminalReply) -> bytes | None:
        if reply.terminal_result is not _OK:
            raise_for_failure(reply)
        tail = reply.tail
        if isinstance(tail, ReplyPayloadTail):
            return tail.payload
        return None


@final
class Messenger(Delivery[ActorId]):
    """Delivery to Actors: the routing component with the Actor adapter."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        node: MeshNodeApi,
        store: LocationStore,
        host: ActorHost,
        authority: Authority,
        deadlines: ReplyDeadlines,
        flow: FlowTrace,
    ) -> None:
        self.target_adapter = ActorTarget(node, host)
        super().__init__(
            target=self.target_adapter,
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
                kind=ObjectKind.ACTOR,
                grace=config.reservation_grace,
                flow=flow,
            ),
        )
