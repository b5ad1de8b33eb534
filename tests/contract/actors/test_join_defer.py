"""The Deferred Join registration and barrier (spec 04 §3.1; checklist A04-10 rules,
A04-11, A04-12): Defer only records, the barrier activates after a normal handler end,
the completion runs once, every forbidden context is refused."""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Iterator

import pytest
import trio
import trio.testing
from join_kit import JoinLog, attempt, create_on, entry_id, make_join_app

from zlink_trio import (
    ApplicationError,
    ConfigurationError,
    DeadlineExceeded,
    InvalidArgument,
    InvalidOperation,
    JoinCall,
    JoinOutcome,
    OperationId,
    Unavailable,
)
from zlink_trio.store.api import ObjectKey
from zlink_trio.testing import CountingStore, FaultPlan, open_cluster
from zlink_trio.wire.commands import Command

JOIN_STORE_METHODS = (
    "read",
    "set_membership",
    "change_owner",
    "read_terminal",
    "record_terminal",
    "read_root",
    "put_root",
)
"""Every Store method a Join could call (background lease renewals and sweeps aside)."""


def _join_calls(store: CountingStore) -> dict[str, int]:
    return {m: store.count(m) for m in JOIN_STORE_METHODS if store.count(m)}


async def test_a04_11_defer_records_only_and_a_rejoin_changes_nothing(
    clock: object, store: CountingStore
) -> None:
    """A04-11: during Defer (the handler still runs, blocked after it) the Store sees no
    read and no write; the Join starts only after the handler ended; re-joining the Entry
    Spot the Actor is in is Accepted with no Store access at all (A04-10 rule), and the
    completion callback runs exactly once, after the reply."""
    log = JoinLog()
    async with open_cluster(2, store=store, app=make_join_app(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "rejoin")
        assert await b.actors.request(actor, "echo", b"warm") == b"warm"  # route cached
        log.gate = trio.Event()
        store.reset()
        async with trio.open_nursery() as nursery:
            replies: list[object] = []

            async def call() -> None:
                replies.append(await b.actors.request(actor, "join-block").timeout(30))

            nursery.start_soon(call)
            await log.entered.wait()
            # Defer has run (the handler waits on the gate): nothing touched the Store.
            assert _join_calls(store) == {}
            assert log.completions == []
            log.gate.set()
        await log.wait_for(lambda: len(log.completions_of(actor)) == 1)
        (done,) = log.completions_of(actor)
        assert replies == [str(done.operation_id.value).encode()]
        assert done.outcome is JoinOutcome.ACCEPTED and done.error is None
        here = await entry_id(a)
        assert done.target == here and done.spot_id == here
        assert _join_calls(store) == {}  # no Store change, not even a read
        assert await b.actors.request(actor, "whoami") == here.value.encode()
        assert len(log.completions_of(actor)) == 1
        assert log.factory_runs[actor] == 1


async def test_a04_11_a_failed_handler_discards_its_barrier(
    clock: object, store: CountingStore
) -> None:
    """A04-11: a handler that raises after Defer, or whose reply cannot be sent (over the
    reply limit: a reply-encode failure), discards its barrier: no Join, no completion,
    and the next message runs normally."""
    log = JoinLog()
    async with open_cluster(2, store=store, app=make_join_app(log)) as cluster:
        await cluster.wait_all_admitted()
        _a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "fails")
        with pytest.raises(ApplicationError):
            await b.actors.request(actor, "join-fail").timeout(10)
        with pytest.raises(ApplicationError):
            await b.actors.request(actor, "join-big-reply").timeout(10)
        assert await b.actors.request(actor, "echo", b"next").timeout(10) == b"next"
        # a Join after those works (no pending transition was left behind)
        assert await b.actors.request(actor, "join").timeout(10)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 1)
        (done,) = log.completions_of(actor)
        assert done.outcome is JoinOutcome.ACCEPTED
        assert log.trace == ["echo:next", "join:", "complete:accepted"]


