"""The demo's nodes: each an ``open_server`` lifecycle in its own task, stoppable and
restartable, sharing one Location Store (memory, or PostgreSQL)."""

from __future__ import annotations

import json
from typing import Any, Literal

import attrs
import trio

from ..config import MeshConfig, PostgresStoreConfig, ServerConfig, StreamConfig
from ..errors import Unavailable
from ..ids import ActorId, NodeRid, SpotId
from ..server import Server, open_server
from .app import Tally, make_app
from .control import LineSplitter, RelocationAnswer, decode_answer, encode_request

__all__ = ["DemoNode", "node_config"]

MESH = "demo"


def node_config(label: str, store: Any, secret: bytes) -> ServerConfig:
    return ServerConfig(
        node_name=label,
        meshes=(MeshConfig(name=MESH),),  # type: ignore[arg-type]  # attrs converter
        cluster_secret=secret,
        location_store=store,
        stream=StreamConfig(host="127.0.0.1", port=0),
        owner_lease_ttl=2.0,
        owner_lease_renew_interval=0.5,
        descriptor_poll_interval=0.2,
        hello_timeout=2.0,
        drain_timeout=2.0,
        default_request_timeout=5.0,
        connect_timeout=1.0,
    )


@attrs.define(eq=False)
class DemoNode:
    """One node of the demo: ``label`` ``node<i>``, up or down, restartable."""

    index: int
    label: str
    store: Any
    secret: bytes
    tally: Tally
    host_rooms: bool
    server: Server | None = None
    lifecycles: int = 0
    _stop: trio.Event | None = None
    _stopped: trio.Event | None = None

    @property
    def up(self) -> bool:
        return self.server is not None

    @property
    def url(self) -> str | None:
        return None if self.server is None else self.server.stream.url

    @property
    def node_rid(self) -> NodeRid | None:
        return None if self.server is None else self.server.identity.node_rid

    async def relocate(self, what: ActorId | SpotId, to: NodeRid) -> RelocationAnswer:
        """Move a player (ActorId) or a room (SpotId) hosted here live to ``to``.

        Raises:
            ZLinkError: ``Server.relocate``'s errors; Unavailable when this node is down.
        """
        if self.server is None:
            raise Unavailable(f"{self.label} is down")
        if isinstance(what, SpotId):
            spot = await self.server.relocate(what, to=to)
            members = tuple(str(m) for m in spot.members)
            return RelocationAnswer(spot.relayed, spot.committed, members)
        actor = await self.server.relocate(what, to=to)
        return RelocationAnswer(actor.relayed, actor.committed)

    async def start(self, nursery: trio.Nursery) -> None:
        """Start a new lifecycle; returns once it is registered and serving."""
        await nursery.start(self._run)

    async def _run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._stop, self._stopped = trio.Event(), trio.Event()
        app = make_app(self.label, self.tally, host_rooms=self.host_rooms)
        try:
            async with open_server(node_config(self.label, self.store, self.secret), app) as server:
                self.server = server
                self.lifecycles += 1
                task_status.started()
                await self._stop.wait()
                self.server = None
        finally:
            self.server = None
            self._stopped.set()

    async def stop(self) -> None:
        """A clean stop (the drain of ``open_server``); returns once it is down."""
        if self._stop is not None and self._stopped is not None:
            self._stop.set()
            await self._stopped.wait()


def is_postgres(store: str) -> bool:
    return store.startswith(("postgresql://", "postgres://"))


def store_config(store: str, schema: str) -> Any:
    """The ``location_store`` every demo node shares: one MemoryLocationStore object, or
    a PostgreSQL schema each node opens itself."""
    if is_postgres(store):
        return PostgresStoreConfig(dsn=store, schema=schema, connections=2)
    from ..store.memory import MemoryLocationStore

    return MemoryLocationStore()


def _event(line: bytes | None) -> dict[str, Any] | None:
    """One event line of a node process; None for anything else on its stdout."""
    try:
        event = json.loads(line) if line is not None else None
    except ValueError:
        return None
    return event if isinstance(event, dict) and "event" in event else None


