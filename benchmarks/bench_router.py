"""SessionRouter latency on PostgreSQL, beside the original's published figures.

Usage: python benchmarks/bench_router.py [--dsn DSN] [--count N] [--gap SECONDS]

Two DISTRIBUTED routers (nodes a and b) in this process, each with its own connections
and its own LISTEN connection on one fresh schema (every signal between them goes through
the PostgreSQL server, as between processes). The application's turn emits one text delta
stamped with its emit time and returns at once, so what is measured is the router.

* ``local``     submit → result on node a, which holds the session (warm handle, held lease);
* ``forwarded`` submit on node b → inbox + doorbell → node a runs it → TURN_RESULT → b;
* ``event``     a turn run on a, the frame received by b's ``events()`` subscriber (the
  EVENT rail: bounded queue, NOTIFY, decode, relay);
* ``raw NOTIFY`` the same run's baseline: one LISTEN/NOTIFY round trip through the bus
  (``PostgresSessionSignalBus.barrier``: NOTIFY on one connection, heard on another).

Each series also counts the PostgreSQL statements (= round trips: every backend method
is one statement) both nodes issued per sample, bus NOTIFYs included, and how the local
submits were answered (a FORWARDED one crossed the inbox and the bus).

Each is run *paced* (one at a time, ``--gap`` idle between them) and *burst* (back to back).
p50 / p95 / p99 in ms are printed beside the original's figures (JVM, Redis: 1.73 / 2.97 /
3.74 ms paced, 0.15 / 0.22 / 0.33 ms burst; what exactly those runs timed is not published
with them, so the comparison is indicative), and LAST the ratio of our p50 to the same
run's raw NOTIFY p50.
"""

from __future__ import annotations

import argparse
import statistics
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from zlink_trio.router import (
    AgentExecutionResult,
    AgentRef,
    AssistantTextDelta,
    EventListener,
    ExecutedLocally,
    Forwarded,
    LiveSession,
    LiveSessionOptions,
    NodeId,
    QueuedInput,
    SessionId,
    SessionRouterBuilder,
    SessionRouterConfig,
    SubmitRequest,
    TurnInput,
)
from zlink_trio.router_pg import open_postgres_spis
from zlink_trio.store.postgres import drop_schema

ORIGINAL = {"paced": (1.73, 2.97, 3.74), "burst": (0.15, 0.22, 0.33)}
AGENT = AgentRef("bench-agent")


class _Session:
    def __init__(self, session_id: SessionId) -> None:
        self._id = session_id

    @property
    def session_id(self) -> SessionId:
        return self._id

    async def run_turn(self, turn: TurnInput, listener: EventListener) -> AgentExecutionResult:
        listener(AssistantTextDelta(repr(trio.current_time())))
        return AgentExecutionResult("ok")

    def inject(self, queued: QueuedInput) -> None:
        return None

    async def aclose(self) -> None:
        return None


async def _factory(
    session_id: SessionId, agent_ref: AgentRef, options: LiveSessionOptions
) -> LiveSession:
    return _Session(session_id)


class _Statements:
    """Counts the statements a router database runs (wraps its ``call``)."""

    def __init__(self, db: Any) -> None:
        self.count = 0
        inner = db.call

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return await inner(*args, **kwargs)

        setattr(db, "call", call)  # noqa: B010 - instrumenting one instance


def _builder(node: str) -> SessionRouterBuilder:
    return SessionRouterBuilder(
        node_id=NodeId(node), session_factory=_factory, config=SessionRouterConfig()
    )


