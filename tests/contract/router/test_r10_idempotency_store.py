"""IdempotencyStore contract (spec 10 §6.3 D, §9.2, §14): the putIfAbsent matrix with input
hashes, the two TTLs, holders moving between nodes, holder-matched markDone, stale reset.
Defaults: primary 24 h, secondary 30 s, forward 5 min."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from router_kit import KEY, NODE_A, NODE_B, NODE_C, Advance, Timing, reserver

from zlink_trio.router import (
    AlreadyDone,
    HolderAcquired,
    HolderRejected,
    IdempotencyKey,
    IdempotencyState,
    IdempotencyStore,
    InFlight,
    InputConflict,
    Marked,
    MarkRejected,
    Rejection,
    Reserved,
    ReserverId,
    StaleInFlight,
    TextInput,
    input_hash,
)

H1 = input_hash(TextInput("hello"))
H2 = input_hash(TextInput("something else"))
RESULT = {"turnId": "t-1", "status": "ok", "text": "answer"}


async def _reserve(store: IdempotencyStore, holder: ReserverId, h: str = H1) -> None:
    assert isinstance(await store.put_if_absent(KEY, h, holder), Reserved)


async def test_r10_114_a_new_key_is_reserved_in_flight_then_done(
    idempotency: IdempotencyStore,
) -> None:
    """R10-114 (store side): a first put records IN_FLIGHT held by the caller; markDone by
    that holder makes it DONE with the result."""
    holder = reserver()
    outcome = await idempotency.put_if_absent(KEY, H1, holder)
    assert isinstance(outcome, Reserved)
    assert (outcome.entry.state, outcome.entry.holder_id) == (IdempotencyState.IN_FLIGHT, holder)
    found = await idempotency.find(KEY)
    assert found is not None and found.state is IdempotencyState.IN_FLIGHT
    marked = await idempotency.mark_done(KEY, holder, RESULT)
    assert isinstance(marked, Marked)
    found = await idempotency.find(KEY)
    assert found is not None
    assert (found.state, found.result) == (IdempotencyState.DONE, RESULT)


async def test_r10_115_same_key_same_input_in_flight_attaches(
    idempotency: IdempotencyStore,
) -> None:
    """R10-115 (store side): the same key and input while in flight is InFlight, naming the
    running attempt; nothing new is reserved (also while handed to the inbox)."""
    first = reserver(NODE_A)
    await _reserve(idempotency, first)
    again = await idempotency.put_if_absent(KEY, H1, reserver(NODE_B))
    assert isinstance(again, InFlight)
    assert again.entry.holder_id == first
    assert await idempotency.release_holder(KEY, first)
    assert isinstance(await idempotency.put_if_absent(KEY, H1, reserver(NODE_C)), InFlight)


async def test_r10_116_same_key_same_input_done_answers_the_cached_result(
    idempotency: IdempotencyStore,
) -> None:
    """R10-116 (store side): after DONE, the same key and input gets the cached result."""
    holder = reserver()
    await _reserve(idempotency, holder)
    await idempotency.mark_done(KEY, holder, RESULT)
    again = await idempotency.put_if_absent(KEY, H1, reserver(NODE_B))
    assert isinstance(again, AlreadyDone)
    assert again.entry.result == RESULT


async def test_r10_117_same_key_other_input_is_a_conflict(idempotency: IdempotencyStore) -> None:
    """R10-117 (store side): another input under a live key is an InputConflict, in flight
    and done alike, and it reserves nothing."""
    holder = reserver()
    await _reserve(idempotency, holder)
    conflict = await idempotency.put_if_absent(KEY, H2, reserver(NODE_B))
    assert isinstance(conflict, InputConflict)
    assert conflict.entry.input_hash == H1
    await idempotency.mark_done(KEY, holder, RESULT)
    assert isinstance(await idempotency.put_if_absent(KEY, H2, reserver(NODE_B)), InputConflict)
    found = await idempotency.find(KEY)
    assert found is not None and (found.input_hash, found.result) == (H1, RESULT)


async def test_r10_118_after_the_primary_ttl_the_key_is_new(
    idempotency: IdempotencyStore,
    advance: Advance,
    timing: Timing,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-118: 24 h after DONE the same key (any input) reserves a new turn."""
    holder = reserver()
    await _reserve(idempotency, holder)
    await idempotency.mark_done(KEY, holder, RESULT)
    await advance(timing.ttls.primary)
    assert await idempotency.find(KEY) is None
    fresh = await idempotency.put_if_absent(KEY, H2, reserver(NODE_B))
    assert isinstance(fresh, Reserved)
    assert fresh.entry.input_hash == H2


