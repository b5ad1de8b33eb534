"""Random traffic through the real engine (hypothesis, one ``trio.run`` per example on a
MockClock): per-lane order, exactly-once execution and gate exclusivity hold whatever the
interleaving."""

from __future__ import annotations

import trio
import trio.testing
from hypothesis import given, settings, strategies as st

from zlink_trio.engine import ActorDeliveryLane, SpotLane, open_engine
from zlink_trio.errors import CapacityExceeded

LANES = 6
SHARED = {0, 1, 2}  # lanes 0..2 share one gate (SpotWide); 3..5 have their own

# (lane, lifecycle?, how the turn yields: 0 not at all, 1 a checkpoint, 2 a timed sleep)
Step = tuple[int, bool, int]
STEPS = st.lists(
    st.tuples(st.integers(0, LANES - 1), st.booleans(), st.integers(0, 2)), max_size=120
)


@settings(max_examples=60, deadline=None)
@given(
    steps=STEPS,
    batch_size=st.integers(1, 8),
    capacity=st.integers(1, 6),
    burst=st.integers(1, 3),
    idle_runners=st.integers(0, 3),
)
def test_random_traffic_keeps_order_exactly_once_and_gates(
    steps: list[Step], batch_size: int, capacity: int, burst: int, idle_runners: int
) -> None:
    executed: dict[int, list[tuple[bool, int]]] = {n: [] for n in range(LANES)}
    shared_active = 0
    shared_peak = 0

    def make_handler(lane_no: int):  # type: ignore[no-untyped-def]
        async def handler(item: tuple[bool, int, int]) -> None:
            nonlocal shared_active, shared_peak
            lifecycle, seq, how = item
            if lane_no in SHARED:
                shared_active += 1
                shared_peak = max(shared_peak, shared_active)
            try:
                executed[lane_no].append((lifecycle, seq))
                if how == 1:
                    await trio.lowlevel.checkpoint()
                elif how == 2:
                    await trio.sleep(0.001)
            finally:
                if lane_no in SHARED:
                    shared_active -= 1

        return handler

    async def main() -> None:
        async with open_engine(
            batch_size=batch_size,
            lane_capacity=capacity,
            lifecycle_burst=burst,
            idle_runners=idle_runners,
        ) as engine:
            gate = engine.new_gate()
            lanes = [
                engine.new_lane(
                    SpotLane() if n == 0 else ActorDeliveryLane(),
                    make_handler(n),
                    gate=gate if n in SHARED else None,
                )
                for n in range(LANES)
            ]
            for seq, (n, lifecycle, how) in enumerate(steps):
                item = (lifecycle, seq, how)
                try:
                    lanes[n].submit_nowait(item, lifecycle=lifecycle)
                except CapacityExceeded:
                    await lanes[n].submit(item, lifecycle=lifecycle)
                if how == 2:
                    await trio.lowlevel.checkpoint()  # let the engine interleave with us
            await engine.wait_idle()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

    for n in range(LANES):
        submitted = [(lc, seq) for seq, (m, lc, _) in enumerate(steps) if m == n]
        ran = executed[n]
        assert sorted(ran, key=lambda x: x[1]) == submitted  # everything once, nothing else
        for kind in (True, False):  # each queue in acceptance order
            seqs = [seq for lc, seq in ran if lc is kind]
            assert seqs == sorted(seqs)
    assert shared_peak <= 1
