"""One hosted Actor activation: its lane, its state and what a turn does.

An idle hosted Actor is a handful of slots (this object, its Context, its lane and lane
core, and the application's own object): no task, no channel, no queue, no per-Actor
callback object (the activation itself is its lane's handler). What every Actor of one
stable type shares on this node (type, handlers, counters, limits) lives once in its
:class:`HostedKind`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeAlias, final

import attrs
import trio

from ..engine.lane import Lane
from ..engine.lanes import ActorDeliveryLane
from ..engine.oneshot import OneShot
from ..errors import ApplicationError, NotFound, ShuttingDown, Unavailable, ZLinkError
from ..ids import ActorId, ActorRef, AuthorityOwnerGeneration, MeshName, NodeRid, ObjectGeneration
from ..mesh.lease import LeaseDeadline
from ..objects.sinks import LocalReply, ReplySink, public_error
from ..objects.timers import TimerService, TimerTable, TimerTick
from ..observe import FlowEvent, FlowTrace
from ..wire.enums import MessageKind
from ..wire.payloads import TypedPayload
from .context import ActorContext
from .handlers import TypedHandler
from .join import JoinScope, task_within

if TYPE_CHECKING:
    from .join import HeldJoin, JoinRegistrar, PendingJoin
    from .membership import JoinCompletion
    from .registry import ActorHandler, ActorType
    from .stats import DispatchStats

__all__ = [
    "ACTOR_LANE",
    "FENCED",
    "RELOCATING",
    "ActorState",
    "ActorWork",
    "Deliver",
    "Destroying",
    "Fenced",
    "HostedActor",
    "HostedKind",
    "JoinDone",
    "Joining",
    "Moved",
    "Ready",
    "Relocating",
    "fail_parked",
    "fail_sink",
]

logger = logging.getLogger("zlink_trio.actors")


@attrs.frozen
class Ready:
    """Published: admits application payloads."""


@attrs.frozen
class Destroying:
    """Admission closed by destroy (spec 04 §6.8 step 1)."""


@attrs.frozen
class Fenced:
    """This node's owner lease was lost: the Actor admits nothing and runs no turn again
    (its row is reclaimed by a live node; docs/decisions.md, "Owner loss: fencing")."""


@attrs.frozen
class Joining:
    """A deferred Join's barrier is active: the lane is retired and every payload accepted
    (queued before, arriving now) is parked in order until the Join ends (on a cross-node
    Join's target: the new activation waiting for the source's journal)."""


@attrs.frozen
class Relocating:
    """A relocation sealed the Actor (docs/relocation.md): its lane is retired and every
    payload accepted (queued before: the saved work; arriving now: the held ingress) is
    held in order in the Actor owner — never run, never refused — until the move is
    accepted by the target (they travel) or aborted (they return to a fresh lane)."""


@attrs.frozen
class Moved:
    """A cross-node Join moved the Actor away: this activation is unpublished and its
    Context retired."""


ActorState: TypeAlias = Ready | Destroying | Fenced | Joining | Relocating | Moved
READY: Final = Ready()
DESTROYING: Final = Destroying()
FENCED: Final = Fenced()
JOINING: Final = Joining()
RELOCATING: Final = Relocating()
MOVED: Final = Moved()
ACTOR_LANE: Final = ActorDeliveryLane()
"""The policy value of every Actor lane (it carries no state, so one instance serves all)."""


@final
class Deliver:
    """An application payload accepted by the Actor queue (send, request, relay, Actor-to-
    Actor: every ingress kind becomes this, in acceptance order). ``sink`` is None for a
    one-way send, a :data:`LocalReply` slot for a local request, a :class:`ReplySink`
    for a remote one. ``payload`` is bytes, or a :class:`TypedPayload` handed over
    in-process without encoding."""

    __slots__ = ("deadline", "kind", "packet", "payload", "sink")

    def __init__(
        self,
        kind: MessageKind,
        packet: str,
        payload: bytes | TypedPayload,
        sink: LocalReply | ReplySink | None,
        deadline: float,
    ) -> None:
        self.kind = kind
        self.packet = packet
        self.payload = payload
        self.sink = sink
        self.deadline = deadline


@final
class Barrier:
    """The destroy barrier: a lifecycle item that marks "every turn before me has
    finished" (``reached``) and then HOLDS the lane — its turn does not end — while the
    destroyer removes the location ownership, so no payload accepted before the close
    runs meanwhile (they stay parked in the queue). The destroyer then ends the turn with
    :meth:`finish`: ``retire=True`` (the ownership is gone, or could not be settled)
    retires the lane, and what it held fails with Unavailable (see
    :meth:`HostedActor.fail_orphans`); ``retire=False`` (the Store row is still Ready:
    destroy failed and admission re-opened) lets the parked payloads run, in order."""

    __slots__ = ("done", "reached", "resumed", "retire")

    def __init__(self) -> None:
        self.reached = trio.Event()
        self.done = trio.Event()
        self.retire = True
        self.resumed = trio.Event()

    def finish(self, *, retire: bool) -> None:
        """End the held turn (idempotent: the first call decides)."""
        if not self.resumed.is_set():
            self.retire = retire
            self.resumed.set()


@final
class JoinDone:
    """The Actor's Join completion callback: a lifecycle item, the first one its lane runs
    when a Join ends (before any payload the barrier held)."""

    __slots__ = ("completion",)

    def __init__(self, completion: JoinCompletion) -> None:
        self.completion = completion


class ActorWork:
    """Framework work that must run in the Actor's own order (a session's disconnect
    notification, spec 02 §7: after the payloads accepted before it): ``fn(hosted)`` runs
    as one turn of the application queue. It must not wait for another lane (the turn
    only reads what it needs and hands the rest to an infrastructure task)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[HostedActor], None]) -> None:
        self.fn = fn


