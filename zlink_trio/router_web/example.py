"""The runnable example: three router nodes on one PostgreSQL, a client with no stickiness.

* :class:`StreamingSession` — an application LiveSession whose turn streams a few text
  deltas over ``turn_seconds`` and answers with a summary of the history it read.
* :func:`run_node` — one node: a DISTRIBUTED router on the DSN (``open_distributed_router``)
  served by the websocket adapter; prints ``{"event": "ready", "node", "port"}``, and with
  ``log_turns`` one JSON line per turn start and end (wall clock, for the process tests).
* :func:`run_client` — sends each request to a random node, prints the events that node
  relays and the result.
* :func:`run_example` — starts three node processes, runs the client, stops the nodes.

``zlink-trio router node|client|example`` (:mod:`.cli`) runs these.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any, Final

import trio

from ..router.application import (
    EventListener,
    LiveSession,
    QueuedInput,
    TurnInput,
)
from ..router.builder import SessionRouterBuilder
from ..router.config import SessionRouterConfig
from ..router.events import AgentExecutionResult, AssistantTextDelta
from ..router.ids import AgentRef, NodeId, SessionId
from ..router.records import TranscriptEntry
from ..router.values import LiveSessionOptions
from ..router_pg import open_distributed_router
from .adapter import serve_router_websocket
from .client import open_router_client

__all__ = ["StreamingSession", "run_client", "run_example", "run_node"]

AGENT: Final = "example-agent"


def _line(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


class StreamingSession:
    """A turn streams ``deltas`` text deltas spread over ``turn_seconds``, then appends
    the exchange to the shared history."""

    def __init__(
        self, session_id: SessionId, node: str, turn_seconds: float, log_turns: bool
    ) -> None:
        self._session_id = session_id
        self._node = node
        self._seconds = turn_seconds
        self._log = log_turns

    @property
    def session_id(self) -> SessionId:
        return self._session_id

    async def run_turn(self, turn: TurnInput, listener: EventListener) -> AgentExecutionResult:
        text = turn.user_input.as_text()
        history = await turn.history.load()
        if self._log:
            _line(event="turn_start", node=self._node, text=text, t=time.time())
        words = [f"[{self._node}]", "thinking", "about", repr(text), "after", str(len(history))]
        for word in words:
            listener(AssistantTextDelta(word + " "))
            await trio.sleep(self._seconds / len(words))
        await turn.history.append(
            [
                TranscriptEntry("user", text, turn.turn_id),
                TranscriptEntry("assistant", f"{self._node} answered {text}"),
            ]
        )
        if self._log:
            _line(event="turn_end", node=self._node, text=text, t=time.time())
        return AgentExecutionResult(f"{self._node}:{text}:{len(history)}")

    def inject(self, queued: QueuedInput) -> None:
        return None

    async def aclose(self) -> None:
        return None


async def run_node(
    dsn: str,
    *,
    schema: str,
    node: str,
    host: str = "127.0.0.1",
    port: int = 0,
    turn_seconds: float = 3.0,
    config: SessionRouterConfig | None = None,
    listen: bool = True,
    log_turns: bool = False,
) -> None:
    """Serve one node until cancelled (SIGINT/SIGTERM end the process)."""

    async def factory(
        session_id: SessionId, agent_ref: AgentRef, options: LiveSessionOptions
    ) -> LiveSession:
        return StreamingSession(session_id, node, turn_seconds, log_turns)

    builder = SessionRouterBuilder(
        node_id=NodeId(node),
        session_factory=factory,
        config=config or SessionRouterConfig(),
    )
    async with (
        open_distributed_router(builder, dsn, schema=schema, listen=listen) as router,
        trio.open_nursery() as nursery,
    ):
        server = await nursery.start(serve_router_websocket, router, host, port)
        _line(event="ready", node=node, port=server.port)
        await trio.sleep_forever()


async def run_client(
    urls: Sequence[str], session: str, texts: Sequence[str], *, seed: int | None = None
) -> list[dict[str, Any]]:
    """Send each text to a random node (no stickiness), print the events it relays and the
    result; answer the result frames."""
    chooser = random.Random(seed)
    results: list[dict[str, Any]] = []
    for text in texts:
        url = chooser.choice(list(urls))
        print(f"--> {url}  {text!r}", flush=True)
        async with open_router_client(url) as client, client.events(session) as frames:

            async def show(frames: Any = frames) -> None:
                async for event in frames:
                    shown = event.get("text") or event.get("reason") or event.get("message")
                    print(f"    event {event['type']}: {shown}", flush=True)
                    if event["type"] in ("completed", "error", "interrupted", "rejected"):
                        return

            async with trio.open_nursery() as nursery:
                nursery.start_soon(show)
                answer = await client.submit(
                    session,
                    AGENT,
                    text,
                    on_accepted=lambda f: print(f"    {f['disposition']}", flush=True),
                )
            print(f"<-- {answer.get('status')} {answer.get('text') or answer}", flush=True)
            results.append(answer)
    return results


async def run_example(dsn: str, *, schema: str = "zlink_router_example") -> None:
    """Three node processes, then the client with three requests, then stop the nodes."""
    path = os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
    processes: list[trio.Process] = []
    urls: list[str] = []
    try:
        for name in ("node-a", "node-b", "node-c"):
            command = [
                sys.executable, "-m", "zlink_trio.cli", "router", "node",
                "--dsn", dsn, "--schema", schema, "--node", name,
            ]  # fmt: skip
            process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, env=env)
            processes.append(process)
            assert process.stdout is not None
            buffer = b""
            with trio.fail_after(30):
                while b"\n" not in buffer:
                    chunk = await process.stdout.receive_some()
                    if not chunk:
                        raise RuntimeError(f"{name} exited before it was ready")
                    buffer += chunk
            ready = json.loads(buffer.split(b"\n", 1)[0])
            urls.append(f"ws://127.0.0.1:{ready['port']}/")
            print(f"{name} ready on {urls[-1]}", flush=True)
        await run_client(urls, "example-session", ["hello", "what did I say?", "thanks"])
    finally:
        with trio.CancelScope(shield=True):
            for process in processes:
                if process.returncode is None:
                    process.terminate()
            for process in processes:
                with trio.move_on_after(10):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
