"""The I/O-free lane core against a plain-Python model (hypothesis stateful).

Rules submit lifecycle and application items, seal/unseal/take held, lend/return the
turn, close the session connection or the lane, and step (take the next item). The model
predicts every admission and every selected item; independent invariants check what the
spec promises whatever the model says:

* acceptance order is preserved per queue (items are numbered in submission order, and
  each queue runs them in increasing order; held items enter the application queue behind
  the pending ones, which are older);
* no item is executed twice or lost: every accepted item is queued, held, executed, taken
  by the relocation or dropped-and-reported, exactly one of them;
* at most ``lifecycle_burst`` lifecycle items run in a row while application work waits,
  and an application item never runs twice in a row while lifecycle work waits;
* impossible states are unreachable: the policy kind never changes, its state is in the
  lane table, held items exist only while sealed, a closed connection has no application
  work, no queue exceeds its bound.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Literal

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from zlink_trio.engine import (
    ActorDeliveryLane,
    Admission,
    AwaitingReturn,
    ConnectionClosed,
    LaneCore,
    LaneLimits,
    LanePolicy,
    Open,
    RelocationSealed,
    SessionLane,
    SpotLane,
)
from zlink_trio.engine.core import NOTHING
from zlink_trio.errors import InvalidOperation

Kind = Literal["spot", "session", "actor"]
Fate = Literal["executed", "taken", "dropped"]
RELOCATIONS = st.sampled_from(["r1", "r2"])


class LaneCoreMachine(RuleBasedStateMachine):
    """Rules and invariants shared by the three lane kinds; subclasses pick the kind."""

    core: LaneCore[int]

    def _start(self, kind: Kind, capacity: int, burst: int) -> None:
        policies: dict[Kind, LanePolicy] = {
            "spot": SpotLane(),
            "session": SessionLane(),
            "actor": ActorDeliveryLane(),
        }
        policy = policies[kind]
        self.kind = kind
        self.policy_type = type(policy)
        self.capacity, self.burst = capacity, burst
        self.core = LaneCore(policy, LaneLimits(capacity, burst))
        # model
        self.mode: Literal["open", "sealed", "lent", "connection_closed", "closed"] = "open"
        self.seal_id: Hashable | None = None
        self.life: list[int] = []
        self.app: list[int] = []
        self.held: list[int] = []
        self.streak = 0
        # bookkeeping for the invariants
        self.next_id = 0
        self.accepted: set[int] = set()
        self.lifecycle_ids: set[int] = set()
        self.fates: dict[int, Fate] = {}
        self.executed_life: list[int] = []
        self.executed_app: list[int] = []
        self.life_run_while_app_waits = 0
        self.app_run_while_life_waits = 0

    # ----- model helpers -----------------------------------------------------------------

    def _app_runnable(self) -> bool:
        return self.mode == "open" and bool(self.app)

    def _fate(self, items: list[int] | tuple[int, ...], fate: Fate) -> None:
        for item in items:
            assert item in self.accepted
            assert item not in self.fates, f"{item} already {self.fates[item]}"
            self.fates[item] = fate

    def _expect_invalid(self, call: object) -> None:
        before = (self.core.policy, self.core.lifecycle_count, self.core.application_count)
        with pytest.raises(InvalidOperation):
            call()  # type: ignore[operator]
        after = (self.core.policy, self.core.lifecycle_count, self.core.application_count)
        assert before == after

    # ----- rules ---------------------------------------------------------------------------

    @rule()
    def submit_application(self) -> None:
        self._submit(lifecycle=False)

    @rule()
    def submit_lifecycle(self) -> None:
        self._submit(lifecycle=True)

    def _submit(self, *, lifecycle: bool) -> None:
        item = self.next_id
        self.next_id += 1
        result = self.core.admit(item, lifecycle)
        if self.mode == "closed":
            expected = Admission.LANE_CLOSED
        elif lifecycle:
            expected = Admission.ACCEPTED if len(self.life) < self.capacity else Admission.FULL
        elif self.mode == "sealed":
            room = len(self.app) + len(self.held) < self.capacity
            expected = Admission.HELD if room else Admission.FULL
        elif self.mode == "connection_closed":
            expected = Admission.CONNECTION_CLOSED
        else:
            expected = Admission.ACCEPTED if len(self.app) < self.capacity else Admission.FULL
        assert result is expected
        if result is Admission.ACCEPTED:
            (self.life if lifecycle else self.app).append(item)
            self.accepted.add(item)
            if lifecycle:
                self.lifecycle_ids.add(item)
        elif result is Admission.HELD:
            self.held.append(item)
            self.accepted.add(item)

    @rule()
    def step(self) -> None:
        app_waits = self._app_runnable()
        life_waits = bool(self.life) and self.mode in ("open", "sealed", "connection_closed")
        item = self.core.next_item()
        # the model's prediction
        expected: int | None = None
        if life_waits and not (app_waits and self.streak >= self.burst):
            self.streak = self.streak + 1 if app_waits else 0
            expected = self.life.pop(0)
        elif app_waits:
            self.streak = 0
            expected = self.app.pop(0)
        if expected is None:
            assert item is NOTHING
            return
        assert item == expected
        self._fate([expected], "executed")
        if expected in self.lifecycle_ids:
            self.executed_life.append(expected)
            self.life_run_while_app_waits = self.life_run_while_app_waits + 1 if app_waits else 0
            self.app_run_while_life_waits = 0
        else:
            self.executed_app.append(expected)
            self.app_run_while_life_waits = self.app_run_while_life_waits + 1 if life_waits else 0
            self.life_run_while_app_waits = 0

    @rule(rid=RELOCATIONS)
    def seal(self, rid: str) -> None:
        valid = self.kind == "spot" and (
            self.mode == "open" or (self.mode == "sealed" and self.seal_id == rid)
        )
        if not valid:
            self._expect_invalid(lambda: self.core.seal(rid))
            return
        self.core.seal(rid)
        self.mode, self.seal_id = "sealed", rid

    @rule(rid=RELOCATIONS)
    def unseal(self, rid: str) -> None:
        if not (self.kind == "spot" and self.mode == "sealed" and self.seal_id == rid):
            self._expect_invalid(lambda: self.core.unseal(rid))
            return
        self.core.unseal(rid)
        self.app.extend(self.held)
        self.held = []
        self.mode, self.seal_id = "open", None

    @rule()
    def take_held(self) -> None:
        if not (self.kind == "spot" and self.mode == "sealed"):
            self._expect_invalid(self.core.take_held)
            return
        handover = self.core.take_held()
        assert handover.pending == tuple(self.app)
        assert handover.held == tuple(self.held)
        self._fate(handover.pending + handover.held, "taken")
        self.app, self.held = [], []

    @rule()
    def lend_turn(self) -> None:
        if not (self.kind == "spot" and self.mode == "open"):
            self._expect_invalid(self.core.lend_turn)
            return
        self.core.lend_turn()
        self.mode = "lent"

    @rule()
    def return_turn(self) -> None:
        if not (self.kind == "spot" and self.mode == "lent"):
            self._expect_invalid(self.core.return_turn)
            return
        self.core.return_turn()
        self.mode = "open"

    # Closing ends most of a lane's story, so the two closing rules act only on a rare
    # draw (hypothesis draws small integers most often), leaving room for long histories.
    @rule(roll=st.integers(0, 7))
    def close_connection(self, roll: int) -> None:
        if roll != 7:
            return
        if self.kind != "session":
            self._expect_invalid(self.core.close_connection)
            return
        dropped = self.core.close_connection()
        if self.mode == "closed":
            assert dropped == ()
            return
        assert dropped == tuple(self.app)
        self._fate(dropped, "dropped")
        self.app = []
        self.mode = "connection_closed"

    @rule(roll=st.integers(0, 7))
    def close(self, roll: int) -> None:
        if roll != 7:
            return
        dropped = self.core.close()
        assert dropped == tuple(self.life + self.app + self.held)
        self._fate(dropped, "dropped")
        self.life, self.app, self.held = [], [], []
        self.mode = "closed"

    # ----- invariants -----------------------------------------------------------------------

    @invariant()
    def queues_agree_with_the_model(self) -> None:
        core = self.core
        assert core.lifecycle_count == len(self.life) <= self.capacity
        assert core.application_count == len(self.app)
        assert core.held_count == len(self.held)
        assert len(self.app) + len(self.held) <= self.capacity
        can_run_lifecycle = self.mode in ("open", "sealed", "connection_closed")
        assert core.runnable() == ((can_run_lifecycle and bool(self.life)) or self._app_runnable())

    @invariant()
    def every_accepted_item_is_accounted_for_exactly_once(self) -> None:
        queued = self.life + self.app + self.held
        assert len(set(queued)) == len(queued)
        assert not set(queued) & set(self.fates)
        assert set(queued) | set(self.fates) == self.accepted

    @invariant()
    def acceptance_order_is_preserved_per_queue(self) -> None:
        for queue in (self.life, self.app, self.held, self.executed_life, self.executed_app):
            assert queue == sorted(queue)
            assert len(queue) == len(set(queue))
        assert set(self.executed_life) <= self.lifecycle_ids
        assert not set(self.executed_app) & self.lifecycle_ids

    @invariant()
    def burst_bound_is_respected(self) -> None:
        assert self.life_run_while_app_waits <= self.burst
        assert self.app_run_while_life_waits <= 1

    @invariant()
    def impossible_states_are_unreachable(self) -> None:
        policy = self.core.policy
        assert type(policy) is self.policy_type
        if isinstance(policy, SpotLane):
            assert isinstance(policy.state, Open | AwaitingReturn | RelocationSealed)
        elif isinstance(policy, SessionLane):
            assert isinstance(policy.state, Open | ConnectionClosed)
        else:
            assert not hasattr(policy, "state")
        if not isinstance(getattr(policy, "state", None), RelocationSealed):
            assert self.core.held_count == 0
        if isinstance(getattr(policy, "state", None), ConnectionClosed):
            assert self.core.application_count == 0
        if self.core.closed:
            assert not self.core.runnable()


CAPACITIES = st.integers(1, 4)
BURSTS = st.integers(1, 3)


class SpotLaneMachine(LaneCoreMachine):
    @initialize(capacity=CAPACITIES, burst=BURSTS)
    def start(self, capacity: int, burst: int) -> None:
        self._start("spot", capacity, burst)


class SessionLaneMachine(LaneCoreMachine):
    @initialize(capacity=CAPACITIES, burst=BURSTS)
    def start(self, capacity: int, burst: int) -> None:
        self._start("session", capacity, burst)


class ActorDeliveryLaneMachine(LaneCoreMachine):
    @initialize(capacity=CAPACITIES, burst=BURSTS)
    def start(self, capacity: int, burst: int) -> None:
        self._start("actor", capacity, burst)


SpotLaneMachine.TestCase.settings = settings(
    max_examples=400, stateful_step_count=60, deadline=None
)
SessionLaneMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=60, deadline=None
)
ActorDeliveryLaneMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=60, deadline=None
)
TestSpotLaneCore = SpotLaneMachine.TestCase
TestSessionLaneCore = SessionLaneMachine.TestCase
TestActorDeliveryLaneCore = ActorDeliveryLaneMachine.TestCase
