"""Messages nobody has collected (spec 10 §6.3 D, §14): the waiting node re-rings the
doorbell at each poll tick while the inbox holds messages (or cannot be read); the orphan
scan picks up what remains when the waiting node died too; a forward fails at its deadline
whatever the idempotency store does."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from router_app import Registry, Shared, World, all_on_time, builder, on_time, start_crashable
from router_kit import AGENT, KEY, S1, message

from zlink_trio.router import (
    DispositionKind,
    ForwardTimeout,
    IdempotencyKey,
    IdempotencyState,
    LeaseGranted,
    NodeId,
    ReserverId,
    SessionId,
    SessionMetrics,
    SignalKind,
    SubmitRequest,
    open_session_router,
)
from zlink_trio.testing import crash_session_router, settle


def _request(text: str, **kw: object) -> SubmitRequest:
    return SubmitRequest(session_id=S1, agent_ref=AGENT, user_input=text, **kw)  # type: ignore[arg-type]


class Rerings(SessionMetrics):
    """Counts re-rings (a hook runs in a worker thread: no Trio clock there)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sessions: list[SessionId] = []

    def on_forward_doorbell_rerung(self, session_id: SessionId) -> None:
        with self.lock:
            self.sessions.append(session_id)


@asynccontextmanager
async def doorbells(shared: Shared) -> AsyncIterator[list[tuple[float, str]]]:
    """(time, origin) of every MESSAGE_ENQUEUED published while the block runs."""
    seen: list[tuple[float, str]] = []
    async with shared.bus.subscribe() as receive, trio.open_nursery() as nursery:

        async def pump() -> None:
            async for signal in receive:
                if signal.kind is SignalKind.MESSAGE_ENQUEUED:
                    seen.append((trio.current_time(), signal.origin.value))  # noqa: PERF401

        nursery.start_soon(pump)
        yield seen
        nursery.cancel_scope.cancel()


class Acquires:
    """A lease store recording every try_acquire: (time, node, granted)."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self.calls: list[tuple[float, str, bool]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    async def try_acquire(self, session_id: SessionId, holder: NodeId, ttl: float) -> Any:
        outcome = await self._target.try_acquire(session_id, holder, ttl)
        self.calls.append((trio.current_time(), holder.value, isinstance(outcome, LeaseGranted)))
        return outcome


async def test_r10_72_each_poll_tick_rings_again_until_a_peer_runs_the_orphan(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-72 / R10-74 / R10-75: h dies at 2 s mid-turn with a's message uncollected in
    the inbox (holderless: no sweep sees it). a's forward waiter publishes MESSAGE_ENQUEUED
    at each 15 s poll tick (each counted by on_forward_doorbell_rerung); the tick at 30 s,
    when h's lease (renewed last at 0 s) has expired, lets a peer claim the session and run
    the message — 28 s after h died, within lease + one poll interval — and the forward
    completes. The waiter rings, it never runs the turn itself: its poll read at 45 s
    happens while the message's 20 s turn (30 → 50 s) runs in a drain pass."""

    class Finds:
        def __init__(self, target: Any) -> None:
            self._target = target
            self.at: list[float] = []

        def __getattr__(self, name: str) -> Any:
            return getattr(self._target, name)

        async def find(self, key: IdempotencyKey) -> Any:
            self.at.append(trio.current_time())
            return await self._target.find(key)

    world.duration = lambda t: 1000.0 if t == "long" else 20.0
    t0 = trio.current_time()
    rerings = Rerings()
    finds = Finds(shared.idempotency)
    a_shared = attrs.evolve(shared, idempotency=finds)
    async with trio.open_nursery() as nursery:
        h = await start_crashable(nursery, builder(shared, world, registry, "h"))
        async with (
            open_session_router(builder(a_shared, world, registry, "a", metrics=rerings)) as a,
            open_session_router(builder(shared, world, registry, "b")),
            doorbells(shared) as rings,
        ):
            await h.submit(_request("long"))
            waiting = await a.submit(_request("orphan", idempotency_key=KEY))
            assert waiting.kind is DispositionKind.FORWARDED
            await trio.sleep_until(t0 + shared.s(2.0))
            crash_session_router(h)
            answer = await waiting.result
            done_at = trio.current_time() - t0
        nursery.cancel_scope.cancel()
    assert all_on_time(shared, [t - t0 for t in finds.at], [15.0, 30.0, 45.0])
    orphan = next(t for t in world.turns if t.text == "orphan")
    assert on_time(shared, orphan.start - t0, 30.0) and orphan.node in ("a", "b")
    assert on_time(shared, done_at, 50.0) and answer.text.endswith(":orphan:0")
    assert [o for _, o in rings] == ["a", "a", "a"]
    assert all_on_time(shared, [t - t0 for t, _ in rings], [0.0, 15.0, 30.0])
    assert rerings.sessions == [S1, S1]