@attrs.define(eq=False)
class ProcessNode:
    """One node of the demo as its own process (:mod:`zlink_trio.demo.node`) on a
    PostgreSQL store: stopped with SIGTERM (its counters come back), or killed with SIGKILL
    (its lifecycle's counters die with it). Its stdin is the driver's control channel
    (:mod:`zlink_trio.demo.control`): :meth:`relocate` asks it to move a player or a room
    it hosts."""

    index: int
    label: str
    dsn: str
    schema: str
    secret: bytes
    tally: Tally
    host_rooms: bool
    url: str | None = None
    node_rid: NodeRid | None = None
    """This lifecycle's NodeRid (from its ready line); None while it is down."""
    process: trio.Process | None = None
    lifecycles: int = 0
    killed: int = 0
    server: None = None
    _requests: int = 0
    _waiting: dict[int, trio.MemorySendChannel[dict[str, Any]]] = attrs.field(factory=dict)
    _send_lock: trio.StrictFIFOLock = attrs.field(factory=trio.StrictFIFOLock)

    @property
    def up(self) -> bool:
        return self.url is not None

    async def start(self, nursery: trio.Nursery) -> None:
        await nursery.start(self._run)

    async def _run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        import os
        import subprocess
        import sys

        command = [
            sys.executable, "-m", "zlink_trio.demo.node", "--label", self.label,
            "--dsn", self.dsn, "--schema", self.schema, "--secret-hex", self.secret.hex(),
            *(() if self.host_rooms else ("--no-rooms",)),
        ]  # fmt: skip
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        process = await trio.lowlevel.open_process(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        self.process = process
        started = False
        lines = LineSplitter(limit=1 << 20)
        try:
            assert process.stdout is not None
            async for chunk in process.stdout:
                for line in lines.feed(chunk):
                    event = _event(line)
                    if event is None:
                        continue
                    if event["event"] == "answer":
                        request_id = event.get("id")
                        waiter = (
                            self._waiting.pop(request_id, None)
                            if isinstance(request_id, int)
                            else None
                        )
                        if waiter is not None:  # else its caller gave up waiting
                            waiter.send_nowait(event)
                    elif event["event"] == "ready":
                        self.url = event["url"]
                        self.node_rid = NodeRid.from_hex(event["node_rid"])
                        self.lifecycles += 1
                        started = True
                        task_status.started()
                    elif event["event"] == "tally":
                        self.tally.handled[self.label] += event["handled"]
                        self.tally.pushed[self.label] += event["pushed"]
                        self.tally.turns[self.label] += event["turns"]
                        self.tally.lobby_activations += event["lobby_activations"]
                        self.tally.lobby_moves += event["lobby_moves"]
                        self.tally.room_moves += event["room_moves"]
        finally:
            self.url = self.node_rid = None
            for waiter in self._waiting.values():  # their callers: Unavailable
                waiter.close()
            self._waiting.clear()
            with trio.CancelScope(shield=True):
                if process.returncode is None:
                    process.kill()
                await process.wait()
                if process.stdin is not None:
                    await process.stdin.aclose()
        if not started:
            raise OSError(f"{self.label} exited before it was ready (status {process.returncode})")

    async def stop(self) -> None:
        """SIGTERM (a clean stop); returns once the process exited."""
        import signal

        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            await self.process.wait()
        self.url = self.node_rid = None

    async def kill(self) -> None:
        """SIGKILL; returns once the process is gone."""
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
            self.killed += 1
        self.url = self.node_rid = None

    async def relocate(self, what: ActorId | SpotId, to: NodeRid) -> RelocationAnswer:
        """Ask this node's process to move a player (ActorId) or a room (SpotId) it hosts
        live to ``to``; returns its answer. The caller owns the timeout (a late answer is
        dropped).

        Raises:
            ZLinkError: the node's typed error (``Server.relocate``'s, by kind);
                Unavailable when the process is down or exits before it answers.
        """
        process = self.process
        if process is None or process.stdin is None or self.node_rid is None:
            raise Unavailable(f"{self.label} is down")
        self._requests += 1
        request_id = self._requests
        kind: Literal["player", "room"] = "room" if isinstance(what, SpotId) else "player"
        send, receive = trio.open_memory_channel[dict[str, Any]](1)
        self._waiting[request_id] = send
        try:
            try:
                async with self._send_lock:
                    await process.stdin.send_all(encode_request(request_id, kind, str(what), to))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                raise Unavailable(f"{self.label} exited") from None
            try:
                answer = await receive.receive()
            except trio.EndOfChannel:
                raise Unavailable(f"{self.label} exited before it answered") from None
        finally:
            self._waiting.pop(request_id, None)
            receive.close()
        return decode_answer(answer)
