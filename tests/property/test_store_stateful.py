"""The memory Location Store's CAS contract against a pure-Python model.

hypothesis-trio does not import with current hypothesis, so every store call runs in its
own ``trio.run`` (with a frozen ``MockClock``: store time stays put, no lease expires).
That is fine for the memory store, whose state is plain Python; concurrent reservations
race inside one run.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TypeVar

import attrs
import trio
import trio.testing
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from zlink_trio.config import ObjectRole
from zlink_trio.errors import CapacityExceeded
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid, StableType, new_entry_spot_id
from zlink_trio.store.api import (
    Applied,
    AuthorityRow,
    AuthorityState,
    CasResult,
    Conflict,
    Endpoint,
    Namespace,
    NodeDescriptor,
    ObjectKey,
    ObjectKind,
    OwnerFence,
    Reservation,
)
from zlink_trio.store.memory import MemoryLocationStore

T = TypeVar("T")

MESH = MeshName("m")
TYPE = StableType("t")
CAPACITIES = (1, 2, 3)
KEYS = ("a", "b", "c", "d", "e")
NODES = st.integers(0, len(CAPACITIES) - 1)
OPS = ("commit", "abort", "begin_closing", "release", "change_owner")


def run(fn: Callable[[], Awaitable[T]]) -> T:
    """Run one async step to completion with a frozen clock."""

    async def main() -> T:
        return await fn()

    return trio.run(main, clock=trio.testing.MockClock())


@attrs.frozen
class Model:
    """What the model knows about one authority row."""

    state: AuthorityState
    version: int
    generation: int
    owner: int
    owner_generation: int


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = MemoryLocationStore()
        self.fences: list[OwnerFence] = []
        self.rows: dict[str, Model] = {}
        self.active = [0] * len(CAPACITIES)
        self.pending = [0] * len(CAPACITIES)
        self.last_version = 0
        self.last_generation = 0
        for capacity in CAPACITIES:
            self.fences.append(run(functools.partial(self._register, capacity)))

    async def _register(self, capacity: int) -> OwnerFence:
        rid, gen = NodeRid.new(), NodeGeneration.new()
        descriptor = NodeDescriptor(
            MESH,
            rid,
            gen,
            Endpoint("127.0.0.1", 1),
            ObjectRole.SERVER,
            frozenset({TYPE}),
            frozenset(),
            frozenset(),
            1.0,
            new_entry_spot_id("n"),
        )
        lease = await self.store.register_node(
            rid, gen, [descriptor], capacity=capacity, lease_ttl=1e9
        )
        for row in await self.store.scan_owned(rid):
            self._saw_version(row.store_version)
        return OwnerFence(MESH, rid, gen, lease.lease_generation)

    # ----- model helpers ------------------------------------------------------------------
    def _saw_version(self, version: int) -> None:
        assert version > self.last_version, "store versions must strictly increase"
        self.last_version = version

    def _owner_index(self, row: AuthorityRow) -> int:
        return self.fences.index(row.owner)

    def _accept(self, row: AuthorityRow, *, new_incarnation: bool = False) -> None:
        """A mutation won: check the new version/generation and adopt the row."""
        self._saw_version(row.store_version)
        if new_incarnation:
            assert row.object_generation.value > self.last_generation
            self.last_generation = row.object_generation.value
        else:
            assert row.object_generation.value == self.rows[row.key.object_id].generation
        self.rows[row.key.object_id] = Model(
            row.state,
            row.store_version,
            row.object_generation.value,
            self._owner_index(row),
            row.owner_generation.value,
        )

    def _matches(self, object_id: str, row: AuthorityRow | None) -> bool:
        model = self.rows.get(object_id)
        if row is None or model is None:
            return row is None and model is None
        return model == Model(
            row.state,
            row.store_version,
            row.object_generation.value,
            self._owner_index(row),
            row.owner_generation.value,
        )

    def _expect_conflict(
        self, object_id: str, result: CasResult[AuthorityRow] | CasResult[None]
    ) -> None:
        assert isinstance(result, Conflict), result
        assert self._matches(object_id, result.current)

    def _room(self, node: int) -> bool:
        return self.active[node] + self.pending[node] < CAPACITIES[node]

    def _reservation(self, object_id: str, node: int) -> Reservation:
        return Reservation(ObjectKey.actor(object_id), ObjectKind.ACTOR, TYPE, self.fences[node])

    # ----- rules --------------------------------------------------------------------------
    @rule(
        object_id=st.sampled_from(KEYS),
        owners=st.lists(NODES, min_size=1, max_size=len(CAPACITIES), unique=True),
    )
    def reserve_race(self, object_id: str, owners: list[int]) -> None:
        """Concurrent reservations of one key: one winner, the rest see its row."""
        outcomes: dict[int, CasResult[AuthorityRow] | CapacityExceeded] = {}

        async def attempt(node: int) -> None:
            try:
                outcomes[node] = await self.store.reserve(self._reservation(object_id, node))
            except CapacityExceeded as exc:
                outcomes[node] = exc

        async def race() -> None:
            async with trio.open_nursery() as nursery:
                for node in owners:
                    nursery.start_soon(attempt, node)

        run(race)
        if object_id in self.rows:
            for outcome in outcomes.values():
                assert not isinstance(outcome, CapacityExceeded)
                self._expect_conflict(object_id, outcome)
            return
        free = [node for node in owners if self._room(node)]
        winners = [n for n, o in outcomes.items() if isinstance(o, Applied)]
        if not free:
            assert winners == []
            assert all(isinstance(o, CapacityExceeded) for o in outcomes.values())
            return
        assert len(winners) == 1
        (winner,) = winners
        assert winner in free
        won = outcomes[winner]
        assert isinstance(won, Applied)
        row = won.row
        assert row.state is AuthorityState.CREATING
        assert row.owner == self.fences[winner]
        assert row.owner_generation.value == 1
        self._accept(row, new_incarnation=True)
        self.pending[winner] += 1
        for node, outcome in outcomes.items():
            if node == winner:
                continue
            if isinstance(outcome, CapacityExceeded):
                assert node not in free
            else:
                self._expect_conflict(object_id, outcome)

    @rule(object_id=st.sampled_from(KEYS), op=st.sampled_from(OPS), new_owner=NODES)
    def transition(self, object_id: str, op: str, new_owner: int) -> None:
        """Apply ``op`` with the current version: it wins exactly when the state allows."""
        model = self.rows.get(object_id)
        key = ObjectKey.actor(object_id)
        version = model.version if model is not None else 1
        state = model.state if model is not None else None
        if op == "commit":
            result = run(lambda: self.store.commit_ready(key, version))
            if state is not AuthorityState.CREATING:
                return self._expect_conflict(object_id, result)
            assert model is not None
            self._accept(self._won(result))
            self.pending[model.owner] -= 1
            self.active[model.owner] += 1
        elif op == "abort":
            gone = run(lambda: self.store.abort_creation(key, version))
            if state is not AuthorityState.CREATING:
                return self._expect_conflict(object_id, gone)
            assert model is not None
            assert gone == Applied(None)
            del self.rows[object_id]
            self.pending[model.owner] -= 1
        elif op == "begin_closing":
            result = run(lambda: self.store.begin_closing(key, version))
            if state is not AuthorityState.READY:
                return self._expect_conflict(object_id, result)
            self._accept(self._won(result))
        elif op == "release":
            gone = run(lambda: self.store.release(key, version))
            if state not in (AuthorityState.READY, AuthorityState.CLOSING):
                return self._expect_conflict(object_id, gone)
            assert model is not None
            assert gone == Applied(None)
            del self.rows[object_id]
            self.active[model.owner] -= 1
        else:
            self._change_owner(object_id, new_owner)
        return None

    def _won(self, result: CasResult[AuthorityRow]) -> AuthorityRow:
        assert isinstance(result, Applied), result
        return result.row

    def _change_owner(self, object_id: str, new_owner: int) -> None:
        model = self.rows.get(object_id)
        key = ObjectKey.actor(object_id)
        version = model.version if model is not None else 1
        fence = self.fences[new_owner]

        async def move() -> CasResult[AuthorityRow] | CapacityExceeded:
            try:
                return await self.store.change_owner(key, version, fence)
            except CapacityExceeded as exc:
                return exc

        result = run(move)
        if model is None or model.state is not AuthorityState.READY:
            assert not isinstance(result, CapacityExceeded)
            return self._expect_conflict(object_id, result)
        moves = new_owner != model.owner
        if moves and not self._room(new_owner):
            assert isinstance(result, CapacityExceeded)
            return None
        assert not isinstance(result, CapacityExceeded)
        row = self._won(result)
        assert row.owner_generation.value == model.owner_generation + 1
        self._accept(row)
        if moves:
            self.active[model.owner] -= 1
            self.active[new_owner] += 1
        return None

    @rule(object_id=st.sampled_from(KEYS), owner=NODES)
    def reserve_and_commit(self, object_id: str, owner: int) -> None:
        """A reservation then its commit (so that batches find Ready rows to move)."""
        self.reserve_race(object_id, [owner])
        self.transition(object_id, "commit", owner)

    @rule(
        object_ids=st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True),
        new_owner=NODES,
        stale=st.sampled_from((None, None, None, 0, 1, 2, 3)),
        ready_only=st.sampled_from((True, True, True, False)),
    )
    def change_owners(
        self, object_ids: list[str], new_owner: int, stale: int | None, ready_only: bool
    ) -> None:
        """The aggregate owner change: the first row (in order) that is Missing, not
        Ready or off its version is the Conflict and nothing changes; else the new owner
        must take every arriving row at once; else every row moves. (``ready_only`` keeps
        the Ready rows of the draw only, so that batches do apply.)"""
        if ready_only:
            object_ids = [
                o
                for o in object_ids
                if o in self.rows and self.rows[o].state is AuthorityState.READY
            ]
            if not object_ids:
                return
        changes: list[tuple[ObjectKey, int]] = []
        for i, object_id in enumerate(object_ids):
            model = self.rows.get(object_id)
            version = model.version if model is not None else 1
            changes.append((ObjectKey.actor(object_id), version + (7 if i == stale else 0)))
        fence = self.fences[new_owner]

        async def move() -> CasResult[tuple[AuthorityRow, ...]] | CapacityExceeded:
            try:
                return await self.store.change_owners(changes, fence)
            except CapacityExceeded as exc:
                return exc

        result = run(move)
        for (_, version), object_id in zip(changes, object_ids, strict=True):
            model = self.rows.get(object_id)
            if model is None or model.state is not AuthorityState.READY or model.version != version:
                assert isinstance(result, Conflict), result
                assert self._matches(object_id, result.current)
                return
        arriving = [self.rows[o].owner for o in object_ids if self.rows[o].owner != new_owner]
        if arriving and (
            self.active[new_owner] + self.pending[new_owner] + len(arriving) > CAPACITIES[new_owner]
        ):
            assert isinstance(result, CapacityExceeded)
            return
        assert isinstance(result, Applied), result
        assert [row.key.object_id for row in result.row] == object_ids
        for row in result.row:
            model = self.rows[row.key.object_id]
            assert row.owner_generation.value == model.owner_generation + 1
            assert row.state is AuthorityState.READY
            self._accept(row)
        for old in arriving:
            self.active[old] -= 1
            self.active[new_owner] += 1

    @rule(
        object_id=st.sampled_from(KEYS),
        op=st.sampled_from(OPS),
        skew=st.integers(1, 5) | st.integers(-5, -1),
    )
    def stale_version_loses(self, object_id: str, op: str, skew: int) -> None:
        """Any expected version other than the current one loses with the current row.
        (Versions below 0 are malformed input, refused with ValueError: see
        tests/contract/store/test_store_invalid_input.py; they clamp to 0 here.)"""
        model = self.rows.get(object_id)
        if model is None:
            return
        key, version = ObjectKey.actor(object_id), max(0, model.version + skew)
        calls: dict[str, Callable[[], Awaitable[CasResult[AuthorityRow] | CasResult[None]]]] = {
            "commit": lambda: self.store.commit_ready(key, version),
            "abort": lambda: self.store.abort_creation(key, version),
            "begin_closing": lambda: self.store.begin_closing(key, version),
            "release": lambda: self.store.release(key, version),
            "change_owner": lambda: self.store.change_owner(key, version, self.fences[0]),
        }
        self._expect_conflict(object_id, run(calls[op]))

    # ----- invariants ---------------------------------------------------------------------
    @invariant()
    def store_agrees_with_model(self) -> None:
        async def read_all() -> tuple[list[AuthorityRow], list[tuple[int, int, int]]]:
            rows = list(await self.store.list_rows(Namespace.ACTOR, after=None, limit=1000))
            records = await self.store.list_nodes()
            by_rid = {r.descriptor.node_rid: r for r in records}
            usage = [
                (by_rid[f.node_rid].active, by_rid[f.node_rid].pending, by_rid[f.node_rid].capacity)
                for f in self.fences
            ]
            return rows, usage

        rows, usage = run(read_all)
        assert {r.key.object_id for r in rows} == set(self.rows)
        for row in rows:
            assert self._matches(row.key.object_id, row)
        for node, (active, pending, capacity) in enumerate(usage):
            assert (active, pending) == (self.active[node], self.pending[node])
            assert active >= 0 and pending >= 0
            assert active + pending <= capacity == CAPACITIES[node]


StoreMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestStoreCas = StoreMachine.TestCase