async def test_r10_119_a_stale_in_flight_entry_is_reset_once_then_re_entered(
    idempotency: IdempotencyStore,
    advance: Advance,
    timing: Timing,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-119: IN_FLIGHT untouched past the secondary TTL is reported stale; exactly one
    compareAndReset with its holder succeeds; the retry then reserves."""
    dead = reserver(NODE_A)
    await _reserve(idempotency, dead)
    await advance(timing.ttls.secondary + timing.pick(0.5, timing.slack))
    stale = await idempotency.put_if_absent(KEY, H1, reserver(NODE_B))
    assert isinstance(stale, StaleInFlight)
    assert stale.entry.holder_id == dead
    assert not await idempotency.compare_and_reset(KEY, reserver(NODE_B))
    assert await idempotency.compare_and_reset(KEY, dead)
    assert not await idempotency.compare_and_reset(KEY, dead)
    retry = reserver(NODE_B)
    assert isinstance(await idempotency.put_if_absent(KEY, H1, retry), Reserved)


async def test_r10_120_two_ttls(
    idempotency: IdempotencyStore,
    advance: Advance,
    timing: Timing,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-120: DONE answers at 23 h 59 m and is new at 24 h; IN_FLIGHT untouched for more
    than 30 s is stale (not at exactly 30 s); IN_FLIGHT touched by a live holder is still
    IN_FLIGHT, and not stale, after 10 min."""
    holder = reserver()
    await _reserve(idempotency, holder)
    await idempotency.mark_done(KEY, holder, RESULT)
    ttls = timing.ttls
    await advance(ttls.primary - timing.pick(60, timing.slack))
    assert isinstance(await idempotency.put_if_absent(KEY, H1, reserver()), AlreadyDone)
    await advance(timing.pick(60, 2 * timing.slack))
    assert isinstance(await idempotency.put_if_absent(KEY, H1, reserver()), Reserved)

    k2, untouched = IdempotencyKey("k-untouched"), reserver()
    assert isinstance(await idempotency.put_if_absent(k2, H1, untouched), Reserved)
    k3, live = IdempotencyKey("k-live"), reserver(NODE_B)
    assert isinstance(await idempotency.put_if_absent(k3, H1, live), Reserved)
    await advance(ttls.secondary - timing.pick(0, timing.slack))
    assert await idempotency.find_stale_in_flight() == ()
    assert await idempotency.touch(k3, live)
    await advance(timing.pick(0.5, 2 * timing.slack))
    assert {e.key for e in await idempotency.find_stale_in_flight()} == {KEY, k2}
    for _ in range(int(timing.pick(60, 4))):  # renewals every 10 s for 10 min
        assert await idempotency.touch(k3, live)
        await advance(timing.pick(10, ttls.secondary / 3))
    entry = await idempotency.find(k3)
    assert entry is not None and entry.state is IdempotencyState.IN_FLIGHT
    assert isinstance(await idempotency.put_if_absent(k3, H1, reserver()), InFlight)
    assert k3 not in [e.key for e in await idempotency.find_stale_in_flight()]


async def test_r10_121_the_holder_moves_between_nodes(
    idempotency: IdempotencyStore,
    advance: Advance,
    timing: Timing,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-121: the losing submitter clears the holder (releaseHolder); a holderless entry
    is never stale and lives on the forward TTL; the collector writes its own name back
    (acquireHolder, secondary TTL again); of two concurrent takeovers exactly one wins."""
    submitter = reserver(NODE_A)
    await _reserve(idempotency, submitter)
    assert await idempotency.release_holder(KEY, submitter)
    assert not await idempotency.release_holder(KEY, submitter)
    entry = await idempotency.find(KEY)
    assert entry is not None and entry.holder_id is None
    await advance(timing.ttls.secondary * timing.pick(4, 1.5))
    assert await idempotency.find_stale_in_flight() == ()

    winners: list[ReserverId] = []
    b, c = reserver(NODE_B), reserver(NODE_C)

    async def take(holder: ReserverId) -> None:
        if isinstance(await idempotency.acquire_holder(KEY, holder), HolderAcquired):
            winners.append(holder)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(take, b)
        nursery.start_soon(take, c)
    assert len(winners) == 1
    collector = winners[0]
    entry = await idempotency.find(KEY)
    assert entry is not None and entry.holder_id == collector
    # back on the secondary TTL: untouched is stale
    await advance(timing.ttls.secondary + timing.pick(0.5, timing.slack))
    assert [e.holder_id for e in await idempotency.find_stale_in_flight()] == [collector]


async def test_a_holderless_entry_expires_on_the_forward_ttl(
    idempotency: IdempotencyStore,
    advance: Advance,
    timing: Timing,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§9.2/§6.3 D: a reservation handed to the inbox sits on the forward TTL (5 min)."""
    submitter = reserver()
    await _reserve(idempotency, submitter)
    await idempotency.release_holder(KEY, submitter)
    await advance(timing.ttls.forward - timing.pick(1, timing.slack))
    assert await idempotency.find(KEY) is not None
    await advance(timing.pick(1, 2 * timing.slack))
    assert await idempotency.find(KEY) is None
    assert await idempotency.acquire_holder(KEY, reserver()) == HolderRejected(Rejection.EXPIRED)


async def test_takeover_rejections(idempotency: IdempotencyStore) -> None:
    """§6.3 D: a takeover is refused for a DONE entry, one with a holder, and a gone one."""
    assert await idempotency.acquire_holder(KEY, reserver()) == HolderRejected(Rejection.EXPIRED)
    holder = reserver()
    await _reserve(idempotency, holder)
    assert await idempotency.acquire_holder(KEY, reserver(NODE_B)) == HolderRejected(Rejection.HELD)
    await idempotency.mark_done(KEY, holder, RESULT)
    assert await idempotency.acquire_holder(KEY, reserver(NODE_B)) == HolderRejected(Rejection.DONE)


async def test_r10_122_mark_done_is_holder_matched_and_never_overwrites(
    idempotency: IdempotencyStore,
) -> None:
    """R10-122 / §14 (closed in the store): markDone matches the holder. A node the store
    called "not yours" cannot write, and a DONE answer is never replaced; the cached result
    stays the first answer."""
    first = reserver(NODE_A)
    await _reserve(idempotency, first)
    intruder = reserver(NODE_B)
    assert await idempotency.mark_done(KEY, intruder, {"text": "x"}) == MarkRejected(
        Rejection.NOT_HOLDER
    )
    assert isinstance(await idempotency.mark_done(KEY, first, RESULT), Marked)
    assert await idempotency.mark_done(KEY, first, {"text": "second"}) == MarkRejected(
        Rejection.DONE
    )
    assert await idempotency.mark_done(KEY, intruder, {"text": "third"}) == MarkRejected(
        Rejection.DONE
    )
    found = await idempotency.find(KEY)
    assert found is not None and found.result == RESULT
    # a holderless reservation (handed to the inbox) is nobody's to finish
    k2, submitter = IdempotencyKey("k-2"), reserver()
    assert isinstance(await idempotency.put_if_absent(k2, H1, submitter), Reserved)
    await idempotency.release_holder(k2, submitter)
    assert await idempotency.mark_done(k2, submitter, RESULT) == MarkRejected(Rejection.NOT_HOLDER)
    assert await idempotency.mark_done(IdempotencyKey("nope"), submitter, RESULT) == MarkRejected(
        Rejection.EXPIRED
    )


async def test_r10_123_one_of_three_sweepers_wins_the_reset(
    idempotency: IdempotencyStore,
    advance: Advance,
    timing: Timing,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-123: three sweepers find the same stale entry and compareAndReset it with the
    holder they read: exactly one wins."""
    dead = reserver(NODE_A)
    await _reserve(idempotency, dead)
    await advance(timing.ttls.secondary + timing.pick(1, timing.slack))
    wins: list[bool] = []
    found: list[object] = []
    all_found = trio.Event()

    async def sweeper() -> None:
        stale = await idempotency.find_stale_in_flight()
        found.append(stale)
        if len(found) == 3:  # the premise: all three read the entry before any resets it
            all_found.set()
        await all_found.wait()
        for entry in stale:
            assert entry.holder_id is not None
            wins.append(await idempotency.compare_and_reset(entry.key, entry.holder_id))

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(sweeper)
    assert sorted(wins) == [False, False, True]
    assert await idempotency.find(KEY) is None


async def test_touch_names_the_reservation_holder(
    idempotency: IdempotencyStore,
    advance: Advance,
    timing: Timing,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """§7.4 (R10-99, store side): touch matches the reservation's holder; touching with the
    lease holder's bare node id, or any other name, silently does nothing."""
    holder = ReserverId.new(NODE_A)
    await _reserve(idempotency, holder)
    before = await idempotency.find(KEY)
    assert before is not None
    step = timing.pick(10, 3 * timing.slack)
    await advance(step)
    assert not await idempotency.touch(KEY, ReserverId(NODE_A.value))
    assert not await idempotency.touch(KEY, reserver(NODE_A))
    unchanged = await idempotency.find(KEY)
    assert unchanged is not None and unchanged.last_touched_at == before.last_touched_at
    assert await idempotency.touch(KEY, holder)
    touched = await idempotency.find(KEY)
    assert touched is not None
    assert timing.near(touched.last_touched_at, before.last_touched_at + step)
    await idempotency.mark_done(KEY, holder, RESULT)
    assert not await idempotency.touch(KEY, holder)  # DONE is not touched


async def test_results_are_plain_primitives(idempotency: IdempotencyStore) -> None:
    """§2: a cached result is stored as JSON primitives; a typed object is refused."""
    holder = reserver()
    await _reserve(idempotency, holder)
    with pytest.raises(TypeError):
        await idempotency.mark_done(KEY, holder, {"result": object()})  # type: ignore[dict-item]
    assert isinstance(await idempotency.mark_done(KEY, holder, {"n": 1, "l": [1, "a"]}), Marked)
    found = await idempotency.find(KEY)
    assert found is not None and found.result == {"n": 1, "l": [1, "a"]}


async def test_find_stale_respects_the_limit_and_skips_done(
    idempotency: IdempotencyStore,
    advance: Advance,
    timing: Timing,
    autojump_clock: trio.testing.MockClock,
) -> None:
    holders = {}
    for i in range(5):
        key, holder = IdempotencyKey(f"k{i}"), reserver()
        assert isinstance(await idempotency.put_if_absent(key, H1, holder), Reserved)
        holders[key] = holder
        await advance(timing.pick(1, 0.05))
    await idempotency.mark_done(IdempotencyKey("k0"), holders[IdempotencyKey("k0")], RESULT)
    await advance(timing.ttls.secondary + timing.pick(0, timing.slack))
    stale = await idempotency.find_stale_in_flight(limit=3)
    assert [e.key.value for e in stale] == ["k1", "k2", "k3"]
    assert len(await idempotency.find_stale_in_flight()) == 4


async def test_a_reservation_records_the_session_it_was_made_for(
    idempotency: IdempotencyStore,
) -> None:
    """§6.3 D: the entry keeps the session the reserving submit named (what a holder-loss
    announcement names), through takeover and markDone; a reserver that names none gets
    None."""
    from router_kit import S1

    holder = reserver()
    outcome = await idempotency.put_if_absent(KEY, H1, holder, session_id=S1)
    assert isinstance(outcome, Reserved) and outcome.entry.session_id == S1
    assert await idempotency.release_holder(KEY, holder)
    taker = reserver(NODE_B)
    assert isinstance(await idempotency.acquire_holder(KEY, taker), HolderAcquired)
    assert isinstance(await idempotency.mark_done(KEY, taker, RESULT), Marked)
    found = await idempotency.find(KEY)
    assert found is not None and found.session_id == S1
    other = IdempotencyKey("k-unnamed")
    unnamed = await idempotency.put_if_absent(other, H1, reserver())
    assert isinstance(unnamed, Reserved) and unnamed.entry.session_id is None
