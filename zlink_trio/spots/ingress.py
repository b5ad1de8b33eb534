"""Inbound command 39 (spec 06 §4.1, §5): a Spot message from a peer.

* Route kind 1 (:class:`~zlink_trio.wire.tails.ReadyFence`): the fence must name this node
  lifecycle; the message joins the queue of the Ready Spot of that id hosted here,
  whatever its ObjectGeneration (the route's is a snapshot only: a Spot closed and created
  again here after the sender's resolve handles it). No Ready Spot of the id here →
  StaleRoute (the sender never re-sends it).
* Route kind 2 (:class:`~zlink_trio.wire.tails.ColdActivation`): the cold-activation
  target (:mod:`.activation`).

A repeated frame (same operation id on the same link) is dropped: a message never runs
twice. This is the connection's reader: nothing here waits for queue space (a full queue
refuses the message).
"""

from __future__ import annotations

import math
from typing import Final, final

import attrs
import trio

from ..errors import (
    CapacityExceeded,
    DeadlineExceeded,
    InvalidOperation,
    StaleRoute,
    Unavailable,
    ZLinkError,
)
from ..ids import SpotId
from ..mesh.api import MeshNodeApi, PeerAddress, PeerIdentity, PeerNotAdmitted
from ..objects.follow import FollowRoute, FollowTable
from ..objects.relay import relay_reply_to
from ..objects.sinks import RemoteSink
from ..observe import FlowEvent, FlowTrace
from ..routing.dedupe import IngressDedupe
from ..wire.codec import evolve
from ..wire.commands import Command
from ..wire.enums import MessageKind
from ..wire.records import SpotDirectRoute
from ..wire.tails import ReadyFence
from .activation import Activation
from .host import SpotHost
from .hosted import SpotMessage

__all__ = ["SpotIngress"]

_REQUEST: Final = MessageKind.REQUEST


