"""A hypothesis state machine drives MemoryIdempotencyStore against a small model of §9.2:
one key, a few attempts, time moving in steps around the TTLs. Every operation's answer
must match the model. (Each call runs in its own ``trio.run``; the store reads a fake clock,
so time is the machine's, not trio's.)"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import attrs
import trio
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from zlink_trio.router import (
    AlreadyDone,
    HolderAcquired,
    IdempotencyKey,
    IdempotencyState,
    IdempotencyTtls,
    InFlight,
    InputConflict,
    Marked,
    MemoryIdempotencyStore,
    Reserved,
    ReserverId,
    StaleInFlight,
)

T = TypeVar("T")
KEY = IdempotencyKey("k")
TTLS = IdempotencyTtls(primary=100.0, secondary=10.0, forward=40.0)
HOLDERS = [ReserverId(f"node/{i}") for i in range(3)]
HASHES = ["h1", "h2"]


def run(fn: Callable[[], Awaitable[T]]) -> T:
    return trio.run(fn)


@attrs.define
class Model:
    state: IdempotencyState
    input_hash: str
    holder: ReserverId | None
    touched: float
    expires: float | None
    result: dict[str, object] | None = None


class IdempotencyMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.store = MemoryIdempotencyStore(ttls=TTLS, clock=lambda: self.now)
        self.model: Model | None = None
        self.results = 0

    def live(self) -> Model | None:
        m = self.model
        if m is not None and m.expires is not None and self.now >= m.expires:
            self.model = m = None
        return m

    def stale(self, m: Model) -> bool:
        return (
            m.state is IdempotencyState.IN_FLIGHT
            and m.holder is not None
            and m.touched < self.now - TTLS.secondary
        )

    @rule(dt=st.sampled_from([0.5, 5.0, 9.99, 10.0, 10.01, 39.0, 41.0, 99.0, 101.0]))
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule(h=st.sampled_from(HASHES), holder=st.sampled_from(HOLDERS))
    def put(self, h: str, holder: ReserverId) -> None:
        got = run(lambda: self.store.put_if_absent(KEY, h, holder))
        m = self.live()
        if m is None:
            assert isinstance(got, Reserved)
            self.model = Model(IdempotencyState.IN_FLIGHT, h, holder, self.now, None)
        elif self.stale(m):
            assert isinstance(got, StaleInFlight) and got.entry.holder_id == m.holder
        elif m.input_hash != h:
            assert isinstance(got, InputConflict)
        elif m.state is IdempotencyState.DONE:
            assert isinstance(got, AlreadyDone) and got.entry.result == m.result
        else:
            assert isinstance(got, InFlight)

    @rule(holder=st.sampled_from(HOLDERS))
    def mark_done(self, holder: ReserverId) -> None:
        self.results += 1
        result = {"n": self.results}
        got = run(lambda: self.store.mark_done(KEY, holder, result))
        m = self.live()
        ok = m is not None and m.state is IdempotencyState.IN_FLIGHT and m.holder == holder
        assert isinstance(got, Marked) == ok
        if ok:
            assert m is not None
            m.state, m.result, m.touched = IdempotencyState.DONE, result, self.now
            m.expires = self.now + TTLS.primary

    @rule(holder=st.sampled_from(HOLDERS))
    def acquire(self, holder: ReserverId) -> None:
        got = run(lambda: self.store.acquire_holder(KEY, holder))
        m = self.live()
        ok = m is not None and m.state is IdempotencyState.IN_FLIGHT and m.holder is None
        assert isinstance(got, HolderAcquired) == ok
        if ok:
            assert m is not None
            m.holder, m.touched, m.expires = holder, self.now, None

    @rule(holder=st.sampled_from(HOLDERS))
    def release(self, holder: ReserverId) -> None:
        got = run(lambda: self.store.release_holder(KEY, holder))
        m = self.live()
        ok = m is not None and m.state is IdempotencyState.IN_FLIGHT and m.holder == holder
        assert got == ok
        if ok:
            assert m is not None
            m.holder, m.expires = None, self.now + TTLS.forward

    @rule(holder=st.sampled_from(HOLDERS))
    def reset(self, holder: ReserverId) -> None:
        got = run(lambda: self.store.compare_and_reset(KEY, holder))
        m = self.live()
        ok = m is not None and m.state is IdempotencyState.IN_FLIGHT and m.holder == holder
        assert got == ok
        if ok:
            self.model = None

    @rule(holder=st.sampled_from(HOLDERS))
    def touch(self, holder: ReserverId) -> None:
        got = run(lambda: self.store.touch(KEY, holder))
        m = self.live()
        ok = m is not None and m.state is IdempotencyState.IN_FLIGHT and m.holder == holder
        assert got == ok
        if ok:
            assert m is not None
            m.touched = self.now

    @invariant()
    def agrees(self) -> None:
        entry = run(lambda: self.store.find(KEY))
        stale = run(lambda: self.store.find_stale_in_flight())
        m = self.live()
        if m is None:
            assert entry is None and stale == ()
            return
        assert entry is not None
        assert (entry.state, entry.input_hash, entry.holder_id, entry.result) == (
            m.state,
            m.input_hash,
            m.holder,
            m.result,
        )
        assert (stale != ()) == self.stale(m)


IdempotencyMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30)
test_idempotency_store_matches_the_model = IdempotencyMachine.TestCase