ActorItem: TypeAlias = Deliver | Barrier | TimerTick | JoinDone | ActorWork
"""What an Actor lane holds: application payloads, timer ticks and framework work (the
application queue, one acceptance order) and destroy barriers and Join completions (the lifecycle queue)."""


@final
class HostedKind:
    """What the hosted Actors of one stable type on this node share."""

    __slots__ = (
        "actor_type",
        "flow",
        "handlers",
        "joins",
        "lease",
        "lease_live",
        "max_reply",
        "node_rid",
        "now",
        "stats",
        "timer_handlers",
        "timer_service",
        "traced",
    )

    def __init__(
        self,
        actor_type: ActorType,
        node_rid: NodeRid,
        stats: DispatchStats,
        max_reply: int,
        flow: FlowTrace,
        lease: LeaseDeadline,
        lease_live: Callable[[], bool],
        timer_service: TimerService | None = None,
    ) -> None:
        self.actor_type = actor_type
        self.handlers: Mapping[tuple[MessageKind, str], ActorHandler] = actor_type.handlers
        self.timer_handlers: Mapping[str, ActorHandler] = actor_type.timers
        self.timer_service = timer_service
        """The node's timer service (None: timers cannot be registered)."""
        self.node_rid = node_rid
        self.stats = stats
        self.max_reply = max_reply
        self.flow = flow
        self.traced: set[tuple[MessageKind | None, str]] = set()
        """Handler keys whose unexpected exception was already logged with a traceback
        (``(None, name)`` for the timer ``name``)."""
        self.lease = lease
        """This node lifecycle's local lease deadline, compared with the clock at the
        start of every turn: no turn starts after it (docs/decisions.md, "Owner loss")."""
        self.lease_live = lease_live
        """True while the lease is held and locally live (expires it on the spot)."""
        self.now: Callable[[], float] = trio.lowlevel.current_clock().current_time
        """``trio.current_time()`` (this run's clock, read once per turn): one call, not
        three (made in the run its Actors run in)."""
        self.joins: JoinRegistrar | None = None
        """Where a handler's registration scope is closed (set by the Actor runtime)."""


def lease_lost_error() -> Unavailable:
    return Unavailable("this node's owner lease was lost: the Actor no longer runs here")


def _stopped_error() -> ShuttingDown:
    return ShuttingDown("the server stopped during the turn")


async def fail_sink(sink: LocalReply | ReplySink, error: ZLinkError) -> None:
    """Fail one terminal (a local slot gets the public form of ``error``)."""
    await _fail(sink, error)


