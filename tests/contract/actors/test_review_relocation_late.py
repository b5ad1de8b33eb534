"""Adversarial review of live Actor relocation (issue 14; spec 02 §8, spec 04 §6.1, §6.7,
spec 06 §6): a relay-ready reply that comes after the source gave up must never make the
target an owner too. Real TCP between the nodes, the fault transport of
``zlink_trio.testing``, both stores."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio
from relocation_kit import RelocLog, create_on, make_reloc_app

from zlink_trio import DeadlineExceeded, RelocationResult, ServerConfig, Unavailable, ZLinkError
from zlink_trio.store.api import LocationStore, ObjectKey
from zlink_trio.testing import CountingStore, FaultPlan, StoreWrapper, open_cluster
from zlink_trio.wire.commands import Command

T = TypeVar("T")


def _apps(log: RelocLog):  # type: ignore[no-untyped-def]
    return lambda i: make_reloc_app(log, f"node{i}")


async def test_review_a_late_relay_ready_never_makes_two_actor_owners(
    clock: object, store: CountingStore
) -> None:
    """A04-07 (an explicit failure before the relay-ready reply is accepted: the source
    stays owner and the target discards its temporary queue): the 120 is 3 s late on the
    wire and the abort (124) 5 s late; the target's Restore is held until the source's
    ``relocation_timeout`` made it give up (DeadlineExceeded, the Actor reopened on the
    source). The target's relay-ready reply then comes too late and its owner CAS must
    lose: afterwards the row still names the source, and a message runs on the source,
    with the source's state."""
    log = RelocLog()
    plan = FaultPlan(seed=14)
    async with open_cluster(2, store=store, app=_apps(log), fault_plan=plan) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "late", "counter")
        await b.actors.send(actor, "add", b"before")
        assert await b.actors.request(actor, "get", b"").timeout(10) == b"1@node0"
        before = await store.read(ObjectKey.actor(actor))
        assert before is not None
        # The target's attempt starts 3 s after the source's (its own timeout ends 3 s
        # after the source's), and the source's abort reaches it 5 s after it was sent:
        # in between, nothing but the row tells the target that the source gave up.
        prepare = plan.delay(3.0, command=Command.RELOCATION_PREPARE, count=1)
        abort = plan.delay(5.0, command=Command.RELOCATION_ABORT, count=1)
        log.restore_gate = trio.Event()
        errors: list[BaseException] = []
        gave_up = trio.Event()
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:

                async def move() -> None:
                    try:
                        await a.relocate(actor, to=b.identity.node_rid)
                    except ZLinkError as exc:
                        errors.append(exc)
                    gave_up.set()

                nursery.start_soon(move)
                await log.restore_entered.wait()
                await gave_up.wait()  # the source's deadline passed: it reopened
                log.restore_gate.set()  # the target's relay-ready reply, too late
        assert prepare.fired == 1 and abort.fired == 1
        assert len(errors) == 1 and isinstance(errors[0], DeadlineExceeded), errors
        await trio.sleep(10)  # the target's cutover fallback and its own timeout
        await b.actors.send(actor, "add", b"after")
        await log.wait_for(lambda: len(log.payloads(actor)) == 2)
        replies = {await server.actors.request(actor, "get", b"").timeout(10) for server in (a, b)}
        assert replies == {b"2@node0"}, replies  # one owner, the source, with its state
        assert {n for x, p, _, n in log.handled if x == actor and p == "add"} == {"node0"}
        row = await store.read(ObjectKey.actor(actor))
        assert row is not None and row.owner == before.owner, row
        assert row.owner_generation == before.owner_generation
        assert row.relocation is None, row
        target = b.statistics().actors
        assert target is not None
        assert target.relocation.committed == 0 and target.relocation.discarded == 1


