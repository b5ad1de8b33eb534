"""The SessionRouter across real OS processes on one PostgreSQL (spec 10 §6.3 D, §7, §10.1):
three router node processes (``zlink-trio router node``, the example's node: a DISTRIBUTED
router on PostgreSQL behind the websocket adapter), driven by real websocket clients.

* concurrent submits to one session from all three nodes run strictly one turn at a time
  (wall-clock turn intervals logged by each process never overlap; every turn saw the
  history of all the turns before it);
* the holder process is SIGKILLed mid-turn: the caller waiting on its idempotency key gets
  HOLDER_LOST within lease + sweep time, and a retry with the same key runs once;
* with notifications blocked on every node (no LISTEN), every keyed forwarded future still
  completes, through the idempotency-store polling fallback.

Short leases and TTLs, every wait event-driven (output lines, answers), all bounded.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pathlib
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest
import trio
from process_kit import JsonLinesProcess

from zlink_trio.router_web import open_router_client
from zlink_trio.store.postgres import drop_schema

pytestmark = [
    pytest.mark.process,
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
]

ROOT = pathlib.Path(__file__).parents[2]
AGENT = "agent-x"
LEASE = 2.0
"""lock_lease and the secondary idempotency TTL of every node (seconds)."""
SWEEP = 0.5
"""The holder-loss sweep interval."""


class Node:
    def __init__(self, name: str, process: JsonLinesProcess) -> None:
        self.name = name
        self.out = process
        self.url = ""

    def turns(self, event: str) -> list[dict[str, Any]]:
        return [line for line in self.out.lines if line.get("event") == event]


@pytest.fixture
async def schema(pg_dsn: str) -> AsyncIterator[str]:
    name = f"zlink_router_proc_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        with trio.CancelScope(shield=True):
            await drop_schema(pg_dsn, name)


@asynccontextmanager
async def node_process(
    dsn: str, schema: str, name: str, *, turn_seconds: float, listen: bool = True
) -> AsyncIterator[Node]:
    command = [
        sys.executable, "-m", "zlink_trio.cli", "router", "node", "--dsn", dsn,
        "--schema", schema, "--node", name, "--turn-seconds", str(turn_seconds),
        "--lease", str(LEASE), "--secondary-ttl", str(LEASE), "--sweep", str(SWEEP),
        "--log-turns",
    ]  # fmt: skip
    if not listen:
        command.append("--no-listen")
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, env=env)
    node = Node(name, JsonLinesProcess(process))
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(node.out.pump)
            ready = await node.out.wait_line(event="ready")
            node.url = f"ws://127.0.0.1:{ready['port']}/"
            try:
                yield node
            finally:
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.terminate()
                with trio.move_on_after(10):
                    await process.wait()
            if process.returncode is None:
                process.kill()
            await process.wait()


@asynccontextmanager
async def three_nodes(
    dsn: str, schema: str, *, turn_seconds: list[float], listen: bool = True
) -> AsyncIterator[list[Node]]:
    async with AsyncExitStack() as stack:
        nodes = []
        for name, seconds in zip(("node-a", "node-b", "node-c"), turn_seconds, strict=True):
            nodes.append(
                await stack.enter_async_context(
                    node_process(dsn, schema, name, turn_seconds=seconds, listen=listen)
                )
            )
        yield nodes


def _intervals(nodes: list[Node]) -> list[tuple[float, float, str]]:
    spans = []
    for node in nodes:
        starts = node.turns("turn_start")
        ends = node.turns("turn_end")
        assert len(starts) == len(ends), node.out.lines
        spans += [(s["t"], e["t"], s["text"]) for s, e in zip(starts, ends, strict=True)]
    return sorted(spans)


async def test_concurrent_submits_from_three_processes_run_one_turn_at_a_time(
    pg_dsn: str, schema: str
) -> None:
    """§7.3 across processes: nine submits to one session, three through each node at once,
    all answer 200; the nine turns' wall-clock intervals (logged by the processes that ran
    them) never overlap, and each turn saw the history of every turn before it."""
    with trio.fail_after(90):
        async with three_nodes(pg_dsn, schema, turn_seconds=[0.2, 0.2, 0.2]) as nodes:
            answers: list[dict[str, Any]] = []

            async def send(node: Node, index: int) -> None:
                async with open_router_client(node.url) as client:
                    answers.append(
                        await client.submit("s-1", AGENT, f"m{index}", idempotency_key=f"k-{index}")
                    )

            async with trio.open_nursery() as nursery:
                for index, node in zip(range(9), itertools.cycle(nodes), strict=False):
                    nursery.start_soon(send, node, index)
    assert [a.get("status") for a in answers] == [200] * 9, answers
    spans = _intervals(nodes)
    assert sorted(text for *_, text in spans) == sorted(f"m{i}" for i in range(9))
    assert all(a_end <= b_start for (_, a_end, _), (b_start, _, _) in itertools.pairwise(spans))
    seen = sorted(int(a["text"].rsplit(":", 1)[1]) for a in answers)
    assert seen == [2 * i for i in range(9)]  # each turn read every earlier turn's history


async def test_a_sigkilled_holder_fails_the_waiting_caller_holder_lost_and_the_retry_runs_once(
    pg_dsn: str, schema: str
) -> None:
    """§6.3 D across processes: node a runs a long turn under key k and is SIGKILLed
    mid-turn; the caller attached to k on node b gets HOLDER_LOST within lease + sweep
    time (plus slack for a loaded machine); a retry with k on node c runs the turn once,
    and a second retry answers the cached result without running it."""
    with trio.fail_after(90):
        async with three_nodes(pg_dsn, schema, turn_seconds=[60.0, 0.2, 0.2]) as nodes:
            a, b, c = nodes
            accepted: list[dict[str, Any]] = []
            async with open_router_client(a.url) as first, trio.open_nursery() as nursery:

                async def run_on_a() -> None:
                    with contextlib.suppress(ConnectionError):  # node a dies under it
                        await first.submit("s-1", AGENT, "long", idempotency_key="k")

                nursery.start_soon(run_on_a)
                await a.out.wait_line(event="turn_start", text="long")
                async with open_router_client(b.url) as waiting:
                    attached = trio.Event()

                    def on_accepted(frame: dict[str, Any]) -> None:
                        accepted.append(frame)
                        attached.set()

                    answer: dict[str, Any] = {}

                    async def wait_on_b() -> None:
                        answer.update(
                            await waiting.submit(
                                "s-1", AGENT, "long", idempotency_key="k", on_accepted=on_accepted
                            )
                        )

                    async with trio.open_nursery() as inner:
                        inner.start_soon(wait_on_b)
                        await attached.wait()
                        a.out.process.send_signal(signal.SIGKILL)
                        killed_at = trio.current_time()
                        assert await a.out.process.wait() == -signal.SIGKILL
                    lost_after = trio.current_time() - killed_at
                nursery.cancel_scope.cancel()  # the dead node's client connection
            assert accepted[0]["disposition"] == "FORWARDED"
            assert answer["type"] == "error" and answer.get("code") == "HOLDER_LOST", answer
            assert answer["status"] == 503
            assert lost_after <= LEASE + SWEEP + 3.0, lost_after
            async with open_router_client(c.url) as retry:
                again = await retry.submit("s-1", AGENT, "long", idempotency_key="k")
                assert again.get("status") == 200, again
                cached = await retry.submit("s-1", AGENT, "long", idempotency_key="k")
                assert cached == {**again, "id": cached["id"]}
            ran = [line for n in (b, c) for line in n.turns("turn_start") if line["text"] == "long"]
            assert len(ran) == 1


async def test_with_notifications_blocked_every_forwarded_future_completes_by_polling(
    pg_dsn: str, schema: str
) -> None:
    """§6.3 D, §10.1 row 3: no node LISTENs (every signal is lost). While node a runs a
    turn, nodes b and c each submit keyed turns: all are FORWARDED, node a runs them after
    its turn (its drain pass reads the inbox, no doorbell needed), and every forwarded
    caller gets its result from the idempotency store (polled every secondary TTL / 2)."""
    with trio.fail_after(90):
        async with three_nodes(pg_dsn, schema, turn_seconds=[1.5, 0.2, 0.2], listen=False) as nodes:
            a, b, c = nodes
            answers: dict[str, dict[str, Any]] = {}
            kinds: dict[str, str] = {}
            async with open_router_client(a.url) as on_a, trio.open_nursery() as nursery:

                async def send(client: Any, text: str) -> None:
                    answers[text] = await client.submit(
                        "s-1",
                        AGENT,
                        text,
                        idempotency_key=f"k-{text}",
                        on_accepted=lambda f: kinds.__setitem__(text, f["disposition"]),
                    )

                nursery.start_soon(send, on_a, "first")
                await a.out.wait_line(event="turn_start", text="first")
                async with (
                    open_router_client(b.url) as on_b,
                    open_router_client(c.url) as on_c,
                    trio.open_nursery() as forwards,
                ):
                    for i in range(2):
                        forwards.start_soon(send, on_b, f"b{i}")
                        forwards.start_soon(send, on_c, f"c{i}")
    assert {t: a.get("status") for t, a in answers.items()} == dict.fromkeys(
        ["first", "b0", "b1", "c0", "c1"], 200
    ), answers
    assert {t: k for t, k in kinds.items() if t != "first"} == dict.fromkeys(
        ["b0", "b1", "c0", "c1"], "FORWARDED"
    )
    assert sorted(line["text"] for line in a.turns("turn_start")) == [
        "b0", "b1", "c0", "c1", "first"
    ]  # fmt: skip