async def test_r10_73_no_ring_for_an_empty_inbox_a_ring_when_it_cannot_be_read(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-73 / R10-75: a's forward rings at its poll ticks while its message waits in the
    inbox (15 … 90 s), and rings nothing once h has collected it (105 … 195 s: the inbox is
    empty, only h can answer now). c's forward, whose message h collects at once, rings at
    every tick all the same, because c's inbox reads fail (not seeing the queue is no proof
    it is empty). on_forward_doorbell_rerung counts exactly those re-rings on each node."""

    class Unreadable:
        def __init__(self, target: Any) -> None:
            self._target = target

        def __getattr__(self, name: str) -> Any:
            return getattr(self._target, name)

        async def has_pending(self, session_id: SessionId) -> bool:
            raise ConnectionError("inbox unreachable")

    world.duration = lambda t: 100.0
    quiet, blind = Rerings(), Rerings()
    c_shared = attrs.evolve(shared, inbox=Unreadable(shared.inbox))
    async with (
        open_session_router(builder(shared, world, registry, "h")) as h,
        open_session_router(builder(shared, world, registry, "a", metrics=quiet)) as a,
        doorbells(shared) as rings,
    ):
        await h.submit(_request("first"))  # h runs it 0 → 100 s
        second = await a.submit(_request("second"))  # collected at 100 s, runs to 200 s
        await second.result
        async with open_session_router(builder(c_shared, world, registry, "c", metrics=blind)) as c:
            third = await c.submit(_request("third"))  # collected at once, runs to 300 s
            await third.result
    assert [t for t, o in rings if o == "a"] == [15.0 * k for k in range(7)]
    assert [t for t, o in rings if o == "c"] == [200.0 + 15.0 * k for k in range(7)]
    assert quiet.sessions == [S1] * 6
    assert blind.sessions == [S1] * 6


async def test_r10_74_a_live_holder_costs_one_refused_acquire_per_poll(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-74: with a live holder running a 100 s turn, a's waiting forward re-rings every
    15 s and each ring costs exactly one refused acquire (a's; the holder hears the ring
    mid-turn and does nothing); the holder's lease is never taken and its turn ends
    normally, then it runs the waiting message."""
    acquires = Acquires(shared.leases)
    world.duration = lambda t: 100.0 if t == "long" else 1.0
    spied = attrs.evolve(shared, leases=acquires)
    async with (
        open_session_router(builder(spied, world, registry, "h")) as h,
        open_session_router(builder(spied, world, registry, "a")) as a,
    ):
        long = await h.submit(_request("long"))
        waiting = await a.submit(_request("waiting"))
        assert (await long.result).text == "h:long:0"
        assert (await waiting.result).text == "h:waiting:2"
    refused = [(t, n) for t, n, granted in acquires.calls if not granted and t > 0]
    assert refused == [(15.0 * k, "a") for k in range(1, 7)]  # after the hand-over at 0 s
    assert [(n, g) for _, n, g in acquires.calls if g] == [("h", True)]
    assert not world.turns[0].interrupted