def _pct(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=100, method="inclusive")
    return ordered[len(ordered) // 2] * 1e3, q[94] * 1e3, q[98] * 1e3


async def _series(op: Callable[[], Awaitable[float]], count: int, gap: float) -> list[float]:
    for _ in range(min(20, count)):  # warm-up
        await op()
    out = []
    for _ in range(count):
        out.append(await op())
        if gap:
            await trio.sleep(gap)
    return out


async def run(dsn: str, count: int, gap: float) -> None:
    from zlink_trio.router import open_session_router

    schema = f"zlink_bench_router_{uuid.uuid4().hex[:8]}"
    results: dict[str, dict[str, list[float]]] = {}
    statements: dict[str, dict[str, float]] = {}
    kinds: dict[str, int] = {}
    try:
        async with (
            open_postgres_spis(dsn, schema=schema) as spis_a,
            open_postgres_spis(dsn, schema=schema) as spis_b,
            open_session_router(spis_a.apply(_builder("a"))) as a,
            open_session_router(spis_b.apply(_builder("b"))) as b,
        ):
            counters = (_Statements(spis_a.db), _Statements(spis_b.db))
            session = SessionId("bench-session")
            request = SubmitRequest(session_id=session, agent_ref=AGENT, user_input="x")
            first = await a.submit(request)
            assert isinstance(first, ExecutedLocally)
            await first.result

            async def local() -> float:
                started = trio.current_time()
                disposition = await a.submit(request)
                kinds[type(disposition).__name__] = kinds.get(type(disposition).__name__, 0) + 1
                await disposition.result
                return trio.current_time() - started

            async def forwarded() -> float:
                started = trio.current_time()
                disposition = await b.submit(request)
                assert isinstance(disposition, Forwarded)
                await disposition.result
                return trio.current_time() - started

            async def raw_notify() -> float:
                started = trio.current_time()
                await spis_b.bus.barrier()
                return trio.current_time() - started

            delays: list[float] = []
            arrived = trio.Event()

            async def watch(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                nonlocal arrived
                async with b.events(session) as frames:
                    task_status.started()
                    async for frame in frames:
                        if isinstance(frame.event, AssistantTextDelta):
                            delays.append(trio.current_time() - float(frame.event.text))
                            arrived.set()

            async def event() -> float:
                nonlocal arrived
                arrived = trio.Event()
                disposition = await a.submit(request)
                await disposition.result
                with trio.fail_after(10):
                    await arrived.wait()
                return delays[-1]

            async with trio.open_nursery() as nursery:
                await nursery.start(watch)
                with trio.fail_after(600):
                    for mode, pause in (("paced", gap), ("burst", 0.0)):
                        results[mode] = {}
                        statements[mode] = {}
                        for name, op in (
                            ("local", local),
                            ("forwarded", forwarded),
                            ("event", event),
                            ("raw NOTIFY", raw_notify),
                        ):
                            before = sum(c.count for c in counters)
                            results[mode][name] = await _series(op, count, pause)
                            issued = sum(c.count for c in counters) - before
                            # the warm-up's samples are counted too
                            statements[mode][name] = issued / (count + min(20, count))
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await drop_schema(dsn, schema)

    print(f"SessionRouter on PostgreSQL, {count} samples each, paced gap {gap * 1e3:g} ms")
    print(f"local submits answered as: {kinds} (FORWARDED: queued behind the previous pass)")
    print(
        "p50 / p95 / p99 in ms; stmts = PostgreSQL statements per sample (both nodes, "
        "background renewals and heartbeats included); original = JVM on Redis; "
        "ratio = our p50 / raw NOTIFY p50"
    )
    for mode, series in results.items():
        base = _pct(series["raw NOTIFY"])[0]
        o = ORIGINAL[mode]
        print(f"[{mode}] original {o[0]:.2f} / {o[1]:.2f} / {o[2]:.2f}")
        for name, samples in series.items():
            p50, p95, p99 = _pct(samples)
            stmts = statements[mode][name]
            print(
                f"  {name:<11} {p50:7.2f} / {p95:7.2f} / {p99:7.2f}   stmts {stmts:5.2f}"
                f"   ratio {p50 / base:.2f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--gap", type=float, default=0.01)
    args = parser.parse_args()
    trio.run(run, args.dsn, args.count, args.gap)


if __name__ == "__main__":
    main()
