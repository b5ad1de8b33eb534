"""Seeded churn on 3 nodes over a small id set, on both stores, then the invariants.

Several tasks per node repeatedly pick one of 10 ActorIds (a seeded ``random.Random``) and
``get_or_create`` / ``create`` / ``request`` / ``send`` / ``find`` / ``destroy`` (the ref
from a find or a create) it with short timeouts (0.002-0.5 s), and 10% of the callers are
also cancelled mid-call. Only the typed errors docs/api.md lists
for that call are tolerated; anything else fails the test. After every task ended and the
background give-backs settled (no Creating/Closing row left, awaited by a bounded poll),
the cluster must be consistent through the public surface:

* each id has at most one row, and it is Ready; the node that owns it hosts exactly that
  incarnation (``hosted_actors``), a request to it is answered by that incarnation and
  ``find`` returns it from every node;
* the Store's capacity counters equal the Ready rows per node, with nothing pending;
* the factory ran at most once per (id, object generation) — never twice for one
  reservation — and exactly once for each Ready incarnation;
* every request a caller got a reply for was handled exactly once (by the incarnation
  whose echo it got), no request or send ever ran twice.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from zlink_trio import (
    AlreadyExists,
    App,
    CapacityExceeded,
    Created,
    DeadlineExceeded,
    Existing,
    InvalidOperation,
    NotFound,
    Unavailable,
)
from zlink_trio.actors.handlers import on_request, on_send
from zlink_trio.actors.policy import RecreateOnRelocation
from zlink_trio.ids import ActorRef
from zlink_trio.store.api import AuthorityState, Namespace
from zlink_trio.testing import CountingStore, hosted_actors, open_cluster

NODES = 3
TASKS_PER_NODE = 3
IDS = [f"churn-{k}" for k in range(10)]
SEEDS = (0x5EED_C4A2, 7, 1234)
"""Each seed is one run per backend (40 memory / 20 PostgreSQL seeds were tried clean)."""
OPS = {"memory": 400, "postgres": 250}
"""Operations per task (virtual time on memory; PostgreSQL keeps the test under ~20 s)."""
TIMEOUTS = (0.002, 0.01, 0.05, 0.5)
"""Timeouts of the creates/requests/sends (seconds), picked per call: the short ones end
calls mid-flight (a create's reservation must then be given back)."""
CANCEL = 0.1
"""Share of calls whose caller is also cancelled mid-call (see ``cancel_later``)."""
BOUND = {"memory": 600.0, "postgres": 60.0}

OPERATIONS = ("get_or_create", "create", "request", "send", "find", "destroy")
WEIGHTS = (3, 2, 4, 3, 2, 2)
ERRORS: dict[str, tuple[type[BaseException], ...]] = {
    "create": (AlreadyExists, Unavailable, DeadlineExceeded, CapacityExceeded),
    "get_or_create": (Unavailable, DeadlineExceeded, CapacityExceeded),
    "request": (NotFound, Unavailable, DeadlineExceeded, CapacityExceeded),
    "send": (NotFound, Unavailable),
    "find": (),
    "destroy": (InvalidOperation, Unavailable),
}
"""What each call may raise in this churn (docs/api.md), nothing else."""


@attrs.define
class Log:
    factory_runs: Counter[tuple[str, int]] = attrs.field(factory=Counter)
    handled: Counter[bytes] = attrs.field(factory=Counter)
    """Token -> times a handler ran it (requests and sends)."""
    handled_by: dict[bytes, tuple[str, int]] = attrs.field(factory=dict)
    replied: dict[bytes, bytes] = attrs.field(factory=dict)
    """Token of an answered request -> the reply."""
    sent: set[bytes] = attrs.field(factory=set)
    outcomes: Counter[str] = attrs.field(factory=Counter)
    unexpected: list[tuple[str, str, BaseException]] = attrs.field(factory=list)


def churn_app(log: Log) -> App:
    app = App()
    app.enable_actor_dispatch()

    class Churner:
        def __init__(self, context: Any) -> None:
            self.context = context
            log.factory_runs[(context.actor_id.value, context.object_generation.value)] += 1

        def _ran(self, token: bytes) -> bytes:
            ctx = self.context
            log.handled[token] += 1
            log.handled_by[token] = (ctx.actor_id.value, ctx.object_generation.value)
            return f"{ctx.actor_id.value}|{ctx.object_generation.value}".encode()

        @on_request("echo")
        async def echo(self, payload: bytes) -> bytes:
            return payload + b"@" + self._ran(payload)

        @on_send("note")
        async def note(self, payload: bytes) -> None:
            self._ran(payload)

    app.register_actor("churner", Churner, relocation=RecreateOnRelocation())
    return app


async def _settled(store: CountingStore, backend: str) -> list[Any]:
    """The ACTOR rows once none is Creating or Closing (bounded poll)."""
    rows: list[Any] = []
    for _ in range(400):
        if backend == "memory":
            await trio.testing.wait_all_tasks_blocked()
        else:
            await trio.sleep(0.05)
        rows = list(await store.list_rows(Namespace.ACTOR, after=None, limit=1000))
        if all(row.state is AuthorityState.READY for row in rows):
            return rows
        if backend == "memory":
            await trio.sleep(0.05)
    pytest.fail(f"rows never settled: {[(r.key.object_id, r.state) for r in rows]}")


@pytest.mark.parametrize("seed", SEEDS)
async def test_churn_three_nodes_small_id_set(
    backend: str, clock: object, store: CountingStore, seed: int
) -> None:
    log = Log()
    tokens = iter(range(1, 1 << 30))
    with trio.fail_after(BOUND[backend]):
        async with open_cluster(NODES, store=store, app=churn_app(log)) as cluster:
            await cluster.wait_all_admitted()
            servers = cluster.servers

            async def one_call(
                node: int,
                op: str,
                actor_id: str,
                token: bytes,
                timeout: float,
                known: dict[str, ActorRef],
            ) -> None:
                actors = servers[node].actors
                if op in ("create", "get_or_create"):
                    call = (
                        actors.create(actor_id, "churner")
                        if op == "create"
                        else actors.get_or_create(actor_id, "churner")
                    )
                    result = await call.timeout(timeout)
                    assert isinstance(result, Created | Existing), result
                    known[actor_id] = result.actor
                elif op == "request":
                    reply = await actors.request(actor_id, "echo", token).timeout(timeout)
                    assert reply is not None
                    log.replied[token] = reply
                elif op == "send":
                    await actors.send(actor_id, "note", token).timeout(timeout)
                    log.sent.add(token)
                elif op == "find":
                    ref = await actors.find(actor_id)
                    if ref is not None:
                        known[actor_id] = ref
                else:
                    ref = known.pop(actor_id, None) or await actors.find(actor_id)
                    if ref is not None:
                        await actors.destroy(ref)

            async def cancel_later(scope: trio.CancelScope, steps: int) -> None:
                # The caller is cancelled mid-call: after ``steps`` scheduler turns on
                # memory (virtual time barely moves there), after ``steps`` ms on PG.
                if backend == "memory":
                    for _ in range(steps):
                        await trio.lowlevel.checkpoint()
                else:
                    await trio.sleep(steps / 1000)
                scope.cancel()

            async def worker(nursery: trio.Nursery, node: int, task: int) -> None:
                rng = random.Random(f"{seed}-{node}-{task}")
                known: dict[str, ActorRef] = {}
                for _ in range(OPS[backend]):
                    actor_id = rng.choice(IDS)
                    op = rng.choices(OPERATIONS, weights=WEIGHTS)[0]
                    token = f"{node}.{task}.{next(tokens)}".encode()
                    timeout = rng.choice(TIMEOUTS)
                    cancel_at = rng.randrange(1, 16) if rng.random() < CANCEL else None
                    try:
                        with trio.CancelScope() as scope:
                            if cancel_at is not None:
                                nursery.start_soon(cancel_later, scope, cancel_at)
                            await one_call(node, op, actor_id, token, timeout, known)
                        outcome = "cancelled" if scope.cancelled_caught else "ok"
                        log.outcomes[f"{op}:{outcome}"] += 1
                    except ERRORS[op] as exc:
                        log.outcomes[f"{op}:{type(exc).__name__}"] += 1
                    except Exception as exc:  # asserted below, with the op that raised it
                        log.unexpected.append((op, actor_id, exc))
                    if rng.random() < 0.3:
                        await trio.sleep(rng.random() * 0.02)

            async with trio.open_nursery() as nursery:
                for node in range(NODES):
                    for task in range(TASKS_PER_NODE):
                        nursery.start_soon(worker, nursery, node, task)

            assert not log.unexpected, log.unexpected[:5]
            rows = await _settled(store, backend)

            # At most one row per id, Ready, hosted by its owner and nowhere else.
            assert len({row.key.object_id for row in rows}) == len(rows)
            ready = {row.key.object_id: (row.object_generation, row.owner.node_rid) for row in rows}
            for server in servers:
                rid = server.identity.node_rid
                hosted = {(r.actor_id.value, r.object_generation) for r in hosted_actors(server)}
                owned = {(i, gen) for i, (gen, owner) in ready.items() if owner == rid}
                assert hosted == owned, (server.identity.node_rid, hosted, owned)
                stats = server.statistics().actors
                assert stats is not None
                assert stats.hosted == len(owned)
                assert (stats.creates_in_flight, stats.staging) == (0, 0), stats
            for actor_id, (gen, owner) in ready.items():
                for server in servers:
                    ref = await server.actors.find(actor_id)
                    assert ref is not None and ref.object_generation == gen, (actor_id, ref)
                    assert ref.node_rid == owner
                token = f"check.{actor_id}".encode()
                reply = await servers[0].actors.request(actor_id, "echo", token).timeout(5)
                assert reply == token + f"@{actor_id}|{gen.value}".encode()

            # Capacity counters equal the Ready rows per node; nothing pending.
            ready_by_node = Counter(owner for _, owner in ready.values())
            nodes = await store.list_nodes()
            assert len(nodes) == NODES
            for record in nodes:
                rid = record.descriptor.node_rid
                assert (record.active, record.pending) == (ready_by_node[rid], 0), record

            # One factory run per reservation at most; exactly one per Ready incarnation.
            assert all(n == 1 for n in log.factory_runs.values()), log.factory_runs
            for actor_id, (gen, _) in ready.items():
                assert log.factory_runs[(actor_id, gen.value)] == 1

            # Every answered request was handled once, by the incarnation that replied.
            assert all(n == 1 for n in log.handled.values()), [
                t for t, n in log.handled.items() if n != 1
            ]
            for token, reply in log.replied.items():
                assert log.handled[token] == 1, token
                actor_id, gen = log.handled_by[token]
                assert reply == token + f"@{actor_id}|{gen}".encode()

            # The churn was real: every kind of call both succeeded and collided.
            for op in ("create", "get_or_create", "request", "send", "destroy"):
                assert log.outcomes[f"{op}:ok"] > 0, log.outcomes
            assert log.outcomes["create:AlreadyExists"] > 0, log.outcomes