async def test_r10_75_a_recording_metrics_instance_counts_each_re_ring(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-75: on_forward_doorbell_rerung is called once per re-ring: a's forward waits
    45 s in the inbox behind a live turn, its three poll ticks (15, 30, 45 s) re-publish
    MESSAGE_ENQUEUED, and a's recording metrics counts exactly three; the holder, which
    waits on nothing, counts none."""
    world.duration = lambda t: 50.0 if t == "long" else 1.0
    t0 = trio.current_time()
    on_a, on_h = Rerings(), Rerings()
    async with (
        open_session_router(builder(shared, world, registry, "h", metrics=on_h)) as h,
        open_session_router(builder(shared, world, registry, "a", metrics=on_a)) as a,
        doorbells(shared) as rings,
    ):
        await h.submit(_request("long"))
        await (await a.submit(_request("waiting"))).result
    assert all_on_time(shared, [t - t0 for t, o in rings if o == "a"], [0.0, 15.0, 30.0, 45.0])
    assert on_a.sessions == [S1, S1, S1]
    assert on_h.sessions == []


async def test_r10_76_an_orphan_whose_waiting_node_died_too_is_picked_up(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-76 (fixed here, beyond the original: docs/router.md): the holder h dies mid-turn
    and so does a, the node waiting on the keyed message it delivered (uncollected, its
    reservation holderless). Nobody re-rings and nobody submits again, yet b's orphan scan
    (each holder-loss sweep, for messages older than lease + one poll interval: 45 s) claims
    the session at its first sweep after that age (60 s; the lease expired at 30 s) and runs
    the message; its reservation is taken over
    and finished, so the client's retry with the same key gets the cached answer and runs
    nothing."""
    world.duration = lambda t: 1000.0 if t == "long" else 1.0
    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        h = await start_crashable(nursery, builder(shared, world, registry, "h"))
        a = await start_crashable(nursery, builder(shared, world, registry, "a"))
        async with open_session_router(builder(shared, world, registry, "b")) as b:
            await h.submit(_request("long"))
            await a.submit(_request("orphan", idempotency_key=KEY))
            await trio.sleep_until(t0 + shared.s(2.0))
            crash_session_router(h)
            crash_session_router(a)
            await trio.sleep_until(t0 + shared.s(100.0))
            orphan = [t for t in world.turns if t.text == "orphan"]
            assert [t.node for t in orphan] == ["b"]
            assert all_on_time(shared, [t.start - t0 for t in orphan], [60.0])
            entry = await shared.idempotency.find(KEY)
            assert entry is not None and entry.state is IdempotencyState.DONE
            retry = await b.submit(_request("orphan", idempotency_key=KEY))
            assert retry.kind is DispositionKind.EXECUTED_LOCALLY
            assert (await retry.result).text == "b:orphan:0"
        nursery.cancel_scope.cancel()
    assert [t.text for t in world.turns].count("orphan") == 1


async def test_r10_178_a_forward_fails_at_its_deadline_while_the_store_is_down(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-178 (fixed here: docs/router.md): the holder dies after collecting a's keyed
    message, and the idempotency store is unreadable for a from then on (every find, and
    its sweeps, throw). The forward still fails at its deadline — ForwardTimeout exactly
    idempotency_forward_ttl (300 s) after the submit, never later — instead of polling
    forever."""

    class Down:
        def __init__(self, target: Any) -> None:
            self._target = target
            self.down = False
            self.failed_reads = 0

        def __getattr__(self, name: str) -> Any:
            value = getattr(self._target, name)
            if self.down and name in ("find", "find_stale_in_flight"):

                async def fail(*_a: Any, **_k: Any) -> Any:
                    self.failed_reads += 1
                    raise ConnectionError("idempotency store down")

                return fail
            return value

    world.duration = lambda t: 1000.0 if t == "job" else 1.0
    down = Down(shared.idempotency)
    async with trio.open_nursery() as nursery:
        h = await start_crashable(nursery, builder(shared, world, registry, "h"))
        async with open_session_router(
            builder(attrs.evolve(shared, idempotency=down), world, registry, "a")
        ) as a:
            await (await h.submit(_request("bind"))).result
            job = await a.submit(_request("job", idempotency_key=KEY))
            submitted = trio.current_time()
            await settle()
            crash_session_router(h)
            down.down = True
            with pytest.raises(ForwardTimeout):
                await job.result
            assert trio.current_time() == submitted + 300.0
        nursery.cancel_scope.cancel()
    assert down.failed_reads >= 19  # every poll tick read and failed


async def test_r10_76_messages_left_for_a_deleted_session_are_purged_by_the_scan(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-76 / R10-170 (the scan's other half): a keyed message delivered for a session
    after its delete purged the inbox (its sender died) can never run — no drain brings a
    deleted record back. The orphan scan purges it once it is older than lease + one poll
    interval and frees its key, so it neither waits forever nor heads every later scan; the
    record stays deleted."""
    world.duration = lambda _t: 1.0
    async with open_session_router(builder(shared, world, registry, "a")) as a:
        await (await a.submit(_request("x"))).result
        assert await a.delete_session(S1)
        late = _request("late", idempotency_key=KEY)
        reserver = ReserverId.new(NodeId("dead"))
        await shared.idempotency.put_if_absent(KEY, late.input_hash(), reserver, session_id=S1)
        assert await shared.idempotency.release_holder(KEY, reserver)
        await shared.inbox.deliver(message("late", key=KEY))
        await trio.sleep(shared.s(46))
        assert await shared.inbox.has_pending(S1)  # not yet older than 45 s at the 45 s sweep
        await trio.sleep(shared.s(15))
        assert not await shared.inbox.has_pending(S1)
        assert await shared.idempotency.find(KEY) is None
        assert await shared.records.load(S1) is None
    assert [t.text for t in world.turns] == ["x"]


async def test_r10_72_a_message_the_dying_holder_collected_but_never_ran_is_run_by_a_peer(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-72 / R10-74 (fixed here: docs/router.md): as above, but a's message lands in the
    inbox before h's pass makes the collect that precedes its first turn, so that collect
    takes it and h queues it behind its own 1000 s turn. h dies at 5 s mid-turn (before its
    first renewal; on a slow PostgreSQL run not before h's put-back below committed, at most
    at 8 s: a crash inside that statement can still lose it). The message
    was not lost with h: h's pass put it back in the inbox before its turn started, so a's
    poll ticks ring for it and a peer runs it once h's lease has expired (30 s), and the
    forward completes — instead of failing at the forward deadline (300 s)."""

    class FirstCollectAfter:
        """h's inbox: its first collect waits until a's message is delivered."""

        def __init__(self, target: Any, delivered: trio.Event) -> None:
            self._target = target
            self._delivered = delivered
            self.put_back = trio.Event()

        def __getattr__(self, name: str) -> Any:
            return getattr(self._target, name)

        async def collect(self, session_id: SessionId, up_to: Any) -> Any:
            await self._delivered.wait()
            return await self._target.collect(session_id, up_to)

        async def deliver(self, message: Any) -> None:
            await self._target.deliver(message)
            self.put_back.set()  # h delivers nothing of its own here

    class Delivering:
        """a's inbox: marks the delivery of its message."""

        def __init__(self, target: Any, delivered: trio.Event) -> None:
            self._target = target
            self._delivered = delivered

        def __getattr__(self, name: str) -> Any:
            return getattr(self._target, name)

        async def deliver(self, message: Any) -> None:
            await self._target.deliver(message)
            self._delivered.set()

    world.duration = lambda t: 1000.0 if t == "long" else 20.0
    delivered = trio.Event()
    gated = FirstCollectAfter(shared.inbox, delivered)
    h_shared = attrs.evolve(shared, inbox=gated)
    a_shared = attrs.evolve(shared, inbox=Delivering(shared.inbox, delivered))
    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        h = await start_crashable(nursery, builder(h_shared, world, registry, "h"))
        async with (
            open_session_router(builder(a_shared, world, registry, "a")) as a,
            open_session_router(builder(shared, world, registry, "b")),
        ):
            await h.submit(_request("long"))
            waiting = await a.submit(_request("orphan", idempotency_key=KEY))
            assert waiting.kind is DispositionKind.FORWARDED
            with trio.move_on_at(t0 + shared.s(8.0)):
                await gated.put_back.wait()
            await trio.sleep_until(t0 + shared.s(5.0))
            crash_session_router(h)
            answer = await waiting.result
            done_at = trio.current_time() - t0
        nursery.cancel_scope.cancel()
    first = world.turns[0]
    assert (first.node, first.text) == ("h", "long")  # h ran its own turn first
    orphan = [t for t in world.turns if t.text == "orphan"]
    assert len(orphan) == 1 and orphan[0].node in ("a", "b")
    assert on_time(shared, orphan[0].start - t0, 30.0)
    assert on_time(shared, done_at, 50.0) and answer.text.endswith(":orphan:0")
