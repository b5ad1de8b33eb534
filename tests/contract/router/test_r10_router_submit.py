"""The submission sequence F0–F7 (spec 10 §7.1), the idempotency matrix as the router
applies it (§9.2), dispositions (§9.1), opening (§6.1). Orderings are proven with spies
that log every SPI call in one list, a synchronous bus and a dropped broadcast."""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing
from router_app import Registry, Shared, World, builder, cluster, on_time
from router_kit import AGENT, KEY, OTHER_AGENT, S1, Advance, CallLog, DroppingBus

from zlink_trio.errors import ShuttingDown
from zlink_trio.router import (
    ConflictingAgentError,
    DispositionKind,
    ExecutedLocally,
    Forwarded,
    ForwardTimeout,
    IdempotencyConflictError,
    IdempotencyKey,
    IdempotencyState,
    LeaseGranted,
    NodeId,
    Priority,
    SessionSignal,
    SignalKind,
    SubmitRequest,
    TurnId,
    open_session_router,
    turn_result_to_wire,
)
from zlink_trio.router.events import AgentExecutionResult, TurnSucceeded
from zlink_trio.testing import settle

GHOST = NodeId("ghost")


def _request(text: str = "hi", **kw: object) -> SubmitRequest:
    return SubmitRequest(session_id=S1, agent_ref=AGENT, user_input=text, **kw)  # type: ignore[arg-type]


def _spied(shared: Shared, log: CallLog) -> Shared:
    return Shared(
        log.spy("records", shared.records),
        log.spy("leases", shared.leases),
        log.spy("inbox", shared.inbox),
        log.spy("bus", shared.bus),
        log.spy("idem", shared.idempotency),
        shared.config,
    )


async def _ghost_holds(shared: Shared) -> None:
    """A holder with no router: nothing will ever drain its inbox."""
    assert isinstance(await shared.leases.try_acquire(S1, GHOST, 10_000), LeaseGranted)


