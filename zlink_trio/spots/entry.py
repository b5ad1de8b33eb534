"""The Entry Spot of one (node, mesh): the default Spot every created Actor joins.

An Entry Spot is a Spot lane on the engine. Its lifecycle queue receives only lifecycle
control (Actor creation approval now; join, leave and relocation later) and never an Actor's
application payload: those go straight to the Actor's own queue (spec 04 §3, §4). Creating an
Actor runs the factory and the application's ``OnCreateActor`` in one lifecycle turn here, so
a node's Entry Spot approves one staging Actor at a time. Its application queue runs the
Spot's own application work (:meth:`EntrySpot.run_application_turn`; the STREAM issue
dispatches Spot packet handlers through it), which the statistics count apart.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, final

import attrs
import trio

from ..engine.engine import Engine
from ..engine.lane import Lane
from ..engine.lanes import SpotLane
from ..engine.oneshot import OneShot
from ..errors import DeadlineExceeded, ShuttingDown, Unavailable
from ..ids import MeshName, SpotId
from .approval import ActorCreateEvent, Approve, CreateDecision, OnCreateActor, Reject

__all__ = ["ApplicationWork", "EntrySpot", "EntrySpotStatistics", "StagingStep"]

logger = logging.getLogger("zlink_trio.spots")

StagingStep = Callable[[], Awaitable[ActorCreateEvent]]
"""Builds the staging Actor (runs the factory) and returns the event OnCreateActor sees."""

ApplicationWork = Callable[[], Awaitable[None]]
"""One application turn's work on the Entry Spot (a Spot packet handler call)."""


@attrs.frozen
class EntrySpotStatistics:
    spot_id: str
    mesh_name: str
    lifecycle_turns: int
    """Turns of the lifecycle queue: approvals (factory + OnCreateActor) and membership
    notifications (OnDisconnectActor)."""
    application_turns: int
    """Turns of the application queue (:meth:`EntrySpot.run_application_turn`). Actor
    payloads never count here: they go to the Actor's own queue (spec 04 §3)."""
    on_create_actor_calls: int
    queued_lifecycle: int


@final
class _Approval:
    """One creation's approval turn. Run inline (:meth:`EntrySpot.approve` on an idle
    lane) it is its own turn host (``engine.inline.TurnHost``): the engine's halt
    cancels its turn's scope, as a runner's scope would be."""

    __slots__ = ("bounded", "deadline", "halted", "result", "scope", "step")

    def __init__(self, step: StagingStep, deadline: float) -> None:
        self.step = step
        self.deadline = deadline
        self.bounded = False
        """Runs inline in a caller whose own cancel scope ends at ``deadline``."""
        self.result: OneShot[tuple[ActorCreateEvent, CreateDecision]] = OneShot()
        self.scope: trio.CancelScope | None = None
        self.halted = False

    def enter_turn(self) -> None:
        pass

    def turn_suspended(self) -> None:
        pass

    def exit_turn(self) -> None:
        pass

    def cancel_turn(self) -> None:
        self.halted = True
        if self.scope is not None:
            self.scope.cancel(reason="zlink_trio engine halted")


@final
class _Lifecycle:
    """Other lifecycle control on the Entry Spot (a cross-node Join's factory run)."""

    __slots__ = ("deadline", "result", "work")

    def __init__(self, work: Callable[[], Awaitable[Any]], deadline: float) -> None:
        self.work = work
        self.deadline = deadline
        self.result: OneShot[Any] = OneShot()


@final
class _Application:
    __slots__ = ("lifecycle", "result", "work")

    def __init__(self, work: ApplicationWork, *, lifecycle: bool = False) -> None:
        self.work = work
        self.lifecycle = lifecycle
        self.result: OneShot[None] = OneShot()


