"""Send to and request Spots by SpotId: the direct-call builder (spec 06 §4, §5).

``server.spots.send(spot_id, packet, payload)`` / ``server.spots.request(...)`` (and
``context.spots`` in Actor and Spot handlers) take a SpotId, a packet name and a payload
(bytes, or an instance of a registered payload class) — never a SpotRef, a mesh or a node
— and return a submit-once fluent call:

* ``.instance(stable_type=None)`` — explicit Instance intent: a Missing Instance Spot is
  cold-activated by this message (type named, or the one Instance type of the mesh);
* ``.in_mesh(name)`` — where a Missing Instance Spot is first placed (only with
  ``.instance()``: InvalidOperation at submit otherwise; it never moves a Ready owner);
* ``.timeout(s)`` — the one end-to-end deadline (a send: its admission only);
* ``.reply_type(cls)`` — a request's reply class.

Each option at most once, one submit (``await call``); the deadline is fixed at submit as
for every call (``min(submit + timeout, the caller's effective deadline)``). A call is
never re-submitted after a timeout, a cancellation, a disconnect or an unknown outcome.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Final, Self, TypeVar, cast, final

import trio

from ..errors import InvalidOperation
from ..ids import MeshName, SpotId, StableType, check_text_id
from ..objects.calls import FluentCall, message_payload
from ..wire.payloads import EMPTY_REGISTRY, PayloadCodec, PayloadRegistry, TypedPayload
from .calls import InstanceIntent

if TYPE_CHECKING:
    from .calls import SpotCalls

__all__ = ["SpotClient", "SpotRequestCall", "SpotSendCall"]

R = TypeVar("R")
T = TypeVar("T")

_PARSED_MAX: Final = 4096
"""Validated SpotIds and packet names remembered per client (cleared when full)."""


class _SpotCall(FluentCall[R]):
    """A message to one Spot: the target, packet, payload and the Instance intent."""

    __slots__ = (
        "_calls",
        "_instance",
        "_mesh",
        "_packet",
        "_payload",
        "_source",
        "_target",
        "_type",
    )

    def __init__(
        self,
        calls: SpotCalls,
        target: SpotId,
        packet: str,
        payload: bytes | TypedPayload,
        default_timeout: float,
        source: SpotId | None,
    ) -> None:
        super().__init__(default_timeout)
        self._calls = calls
        self._target = target
        self._packet = packet
        self._payload = payload
        self._source = source
        self._instance = False
        self._type: StableType | None = None
        self._mesh: MeshName | None = None

    def instance(self, stable_type: str | StableType | None = None) -> Self:
        """Explicit Instance intent: if the Spot is Missing, this message activates it as
        an Instance Spot of ``stable_type`` (None: the one Instance type its mesh's nodes
        register; several → InvalidOperation). An existing Spot of another kind or type is
        TypeMismatch."""
        bit = self._option("instance")
        self._type = None if stable_type is None else StableType.parse(stable_type)
        self._instance = True
        self._options |= bit
        return self

    def in_mesh(self, mesh_name: str | MeshName) -> Self:
        """The mesh where a Missing Instance Spot is first placed (with ``instance()``
        only). It never moves or restricts a Ready owner."""
        bit = self._option("in_mesh")
        self._mesh = MeshName.parse(mesh_name)
        self._options |= bit
        return self

    def _intent(self) -> InstanceIntent | None:
        if not self._instance:
            if self._mesh is not None:
                raise InvalidOperation(
                    "in_mesh() needs instance(): it only places a Missing Instance Spot"
                )
            return None
        return InstanceIntent(self._type, self._mesh)


@final
class SpotSendCall(_SpotCall[None]):
    """A one-way send: completes once the message was admitted (with cold activation:
    once the activation envelope was accepted by the target's transport)."""

    __slots__ = ()

    def _begin(self) -> Coroutine[Any, Any, None]:
        # As for an Actor send: the deadline bounds the admission only, and every wait
        # is nested in the caller's scopes, so its effective deadline need not be read.
        if self._submitted:
            raise InvalidOperation("the call was already submitted")
        self._submitted = True
        return self._calls.send(
            self._target,
            self._packet,
            self._payload,
            trio.current_time() + self._timeout,
            self._intent(),
            self._source,
        )


@final
class SpotRequestCall(_SpotCall[R]):
    """A request: completes once with the handler's reply or a typed error. The reply is
    bytes (or None) unless :meth:`reply_type` states its class."""

    __slots__ = ("_payloads", "_reply")

    def __init__(
        self,
        calls: SpotCalls,
        target: SpotId,
        packet: str,
        payload: bytes | TypedPayload,
        default_timeout: float,
        source: SpotId | None,
        payloads: PayloadRegistry,
    ) -> None:
        super().__init__(calls, target, packet, payload, default_timeout, source)
        self._payloads = payloads
        self._reply: PayloadCodec[Any] | None = None

    def reply_type(self, cls: type[T]) -> SpotRequestCall[T]:
        """The reply is an instance of the registered payload class ``cls``."""
        bit = self._option("reply_type")
        codec = self._payloads.get(cls)
        if codec is None:
            raise InvalidOperation(f"reply_type {cls!r} is not a registered payload class")
        self._reply = codec
        self._options |= bit
        return cast("SpotRequestCall[T]", self)

    def _begin(self) -> Coroutine[Any, Any, R]:
        # The caller's effective deadline is looked up where it matters (see the Actor
        # RequestCall): a request that leaves, queues or resolves is bounded by it.
        if self._submitted:
            raise InvalidOperation("the call was already submitted")
        self._submitted = True
        return self._calls.request(
            self._target,
            self._packet,
            self._payload,
            trio.current_time() + self._timeout,
            self._reply,
            self._intent(),
            self._source,
        )


@final
class SpotClient:
    """Direct calls to Spots by SpotId (``server.spots`` and ``context.spots``)."""

    __slots__ = (
        "_calls",
        "_default_timeout",
        "_ids",
        "_max_request",
        "_packets",
        "_payloads",
        "_source",
    )

    def __init__(
        self,
        calls: SpotCalls,
        *,
        max_request: int,
        default_timeout: float,
        payloads: PayloadRegistry = EMPTY_REGISTRY,
        source: SpotId | None = None,
    ) -> None:
        self._calls = calls
        self._payloads = payloads
        self._max_request = max_request
        self._default_timeout = default_timeout
        self._source = source
        self._ids: dict[str, SpotId] = {}
        self._packets: set[str] = set()

    def from_spot(self, spot_id: SpotId) -> SpotClient:
        """This client for the calls of one Spot's handlers (they carry it as the source
        Spot)."""
        client = SpotClient(
            self._calls,
            max_request=self._max_request,
            default_timeout=self._default_timeout,
            payloads=self._payloads,
            source=spot_id,
        )
        client._ids = self._ids
        client._packets = self._packets
        return client

    def _target(self, spot_id: object) -> SpotId:
        if type(spot_id) is not str:
            return SpotId.parse(spot_id)
        target = self._ids.get(spot_id)
        if target is None:
            target = SpotId.parse(spot_id)
            if len(self._ids) >= _PARSED_MAX:
                self._ids.clear()
            self._ids[spot_id] = target
        return target

    def _packet(self, packet: object) -> str:
        if type(packet) is str and packet in self._packets:
            return packet
        name = check_text_id(packet, "packet name")
        if len(self._packets) >= _PARSED_MAX:
            self._packets.clear()
        self._packets.add(name)
        return name

    def _payload(self, payload: object) -> bytes | TypedPayload:
        if type(payload) is bytes and len(payload) <= self._max_request:
            return payload  # the common case, without a call
        return message_payload(payload, self._payloads, self._max_request)

    def send(self, spot_id: str | SpotId, packet: str, payload: object = b"") -> SpotSendCall:
        """One-way ``packet`` to the Spot ``spot_id``. Await it (or ``.submit()``)."""
        return SpotSendCall(
            self._calls,
            self._target(spot_id),
            self._packet(packet),
            self._payload(payload),
            self._default_timeout,
            self._source,
        )

    def request(
        self, spot_id: str | SpotId, packet: str, payload: object = b""
    ) -> SpotRequestCall[bytes | None]:
        """Request ``packet`` of the Spot ``spot_id``; the reply bytes (or None), or with
        ``.reply_type(cls)`` an instance of ``cls``."""
        return SpotRequestCall(
            self._calls,
            self._target(spot_id),
            self._packet(packet),
            self._payload(payload),
            self._default_timeout,
            self._source,
            self._payloads,
        )