async def test_r10_24_submit_answers_a_disposition_or_raises_conflict(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-24: submit returns a SubmitDisposition; an agent mismatch raises
    ConflictingAgentError (409)."""
    async with cluster(shared, world, registry, ["a"]) as (a,):
        disposition = await a.submit(_request())
        assert isinstance(disposition, ExecutedLocally)
        assert (await disposition.result).text == "a:hi:0"
        with pytest.raises(ConflictingAgentError) as info:
            await a.submit(attrs.evolve(_request(), agent_ref=OTHER_AGENT))
        assert info.value.http_status == 409


async def test_r10_53_no_warm_up_lazy_record_one_open(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-53: starting the router opens nothing; the first submit makes one claim that
    creates the record; the opener is called once on that node (and looks the runtime up)."""
    log = CallLog()
    spied = _spied(shared, log)
    async with cluster(spied, world, registry, ["a"]) as (a,):
        await settle()
        assert world.opens == {}
        assert log.of("leases") == [] and log.of("records") == []
        await (await a.submit(_request())).result
        assert log.of("leases").count("leases.try_acquire") == 1
        assert log.of("records").count("records.provision") == 1
        assert world.opens == {"a": 1}
        assert world.runtime_lookups == 1 and world.runtime_constructions == 0
    view = await shared.records.load(S1)
    assert view is not None and view.agent_ref == AGENT


async def test_r10_78_f0_subscribed_first_and_a_synchronous_rail_is_not_missed(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-78: the router subscribes before any submit I/O; with a bus on which the holder
    answers TURN_RESULT synchronously during delivery, the forwarded result still completes
    through the rail, without one polling ``find``."""
    log = CallLog()
    spied = _spied(shared, log)

    class InstantHolderInbox:
        """Delivery makes the (ghost) holder answer at once, before deliver returns."""

        def __init__(self, target: object) -> None:
            self._target = target

        def __getattr__(self, name: str) -> object:
            return getattr(self._target, name)

        async def deliver(self, message: object) -> None:
            await spied.inbox.deliver(message)
            turn = TurnId.for_message(message.message_id)  # type: ignore[attr-defined]
            payload = {"messageId": message.message_id.value, "idempotencyKey": KEY.value}  # type: ignore[attr-defined]
            payload.update(
                turn_result_to_wire(turn, TurnSucceeded(AgentExecutionResult("instant")))
            )
            await shared.bus.publish(
                SessionSignal(
                    kind=SignalKind.TURN_RESULT, session_id=S1, origin=GHOST, payload=payload
                )
            )

    await _ghost_holds(shared)
    fast = attrs.evolve(spied, inbox=InstantHolderInbox(shared.inbox))
    async with cluster(fast, world, registry, ["a"]) as (a,):
        disposition = await a.submit(_request(idempotency_key=KEY))
        assert isinstance(disposition, Forwarded)
        assert (await disposition.result).text == "instant"
    first_io = [c for c in log.calls if not c.startswith("bus.subscribe")]
    assert log.calls.index("bus.subscribe") < log.calls.index(first_io[0])
    for call in ("idem.put_if_absent", "leases.try_acquire", "inbox.deliver"):
        assert log.calls.index("bus.subscribe") < log.calls.index(call)
    assert "idem.find" not in log.calls


async def test_r10_79_f1_a_conflict_touches_neither_lease_nor_idempotency(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-79: after the first turn bound the session, a submit with another agent raises
    ConflictingAgentError with no putIfAbsent, no entry for its key, no lease-store call."""
    log = CallLog()
    async with cluster(_spied(shared, log), world, registry, ["a", "b"]) as (_a, b):
        await (await _a.submit(_request())).result
        log.calls.clear()
        other_key = IdempotencyKey("k-conflict")
        with pytest.raises(ConflictingAgentError):
            await b.submit(
                attrs.evolve(_request(), agent_ref=OTHER_AGENT, idempotency_key=other_key)
            )
        assert log.of("idem") == []
        assert log.of("leases") == []
        assert await shared.idempotency.find(other_key) is None
    view = await shared.records.load(S1)
    assert view is not None and view.agent_ref == AGENT


async def test_r10_80_f2_losing_the_lease_forwards_through_the_inbox(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-80: with a remote holder, submit returns FORWARDED with a turn id and a pending
    result; the inbox has one entry, one MESSAGE_ENQUEUED was published, and the
    reservation is IN_FLIGHT with an empty holder (releaseHolder before the hand-over)."""
    log = CallLog()
    await _ghost_holds(shared)
    async with cluster(_spied(shared, log), world, registry, ["a"]) as (a,):
        disposition = await a.submit(_request(idempotency_key=KEY))
        assert isinstance(disposition, Forwarded)
        assert disposition.turn_id == TurnId.for_message(disposition.inbound_message_id)  # type: ignore[arg-type]
        assert not disposition.result.done()
        assert log.calls.count("bus.publish:MESSAGE_ENQUEUED") == 1
        assert log.calls.index("idem.release_holder") < log.calls.index("inbox.deliver")
        entry = await shared.idempotency.find(KEY)
        assert entry is not None
        assert (entry.state, entry.holder_id) == (IdempotencyState.IN_FLIGHT, None)
        assert len(await shared.inbox.collect(S1, Priority.LATER)) == 1


async def test_r10_81_the_lease_is_tried_before_a_session_is_opened(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-81: a submit on a non-holder node opens no handle there."""
    await _ghost_holds(shared)
    async with cluster(shared, world, registry, ["a"]) as (a,):
        assert isinstance(await a.submit(_request()), Forwarded)
    assert world.opens == {}


async def test_r10_86_mark_done_comes_before_the_turn_result_broadcast(
    shared: Shared,
    world: World,
    registry: Registry,
    advance: Advance,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-86: on the holder, markDone is called before TURN_RESULT is published; a
    submitter whose bus drops TURN_RESULT still completes with the same result by polling."""
    log = CallLog()
    spied = _spied(shared, log)
    world.duration = lambda _t: 3.0
    deaf = attrs.evolve(spied, bus=DroppingBus(spied.bus, {"TURN_RESULT"}))
    async with (
        open_session_router(builder(spied, world, registry, "holder")) as holder,
        open_session_router(builder(deaf, world, registry, "submitter")) as submitter,
    ):
        await (await holder.submit(_request("warm"))).result
        log.calls.clear()
        forwarded = await submitter.submit(_request("keyed", idempotency_key=KEY))
        assert isinstance(forwarded, Forwarded)
        result = await forwarded.result
    assert result.text == "holder:keyed:2"
    assert log.calls.index("idem.mark_done") < log.calls.index("bus.publish:TURN_RESULT")
    assert isinstance(deaf.bus, DroppingBus) and deaf.bus.dropped == 1
    assert "idem.find" in log.calls  # the submitter learned the answer from the store


async def test_r10_87_f7_rail_first_polling_when_the_rail_is_lost(
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-87: with the rail the forwarded result completes with no ``find``; with the
    rail dropped it completes through ``find`` within one poll interval (15 s) of the turn's
    end."""
    world.duration = lambda _t: 3.0
    for drop in (False, True):
        log = CallLog()
        spied = _spied(shared, log)
        submit_side = (
            attrs.evolve(spied, bus=DroppingBus(spied.bus, {"TURN_RESULT"})) if drop else spied
        )
        key = IdempotencyKey(f"k-{drop}")
        async with (
            open_session_router(builder(spied, world, registry, f"h-{drop}")) as holder,
            open_session_router(builder(submit_side, world, registry, f"s-{drop}")) as submitter,
        ):
            await (await holder.submit(_request("warm"))).result
            forwarded = await submitter.submit(_request(f"x{drop}", idempotency_key=key))
            await forwarded.result
            done_at = trio.current_time()
            turn = world.turns[-1]
            assert turn.end is not None
        if drop:
            assert "idem.find" in log.calls
            assert done_at - turn.end <= shared.by(15.0)
        else:
            assert "idem.find" not in log.calls
            assert on_time(shared, done_at - turn.end, 0.0)
        assert await shared.leases.current(S1) is None  # closing gave the lease back


async def test_r10_110_an_unanswered_forward_fails_at_exactly_the_forward_ttl(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-110 / R10-155: with no answer, a forwarded result fails with ForwardTimeout at
    exactly the default idempotency_forward_ttl, 5 min."""
    await _ghost_holds(shared)
    async with cluster(shared, world, registry, ["a"]) as (a,):
        start = trio.current_time()
        forwarded = await a.submit(_request())
        with pytest.raises(ForwardTimeout):
            await forwarded.result
        assert on_time(shared, trio.current_time() - start, 300.0)


async def test_r10_113_keyless_submits_are_never_deduplicated(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-113 (and R10-112's first point): two keyless submits with identical content both
    run."""
    async with cluster(shared, world, registry, ["a"]) as (a,):
        for _ in range(2):
            await (await a.submit(_request("same"))).result
    assert [t.text for t in world.turns] == ["same", "same"]


async def test_r10_114_a_new_key_is_in_flight_during_and_done_after(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-114: during the turn the key's entry is IN_FLIGHT, after it DONE."""
    world.duration = lambda _t: 5.0
    async with cluster(shared, world, registry, ["a"]) as (a,):
        disposition = await a.submit(_request(idempotency_key=KEY))
        await settle()
        entry = await shared.idempotency.find(KEY)
        assert entry is not None and entry.state is IdempotencyState.IN_FLIGHT
        await disposition.result
        entry = await shared.idempotency.find(KEY)
        assert entry is not None and entry.state is IdempotencyState.DONE


async def test_r10_115_a_retry_in_flight_attaches_to_the_running_turn(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-115: same key and input while running: no new turn; FORWARDED with a synthetic
    id whose result is the first turn's (locally, and from another router)."""
    world.duration = lambda _t: 5.0
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
        first = await a.submit(_request(idempotency_key=KEY))
        local = await a.submit(_request(idempotency_key=KEY))
        remote = await b.submit(_request(idempotency_key=KEY))
        for attached in (local, remote):
            assert isinstance(attached, Forwarded)
            assert attached.turn_id != first.turn_id
        answer = await first.result
        assert await local.result == answer
        assert await remote.result == answer
    assert len(world.turns) == 1


async def test_r10_116_a_done_key_answers_at_once_from_the_cache(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-116: same key and input after completion: no new turn; EXECUTED_LOCALLY with an
    already completed result holding the cached answer."""
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
        answer = await (await a.submit(_request(idempotency_key=KEY))).result
        again = await b.submit(_request(idempotency_key=KEY))
        assert again.kind is DispositionKind.EXECUTED_LOCALLY
        assert again.result.done()
        assert (await again.result).text == answer.text
    assert len(world.turns) == 1


async def test_r10_117_same_key_other_input_is_a_409_with_no_trace(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-117: IdempotencyConflictError (409); no turn and no inbox entry."""
    world.duration = lambda _t: 5.0
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
        await a.submit(_request("one", idempotency_key=KEY))
        with pytest.raises(IdempotencyConflictError) as info:
            await b.submit(_request("two", idempotency_key=KEY))
        assert info.value.http_status == 409
        assert not await shared.inbox.has_pending(S1)
    assert [t.text for t in world.turns] == ["one"]


async def test_r10_119_a_stale_reservation_is_reset_and_the_retry_runs(
    shared: Shared,
    world: World,
    registry: Registry,
    advance: Advance,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """R10-119 (router side): a retry finding the key IN_FLIGHT but untouched past the
    secondary TTL resets it once and runs a new turn."""
    from router_kit import reserver

    from zlink_trio.router import input_hash

    dead = reserver(GHOST)
    await shared.idempotency.put_if_absent(KEY, input_hash(_request().user_input), dead)
    await advance(31)
    async with cluster(shared, world, registry, ["a"]) as (a,):
        disposition = await a.submit(_request(idempotency_key=KEY))
        assert isinstance(disposition, ExecutedLocally)
        await disposition.result
    assert len(world.turns) == 1


async def test_r10_60_a_closing_router_refuses_submits(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-60: once shutdown starts, submit raises (ShuttingDown: IllegalStateException in
    the original)."""
    async with cluster(shared, world, registry, ["a"]) as (a,):
        await a.close_gracefully(0)
        with pytest.raises(ShuttingDown):
            await a.submit(_request())