async def test_a04_11_the_barrier_holds_the_next_message_behind_the_completion(
    clock: object, store: CountingStore
) -> None:
    """A04-11: payloads accepted after the registration (while the handler still runs)
    wait behind the barrier and run after the completion callback, in acceptance order;
    a reply lost on the wire (the transport did not deliver the encoded reply) does not
    cancel the Join."""
    log = JoinLog()
    plan = FaultPlan(seed=11)
    async with open_cluster(2, store=store, app=make_join_app(log), fault_plan=plan) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "held")
        log.gate = trio.Event()
        lost = plan.drop(command=Command.TERMINAL_REPLY, sender=a.identity.node_rid, count=1)
        async with trio.open_nursery() as nursery:
            outcome: list[object] = []

            async def call() -> None:
                try:
                    outcome.append(await b.actors.request(actor, "join-block").timeout(5))
                except DeadlineExceeded as exc:
                    outcome.append(exc)

            nursery.start_soon(call)
            await log.entered.wait()
            await b.actors.send(actor, "note", b"b1")
            await b.actors.send(actor, "note", b"b2")
            await a.actors.send(actor, "note", b"a1")
            log.gate.set()
        assert lost.fired == 1
        assert isinstance(outcome[0], DeadlineExceeded)  # the caller never got the reply
        await log.wait_for(lambda: len(log.handled) >= 4)
        # (the order between two senders is the queue's acceptance order, which the test
        # does not control; each sender's order is kept)
        assert log.trace[:2] == ["join-block:", "complete:accepted"]
        assert sorted(log.trace[2:]) == ["note:a1", "note:b1", "note:b2"]
        assert [t for t in log.trace if t.startswith("note:b")] == ["note:b1", "note:b2"]


@contextlib.contextmanager
def _no_autojump(clock: object) -> Iterator[None]:
    if not isinstance(clock, trio.testing.MockClock):
        yield
        return
    threshold = clock.autojump_threshold
    clock.autojump_threshold = math.inf
    try:
        yield
    finally:
        clock.autojump_threshold = threshold


async def test_a04_10_forbidden_contexts_get_their_error_kind(
    clock: object, store: CountingStore
) -> None:
    """A04-10 (its forbidden-context rules, owned here): Defer is synchronous and the call
    has no awaitable form; it is InvalidOperation in a factory, OnCreateActor, the
    completion callback (lifecycle callbacks), a thread, a detached task, a second Defer
    of the same call and after the scope closed; another pending transition of the same
    Actor is Unavailable; a child task the handler awaits may Defer. A request to its own
    barrier-holding Actor is refused before it is sent; a send is not."""
    log = JoinLog()
    log.defer_in_factory = True
    async with (
        open_cluster(2, store=store, app=make_join_app(log)) as cluster,
        trio.open_nursery() as outside,
    ):
        log.outside = outside
        await cluster.wait_all_admitted()
        _a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "rules")
        assert isinstance(log.errors["factory"], InvalidOperation)
        assert isinstance(log.errors["on-create"], InvalidOperation)
        assert not hasattr(JoinCall, "__await__") and not hasattr(JoinCall, "submit")
        assert not inspect.iscoroutinefunction(JoinCall.defer)

        first = await b.actors.request(actor, "join-checks").timeout(10)
        assert isinstance(log.errors["second-defer"], InvalidOperation)
        assert isinstance(log.errors["other-transition"], Unavailable)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 1)
        assert log.completions_of(actor)[0].operation_id == OperationId(int(first or b"0"))
        assert isinstance(log.errors["completion"], InvalidOperation)

        # A real thread runs while every Trio task is blocked: an autojumping clock would
        # leap to the request's deadline before the thread returns, so it stops jumping.
        with _no_autojump(clock):
            await b.actors.request(actor, "join-thread").timeout(10)
        assert isinstance(log.errors["thread"], InvalidOperation)
        await b.actors.request(actor, "join-detached").timeout(10)
        assert isinstance(log.errors["detached"], InvalidOperation)
        await b.actors.request(actor, "join-child").timeout(10)
        assert isinstance(log.errors["child"], OperationId)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 2)

        await b.actors.request(actor, "join-later").timeout(10)
        (instance,) = log.instances[actor]
        attempt(log, "later", instance.later.defer)
        assert isinstance(log.errors["later"], InvalidOperation)

        log.trace.clear()
        await b.actors.request(actor, "join-self-request").timeout(10)
        assert isinstance(log.errors["self-request"], InvalidOperation)
        await log.wait_for(lambda: len(log.trace) >= 2)
        # the request never reached the queue; the send ran after the completion
        assert log.trace == ["complete:accepted", "note:after-join"]
        assert len(log.completions_of(actor)) == 3
        outside.cancel_scope.cancel()