@final
class SpotIngress:
    def __init__(
        self, node: MeshNodeApi, host: SpotHost, activation: Activation, flow: FlowTrace
    ) -> None:
        self._node = node
        self._host = host
        self._activation = activation
        self._flow = flow
        self._dedupe = IngressDedupe()
        self.follow: FollowTable[SpotId] | None = None
        """Message Follow routes of the Spots that moved away from here (set by the
        runtime); None: nothing follows."""
        self.max_hops = 8
        self.nursery: trio.Nursery | None = None
        """Where a followed request's reply relay runs (the Spot runtime's)."""

    def register(self) -> None:
        # draining: a move's relay still reaches this node while it closes (a clean stop
        # after it accepted the move); everything else is refused then, as before.
        self._node.on(Command.SPOT_DIRECT_ROUTE, self.on_spot_direct, draining=True)

    async def on_spot_direct(self, peer: PeerIdentity, record: SpotDirectRoute) -> None:
        # A followed record (follow_hops > 0) keeps its original caller's operation id,
        # which the relaying node deduplicated on arrival: not this link's id space.
        if record.follow_hops == 0 and not self._dedupe.first(peer, record.operation_id.value):
            self._flow.emit(
                FlowEvent.REPEATED_FRAME_DROPPED,
                "spot message %d from %s",
                record.operation_id.value,
                peer,
            )
            return
        route = record.route
        if not isinstance(route, ReadyFence):
            if not self._node.admitting:
                if record.message_kind is _REQUEST and record.correlation:
                    refusal = RemoteSink(self._node, peer.address, record.correlation)
                    await refusal.fail_nowait(Unavailable("the node is not admitting"))
                return
            await self._activation.on_envelope(peer, record)
            return
        sink = (
            RemoteSink(self._node, peer.address, record.correlation)
            if record.message_kind is _REQUEST
            else None
        )
        me = self._node.identity
        error: ZLinkError | None = None
        if route.target_rid != me.node_rid or route.target_generation != me.node_generation:
            error = StaleRoute("the route names another node lifecycle")
        elif not self._node.admitting:
            # The relay of a move this node accepted before it stopped admitting (a clean
            # stop) is still taken: the move's commit runs it (it was admitted at the
            # source; refusing it here would lose it).
            if record.follow_hops == 0 and self._host.admit_relayed_nowait(
                route.spot_id, _item(record, route, sink), (peer.node_rid, peer.node_generation)
            ):
                return
            error = Unavailable("this owner's lease expired: it admits nothing")
        elif (follow := self._follow_or_fence(record, route)) is not None:
            if not isinstance(follow, FollowRoute):
                error = follow
            else:
                await self._follow_on(record, route, follow, sink)
                return
        else:
            item = _item(record, route, sink)
            try:
                if record.follow_hops != 0 or not self._host.admit_relayed_nowait(
                    route.spot_id, item, (peer.node_rid, peer.node_generation)
                ):
                    self._host.admit_nowait(route.spot_id, item)
            except ZLinkError as exc:
                error = exc
        if error is None:
            return
        if isinstance(error, StaleRoute):
            self._flow.emit(
                FlowEvent.STALE_ROUTE_INGRESS,
                "%s to spot %r: %r",
                record.message_kind.name.lower(),
                route.spot_id.value,
                error,
            )
        elif sink is None and not isinstance(error, CapacityExceeded):
            self._flow.emit(
                FlowEvent.SEND_NOT_ADMITTED, "send to spot %r: %r", route.spot_id.value, error
            )
        if sink is not None:
            await sink.fail_nowait(error)

    def _follow_or_fence(
        self, record: SpotDirectRoute, route: ReadyFence
    ) -> FollowRoute[SpotId] | ZLinkError | None:
        """None to admit here (hosted, or a temporary queue: checked first, A04-04); a
        follow route when the Spot moved away from here; an error to refuse with."""
        follow = self.follow
        spot_id = route.spot_id
        if (
            follow is None
            or self._host.get(spot_id) is not None
            or self._host.has_temporary_queue(spot_id)
        ):
            return None
        found = follow.lookup(spot_id)
        if found is None:
            return None  # admission decides (a stale route)
        if route.object_generation != found.object_generation:
            return InvalidOperation("the route names another incarnation than the one that moved")
        if record.follow_hops >= self.max_hops:
            return Unavailable("the Message Follow chain is longer than its hop bound")
        return found

    async def _follow_on(
        self,
        record: SpotDirectRoute,
        route: ReadyFence,
        follow: FollowRoute[SpotId],
        sink: RemoteSink | None,
    ) -> None:
        """Message Follow: the record, its operation id, payload and deadline unchanged,
        to the current owner over the committed route (no Store read, no handler); the
        terminal of a request comes back through here to its caller."""
        me = self._node.identity
        forwarded = evolve(
            record,
            source_rid=me.node_rid,
            source_generation=me.node_generation,
            route=attrs.evolve(
                route,
                target_rid=follow.target_rid,
                target_generation=follow.target_generation,
                authority_owner_generation=follow.target_owner_generation,
                owner_lease_generation=follow.target_lease_generation,
            ),
            follow_hops=record.follow_hops + 1,
        )
        peer = PeerAddress(follow.mesh_name, follow.target_rid)
        assert self.follow is not None
        self.follow.followed += 1
        try:
            if sink is None:
                await self._node.send(peer, forwarded, wait=False)
                return
            pending = await self._node.request_with(
                peer, lambda correlation: evolve(forwarded, correlation=correlation), wait=False
            )
        except (PeerNotAdmitted, DeadlineExceeded, trio.WouldBlock, ZLinkError) as exc:
            if sink is not None:
                await sink.fail_nowait(Unavailable(f"the Message Follow route failed: {exc!r}"))
            return
        timeout_ms = route.timeout_ms
        deadline = math.inf if timeout_ms is None else trio.current_time() + timeout_ms / 1000
        nursery = self.nursery
        if nursery is None:
            pending.discard()
            await sink.fail_nowait(Unavailable("this node does not relay followed replies"))
            return
        nursery.start_soon(
            relay_reply_to, sink, deadline, pending, "the followed owner did not answer"
        )


def _item(record: SpotDirectRoute, route: ReadyFence, sink: RemoteSink | None) -> SpotMessage:
    """The queued item of an inbound 39 (a request runs by its caller's deadline; an
    accepted send never expires)."""
    run_by = math.inf
    if sink is not None and route.timeout_ms is not None:
        run_by = trio.current_time() + route.timeout_ms / 1000
    return SpotMessage(record.message_kind, record.packet_name, record.payload, sink, run_by)
