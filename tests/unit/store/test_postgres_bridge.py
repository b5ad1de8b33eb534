"""The Trio -> asyncio loop-thread bridge (zlink_trio.store._aiobridge), and the
connection layer's behaviour when a statement is cancelled mid-flight."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import textwrap
import threading

import pytest
import trio
from pg_kit import Admin, open_admin

from zlink_trio.store._aiobridge import open_loop_thread
from zlink_trio.store._pgconn import PgConnections
from zlink_trio.store.postgres import application_name


async def _echo(value: int) -> tuple[int, str]:
    await asyncio.sleep(0)
    return value, threading.current_thread().name


async def _fail() -> None:
    await asyncio.sleep(0)
    raise KeyError("asyncio side")


async def test_run_returns_the_value_computed_on_the_loop_thread() -> None:
    async with open_loop_thread(name="bridge-test") as bridge:
        assert await bridge.run(_echo, 7) == (7, "bridge-test")
        with pytest.raises(KeyError, match="asyncio side"):
            await bridge.run(_fail)


async def test_many_concurrent_calls_complete_and_reuse_doorbells() -> None:
    results: list[int] = []
    async with open_loop_thread() as bridge:

        async def worker(base: int) -> None:
            for i in range(50):
                value, _ = await bridge.run(_echo, base + i)
                results.append(value)

        async with trio.open_nursery() as nursery:
            for w in range(8):
                nursery.start_soon(worker, w * 1000)
        assert len(bridge._bells) <= 8
    assert sorted(results) == sorted(w * 1000 + i for w in range(8) for i in range(50))


async def test_cancellation_waits_for_the_asyncio_task_to_finish() -> None:
    """Trap 1: Trio resumes only after the asyncio task itself has finished (here its
    cleanup takes 50 ms after the CancelledError)."""
    log: list[str] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            log.append("cancelled")
            await asyncio.sleep(0.05)  # cleanup that must finish before Trio resumes
            log.append("cleaned up")
            raise

    async with open_loop_thread() as bridge:
        with trio.move_on_after(0.05) as scope:
            await bridge.run(slow)
        assert scope.cancelled_caught
        assert log == ["cancelled", "cleaned up"]


async def test_a_cancelled_call_raises_cancelled_even_if_the_task_finished() -> None:
    async def swallow() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return "finished anyway"
        return "never"

    async with open_loop_thread() as bridge:
        with trio.move_on_after(0.01) as scope:
            await bridge.run(swallow)
            pytest.fail("the call must raise Cancelled")  # pragma: no cover
        assert scope.cancelled_caught


async def test_cancellation_at_any_moment_never_loses_the_wakeup() -> None:
    """Cancels landing before the task starts, before its first step, mid-run and after
    it finished: every call returns or raises Cancelled, none hangs."""
    rng = random.Random(3)
    outcomes = {"value": 0, "cancelled": 0}
    async with open_loop_thread() as bridge:
        with trio.fail_after(30):
            for i in range(2000):
                with trio.move_on_after(rng.uniform(0, 0.0002)) as scope:
                    assert await bridge.run(_echo, i) == (i, "zlink-asyncio")
                outcomes["cancelled" if scope.cancelled_caught else "value"] += 1
    assert outcomes["value"] > 0
    assert outcomes["cancelled"] > 0


async def test_an_already_cancelled_caller_never_starts_the_coroutine() -> None:
    started: list[bool] = []

    async def record() -> None:
        started.append(True)

    async with open_loop_thread() as bridge:
        with trio.CancelScope() as scope:
            scope.cancel()
            await bridge.run(record)
        assert scope.cancelled_caught
        assert await bridge.run(_echo, 1) == (1, "zlink-asyncio")
    assert started == []


async def test_run_after_exit_raises_closed_resource_error() -> None:
    async with open_loop_thread() as bridge:
        pass
    with pytest.raises(trio.ClosedResourceError):
        await bridge.run(_echo, 1)


async def test_exit_cancels_leftover_asyncio_tasks() -> None:
    async def background() -> None:
        await asyncio.sleep(30)

    async def spawn() -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(background())

    async with open_loop_thread() as bridge:
        task = await bridge.run(spawn)
    assert task.cancelled()


@pytest.mark.process
def test_the_bridge_works_with_trio_asyncio_imported() -> None:
    """Trap 6: trio-asyncio patches asyncio on import (new_event_loop raises from Trio);
    the bridge builds its SelectorEventLoop itself."""
    script = textwrap.dedent(
        """
        import asyncio, trio, trio_asyncio
        from zlink_trio.store._aiobridge import open_loop_thread

        async def value():
            await asyncio.sleep(0)
            return 42

        async def main():
            async with open_loop_thread() as bridge:
                assert await bridge.run(value) == 42
            print("ok")

        trio.run(main)
        """
    )
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# ----- the connection layer, with a real server ---------------------------------------------
@pytest.mark.postgres
@pytest.mark.parametrize("blocker", ["row lock", "pg_sleep"])
async def test_statement_cancelled_mid_flight_returns_promptly_and_is_settled(
    pg_dsn: str, pg_schema: str, blocker: str
) -> None:
    """A cancel scope firing while the backend is blocked returns within the cancel
    round trip; the backend is gone by then (no zombie statement, trap 3: the connection
    is never reused) and the next statement runs on a new connection."""
    kwargs = {"dsn": pg_dsn, "server_settings": {"application_name": application_name(pg_schema)}}
    async with open_loop_thread() as bridge, open_admin(pg_dsn) as admin:
        conns = PgConnections(bridge, kwargs, 1, cancel_grace=5.0, retry_window=5.0)
        await conns.open()
        try:
            await _cancel_mid_flight(conns, admin, pg_schema, blocker)
        finally:
            await conns.aclose()


async def _cancel_mid_flight(conns: PgConnections, admin: Admin, schema: str, blocker: str) -> None:
    (old_pid,) = await admin.store_backends(schema)
    if blocker == "row lock":
        await admin.execute(f'CREATE SCHEMA "{schema}"')
        await admin.execute(f'CREATE TABLE "{schema}".t (id int PRIMARY KEY, v int)')
        await admin.execute(f'INSERT INTO "{schema}".t VALUES (1, 0)')
        await admin.execute("BEGIN")
        await admin.execute(f'SELECT * FROM "{schema}".t WHERE id = 1 FOR UPDATE')
        sql = f'UPDATE "{schema}".t SET v = v + 1 WHERE id = 1'
    else:
        sql = "SELECT pg_sleep(30)"
    deadline = trio.current_time() + 0.1
    with trio.move_on_after(0.1) as scope:
        await conns.call("execute", sql, (), idempotent=False)
    late = trio.current_time() - deadline
    assert scope.cancelled_caught
    assert late < 2.0, f"cancellation took {late:.3f} s"
    assert await admin.store_backends(schema) == []  # settled and closed, not reused
    if blocker == "row lock":
        await admin.execute("COMMIT")
        assert await admin.fetchval(f'SELECT v FROM "{schema}".t') == 0  # never committed
    new_pid = await conns.call("fetchval", "SELECT pg_backend_pid()", (), idempotent=True)
    assert new_pid != old_pid
    assert conns.recovery_epoch == 0  # a deliberate discard is not an outage