async def _fail(sink: LocalReply | ReplySink, error: ZLinkError) -> None:
    if type(sink) is OneShot:
        sink.fail(public_error(error))
    else:
        await sink.fail(error)


async def fail_parked(items: list[Deliver], error: ZLinkError) -> None:
    """Fail the terminal of accepted items that will never run (a one-way send has
    none: it is logged)."""
    for item in items:
        sink = item.sink
        if sink is None:
            logger.info("send %r not run: %r", item.packet, error)
            continue
        try:
            await _fail(sink, error)
        except Exception:
            logger.exception("failing the terminal of %r", item.packet)


@final
class _Rare:
    """The rarely set fields of a :class:`HostedActor` (see ``HostedActor._rare``)."""

    __slots__ = ("join", "orphans", "parked", "scope", "timers")

    def __init__(self) -> None:
        self.orphans: list[Deliver] | None = None
        self.timers: TimerTable | None = None
        self.scope: JoinScope | None = None
        self.join: PendingJoin | HeldJoin | None = None
        self.parked: list[ActorItem] | None = None


@final
class HostedActor:
    """A published Actor activation. Calling it runs one turn of its lane."""

    __slots__ = (
        "_rare",
        "context",
        "handling",
        "instance",
        "kind",
        "lane",
        "owner_generation",
        "state",
    )

    def __init__(
        self,
        kind: HostedKind,
        context: ActorContext,
        instance: Any,
        owner_generation: AuthorityOwnerGeneration,
    ) -> None:
        self.kind = kind
        self.context = context
        self.instance = instance
        self.owner_generation = owner_generation
        self.state: ActorState = READY
        self.lane: Lane[ActorDeliveryLane, ActorItem] | None = None
        context._hosted = self
        self.handling = False
        """True while an application handler of this Actor runs (its registration scope)."""
        self._rare: _Rare | None = None
        """What few Actors ever have (timers, a Join, parked or orphaned items): made at
        the first such field set, so an idle Actor pays one slot for all of them."""

    @property
    def orphans(self) -> list[Deliver] | None:
        rare = self._rare
        return None if rare is None else rare.orphans

    @orphans.setter
    def orphans(self, value: list[Deliver] | None) -> None:
        rare = self._rare_for(value)
        if rare is not None:
            rare.orphans = value

    @property
    def timers(self) -> TimerTable | None:
        """Its timers, from its first registration on (``context.timers``)."""
        rare = self._rare
        return None if rare is None else rare.timers

    @timers.setter
    def timers(self, value: TimerTable | None) -> None:
        rare = self._rare_for(value)
        if rare is not None:
            rare.timers = value

    @property
    def scope(self) -> JoinScope | None:
        """The running handler's registration scope, made at its first Defer."""
        rare = self._rare
        return None if rare is None else rare.scope

    @scope.setter
    def scope(self, value: JoinScope | None) -> None:
        rare = self._rare_for(value)
        if rare is not None:
            rare.scope = value

    @property
    def join(self) -> PendingJoin | HeldJoin | None:
        """The pending membership transition (registered or running)."""
        rare = self._rare
        return None if rare is None else rare.join

    @join.setter
    def join(self, value: PendingJoin | HeldJoin | None) -> None:
        rare = self._rare_for(value)
        if rare is not None:
            rare.join = value

    @property
    def parked(self) -> list[ActorItem] | None:
        """Joining: what the barrier holds, in acceptance order."""
        rare = self._rare
        return None if rare is None else rare.parked

    @parked.setter
    def parked(self, value: list[ActorItem] | None) -> None:
        rare = self._rare_for(value)
        if rare is not None:
            rare.parked = value

    def _rare_for(self, value: object) -> _Rare | None:
        """Where to set a rare field to ``value`` (None: it is None already)."""
        rare = self._rare
        if rare is None and value is not None:
            rare = self._rare = _Rare()
        return rare

    @property
    def admitting(self) -> bool:
        return self.state is READY

    def open_scope(self) -> JoinScope | None:
        """The registration scope of the handler running now, if the caller runs in it
        (its own task or one it awaits); None otherwise."""
        lane = self.lane
        runner = None if lane is None else lane.runner
        if not self.handling or runner is None or not task_within(runner):
            return None
        scope = self.scope
        if scope is None:
            scope = self.scope = JoinScope(runner)
        return scope

    def _end_scope(self, *, ok: bool) -> None:
        scope = self.scope
        if scope is not None:
            self.scope = None
            joins = self.kind.joins
            if joins is not None:
                joins.close(scope, ok=ok)

    @property
    def actor_type(self) -> ActorType:
        return self.kind.actor_type

    @property
    def actor_id(self) -> ActorId:
        return self.context.actor_id

    @property
    def generation(self) -> ObjectGeneration:
        return self.context.object_generation

    @property
    def mesh_name(self) -> MeshName:
        return self.context.mesh_name

    # --- the timer owner (objects.timers.TimerOwner; ``admitting`` above) ---------------------

    @property
    def timer_service(self) -> TimerService | None:
        return self.kind.timer_service

    @property
    def timer_names(self) -> Mapping[str, ActorHandler]:
        return self.kind.timer_handlers

    @property
    def timer_owner_noun(self) -> str:
        return f"actor type {self.kind.actor_type.stable_type.value!r}"

    def in_own_turn(self) -> bool:
        lane = self.lane
        return lane is not None and lane.in_turn()

    def ref(self) -> ActorRef:
        context = self.context
        return ActorRef(
            context.actor_id, context.object_generation, context.mesh_name, self.kind.node_rid
        )

    # --- the timer target (objects.timers.TickTarget) ---------------------------------------

    def submit_tick_nowait(self, tick: TimerTick) -> object:
        lane = self.lane
        if lane is None:
            raise Unavailable("the Actor runs no turn any more")
        return lane.submit_nowait(tick)

    async def submit_tick(self, tick: TimerTick) -> object:
        lane = self.lane
        if lane is None:
            raise Unavailable("the Actor runs no turn any more")
        return await lane.submit(tick)

    async def __call__(self, item: ActorItem) -> None:
        """One turn of this Actor's lane."""
        if type(item) is not Deliver:
            if type(item) is TimerTick:
                await self._tick(item)
                return
            if type(item) is JoinDone:
                await self._join_done(item.completion)
                return
            if type(item) is ActorWork:
                item.fn(self)
                return
            assert type(item) is Barrier
            item.reached.set()
            try:
                await item.resumed.wait()  # the lane is held while the Store is updated
            finally:
                lane = self.lane
                if item.retire and lane is not None:
                    self._orphan(lane.retire())  # queued payloads fail (fail_orphans)
                item.done.set()
            return
        kind = self.kind
        stats = kind.stats
        now = kind.now()
        if now >= kind.lease.at:
            # Fenced: its row can be reclaimed (and a new incarnation serve elsewhere)
            # from the local lease deadline on; nothing of this incarnation runs again.
            kind.lease_live()  # expires the lease now if its keeper has not noticed yet
            stats.dropped += 1
            kind.flow.emit(FlowEvent.FENCED, "%r to %r not run", item.packet, self.context)
            if item.sink is not None:
                await _fail(item.sink, lease_lost_error())
            return
        if item.deadline <= now:
            # A request whose caller's deadline passed while it waited (the caller was
            # answered DeadlineExceeded) is not run. A send's deadline is infinite: an
            # accepted send always runs.
            stats.expired += 1
            kind.flow.emit(FlowEvent.REQUEST_EXPIRED, "%r to %r", item.packet, self.context)
            return
        sink = item.sink
        handler = kind.handlers.get((item.kind, item.packet))
        if handler is None:
            stats.no_handler += 1
            error = NotFound(
                f"actor type {kind.actor_type.stable_type.value!r} has no "
                f"{item.kind.name.lower()} handler for {item.packet!r}"
            )
            kind.flow.emit(FlowEvent.NO_HANDLER, "%s", error.message)
            if sink is not None:
                await _fail(sink, error)
            return
        payload: object = item.payload
        if type(handler) is TypedHandler:
            try:
                payload = handler.accept(item.payload)
            except ZLinkError as exc:  # not the handler's type: it never sees it
                stats.failed += 1
                what = "send" if sink is None else "request"
                kind.flow.emit(
                    FlowEvent.PAYLOAD_UNDECODABLE,
                    "%s %r to %r not run: %r",
                    what,
                    item.packet,
                    self.context,
                    exc,
                )
                if sink is not None:
                    await _fail(sink, exc)
                return
        elif type(payload) is TypedPayload:
            try:
                payload = payload.encode()  # a bytes handler gets what a remote one would
            except ZLinkError as exc:  # checked at the caller: not expected
                stats.failed += 1
                kind.flow.emit(
                    FlowEvent.PAYLOAD_UNDECODABLE, "%r to %r: %r", item.packet, self.context, exc
                )
                if sink is not None:
                    await _fail(sink, exc)
                return
        self.handling = True
        try:
            result: object = await handler(self.instance, payload)
        except trio.Cancelled:
            # The engine stopped running turns (the owner lease was lost, or the server
            # closes): a local caller learns it now rather than at its deadline (a remote
            # caller's link closes with the node).
            self.handling = False
            if self._rare is not None and self._rare.scope is not None:
                self._end_scope(ok=False)
            if type(sink) is OneShot:
                sink.fail(lease_lost_error() if not kind.lease_live() else _stopped_error())
            raise
        except ZLinkError as exc:
            # Expected: raised on purpose. One line, no traceback.
            self.handling = False
            if self._rare is not None and self._rare.scope is not None:
                self._end_scope(ok=False)
            stats.failed += 1
            what = "send" if sink is None else "request"
            kind.flow.emit(
                FlowEvent.HANDLER_ERROR,
                "%s handler %r of %r raised %r",
                what,
                item.packet,
                self.context,
                exc,
            )
            if sink is not None:
                await _fail(sink, exc)
            return
        except BaseException as exc:
            self.handling = False
            if self._rare is not None and self._rare.scope is not None:
                self._end_scope(ok=False)
            if not isinstance(exc, Exception):
                raise
            stats.failed += 1
            key = (item.kind, item.packet)
            if key in kind.traced:
                kind.flow.emit(
                    FlowEvent.HANDLER_CRASHED,
                    "handler %r of %r raised %r",
                    item.packet,
                    self.context,
                    exc,
                )
            else:  # the first unexpected exception of this handler: with its traceback
                kind.traced.add(key)
                kind.flow.emit(
                    FlowEvent.HANDLER_CRASHED,
                    "handler %r of %r raised %r (later ones of this handler: one line each)",
                    item.packet,
                    self.context,
                    exc,
                    traceback=True,
                )
            if sink is not None:
                await _fail(sink, ApplicationError(f"{type(exc).__name__}: {exc}"))
            return
        self.handling = False
        stats.ok += 1
        if sink is None:
            if self._rare is not None and self._rare.scope is not None:
                self._end_scope(ok=True)
            return
        if result is not None:
            if type(result) is TypedPayload:
                if type(sink) is not OneShot:  # in-process the reply is not encoded
                    try:
                        result = result.encode()
                    except ZLinkError as exc:  # checked by its TypedHandler: not expected
                        if self._rare is not None and self._rare.scope is not None:
                            self._end_scope(ok=False)  # a reply-encode failure
                        await _fail(sink, ApplicationError(exc.message))
                        return
            elif type(result) is not bytes:
                if not isinstance(result, bytearray | memoryview):
                    if self._rare is not None and self._rare.scope is not None:
                        self._end_scope(ok=False)
                    await _fail(
                        sink,
                        ApplicationError(
                            f"handler {item.packet!r} returned {type(result).__name__}, not bytes"
                        ),
                    )
                    return
                result = bytes(result)
            if type(result) is bytes and len(result) > kind.max_reply:
                if self._rare is not None and self._rare.scope is not None:
                    self._end_scope(ok=False)
                await _fail(
                    sink,
                    ApplicationError(f"reply of {len(result)} bytes exceeds {kind.max_reply}"),
                )
                return
        if self._rare is not None and self._rare.scope is not None:
            # The reply is shaped (and encoded for a remote caller): the barriers this
            # handler registered activate now, whatever becomes of the reply's delivery.
            self._end_scope(ok=True)
        if type(sink) is OneShot:
            sink.set(result)
        else:
            # More work queued behind this turn: its replies leave in one write.
            assert result is None or type(result) is bytes
            lane = self.lane
            await sink.reply(result, flush=lane is None or lane.backlog == 0)

    async def _tick(self, tick: TimerTick) -> None:
        """The turn of a timer tick: its ``@on_timer`` handler, unless the registration
        was cancelled or replaced meanwhile (then nothing runs)."""
        kind = self.kind
        stats = kind.stats
        table = self.timers
        if kind.now() >= kind.lease.at:
            kind.lease_live()  # (see the payload path)
            stats.dropped += 1
            kind.flow.emit(FlowEvent.FENCED, "timer %r of %r not run", tick.name, self.context)
            if table is not None:
                table.discard(tick)
            return
        registration = None if table is None else table.accept(tick)
        if registration is None:
            return  # cancelled, replaced or cleaned up: counted by the timer service
        handler = kind.timer_handlers.get(tick.name)
        if handler is None:  # registration checks the handler: not expected
            stats.no_handler += 1
            kind.flow.emit(FlowEvent.NO_HANDLER, "timer %r of %r", tick.name, self.context)
            return
        try:
            await handler(self.instance, registration.payload)
        except trio.Cancelled:
            raise
        except ZLinkError as exc:
            stats.failed += 1
            kind.flow.emit(
                FlowEvent.HANDLER_ERROR,
                "timer handler %r of %r raised %r",
                tick.name,
                self.context,
                exc,
            )
            return
        except Exception as exc:
            stats.failed += 1
            key = (None, tick.name)
            first = key not in kind.traced
            kind.traced.add(key)
            kind.flow.emit(
                FlowEvent.HANDLER_CRASHED,
                "timer handler %r of %r raised %r%s",
                tick.name,
                self.context,
                exc,
                " (later ones of this handler: one line each)" if first else "",
                traceback=first,
            )
            return
        stats.ok += 1

    async def _join_done(self, completion: JoinCompletion) -> None:
        """Run the type's ``@on_join_complete`` method (a lifecycle callback)."""
        fn = self.kind.actor_type.join_complete
        if fn is None:
            logger.info("join of %r ended %s (no @on_join_complete)", self.context, completion)
            return
        try:
            await fn(self.instance, completion)
        except Exception:
            logger.exception("the join completion callback of %r raised", self.context)

    def _orphan(
        self,
        items: tuple[ActorItem, ...] | list[ActorItem],
        event: FlowEvent = FlowEvent.DROPPED_BY_DESTROY,
    ) -> None:
        """Accepted items the lane will not run (the Actor is being destroyed, or fenced):
        kept in ``orphans`` so the destroyer (or the fence) can fail each one's terminal
        (see :meth:`fail_orphans`); a timer tick has no terminal: its timer learns it."""
        for item in items:
            if type(item) is Barrier:
                item.reached.set()
                item.done.set()
                continue
            if type(item) is ActorWork:
                continue  # its owner waits with its own deadline
            if type(item) is TimerTick:
                self.kind.stats.dropped += 1
                self.kind.flow.emit(event, "timer %r of %r", item.name, self.context)
                if self.timers is not None:
                    self.timers.discard(item)
                continue
            if type(item) is JoinDone:
                continue
            assert type(item) is Deliver
            self.kind.stats.dropped += 1
            self.kind.flow.emit(event, "%r to %r", item.packet, self.context)
            if self.orphans is None:
                self.orphans = []
            self.orphans.append(item)

    def retire_lane(self, event: FlowEvent = FlowEvent.DROPPED_BY_DESTROY) -> None:
        """Close the lane for good; whatever it still held becomes an orphan (counted as
        ``event``)."""
        if self.lane is not None:
            self._orphan(self.lane.retire(), event)
        if self.parked:
            parked, self.parked = self.parked, None
            self._orphan(parked, event)

    async def fail_orphans(self, error: ZLinkError | None = None) -> None:
        """Fail the terminal of every orphan (default error: destroyed before it ran)."""
        orphans, self.orphans = self.orphans or [], None
        if error is None:
            error = Unavailable("the Actor was destroyed before this payload ran")
        for item in orphans:
            if item.sink is not None:
                await _fail(item.sink, error)