async def test_review_an_abort_that_lost_to_the_target_commit_never_reopens_the_source(
    clock: object, store: CountingStore
) -> None:
    """A04-07 (after acceptance: never back to the source): the target's relay-ready reply
    (122) is 12 s late on the wire, so the source's ``relocation_timeout`` passes first —
    but the target already committed (its cutover fallback). The source's durable abort
    then loses to that commit: the source does not reopen, it goes on as after an
    acceptance (``relocate`` returns the committed move), and what it held while sealed
    runs once, in order, on the target only."""
    log = RelocLog()
    plan = FaultPlan(seed=15)
    async with open_cluster(2, store=store, app=_apps(log), fault_plan=plan) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "lost", "counter")
        await b.actors.send(actor, "add", b"before")
        assert await b.actors.request(actor, "get", b"").timeout(10) == b"1@node0"
        before = await store.read(ObjectKey.actor(actor))
        assert before is not None
        late = plan.delay(12.0, command=Command.RELOCATION_RELAY_READY, count=1)
        log.restore_gate = trio.Event()
        outcome: list[object] = []
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:

                async def move() -> None:
                    try:
                        outcome.append(await a.relocate(actor, to=b.identity.node_rid))
                    except ZLinkError as exc:
                        outcome.append(exc)

                nursery.start_soon(move)
                await log.restore_entered.wait()
                for i in range(3):
                    await a.actors.send(actor, "add", f"held-{i}".encode())  # held: sealed
                log.restore_gate.set()
        assert late.fired == 1
        assert len(outcome) == 1 and isinstance(outcome[0], RelocationResult), outcome
        assert outcome[0].committed and outcome[0].relayed == 3, outcome
        await log.wait_for(lambda: len(log.payloads(actor)) == 4)
        assert log.payloads(actor) == [b"before"] + [f"held-{i}".encode() for i in range(3)]
        assert [n for x, p, _, n in log.handled if x == actor and p == "add"][1:] == ["node1"] * 3
        replies = {await server.actors.request(actor, "get", b"").timeout(10) for server in (a, b)}
        assert replies == {b"4@node1"}, replies
        row = await store.read(ObjectKey.actor(actor))
        assert row is not None and row.owner.node_rid == b.identity.node_rid, row
        assert row.owner_generation == before.owner_generation.next()
        assert row.relocation is None, row
        source = a.statistics().actors
        assert source is not None and source.relocation.aborted == 0


class _RowCutOff(StoreWrapper):
    """The source node's Store: once ``cut``, every call naming ``key`` fails Unavailable
    (the Store unreachable for that row from that node; its lease renewals go on)."""

    def __init__(self, inner: LocationStore) -> None:
        super().__init__(inner)
        self.key: ObjectKey | None = None
        self.refused = 0

    async def _around(self, method: str, call: Callable[[], Awaitable[T]], *args: object) -> T:
        if self.key is not None and args and args[0] == self.key:
            await trio.lowlevel.checkpoint()
            self.refused += 1
            raise Unavailable(f"test: the row is unreachable from the source ({method})")
        return await call()


async def test_review_a_mark_the_source_cannot_clear_never_makes_two_actor_owners(
    clock: object, store: CountingStore
) -> None:
    """A04-07 (an explicit failure before the relay-ready reply is accepted: never two
    owners): as the late test above, but the source cannot reach the Actor's row from the
    moment the target entered its Restore, so its durable abort (clearing the mark) fails.
    The source must not reopen while the target's attempt could still commit under that
    mark: the target does commit (its cutover fallback), and the work sent to the Actor
    while the source held it, and after, runs once, in order, on the target only."""
    log = RelocLog()
    plan = FaultPlan(seed=16)
    cut = _RowCutOff(store)

    def config(index: int) -> ServerConfig:
        return ServerConfig(location_store=cut) if index == 0 else ServerConfig()

    async with open_cluster(
        2, store=store, app=_apps(log), fault_plan=plan, config=config
    ) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "cut", "counter")
        await b.actors.send(actor, "add", b"before")
        assert await b.actors.request(actor, "get", b"").timeout(10) == b"1@node0"
        before = await store.read(ObjectKey.actor(actor))
        assert before is not None
        plan.delay(3.0, command=Command.RELOCATION_PREPARE, count=1)
        plan.delay(5.0, command=Command.RELOCATION_ABORT, count=1)
        log.restore_gate = trio.Event()
        errors: list[BaseException] = []
        gave_up = trio.Event()
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:

                async def move() -> None:
                    try:
                        await a.relocate(actor, to=b.identity.node_rid)
                    except ZLinkError as exc:
                        errors.append(exc)
                    gave_up.set()

                nursery.start_soon(move)
                await log.restore_entered.wait()
                cut.key = ObjectKey.actor(actor)  # the source's clear will fail
                await gave_up.wait()  # the source's deadline passed
                for i in range(2):
                    await b.actors.send(actor, "add", f"held-{i}".encode())
                log.restore_gate.set()  # the target's relay-ready reply, too late
        assert len(errors) == 1 and isinstance(errors[0], DeadlineExceeded), errors
        assert cut.refused > 0
        await trio.sleep(20)  # the target's fallback, its commit, the source's bound
        await b.actors.send(actor, "add", b"after")
        await log.wait_for(lambda: len(log.payloads(actor)) == 4)
        assert log.payloads(actor) == [b"before", b"held-0", b"held-1", b"after"]
        row = await store.read(ObjectKey.actor(actor))
        assert row is not None and row.owner.node_rid == b.identity.node_rid, row
        assert row.owner_generation == before.owner_generation.next()
        runs = [n for x, p, _, n in log.handled if x == actor and p == "add"]
        assert runs == ["node0", "node1", "node1", "node1"], runs  # never on both
        cut.key = None
        replies = {await server.actors.request(actor, "get", b"").timeout(10) for server in (a, b)}
        assert replies == {b"4@node1"}, replies


