"""One hosted User or Instance Spot activation: its lane, its state and what a turn does.

A hosted Spot is a lane on the engine (policy :class:`~zlink_trio.engine.lanes.SpotLane`),
never a task of its own: its LIFECYCLE queue runs the factory and create callback, the
membership callbacks and the close steps; its APPLICATION queue runs the Spot's own
messages (:class:`SpotMessage`, the direct calls) and application work (timer ticks). When
both are runnable the lifecycle queue goes first, with the engine's bounded burst (spec 04
§4). A SpotWide Spot's lane runs under its own shared :attr:`HostedSpot.gate`, which its
member Actors' lanes share; a PerActor Spot's lane is its own gate.

What every Spot of one stable type shares on this node (type, handlers, counters, limits)
lives once in its :class:`SpotShared`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, TypeAlias, TypeVar, final

import trio

from ..engine.gate import Gate
from ..engine.lane import Lane
from ..engine.lanes import SpotLane
from ..engine.oneshot import OneShot
from ..errors import InvalidOperation, ShuttingDown, Unavailable, ZLinkError
from ..ids import ActorId, AuthorityOwnerGeneration, NodeRid, ObjectGeneration, SpotId, SpotRef
from ..mesh.lease import LeaseDeadline
from ..objects.timers import TimerService, TimerTable, TimerTick
from ..objects.timers.handlers import TimerHandler
from ..observe import FlowEvent, FlowTrace
from .context import SpotContext
from .dispatch import SpotMessage, fail_message, fail_messages, run_message
from .execution import ExecutionMode, SpotWide
from .lifecycle import SpotCallback
from .members import DeferredJoin, MemberJoins
from .registry import SpotType
from .spot_kind import SpotKind
from .states import (
    SPOT_CLOSED,
    SPOT_CLOSING,
    SPOT_FENCED,
    SPOT_READY,
    SPOT_RELOCATING,
    SPOT_STAGING,
    SpotClosed,
    SpotClosing,
    SpotFenced,
    SpotReady,
    SpotRelocating,
    SpotStaging,
    SpotState,
    spot_lease_lost,
)
from .stats import SpotCounters

__all__ = [
    "SPOT_CLOSED",
    "SPOT_CLOSING",
    "SPOT_FENCED",
    "SPOT_READY",
    "SPOT_RELOCATING",
    "SPOT_STAGING",
    "HostedSpot",
    "SpotClosed",
    "SpotClosing",
    "SpotFenced",
    "SpotItem",
    "SpotMessage",
    "SpotReady",
    "SpotRelocating",
    "SpotShared",
    "SpotStaging",
    "SpotState",
    "spot_lease_lost",
]

logger = logging.getLogger("zlink_trio.spots")

T = TypeVar("T")


@final
class _Work(Generic[T]):
    """A turn running ``fn(instance)`` (lifecycle or application queue)."""

    __slots__ = ("awaited", "callback", "counted", "fn", "lifecycle", "result")

    def __init__(
        self,
        fn: Callable[[Any], Awaitable[T]],
        *,
        lifecycle: bool,
        callback: SpotCallback | None = None,
        awaited: bool = True,
        counted: bool = True,
    ) -> None:
        self.fn = fn
        self.awaited = awaited
        self.counted = counted
        self.lifecycle = lifecycle
        self.callback = callback
        self.result: OneShot[T] = OneShot()


SpotItem: TypeAlias = SpotMessage | _Work[Any] | TimerTick
"""Application queue: messages, application work and timer ticks (one acceptance order);
lifecycle queue: lifecycle work."""


@final
class SpotShared:
    """What the hosted Spots of one stable type on this node share."""

    __slots__ = (
        "counters",
        "flow",
        "joins",
        "lease",
        "lease_live",
        "max_reply",
        "node_rid",
        "spot_type",
        "timer_service",
        "traced_timers",
    )

    def __init__(
        self,
        spot_type: SpotType,
        node_rid: NodeRid,
        max_reply: int,
        flow: FlowTrace,
        lease: LeaseDeadline,
        lease_live: Callable[[], bool],
        timer_service: TimerService | None = None,
        joins: MemberJoins | None = None,
    ) -> None:
        self.spot_type = spot_type
        self.joins = joins
        """Where a User Spot handler's members' Joins are registered (None: nowhere)."""
        self.timer_service = timer_service
        """The node's timer service (None: timers cannot be registered)."""
        self.traced_timers: set[str] = set()
        """Timer names whose handler's unexpected exception was logged with a traceback."""
        self.node_rid = node_rid
        self.max_reply = max_reply
        self.flow = flow
        self.counters = SpotCounters()
        self.lease = lease
        """This lifecycle's local lease deadline: no turn starts after it."""
        self.lease_live = lease_live