@final
class EntrySpot:
    __slots__ = (
        "_application_turns",
        "_calls",
        "_lane",
        "_lifecycle_turns",
        "_on_create",
        "mesh_name",
        "spot_id",
    )

    def __init__(
        self, engine: Engine, spot_id: SpotId, mesh_name: MeshName, on_create: OnCreateActor | None
    ) -> None:
        self.spot_id = spot_id
        self.mesh_name = mesh_name
        self._on_create = on_create
        self._calls = 0
        self._lifecycle_turns = 0
        self._application_turns = 0
        self._lane: Lane[SpotLane, _Approval | _Application | _Lifecycle] = engine.new_lane(
            SpotLane(), self._turn, on_drop=self._dropped
        )

    async def approve(
        self, step: StagingStep, deadline: float, *, caller_bounded: bool = False
    ) -> tuple[ActorCreateEvent, CreateDecision]:
        """Run ``step`` (the factory) and OnCreateActor in one lifecycle turn of this Spot,
        bounded by the creation's ``deadline`` (trio time).

        Exceptions from either propagate to the caller (the creation attempt fails); a turn
        that reaches the deadline is cancelled and fails with DeadlineExceeded, so a slow
        OnCreateActor never holds the Entry Spot past the attempt it serves, and an attempt
        whose deadline passed while it was queued runs no factory at all.

        ``caller_bounded``: the caller runs inside a cancel scope of its own that ends at
        ``deadline`` (an inline turn then needs no deadline of its own)."""
        item = _Approval(step, deadline)
        item.bounded = caller_bounded
        # An idle Entry Spot runs the turn in this task (no runner hand-off, no scheduler
        # pass to start it and none to hand its result back): same order and fairness,
        # since nothing else is queued for it and no other lane waits for a runner.
        if await self._lane.run_here(item, item):
            if item.result.done:  # the turn ended in this task: no wait, no extra pass
                return item.result.get_nowait()
        else:
            item.bounded = False  # a runner's turn: no caller scope around it
            await self._lane.submit(item, lifecycle=True)
        return await item.result.wait()

    async def run_lifecycle(self, work: Callable[[], Awaitable[Any]], deadline: float) -> Any:
        """Run ``work`` in one lifecycle turn of this Spot (membership control: the factory
        of an Actor a cross-node Join brings here), bounded by ``deadline``: a turn still
        queued at it never starts and one running is cancelled (both DeadlineExceeded).
        Its exception propagates to the caller."""
        item = _Lifecycle(work, deadline)
        await self._lane.submit(item, lifecycle=True)
        return await item.result.wait()

    async def run_application_turn(self, work: ApplicationWork) -> None:
        """Run ``work`` as one turn of this Spot's application queue: after the lifecycle
        work the lane policy puts first, never beside another turn of this Spot. Waits
        for room in the queue (back-pressure); an exception from ``work`` propagates to
        the caller. Once queued the turn runs even if the caller stops waiting."""
        item = _Application(work)
        await self._lane.submit(item)
        await item.result.wait()

    async def run_lifecycle_turn(self, work: ApplicationWork) -> None:
        """Run ``work`` as one turn of this Spot's LIFECYCLE queue (a membership
        notification such as OnDisconnectActor, spec 02 §7), counted as a lifecycle turn.
        Like :meth:`run_application_turn` otherwise."""
        item = _Application(work, lifecycle=True)
        await self._lane.submit(item, lifecycle=True)
        await item.result.wait()

    async def _turn(self, item: _Approval | _Application | _Lifecycle) -> None:
        if isinstance(item, _Lifecycle):
            if item.deadline <= trio.current_time():
                item.result.fail(DeadlineExceeded("the deadline passed before its turn"))
                return
            with trio.move_on_at(item.deadline):
                try:
                    value = await item.work()
                except Exception as exc:
                    item.result.fail(exc)
                    return
                item.result.set(value)
                return
            item.result.fail(DeadlineExceeded("the lifecycle turn did not finish in time"))
            return
        if isinstance(item, _Application):
            if item.lifecycle:
                self._lifecycle_turns += 1
            else:
                self._application_turns += 1
            try:
                await item.work()
            except Exception as exc:
                item.result.fail(exc)
                return
            item.result.set(None)
            return
        if item.deadline <= trio.current_time():
            item.result.fail(DeadlineExceeded("the creation deadline passed before approval"))
            return
        self._lifecycle_turns += 1
        # Run inline, the turn is already bounded by its caller's scope at (or before) the
        # same deadline, which would catch the expiry first (the outermost cancelled scope
        # does): a plain scope then serves the engine's halt alone, without a deadline.
        item.scope = (
            trio.CancelScope()
            if item.bounded or trio.current_effective_deadline() <= item.deadline
            else trio.move_on_at(item.deadline)
        )
        with item.scope:
            try:
                event = await item.step()
                decision: Any = Approve()
                if self._on_create is not None:
                    self._calls += 1
                    decision = await self._on_create(event)
                if not isinstance(decision, Approve | Reject):
                    raise TypeError(
                        f"OnCreateActor must return Approve or Reject, got {decision!r}"
                    )
            except Exception as exc:
                item.result.fail(exc)
                return
            item.result.set((event, decision))
            return
        if item.halted:
            item.result.fail(Unavailable("the engine halted during the approval"))
            return
        item.result.fail(DeadlineExceeded("the approval did not finish before the deadline"))

    def _dropped(self, item: _Approval | _Application | _Lifecycle) -> None:
        item.result.fail(ShuttingDown("the Entry Spot closed"))

    def close(self) -> None:
        self._lane.close()

    def statistics(self) -> EntrySpotStatistics:
        lane = self._lane.statistics()
        return EntrySpotStatistics(
            spot_id=self.spot_id.value,
            mesh_name=self.mesh_name.value,
            lifecycle_turns=self._lifecycle_turns,
            application_turns=self._application_turns,
            on_create_actor_calls=self._calls,
            queued_lifecycle=lane.lifecycle,
        )
