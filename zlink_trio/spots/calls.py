"""Spot direct send / request by SpotId: the source side (spec 06 §4.1 steps 1–12, §5).

The call resolves the SpotId (positive route cache, else one Store read) and:

* Ready → the message goes to the current owner with the stored kind and type (command 39
  route kind 1, :mod:`.direct`); with Instance intent a User Spot, an Entry claim or an
  Instance Spot of another type than the named one is ``TypeMismatch`` first, and
  ``in_mesh`` never moves or restricts the owner;
* not Ready, no Instance intent → ``NotFound`` (nothing is written, nothing created);
* not Ready with Instance intent → **cold activation**: the mesh (``in_mesh`` or the one
  Object mesh), the type (named, or the one distinct Instance type of that mesh's live
  Object Servers), a target with capacity by weighted placement, then ONE command 39 with
  route kind 2 (:class:`~zlink_trio.wire.tails.ColdActivation`) carrying the first message
  to it — the source writes nothing to the Store and reserves nothing (the target does,
  :mod:`.activation`). A target that cannot be reached before anything was sent to it is
  left out and the message placed again; once sent, the message is never sent again.

A send completes once its message (or envelope) was accepted by the target's transport (or
handed to this node's own Spot or activation); a request waits for its one terminal within
the one deadline fixed at submit. Store failures are never cached and never turned into a
negative result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol, final

import attrs
import trio

from ..config import ServerConfig
from ..engine.oneshot import OneShot
from ..errors import (
    CapacityExceeded,
    DeadlineExceeded,
    NotFound,
    TypeMismatch,
    Unavailable,
)
from ..ids import MeshName, NodeRid, OperationId, SpotId, StableType
from ..mesh.api import MeshNodeApi, PeerAddress
from ..objects.authority import Authority
from ..objects.durable import remaining_ms
from ..objects.placement import choose_instance_type, choose_mesh, choose_node
from ..objects.sinks import LocalReply
from ..routing.deadline import yield_to_caller
from ..routing.deliver import Deadlines
from ..routing.route_cache import Route
from ..store.api import AuthorityRow, AuthorityState, LocationStore, NodeRecord, ObjectKind
from ..wire.enums import MessageKind
from ..wire.payloads import PayloadCodec, TypedPayload, reply_value
from ..wire.records import SpotDirectRoute
from ..wire.tails import ColdActivation
from .direct import SpotDelivery, describe, spot_route_error
from .kind import reserved_shape_error
from .submit import TargetUnreachable, reply_payload, submit, terminal_of

__all__ = ["InstanceIntent", "LocalActivation", "SpotCalls"]

_SEND: Final = MessageKind.SEND
_REQUEST: Final = MessageKind.REQUEST
_INSTANCE: Final = ObjectKind.INSTANCE_SPOT

Payload = bytes | TypedPayload


@attrs.frozen(slots=True)
class InstanceIntent:
    """The call's explicit Instance intent: cold activation is allowed, with this type
    (None: the mesh's one Instance type) in this mesh (None: the one Object mesh)."""

    stable_type: StableType | None = None
    in_mesh: MeshName | None = None


class LocalActivation(Protocol):
    """What the source needs of this node's activation target (:mod:`.activation`)."""

    def start(
        self,
        envelope: SpotDirectRoute,
        payload: Payload,
        sink: LocalReply | None,
        deadline: float,
    ) -> None:
        """Start the activation of ``envelope`` here (never blocks)."""
        ...


def check_intent(spot_id: SpotId, route: Route | AuthorityRow, intent: InstanceIntent) -> None:
    """TypeMismatch when the existing authority is not an Instance Spot of the intent's
    type (spec 06 §4.2)."""
    if route.kind is not _INSTANCE:
        kind = "an Entry Spot" if route.kind is ObjectKind.ENTRY_SPOT else "a User Spot"
        raise TypeMismatch(f"{describe(spot_id)} is {kind}, not an Instance Spot")
    wanted = intent.stable_type
    if wanted is not None and route.stable_type != wanted:
        have = route.stable_type.value if route.stable_type is not None else "?"
        raise TypeMismatch(
            f"{describe(spot_id)} is an Instance Spot of type {have!r}, not {wanted.value!r}"
        )


@final
class SpotCalls:
    """Direct calls of this node to Spots (see the module docstring)."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        node: MeshNodeApi,
        store: LocationStore,
        authority: Authority[SpotId],
        delivery: SpotDelivery,
        activation: LocalActivation,
        deadlines: Deadlines,
    ) -> None:
        self._config = config
        self._node = node
        self._store = store
        self._authority = authority
        self._cache = authority.cache
        self._delivery = delivery
        self._activation = activation
        self._deadlines = deadlines
        self.activations = 0
        """Cold-activation envelopes this node sent (or started here)."""

    @property
    def delivery(self) -> SpotDelivery:
        return self._delivery

    # --- send -------------------------------------------------------------------------------
    async def send(
        self,
        spot_id: SpotId,
        packet: str,
        payload: Payload,
        deadline: float,
        intent: InstanceIntent | None,
        source_spot: SpotId | None = None,
    ) -> None:
        """One-way: completes once admitted (``deadline`` bounds the admission only)."""
        route = self._cache.get(spot_id, self._store.recovery_epoch)
        if route is not None:
            self._check(spot_id, route, intent)
            return await self._delivery.send(spot_id, packet, payload, deadline)
        if intent is None:
            return await self._delivery.send(spot_id, packet, payload, deadline)
        refused = self._node.admission_error()
        if refused is not None:
            await trio.lowlevel.checkpoint()
            raise refused
        with trio.move_on_at(deadline):
            row, route = await self._authority.resolve(spot_id)
            if route is not None:
                self._check(spot_id, route, intent)
                await self._delivery.deliver(spot_id, _SEND, packet, payload, deadline, route)
                return
            await self._activate(
                spot_id, row, _SEND, packet, payload, deadline, intent, source_spot
            )
            return
        raise Unavailable(f"{describe(spot_id)}: the send was not admitted before its deadline")

    # --- request ----------------------------------------------------------------------------
    async def request(
        self,
        spot_id: SpotId,
        packet: str,
        payload: Payload,
        deadline: float,
        reply: PayloadCodec[Any] | None,
        intent: InstanceIntent | None,
        source_spot: SpotId | None = None,
    ) -> Any:
        """The handler's reply (bytes or None; with ``reply`` an object of its class), or
        its typed error; ``deadline`` is the call's own (submit + timeout)."""
        route = self._cache.get(spot_id, self._store.recovery_epoch)
        if route is not None or intent is None:
            if route is not None:
                self._check(spot_id, route, intent)
            return await self._delivery.request(spot_id, packet, payload, deadline, reply)
        refused = self._node.admission_error()
        if refused is not None:
            await trio.lowlevel.checkpoint()
            raise refused
        callers = trio.current_effective_deadline()
        if callers <= deadline:
            return await yield_to_caller(
                self._request(spot_id, packet, payload, callers, reply, intent, source_spot),
                callers,
            )
        return await self._request(spot_id, packet, payload, deadline, reply, intent, source_spot)

    async def _request(
        self,
        spot_id: SpotId,
        packet: str,
        payload: Payload,
        deadline: float,
        reply: PayloadCodec[Any] | None,
        intent: InstanceIntent,
        source_spot: SpotId | None,
    ) -> Any:
        result: Any
        with trio.move_on_at(deadline):
            row, route = await self._authority.resolve(spot_id)
            if route is not None:
                self._check(spot_id, route, intent)
                result = await self._delivery.deliver(
                    spot_id, _REQUEST, packet, payload, deadline, route
                )
            else:
                result = await self._activate(
                    spot_id, row, _REQUEST, packet, payload, deadline, intent, source_spot, reply
                )
            if reply is None and type(result) is not TypedPayload:
                return result
            return reply_value(result, reply)
        raise DeadlineExceeded(f"no reply from {describe(spot_id)} before the deadline")

    def _check(self, spot_id: SpotId, route: Route, intent: InstanceIntent | None) -> None:
        if intent is not None:
            check_intent(spot_id, route, intent)
            return
        refused = spot_route_error(spot_id, route)
        if refused is not None:
            raise refused

    # --- cold activation ----------------------------------------------------------------------
    async def _activate(
        self,
        spot_id: SpotId,
        row: AuthorityRow | None,
        kind: MessageKind,
        packet: str,
        payload: Payload,
        deadline: float,
        intent: InstanceIntent | None,
        source_spot: SpotId | None,
        reply: PayloadCodec[Any] | None = None,
    ) -> Any:
        """Cold activation of the not-Ready ``spot_id`` (``row``: Missing, Creating or
        Closing) with this message as its first one."""
        if intent is None:
            raise NotFound(f"{describe(spot_id)} has no Ready authority")
        reserved = reserved_shape_error(spot_id)
        if reserved is not None:
            raise reserved  # the Entry shape is the framework's: before anything else
        mesh = choose_mesh(self._config, intent.in_mesh)
        nodes = await self._store.list_nodes(mesh)
        if row is not None and intent.stable_type is None and row.kind is ObjectKind.INSTANCE_SPOT:
            # An activation (or a close) of this id is under way: its stored type is the
            # one this call waits for (06 §4.2), however many types the mesh hosts.
            stable_type = row.stable_type
        else:
            stable_type = choose_instance_type(nodes, mesh, intent.stable_type)
        if row is not None:
            check_intent(spot_id, row, InstanceIntent(stable_type, mesh))
        data = payload if type(payload) is bytes else self._delivery.wire_payload(payload)
        # A send's timeout bounds its admission only (06 §5): once admitted, the
        # activation it starts runs to the create timeout, not to the send's deadline.
        activation_deadline = (
            deadline
            if kind is not _SEND
            else max(deadline, trio.current_time() + self._config.default_create_timeout)
        )
        operation_id = OperationId.new()
        unreachable: set[bytes] = set()
        me = self._node.identity
        while True:
            target = self._choose(nodes, stable_type, row, unreachable)
            descriptor = target.descriptor
            fence = ColdActivation(
                target_mesh=mesh,
                target_rid=descriptor.node_rid,
                target_generation=descriptor.node_generation,
                spot_id=spot_id,
                stable_type=stable_type,
                descriptor_version=target.lease_generation.value,
                timeout_ms=remaining_ms(activation_deadline),
            )

            def build(correlation: int, fence: ColdActivation = fence) -> SpotDirectRoute:
                return SpotDirectRoute(
                    correlation=correlation,
                    operation_id=operation_id,
                    source_rid=me.node_rid,
                    source_generation=me.node_generation,
                    source_spot_id=source_spot,
                    route=fence,
                    message_kind=kind,
                    packet_name=packet,
                    payload=data,
                )

            if descriptor.node_rid == me.node_rid and descriptor.node_generation == (
                me.node_generation
            ):
                return await self._activate_here(build, kind, payload, activation_deadline)
            try:
                return await self._activate_remote(
                    spot_id, mesh, descriptor.node_rid, build, kind, deadline
                )
            except TargetUnreachable as exc:
                unreachable.add(exc.node_rid.value)

    def _choose(
        self,
        nodes: Sequence[NodeRecord],
        stable_type: StableType,
        row: AuthorityRow | None,
        unreachable: set[bytes],
    ) -> NodeRecord:
        """The activation target: the owner of an activation in progress when it is a live
        candidate (the message then queues behind its first message), else the weighted
        placement among the live Object Servers of the type with capacity left."""
        records: list[NodeRecord] = list(nodes)
        if row is not None and row.state is AuthorityState.CREATING:
            owner = row.owner
            for record in records:
                d = record.descriptor
                if (
                    record.live
                    and d.node_rid == owner.node_rid
                    and d.node_generation == owner.node_generation
                    and stable_type in d.instance_types
                    and d.node_rid.value not in unreachable
                ):
                    return record
        try:
            return choose_node(
                records,
                stable_type,
                kind=_INSTANCE,
                exclude=frozenset(unreachable),
            )
        except CapacityExceeded:
            if unreachable:
                raise Unavailable(
                    f"no node hosting instance spot type {stable_type.value!r} can be reached"
                ) from None
            raise

    async def _activate_here(
        self,
        build: Callable[[int], SpotDirectRoute],
        kind: MessageKind,
        payload: Payload,
        deadline: float,
    ) -> Any:
        self.activations += 1
        envelope: SpotDirectRoute = build(0 if kind is _SEND else 1)
        if kind is _SEND:
            self._activation.start(envelope, payload, None, deadline)
            await trio.lowlevel.checkpoint()
            return None
        slot: LocalReply = OneShot()
        self._activation.start(envelope, payload, slot, deadline)
        ticket = self._deadlines.watch(slot, deadline)
        try:
            return await slot.wait()
        finally:
            self._deadlines.settled(ticket)

    async def _activate_remote(
        self,
        spot_id: SpotId,
        mesh: MeshName,
        node_rid: NodeRid,
        build: Callable[[int], SpotDirectRoute],
        kind: MessageKind,
        deadline: float,
    ) -> Any:
        what = describe(spot_id)
        pending = await submit(
            self._node,
            PeerAddress(mesh, node_rid),
            build,
            kind,
            deadline=deadline,
            connect_timeout=self._config.connect_timeout,
            what=what,
        )
        self.activations += 1
        if pending is None:
            return None
        ticket = self._deadlines.watch(pending, deadline)
        try:
            return reply_payload(await terminal_of(self._node, pending, what))
        finally:
            self._deadlines.settled(ticket)