@final
class HostedSpot:
    """One Spot activation hosted here. Calling it runs one turn of its lane."""

    __slots__ = (
        "_cleanups",
        "_members",
        "close_requested",
        "context",
        "gate",
        "handling",
        "instance",
        "lane",
        "orphans",
        "owner_generation",
        "parked",
        "scope",
        "shared",
        "state",
        "timers",
    )

    def __init__(
        self,
        shared: SpotShared,
        context: SpotContext,
        owner_generation: AuthorityOwnerGeneration,
        gate: Gate | None,
    ) -> None:
        self.shared = shared
        self.context = context
        self.owner_generation = owner_generation
        self.gate = gate
        """The Spot's shared engine gate (SpotWide), None (PerActor, Instance)."""
        self.instance: Any = None
        self.state: SpotState = SPOT_STAGING
        self.lane: Lane[SpotLane, SpotItem] | None = None
        self.parked: list[SpotMessage] = []
        """Messages admitted while Relocating (the relocation hold, arrival order; never
        bounded, never run here: relayed to the target, or queued again on an abort)."""
        self.orphans: list[SpotMessage] = []
        self.close_requested = False
        self._members: set[ActorId] = set()
        self._cleanups: list[Callable[[], object]] = []
        self.timers: TimerTable | None = None
        """Its timers, from its first registration on (``context.timers``)."""
        self.handling = False
        """True while one of its request, packet or timer handlers runs."""
        self.scope: Any = None
        """That handler's Join registration scope, made at its first member Join."""
        context._hosted = self

    # --- identity -----------------------------------------------------------------------
    @property
    def spot_id(self) -> SpotId:
        return self.context.spot_id

    @property
    def generation(self) -> ObjectGeneration:
        return self.context.object_generation

    @property
    def kind(self) -> SpotKind:
        return self.context.kind

    @property
    def spot_type(self) -> SpotType:
        return self.shared.spot_type

    @property
    def execution(self) -> ExecutionMode | None:
        return self.shared.spot_type.execution

    @property
    def spot_wide(self) -> bool:
        return isinstance(self.shared.spot_type.execution, SpotWide)

    def ref(self) -> SpotRef:
        context = self.context
        return SpotRef(
            context.spot_id, context.object_generation, context.mesh_name, self.shared.node_rid
        )

    def __repr__(self) -> str:
        return f"<HostedSpot {self.context!r} {type(self.state).__name__}>"

    # --- the timer owner (objects.timers.TimerOwner, TickTarget) --------------------------
    @property
    def admitting(self) -> bool:
        return isinstance(self.state, SpotReady)

    @property
    def timer_service(self) -> TimerService | None:
        return self.shared.timer_service

    @property
    def timer_names(self) -> Mapping[str, TimerHandler]:
        return self.shared.spot_type.timers

    @property
    def timer_owner_noun(self) -> str:
        return f"spot type {self.shared.spot_type.stable_type.value!r}"

    def in_own_turn(self) -> bool:
        lane = self.lane
        return lane is not None and lane.in_turn()

    def submit_tick_nowait(self, tick: TimerTick) -> object:
        # Ticks are admitted while Ready only (the admission of application work): from
        # the close's seal on a due tick is dropped (the cleanup follows); ticks accepted
        # before it still run.
        return self._admitting_lane().submit_nowait(tick)

    async def submit_tick(self, tick: TimerTick) -> object:
        return await self._admitting_lane().submit(tick)

    # --- membership (the Join engineer's API; serialize it with lifecycle work) -----------
    @property
    def members(self) -> frozenset[ActorId]:
        return frozenset(self._members)

    @property
    def has_members(self) -> bool:
        return bool(self._members)

    def add_member(self, actor_id: ActorId) -> None:
        """Record ``actor_id`` as a current member (after its membership commit)."""
        if self.kind is not SpotKind.USER:
            raise Unavailable("an Instance Spot has no Actor membership")
        self._members.add(actor_id)

    def remove_member(self, actor_id: ActorId) -> None:
        self._members.discard(actor_id)

    def member_join(
        self, actor_id: ActorId, target: SpotId | None, *, entry: bool, request: object
    ) -> DeferredJoin:
        """``context.join_spot(actor_id, ...)``: the Join of member ``actor_id``,
        registered in the running handler's scope at its ``defer()`` (spec 04 §3.1)."""
        joins = self.shared.joins
        if joins is None:
            raise InvalidOperation("this server has no Actor membership")
        if self.kind is not SpotKind.USER:
            raise InvalidOperation(
                "an Instance Spot has no members: its handlers cannot Defer a Join"
            )
        scope = self.scope
        lane = self.lane
        runner = None if lane is None else lane.runner
        if scope is None and self.handling and runner is not None:
            scope = self.scope = joins.open_scope(runner)
        return joins.member_call(
            scope, self.spot_id, actor_id, target, entry=entry, request=request
        )

    def begin_handler(self) -> None:
        """A request, packet or timer handler starts (its registration scope opens)."""
        self.handling = True

    def end_handler(self, *, ok: bool) -> None:
        """The handler ended (``ok``: normally, its reply shaped): the members' Joins it
        registered activate (``ok``) or are discarded."""
        self.handling = False
        scope = self.scope
        if scope is not None:
            self.scope = None
            joins = self.shared.joins
            if joins is not None:
                joins.close(scope, ok=ok)

    def on_cleanup(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` (sync, or returning an awaitable) once at close step 3."""
        self._cleanups.append(fn)

    # --- work on the lanes ----------------------------------------------------------------
    def _live_lane(self) -> Lane[SpotLane, SpotItem]:
        lane = self.lane
        if lane is None or isinstance(self.state, SpotClosed | SpotFenced):
            raise Unavailable(f"spot {self.spot_id.value!r} no longer runs here")
        return lane

    async def run_lifecycle_work(self, fn: Callable[[Any], Awaitable[T]]) -> T:
        """Run ``async fn(instance)`` as ONE turn of the lifecycle queue (serialized with
        the Spot's callbacks, its close and every other lifecycle turn); its result or
        exception comes back. Raises Unavailable when the Spot no longer runs here (check
        ``state`` inside ``fn`` for Closing)."""
        work: _Work[T] = _Work(fn, lifecycle=True)
        await self._live_lane().submit(work, lifecycle=True)
        return await work.result.wait()

    def _admitting_lane(self) -> Lane[SpotLane, SpotItem]:
        if not isinstance(self.state, SpotReady):
            if isinstance(self.state, SpotClosing):
                raise Unavailable(f"spot {self.spot_id.value!r} is closing")
            raise Unavailable(f"spot {self.spot_id.value!r} is not Ready ({self.state!r})")
        return self._live_lane()

    async def run_application_work(
        self, fn: Callable[[Any], Awaitable[T]], *, internal: bool = False
    ) -> T:
        """Run ``async fn(instance)`` as ONE turn of the application queue (after the
        lifecycle work the lane policy puts first), counted as an application turn.
        Raises Unavailable unless the Spot is Ready (its admission is sealed from the
        Closing CAS on). ``internal``: the framework's own boundary item (allowed while
        closing, not counted)."""
        work: _Work[T] = _Work(fn, lifecycle=False, counted=not internal)
        lane = self._live_lane() if internal else self._admitting_lane()
        await lane.submit(work)
        return await work.result.wait()

    def submit_application_work_nowait(self, fn: Callable[[Any], Awaitable[object]]) -> None:
        """Queue ``async fn(instance)`` on the application queue without waiting (an
        exception it raises is logged): a timer tick. Raises Unavailable unless the Spot
        is Ready, CapacityExceeded when its queue is full."""
        self._admitting_lane().submit_nowait(_Work(fn, lifecycle=False, awaited=False))

    async def run_callback(self, callback: SpotCallback, argument: object) -> object:
        """Run the type's ``callback`` on ``argument`` in ONE lifecycle turn; its result
        (None when the type has no such callback: then no turn runs). Raises Unavailable
        unless the Spot is Ready; the callback's exception propagates."""
        fn = self.shared.spot_type.callbacks.get(callback)
        if fn is None:
            await trio.lowlevel.checkpoint()
            return None
        if not isinstance(self.state, SpotReady):
            await trio.lowlevel.checkpoint()
            raise Unavailable(f"spot {self.spot_id.value!r} is not Ready ({self.state!r})")
        return await self._callback_turn(callback, fn, argument)

    async def _callback_turn(
        self, callback: SpotCallback, fn: Callable[[Any, Any], Awaitable[object]], arg: object
    ) -> object:
        async def call(instance: Any) -> object:
            return await fn(instance, arg)

        work: _Work[object] = _Work(call, lifecycle=True, callback=callback)
        await self._live_lane().submit(work, lifecycle=True)
        return await work.result.wait()

    async def run_own_callback(self, callback: SpotCallback, argument: object) -> object:
        """Like :meth:`run_callback` in any state the lane still runs (the create path's
        CREATE while staging, the close's CLOSE while closing)."""
        fn = self.shared.spot_type.callbacks.get(callback)
        if fn is None:
            await trio.lowlevel.checkpoint()
            return None
        return await self._callback_turn(callback, fn, argument)

    async def run_cleanups(self) -> None:
        """Close step 3 (once): the hooks registered with :meth:`on_cleanup`, in order;
        a failing hook is logged and the next one still runs."""
        cleanups, self._cleanups = self._cleanups, []
        for fn in cleanups:
            try:
                result = fn()
                if isinstance(result, Awaitable):
                    await result
            except Exception:
                logger.exception("a cleanup hook of %r failed", self)

    # --- the turn ---------------------------------------------------------------------------
    async def __call__(self, item: SpotItem) -> None:
        """One turn of this Spot's lane."""
        shared = self.shared
        counters = shared.counters
        if trio.current_time() >= shared.lease.at and not shared.lease_live():
            counters.dropped += 1
            shared.flow.emit(FlowEvent.FENCED, "a turn of %r not run", self.context)
            if type(item) is SpotMessage:
                if item.sink is not None:
                    await fail_message(item.sink, spot_lease_lost())
            elif isinstance(item, TimerTick):
                if self.timers is not None:
                    self.timers.discard(item)
            else:
                item.result.fail(spot_lease_lost())
            return
        if type(item) is SpotMessage:
            counters.application_turns += 1
            await run_message(self, item)
            return
        if type(item) is TimerTick:
            counters.application_turns += 1
            await self._tick(item)
            return
        assert isinstance(item, _Work)
        callback = item.callback
        if callback is not None:
            counters.callbacks[callback] += 1
        if item.counted:
            if item.lifecycle:
                counters.lifecycle_turns += 1
            else:
                counters.application_turns += 1
        try:
            value = await item.fn(self.instance)
        except trio.Cancelled:
            item.result.fail(ShuttingDown("the server stopped during the Spot's turn"))
            raise
        except Exception as exc:
            if not item.awaited:
                logger.exception("application work of %r failed", self)
            item.result.fail(exc)
            return
        item.result.set(value)

    async def _tick(self, tick: TimerTick) -> None:
        """The turn of a timer tick: its ``@on_timer`` handler, unless the registration
        was cancelled or replaced meanwhile (then nothing runs)."""
        shared = self.shared
        counters = shared.counters
        table = self.timers
        registration = None if table is None else table.accept(tick)
        if registration is None:
            return  # cancelled, replaced or cleaned up: counted by the timer service
        handler = shared.spot_type.timers.get(tick.name)
        if handler is None:  # registration checks the handler: not expected
            counters.no_handler += 1
            shared.flow.emit(FlowEvent.NO_HANDLER, "timer %r of %r", tick.name, self.context)
            return
        self.begin_handler()
        try:
            await handler(self.instance, registration.payload)
        except trio.Cancelled:
            self.end_handler(ok=False)
            raise
        except ZLinkError as exc:
            self.end_handler(ok=False)
            counters.handler_failures += 1
            shared.flow.emit(
                FlowEvent.HANDLER_ERROR,
                "timer handler %r of %r raised %r",
                tick.name,
                self.context,
                exc,
            )
        except Exception as exc:
            self.end_handler(ok=False)
            counters.handler_failures += 1
            first = tick.name not in shared.traced_timers
            shared.traced_timers.add(tick.name)
            shared.flow.emit(
                FlowEvent.HANDLER_CRASHED,
                "timer handler %r of %r raised %r",
                tick.name,
                self.context,
                exc,
                traceback=first,
            )
        else:
            self.end_handler(ok=True)

    # --- ending ---------------------------------------------------------------------------
    def dropped(self, item: SpotItem) -> None:
        """``on_drop`` of the lane: an item the lane will never run."""
        if type(item) is SpotMessage:
            self.shared.counters.dropped += 1
            self.orphans.append(item)
            return
        if type(item) is TimerTick:
            self.shared.counters.dropped += 1
            if self.timers is not None:
                self.timers.discard(item)
            return
        assert isinstance(item, _Work)
        if not item.result.done:
            item.result.fail(Unavailable(f"spot {self.spot_id.value!r} closed before it ran"))

    def retire_lane(self) -> None:
        """Close the lane for good: what it still held fails (messages become orphans,
        work fails Unavailable, ticks are discarded); its timers are cleaned up (once)."""
        lane = self.lane
        if lane is not None:
            for item in lane.retire():
                self.dropped(item)
        if self.timers is not None:
            self.timers.close()

    async def fail_orphans(self, error: ZLinkError | None = None) -> None:
        orphans, self.orphans = self.orphans, []
        await fail_messages(
            orphans, error or Unavailable(f"spot {self.spot_id.value!r} closed before it ran")
        )
