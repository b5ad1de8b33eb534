"""Actors under transport faults (spec 04 §5.1, §6.5, §8.1; DESIGN.md §9).

Three nodes in one Trio run on the memory store, in virtual time
(``MockClock(autojump_threshold=0)``), with a :class:`~zlink_trio.testing.FaultPlan` that
drops, duplicates, delays, reorders and cuts frames. Every outcome must be one the spec
allows: a value or a typed ``ZLinkError`` by the operation's deadline, the factory at most
once per reservation, never two Ready incarnations of one ActorId, an application request
or send run at most once (they are never re-sent), and a consistent Location Store at the
end.
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from zlink_trio import (
    ActorContext,
    App,
    DeadlineExceeded,
    ServerConfig,
    Unavailable,
    ZLinkError,
)
from zlink_trio.actors.handlers import on_request, on_send
from zlink_trio.actors.manager import ActorManager
from zlink_trio.actors.policy import RecreateOnRelocation
from zlink_trio.actors.results import Created, Existing
from zlink_trio.store.api import AuthorityState, Namespace, OperationKey
from zlink_trio.testing import (
    FaultPlan,
    TapDirection,
    WireTap,
    hosted_actors,
    open_cluster,
    server_engine,
)
from zlink_trio.testing.cluster import Cluster
from zlink_trio.wire.commands import Command

SENT, RECEIVED = TapDirection.SENT, TapDirection.RECEIVED
FAULTED = (
    Command.TERMINAL_REPLY,
    Command.ACTOR_SEND,
    Command.ACTOR_CREATE,
    Command.ACTOR_DESTROY,
)
CREATE_TIMEOUT = 6.0
MESSAGE_TIMEOUT = 3.0
SLACK = 1.0
"""An operation may end this long after its deadline (shielded give-back, scheduling)."""
STEPS = 40
"""Operations per worker task (24 tasks)."""


@attrs.define
class Observed:
    """What the application saw, across all nodes."""

    factory: Counter[tuple[str, int]] = attrs.field(factory=Counter)
    """Factory runs per (ActorId, ObjectGeneration), i.e. per reservation."""
    requests: Counter[bytes] = attrs.field(factory=Counter)
    sends: Counter[bytes] = attrs.field(factory=Counter)


def make_app(seen: Observed, node: int) -> App:
    class Account:
        def __init__(self, context: ActorContext) -> None:
            self.context = context
            seen.factory[(context.actor_id.value, context.object_generation.value)] += 1

        @on_request("work")
        async def work(self, payload: bytes) -> bytes:
            seen.requests[payload] += 1
            await trio.sleep(payload[-1] % 4 / 100)  # interleave turns of different Actors
            return b"done:" + payload

        @on_send("tell")
        async def tell(self, payload: bytes) -> None:
            seen.sends[payload] += 1

        @on_request("where")
        async def where(self, payload: bytes) -> bytes:
            return f"{node}:{self.context.object_generation.value}".encode()

    app = App()
    app.enable_actor_dispatch()
    app.register_actor("account", Account, relocation=RecreateOnRelocation())
    return app


def _config(index: int) -> ServerConfig:
    return ServerConfig(default_request_timeout=MESSAGE_TIMEOUT, hello_timeout=2.0)


def _apps(seen: Observed) -> Callable[[int], App]:
    return lambda index: make_app(seen, index)


def assert_single_ready(cluster: Cluster) -> None:
    """No ActorId has two Ready incarnations (on one node or across nodes)."""
    owners: Counter[str] = Counter()
    for server in cluster.running_servers():
        for ref in hosted_actors(server):
            owners[ref.actor_id.value] += 1
    doubled = {actor_id: n for actor_id, n in owners.items() if n > 1}
    assert not doubled, f"two Ready incarnations: {doubled}"


async def assert_store_consistent(cluster: Cluster) -> None:
    """Ready rows match the hosted Actors one to one, nothing is left Creating or Closing,
    the capacity counters match the rows, and each Ready Actor answers from its owner."""
    store = cluster.store
    rows = await store.list_rows(Namespace.ACTOR, after=None, limit=1000)
    assert all(row.state is AuthorityState.READY for row in rows), [
        (r.key.object_id, r.state) for r in rows if r.state is not AuthorityState.READY
    ]
    by_rid = {s.identity.node_rid: i for i, s in enumerate(cluster.servers)}
    expected: dict[int, set[tuple[str, int]]] = {i: set() for i in range(len(cluster))}
    for row in rows:
        expected[by_rid[row.owner.node_rid]].add((row.key.object_id, row.object_generation.value))
    for index, server in enumerate(cluster.servers):
        hosted = {(r.actor_id.value, r.object_generation.value) for r in hosted_actors(server)}
        assert hosted == expected[index], index
    for record in await store.list_nodes():
        index = by_rid[record.descriptor.node_rid]
        assert (record.active, record.pending) == (len(expected[index]), 0)
    for row in rows:
        answer = await where(cluster, row.key.object_id)
        owner = by_rid[row.owner.node_rid]
        assert answer == f"{owner}:{row.object_generation.value}".encode()


async def where(cluster: Cluster, actor_id: str) -> bytes | None:
    """Ask ``actor_id`` where it runs, re-sending as an application does after an unknown
    outcome: once the faults stop, the first frame on a quiet connection can still be the
    one that reveals a frame dropped before (the link breaks, that request is lost, never
    re-sent by the framework), and a route cached before a recreate elsewhere is stale."""
    actors = cluster.servers[0].actors
    for _ in range(3):
        try:
            return await actors.request(actor_id, "where").timeout(5)
        except (Unavailable, DeadlineExceeded):
            continue
    return await actors.request(actor_id, "where").timeout(5)


def install_random_faults(plan: FaultPlan) -> None:
    """Probability-based rules on the Actor commands and their replies (and a little of
    everything else: keepalives, goodbyes); each rule has its own seeded stream."""
    plan.drop(command=FAULTED, probability=0.02)
    plan.duplicate(command=FAULTED, probability=0.06)
    plan.delay(0.3, command=FAULTED, probability=0.05)
    plan.reorder(command=FAULTED, probability=0.05)
    plan.cut(command=FAULTED, count=None, probability=0.01, deliver=True)
    plan.cut(command=FAULTED, count=None, probability=0.005)
    plan.delay(0.5, probability=0.01)
    plan.duplicate(command=(Command.PEER_PING, Command.PEER_PONG), probability=0.05)


async def bounded(timeout: float, op: Callable[[], Awaitable[Any]], outcomes: Counter[str]) -> Any:
    """Run one operation: it must end with a value or a typed ZLinkError, by its deadline."""
    start = trio.current_time()
    result: Any = None
    with trio.move_on_after(timeout + SLACK) as scope:
        try:
            result = await op()
        except ZLinkError as exc:
            outcomes[type(exc).__name__] += 1
            result = exc
        else:
            outcomes[type(result).__name__] += 1
    assert not scope.cancelled_caught, f"hung for {trio.current_time() - start} s"
    return result


async def find_and_destroy(actors: ActorManager, actor_id: str) -> bool:
    ref = await actors.find(actor_id)
    return ref is not None and await actors.destroy(ref)


async def worker(
    cluster: Cluster, rng: random.Random, ids: list[str], tag: str, outcomes: Counter[str]
) -> dict[bytes, object]:
    """Random operations; returns each request id's outcome."""
    replies: dict[bytes, object] = {}
    for step in range(STEPS):
        actors = cluster.servers[rng.randrange(len(cluster))].actors
        actor_id = rng.choice(ids)
        uid = f"{tag}-{step}".encode()
        roll = rng.random()
        if roll < 0.15:
            create = actors.create(actor_id, "account").timeout(CREATE_TIMEOUT)
            await bounded(CREATE_TIMEOUT, create.submit, outcomes)
        elif roll < 0.35:
            get = actors.get_or_create(actor_id, "account").timeout(CREATE_TIMEOUT)
            result = await bounded(CREATE_TIMEOUT, get.submit, outcomes)
            assert isinstance(result, Created | Existing | ZLinkError)
        elif roll < 0.65:
            request = actors.request(actor_id, "work", uid).timeout(MESSAGE_TIMEOUT)
            replies[uid] = await bounded(MESSAGE_TIMEOUT, request.submit, outcomes)
        elif roll < 0.9:
            send = actors.send(actor_id, "tell", uid).timeout(MESSAGE_TIMEOUT)
            await bounded(MESSAGE_TIMEOUT, send.submit, outcomes)
        else:
            destroy = functools.partial(find_and_destroy, actors, actor_id)
            await bounded(MESSAGE_TIMEOUT * 2, destroy, outcomes)
        await trio.sleep(rng.random() / 10)
    return replies