async def test_a04_12_request_limit_and_no_partial_record(
    clock: object, store: CountingStore
) -> None:
    """A04-12: a Join request of exactly 1 MiB is accepted; 1 MiB + 1 byte fails
    synchronously with a ConfigurationError that leaves no record (a valid registration
    right after it in the same handler succeeds)."""
    log = JoinLog()
    async with open_cluster(2, store=store, app=make_join_app(log)) as cluster:
        await cluster.wait_all_admitted()
        _a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "sizes")
        mib = 1024 * 1024
        await b.actors.request(actor, "join-size", str(mib).encode()).timeout(10)
        assert isinstance(log.errors[f"size:{mib}"], OperationId)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 1)
        await b.actors.request(actor, "join-size", str(mib + 1).encode()).timeout(10)
        refused = log.errors[f"size:{mib + 1}"]
        assert isinstance(refused, ConfigurationError)
        assert isinstance(log.errors[f"after:{mib + 1}"], OperationId)
        await log.wait_for(lambda: len(log.completions_of(actor)) == 2)
        assert [c.outcome for c in log.completions_of(actor)] == [JoinOutcome.ACCEPTED] * 2


@pytest.mark.parametrize("bad", [0, -1, -0.5, float("nan"), float("inf"), 2**31, True, "5"])
def test_a04_12_join_timeouts_outside_the_domain_are_refused(bad: object) -> None:
    """A04-12: an explicit Join timeout must be finite and 1..INT_MAX whole milliseconds
    (after rounding up): 0, negative, non-finite, over INT_MAX ms or not a number is an
    InvalidArgument (a ConfigurationError), raised synchronously."""
    call = JoinCall(None, None, None, entry=True, request=b"")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        call.timeout(bad)  # type: ignore[arg-type]


def test_a04_12_sub_millisecond_timeouts_round_up() -> None:
    """A04-12: a sub-millisecond timeout is rounded up to 1 ms; others to whole ms."""
    assert JoinCall(None, None, None, entry=True, request=b"").timeout(0.0001).timeout_ms == 1  # type: ignore[arg-type]
    assert JoinCall(None, None, None, entry=True, request=b"").timeout(1.0001).timeout_ms == 1001  # type: ignore[arg-type]
    assert (
        JoinCall(None, None, None, entry=True, request=b"").timeout(2**31 / 1000 - 0.001).timeout_ms
        == 2**31 - 1
    )  # type: ignore[arg-type]
    call = JoinCall(None, None, None, entry=True, request=b"")  # type: ignore[arg-type]
    call.timeout(1)
    with pytest.raises(InvalidOperation):
        call.timeout(1)


@pytest.mark.parametrize("backend", ["memory"])  # a simulated crash of one node
async def test_a04_11_a_process_dying_before_the_commit_replays_nothing(
    clock: object, store: CountingStore
) -> None:
    """A04-11: barriers and scopes live in process memory only: the Actor's node dies
    while the handler that registered a cross-node Join still runs (its turn is
    cancelled, the registration discarded); nothing is replayed — the target never runs
    a factory for it and the Store keeps the source authority and membership."""
    log = JoinLog()
    async with open_cluster(2, store=store, app=make_join_app(log)) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "doomed")
        home = await entry_id(a)
        target = await entry_id(b)
        before = await store.read(ObjectKey.actor(actor))
        log.gate = trio.Event()
        async with trio.open_nursery() as nursery:

            async def join() -> None:
                with contextlib.suppress(Unavailable, DeadlineExceeded):
                    await b.actors.request(actor, "join-block", target.value.encode()).timeout(5)

            nursery.start_soon(join)
            await log.entered.wait()
            await cluster.kill(0)
        log.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert log.completions == [] and log.factory_runs[actor] == 1
        row = await store.read(ObjectKey.actor(actor))
        assert row == before and row is not None and row.membership == home
