"""One hosted Actor activation: its lane, its state and what a turn does.

An idle hosted Actor is a handful of slots (this object, its Context, its lane and lane
core, and the application's own object): no task, no channel, no queue.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final, TypeAlias, final

import attrs
import trio

from ..engine.lane import Lane
from ..engine.lanes import ActorDeliveryLane
from ..errors import ApplicationError, NotFound, Unavailable, ZLinkError
from ..ids import ActorId, ActorRef, AuthorityOwnerGeneration, MeshName, NodeRid, ObjectGeneration
from ..wire.enums import MessageKind
from ..wire.tails import ReplyPayloadTail
from .context import ActorContext
from .sinks import TerminalSink, failure, ok

if TYPE_CHECKING:
    from ..app import ActorType
    from .stats import DispatchStats

__all__ = ["ActorState", "Deliver", "Destroying", "HostedActor", "Ready"]

logger = logging.getLogger("zlink_trio.actors")


@attrs.frozen
class Ready:
    """Published: admits application payloads."""


@attrs.frozen
class Destroying:
    """Admission closed by destroy (spec 04 §6.8 step 1)."""


ActorState: TypeAlias = Ready | Destroying
READY: Final = Ready()
DESTROYING: Final = Destroying()


@final
class Deliver:
    """An application payload accepted by the Actor queue (send, request, relay, Actor-to-
    Actor: every ingress kind becomes this, in acceptance order)."""

    __slots__ = ("deadline", "kind", "packet", "payload", "sink")

    def __init__(
        self,
        kind: MessageKind,
        packet: str,
        payload: bytes,
        sink: TerminalSink | None,
        deadline: float,
    ) -> None:
        self.kind = kind
        self.packet = packet
        self.payload = payload
        self.sink = sink
        self.deadline = deadline


@final
class Barrier:
    """A lifecycle item that only marks "every turn before me has finished"."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = trio.Event()


ActorItem: TypeAlias = Deliver | Barrier


@final
class HostedActor:
    __slots__ = (
        "actor_type",
        "context",
        "instance",
        "lane",
        "max_reply",
        "mesh_name",
        "node_rid",
        "orphans",
        "owner_generation",
        "state",
        "stats",
        "store_version",
    )

    def __init__(
        self,
        actor_type: ActorType,
        context: ActorContext,
        instance: Any,
        owner_generation: AuthorityOwnerGeneration,
        store_version: int,
        node_rid: NodeRid,
        stats: DispatchStats,
        max_reply: int,
    ) -> None:
        self.actor_type = actor_type
        self.context = context
        self.instance = instance
        self.owner_generation = owner_generation
        self.store_version = store_version
        self.mesh_name: MeshName = context.mesh_name
        self.node_rid = node_rid
        self.stats = stats
        self.max_reply = max_reply
        self.state: ActorState = READY
        self.lane: Lane[ActorDeliveryLane, ActorItem] | None = None
        self.orphans: list[Deliver] | None = None

    @property
    def actor_id(self) -> ActorId:
        return self.context.actor_id

    @property
    def generation(self) -> ObjectGeneration:
        return self.context.object_generation

    def ref(self) -> ActorRef:
        return ActorRef(self.actor_id, self.generation, self.mesh_name, self.node_rid)

    async def turn(self, item: ActorItem) -> None:
        """One turn of this Actor's lane."""
        if type(item) is Barrier:
            item.done.set()
            return
        assert type(item) is Deliver
        stats = self.stats
        sink = item.sink
        if item.deadline <= trio.current_time():
            # The caller's deadline passed while the payload waited: it is not run.
            stats.expired += 1
            return
        handler = self.actor_type.handlers.get((item.kind, item.packet))
        if handler is None:
            stats.no_handler += 1
            error = NotFound(
                f"actor type {self.actor_type.stable_type.value!r} has no "
                f"{item.kind.name.lower()} handler for {item.packet!r}"
            )
            if sink is not None:
                await sink.deliver(failure(error))
            else:
                logger.warning("%s", error.message)
            return
        try:
            result: object = await handler(self.instance, item.payload)
        except ZLinkError as exc:
            stats.failed += 1
            if sink is not None:
                await sink.deliver(failure(exc))
            else:
                logger.warning("send handler %r of %r raised %r", item.packet, self.context, exc)
            return
        except Exception as exc:
            stats.failed += 1
            logger.exception("handler %r of %r raised", item.packet, self.context)
            if sink is not None:
                await sink.deliver(failure(ApplicationError(f"{type(exc).__name__}: {exc}")))
            return
        stats.ok += 1
        if sink is None:
            return
        if result is None:
            await sink.deliver(ok())
        elif not isinstance(result, bytes | bytearray | memoryview):
            await sink.deliver(
                failure(
                    ApplicationError(
                        f"handler {item.packet!r} returned {type(result).__name__}, not bytes"
                    )
                )
            )
        elif len(result) > self.max_reply:
            await sink.deliver(
                failure(ApplicationError(f"reply of {len(result)} bytes exceeds {self.max_reply}"))
            )
        else:
            await sink.deliver(ok(ReplyPayloadTail(payload=bytes(result))))

    def dropped(self, item: ActorItem) -> None:
        """An accepted item the lane will not run (the Actor was destroyed): kept in
        ``orphans`` so the destroyer can fail each one's terminal (see :meth:`fail_orphans`)."""
        if type(item) is Barrier:
            item.done.set()
            return
        assert type(item) is Deliver
        self.stats.dropped += 1
        if self.orphans is None:
            self.orphans = []
        self.orphans.append(item)

    async def fail_orphans(self) -> None:
        orphans, self.orphans = self.orphans or [], None
        error = failure(Unavailable("the Actor was destroyed before this payload ran"))
        for item in orphans:
            if item.sink is not None:
                await item.sink.deliver(error)