@pytest.mark.parametrize("seed", range(1, 7))
async def test_random_faults_keep_the_actor_promises(
    seed: int, autojump_clock: trio.testing.MockClock
) -> None:
    """Under random drops, duplicates, delays, reorders and cuts of commands 20, 24, 110
    and 111 (and some keepalive noise), 24 tasks on 3 nodes create, get_or_create,
    request, send to and destroy 10 Actors: every call ends with a value or a typed error
    by its deadline; the factory runs at most once per reservation; no ActorId is ever
    Ready twice; each request either returns its handler's reply (having run it exactly
    once) or a typed error (having run it at most once), each send runs at most once; and
    once the faults stop, the Store matches the hosted Actors and its capacity counters."""
    seen = Observed()
    plan = FaultPlan(seed=seed)
    outcomes: Counter[str] = Counter()
    ids = [f"acct-{i}" for i in range(10)]
    async with open_cluster(3, app=_apps(seen), config=_config, fault_plan=plan) as cluster:
        await cluster.wait_all_admitted()
        install_random_faults(plan)
        replies: dict[bytes, object] = {}
        stop = trio.Event()

        async def watch() -> None:
            while not stop.is_set():
                assert_single_ready(cluster)
                await trio.sleep(0.05)

        async def run(index: int) -> None:
            rng = random.Random(f"{seed}/{index}")
            replies.update(await worker(cluster, rng, ids, f"w{index}", outcomes))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            async with trio.open_nursery() as workers:
                for index in range(24):
                    workers.start_soon(run, index)
            stop.set()
        plan.clear()
        assert plan.fired() > 50, plan.fired()
        # the promises
        assert all(n == 1 for n in seen.factory.values()), seen.factory
        assert all(n <= 1 for n in seen.sends.values()), seen.sends
        for uid, reply in replies.items():
            assert seen.requests[uid] <= 1, uid
            if isinstance(reply, bytes):
                assert reply == b"done:" + uid and seen.requests[uid] == 1
            else:
                assert isinstance(reply, ZLinkError), reply
        assert set(seen.requests) <= set(replies)
        # quiesce, then the Store must match the hosts
        with trio.fail_after(60):
            await cluster.wait_all_admitted()
            for server in cluster.servers:
                await server_engine(server).wait_idle()
        assert_single_ready(cluster)
        await assert_store_consistent(cluster)
        assert outcomes["Created"] >= 5 and outcomes["bytes"] >= 20, outcomes


