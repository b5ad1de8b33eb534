"""Trio -> asyncpg bridge candidates, measured in one run on this machine.

Usage: python benchmarks/bench_pg_bridge.py [--dsn DSN] [--seconds S]

Each candidate runs in its own subprocess (trio-asyncio patches asyncio process-wide on
import, so it must not share a process with the others):

* ``raw``          asyncpg on plain asyncio (the reference, no Trio);
* ``loop-thread``  zlink_trio.store._aiobridge: asyncpg on a dedicated asyncio loop thread;
* ``trio-asyncio`` asyncpg on trio-asyncio's loop inside the Trio run;
* ``stepped``      a prototype, throughput only: the stock asyncio loop stepped by a Trio
  task in the Trio thread (private asyncio API; see docs/decisions.md).

For each it prints sequential CAS ``UPDATE ... WHERE id=$1 AND version=$2`` rates with
1 task and with 8 tasks (one connection each), then, for the two bridges, how long a Trio
deadline takes to return while the backend is frozen (blocked on a row lock held by
another connection, and in ``pg_sleep``), and whether the cancelled UPDATE stayed
uncommitted once the lock was released. Ratios to the raw reference come LAST on each line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

SCHEMA = "zlink_bench_bridge"
TASKS = 8
CANCEL_AFTER = 0.05
TRIES = 5


# ----- loop-side helpers (run on an asyncio loop, whichever bridge) ----------------------
async def _cas(conn: Any, row: int, version: int) -> int:
    try:
        got = await conn.fetchval(
            f"UPDATE {SCHEMA}.cas SET version = version + 1"
            " WHERE id = $1 AND version = $2 RETURNING version",
            row,
            version,
        )
    except BaseException:
        # The store's rule: a connection whose statement was interrupted is closed
        # gracefully (close() waits for the cancel acknowledgement), never reused.
        if isinstance(asyncio.current_task(), asyncio.Task):
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
        try:
            await conn.close(timeout=2.0)
        except BaseException:
            conn.terminate()
        raise
    assert got == version + 1
    return int(got)


async def _sleep(conn: Any) -> None:
    try:
        await conn.execute("SELECT pg_sleep(10)")
    except BaseException:
        asyncio.current_task().uncancel()  # type: ignore[union-attr]
        try:
            await conn.close(timeout=2.0)
        except BaseException:
            conn.terminate()
        raise


async def _setup(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        await conn.execute(f"CREATE SCHEMA {SCHEMA}")
        await conn.execute(f"CREATE TABLE {SCHEMA}.cas (id int PRIMARY KEY, version bigint)")
        await conn.execute(
            f"INSERT INTO {SCHEMA}.cas SELECT g, 0 FROM generate_series(0, {TASKS}) g"
        )
    finally:
        await conn.close()


async def _version(dsn: str, row: int) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval(f"SELECT version FROM {SCHEMA}.cas WHERE id = $1", row))
    finally:
        await conn.close()


# ----- raw reference ------------------------------------------------------------------
async def _raw(dsn: str, seconds: float) -> dict[str, float]:
    await _setup(dsn)

    async def worker(row: int, stop: float) -> int:
        conn = await asyncpg.connect(dsn)
        try:
            version, n = await _version(dsn, row), 0
            while time.perf_counter() < stop:
                version = await _cas(conn, row, version)
                n += 1
            return n
        finally:
            await conn.close()

    one = await worker(0, time.perf_counter() + seconds) / seconds
    stop = time.perf_counter() + seconds
    many = sum(await asyncio.gather(*(worker(r, stop) for r in range(TASKS)))) / seconds
    return {"one": one, "many": many}


# ----- the bridges (Trio side) ------------------------------------------------------------
Runner = Callable[..., Awaitable[Any]]


async def _trio_measure(dsn: str, seconds: float, run: Runner) -> dict[str, float]:
    rates = await _throughput(dsn, seconds, run)
    lock_ms, committed = await _cancel_on_lock(dsn, run)
    sleep_ms = await _cancel_in_sleep(dsn, run)
    return {**rates, "lock_ms": lock_ms, "sleep_ms": sleep_ms, "committed": committed}


async def _throughput(dsn: str, seconds: float, run: Runner) -> dict[str, float]:
    import trio

    async def worker(row: int, stop: float, counts: list[int]) -> None:
        conn = await run(asyncpg.connect, dsn)
        try:
            version = await run(_version, dsn, row)
            while time.perf_counter() < stop:
                version = await run(_cas, conn, row, version)
                counts[row] += 1
        finally:
            await run(conn.close)

    counts = [0] * (TASKS + 1)
    await worker(0, time.perf_counter() + seconds, counts)
    one = counts[0] / seconds
    counts = [0] * (TASKS + 1)
    stop = time.perf_counter() + seconds
    async with trio.open_nursery() as nursery:
        for row in range(TASKS):
            nursery.start_soon(worker, row, stop, counts)
    many = sum(counts) / seconds
    return {"one": one, "many": many}


async def _cancel_on_lock(dsn: str, run: Runner) -> tuple[float, float]:
    """Median ms from the deadline to the return; count of cancelled UPDATEs that
    committed after the lock holder let go (must be 0)."""
    import trio

    late, committed = [], 0
    for _ in range(TRIES):
        blocker = await run(asyncpg.connect, dsn)
        victim = await run(asyncpg.connect, dsn)
        try:
            before = await run(_version, dsn, TASKS)
            await run(blocker.execute, "BEGIN")
            await run(blocker.execute, f"SELECT 1 FROM {SCHEMA}.cas WHERE id = {TASKS} FOR UPDATE")
            deadline = trio.current_time() + CANCEL_AFTER
            with trio.move_on_after(CANCEL_AFTER):
                await run(_cas, victim, TASKS, before)
            late.append((trio.current_time() - deadline) * 1000)
            await run(blocker.execute, "COMMIT")
            if await run(_version, dsn, TASKS) != before:
                committed += 1
        finally:
            await run(blocker.close)
            if not victim.is_closed():
                await run(victim.close)
    return sorted(late)[len(late) // 2], committed


async def _cancel_in_sleep(dsn: str, run: Runner) -> float:
    import trio

    late = []
    for _ in range(TRIES):
        conn = await run(asyncpg.connect, dsn)
        deadline = trio.current_time() + CANCEL_AFTER
        with trio.move_on_after(CANCEL_AFTER):
            await run(_sleep, conn)
        late.append((trio.current_time() - deadline) * 1000)
        if not conn.is_closed():
            await run(conn.close)
    return sorted(late)[len(late) // 2]


async def _loop_thread(dsn: str, seconds: float) -> dict[str, float]:
    from zlink_trio.store._aiobridge import open_loop_thread

    async with open_loop_thread() as bridge:
        await bridge.run(_setup, dsn)
        return await _trio_measure(dsn, seconds, bridge.run)


async def _trio_asyncio(dsn: str, seconds: float) -> dict[str, float]:
    import trio_asyncio  # type: ignore[import-untyped]

    async def run(afn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        return await trio_asyncio.aio_as_trio(afn)(*args)

    async with trio_asyncio.open_loop():
        await run(_setup, dsn)
        return await _trio_measure(dsn, seconds, run)


class _SteppedLoop:
    """Prototype (not chosen, see docs/decisions.md): the stock SelectorEventLoop stepped
    from a Trio task in the Trio thread. No second thread and no GIL hand-offs, but it
    drives private asyncio API (_run_once, _ready, _scheduled, _set_running_loop) and breaks
    when trio-asyncio is imported (its patched get_running_loop ignores this loop)."""

    def __init__(self) -> None:
        import selectors

        class NoWait(selectors.DefaultSelector):
            def select(self, timeout: float | None = None) -> Any:
                return super().select(0)

        self.loop: Any = asyncio.SelectorEventLoop(NoWait())
        self._scope: Any = None
        self._kicked = False

    async def drive(self, task_status: Any) -> None:
        import math

        import trio

        loop, fd = self.loop, self.loop._selector.fileno()
        task_status.started()
        while True:
            asyncio.events._set_running_loop(loop)
            try:
                loop._run_once()
            finally:
                asyncio.events._set_running_loop(None)
            if loop._ready or self._kicked:
                self._kicked = False
                await trio.lowlevel.checkpoint()
                continue
            deadline = math.inf
            if loop._scheduled:
                deadline = trio.current_time() + max(0, loop._scheduled[0]._when - loop.time())
            with trio.CancelScope(deadline=deadline) as self._scope:
                await trio.lowlevel.wait_readable(fd)
            self._scope = None

    async def run(self, afn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        import outcome
        import trio

        waiter = trio.lowlevel.current_task()
        task = self.loop.create_task(afn(*args))
        task.add_done_callback(
            lambda t: trio.lowlevel.reschedule(waiter, outcome.capture(t.result))
        )
        self._kicked = True
        if self._scope is not None:
            self._scope.cancel()

        def abort(_: Any) -> Any:
            task.cancel()  # same thread: the done callback reschedules us once it ended
            return trio.lowlevel.Abort.FAILED

        result = await trio.lowlevel.wait_task_rescheduled(abort)
        if isinstance(result, BaseException):  # pragma: no cover
            raise result
        return result


async def _stepped(dsn: str, seconds: float) -> dict[str, float]:
    import trio

    stepped = _SteppedLoop()
    async with trio.open_nursery() as nursery:
        await nursery.start(stepped.drive)
        await stepped.run(_setup, dsn)
        rates = await _throughput(dsn, seconds, stepped.run)
        nursery.cancel_scope.cancel()
    return rates


def _child(mode: str, dsn: str, seconds: float) -> None:
    if mode == "raw":
        result = asyncio.run(_raw(dsn, seconds))
    else:
        import trio

        fn = {"loop-thread": _loop_thread, "trio-asyncio": _trio_asyncio, "stepped": _stepped}
        result = trio.run(fn[mode], dsn, seconds)
    print(json.dumps(result))


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", choices=["raw", "loop-thread", "trio-asyncio", "stepped"])
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.dsn, args.seconds)
        return
    modes = ("raw", "loop-thread", "trio-asyncio", "stepped")
    rounds: list[dict[str, dict[str, float]]] = []
    for _ in range(args.rounds):  # interleaved: the machine is shared and noisy
        results = {}
        for mode in modes:
            out = subprocess.run(
                [
                    *(sys.executable, __file__, "--child", mode),
                    *("--dsn", args.dsn, "--seconds", str(args.seconds)),
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            results[mode] = json.loads(out.strip().splitlines()[-1])
        rounds.append(results)
    print(
        f"PostgreSQL CAS through a Trio bridge: medians of {args.rounds} interleaved rounds"
        f" of {args.seconds:g} s; ratio = same-round rate / raw rate"
    )
    for mode in modes:

        def med(key: str, mode: str = mode) -> float:
            return _median([r[mode][key] for r in rounds])

        def ratio(key: str, mode: str = mode) -> float:
            return _median([r[mode][key] / r["raw"][key] for r in rounds])

        line = f"{mode:13s} 1 task {med('one'):6.0f} ops/s  {TASKS} tasks {med('many'):6.0f} ops/s"
        if mode not in ("raw", "stepped"):
            line += (
                f"  cancel: on lock +{med('lock_ms'):.1f} ms, in pg_sleep +{med('sleep_ms'):.1f} ms,"
                f" late commits {sum(r[mode]['committed'] for r in rounds):.0f}/{TRIES * args.rounds}"
            )
        line += f"  ratio {ratio('one'):.2f} / {ratio('many'):.2f}"
        print(line)

    async def _drop() -> None:
        conn = await asyncpg.connect(args.dsn)
        try:
            await conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        finally:
            await conn.close()

    asyncio.run(_drop())


if __name__ == "__main__":
    main()
