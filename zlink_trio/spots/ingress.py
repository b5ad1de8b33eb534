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

import trio

from ..errors import CapacityExceeded, StaleRoute, Unavailable, ZLinkError
from ..mesh.api import MeshNodeApi, PeerIdentity
from ..objects.sinks import RemoteSink
from ..observe import FlowEvent, FlowTrace
from ..routing.dedupe import IngressDedupe
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

    def register(self) -> None:
        self._node.on(Command.SPOT_DIRECT_ROUTE, self.on_spot_direct)

    async def on_spot_direct(self, peer: PeerIdentity, record: SpotDirectRoute) -> None:
        if not self._dedupe.first(peer, record.operation_id.value):
            self._flow.emit(
                FlowEvent.REPEATED_FRAME_DROPPED,
                "spot message %d from %s",
                record.operation_id.value,
                peer,
            )
            return
        route = record.route
        if not isinstance(route, ReadyFence):
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
            error = Unavailable("this owner's lease expired: it admits nothing")
        else:
            run_by = math.inf  # an accepted send never expires
            if sink is not None and route.timeout_ms is not None:
                run_by = trio.current_time() + route.timeout_ms / 1000
            item = SpotMessage(
                record.message_kind, record.packet_name, record.payload, sink, run_by
            )
            try:
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