# --- the three named faults ------------------------------------------------------------------


def _host_and_caller(seen: Observed) -> Callable[[int], App]:
    def app(index: int) -> App:
        if index == 0:
            caller = App()
            caller.enable_actor_dispatch()
            return caller
        return make_app(seen, index)

    return app


async def test_create_whose_reply_is_dropped_gets_the_original_terminal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A create whose terminal reply is lost is replayed under the same OperationId and
    completes with the original terminal (Created, the same incarnation) via the
    target's terminal record: one reservation, one factory run."""
    seen = Observed()
    plan = FaultPlan(seed=1)
    tap = WireTap()
    async with open_cluster(
        2, app=_host_and_caller(seen), config=_config, fault_plan=plan, tap=tap
    ) as cluster:
        await cluster.wait_all_admitted()
        host = cluster.servers[1].identity.node_rid
        lost = plan.drop(command=Command.TERMINAL_REPLY, sender=host, count=1)
        created = await cluster.servers[0].actors.create("replayed", "account").timeout(30)
        assert isinstance(created, Created) and lost.fired == 1
        me = cluster.servers[0].identity
        sent = tap.select(node=me.node_rid, direction=SENT, command=Command.ACTOR_CREATE)
        # the replay: the same operation and the same reservation, sent twice
        assert len(sent) == 2
        assert len({(e.record.operation_id, e.record.reservation) for e in sent}) == 1
        assert tap.count(node=host, direction=RECEIVED, command=Command.ACTOR_CREATE) == 2
        # the target answered the replay from the durable terminal of the first attempt
        key = OperationKey(me.node_rid, me.node_generation, sent[0].record.operation_id)
        assert await cluster.store.read_terminal(key) is not None
        assert seen.factory == Counter({("replayed", created.actor.object_generation.value): 1})
        assert await cluster.servers[0].actors.find("replayed") == created.actor