async def test_review_a_source_holding_an_uncleared_mark_reopens_once_the_target_cannot_commit(
    clock: object, store: CountingStore
) -> None:
    """A04-07 (an explicit failure before the relay-ready reply is accepted: the source
    stays owner, nothing lost): the source cannot clear its mark and the target never
    answers its Restore, so the target's attempt ends by its own ``relocation_timeout``
    (discarded, nothing committed). The source holds the Actor sealed until that attempt
    can no longer commit, then reopens it: what was sent meanwhile runs there, once, in
    order, and nothing ran while it was held."""
    log = RelocLog()
    plan = FaultPlan(seed=17)
    cut = _RowCutOff(store)

    def config(index: int) -> ServerConfig:
        return ServerConfig(location_store=cut) if index == 0 else ServerConfig()

    async with open_cluster(
        2, store=store, app=_apps(log), fault_plan=plan, config=config
    ) as cluster:
        await cluster.wait_all_admitted()
        a, b = cluster.servers
        actor = await create_on(b, cluster.servers, 0, "held", "counter")
        await b.actors.send(actor, "add", b"before")
        assert await b.actors.request(actor, "get", b"").timeout(10) == b"1@node0"
        before = await store.read(ObjectKey.actor(actor))
        assert before is not None
        log.restore_gate = trio.Event()
        errors: list[BaseException] = []
        with trio.fail_after(120):
            await log_and_move(a, b, actor, cut, log, errors)
            assert len(errors) == 1 and isinstance(errors[0], DeadlineExceeded), errors
            for i in range(2):
                await b.actors.send(actor, "add", f"held-{i}".encode())
            assert len(log.payloads(actor)) == 1  # sealed: nothing runs
            await log.wait_for(lambda: len(log.payloads(actor)) == 3)
        # the target's attempt ended first (its timeout), then the source reopened
        target = b.statistics().actors
        assert target is not None
        assert target.relocation.discarded == 1 and target.relocation.committed == 0
        log.restore_gate.set()
        assert log.payloads(actor) == [b"before", b"held-0", b"held-1"]
        runs = [n for x, p, _, n in log.handled if x == actor and p == "add"]
        assert runs == ["node0"] * 3, runs
        row = await store.read(ObjectKey.actor(actor))
        assert row is not None and row.owner == before.owner, row
        assert row.owner_generation == before.owner_generation
        assert row.relocation is not None  # the stale mark stays (the next move replaces it)


async def log_and_move(  # type: ignore[no-untyped-def]
    a, b, actor, cut: _RowCutOff, log: RelocLog, errors: list[BaseException]
) -> None:
    """Move ``actor`` from ``a`` to ``b``, cutting ``a`` off the row once ``b`` entered
    its Restore; the error ``relocate`` raised is appended to ``errors``."""
    async with trio.open_nursery() as nursery:

        async def move() -> None:
            try:
                await a.relocate(actor, to=b.identity.node_rid)
            except ZLinkError as exc:
                errors.append(exc)

        nursery.start_soon(move)
        await log.restore_entered.wait()
        cut.key = ObjectKey.actor(actor)