async def test_request_whose_reply_is_dropped_is_not_resent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An application request whose reply is lost is NOT re-sent (its outcome is
    unknown): exactly one command 24 on the wire, the handler ran once, and the call ends
    DeadlineExceeded exactly at its deadline."""
    seen = Observed()
    plan = FaultPlan(seed=2)
    tap = WireTap()
    async with open_cluster(
        2, app=_host_and_caller(seen), config=_config, fault_plan=plan, tap=tap
    ) as cluster:
        await cluster.wait_all_admitted()
        caller = cluster.servers[0].actors
        assert isinstance(await caller.create("quiet", "account"), Created)
        host = cluster.servers[1].identity.node_rid
        me = cluster.servers[0].identity.node_rid
        lost = plan.drop(command=Command.TERMINAL_REPLY, sender=host, count=1)
        tap.clear()
        start = trio.current_time()
        with pytest.raises(DeadlineExceeded):
            await caller.request("quiet", "work", b"only-once").timeout(5)
        assert trio.current_time() == start + 5.0
        assert lost.fired == 1
        # the lost reply broke the link, which came back well before the deadline: a
        # re-send was possible, and none happened
        hellos = tap.select(node=me, direction=SENT, command=Command.PEER_HELLO_CONFIRM)
        hellos += tap.select(node=me, direction=RECEIVED, command=Command.PEER_HELLO_CONFIRM)
        assert any(e.time < start + 5.0 for e in hellos), tap.events
        assert tap.count(node=me, direction=SENT, command=Command.ACTOR_SEND) == 1
        assert tap.count(node=host, direction=RECEIVED, command=Command.ACTOR_SEND) == 1
        assert seen.requests == Counter({b"only-once": 1})


async def test_factory_never_runs_twice_for_one_reservation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The factory never runs twice for one reservation: a create whose command 110 is
    duplicated (the target gets it twice) and whose replies are lost, and whose replay is
    delivered and then cut, is replayed again and joins the one attempt (or reads its
    terminal): every rule fired, one reservation on the wire, one factory run."""
    seen = Observed()
    plan = FaultPlan(seed=3)
    tap = WireTap()
    async with open_cluster(
        2, app=_host_and_caller(seen), config=_config, fault_plan=plan, tap=tap
    ) as cluster:
        await cluster.wait_all_admitted()
        host = cluster.servers[1].identity.node_rid
        rules = [
            plan.duplicate(command=Command.ACTOR_CREATE, count=1),
            plan.cut(command=Command.ACTOR_CREATE, to=host, deliver=True, count=1),
            plan.drop(command=Command.TERMINAL_REPLY, sender=host, count=2),
        ]
        created = await cluster.servers[0].actors.create("once", "account").timeout(60)
        assert isinstance(created, Created)
        assert [rule.fired for rule in rules] == [1, 1, 2]
        me = cluster.servers[0].identity.node_rid
        sent = tap.select(node=me, direction=SENT, command=Command.ACTOR_CREATE)
        # one operation, one reservation, however many times it reached the target
        assert len({(e.record.operation_id, e.record.reservation) for e in sent}) == 1
        assert tap.count(node=host, direction=RECEIVED, command=Command.ACTOR_CREATE) >= 3
        assert seen.factory == Counter({("once", created.actor.object_generation.value): 1})
