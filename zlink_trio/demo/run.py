"""``zlink-trio demo``: the room application on a local cluster, driven by scripted clients.

::

    zlink-trio demo [--nodes 3] [--clients 6] [--duration 20] [--store postgresql://...]
                    [--web-port PORT] [--seed N]

What it does, in order (times are fractions of ``--duration``):

* starts ``--nodes`` nodes, each with a STREAM websocket endpoint: in this process on one
  in-memory Location Store, or -- ``--store postgresql://...`` -- one OS process per node
  (:mod:`zlink_trio.demo.node`) on a fresh schema of that PostgreSQL (dropped at the end),
  with a client-role node in this process that creates and reads the rooms; rooms and the
  lobby are hosted by every node but the last, players by all;
* creates the rooms, then starts ``--clients`` scripted clients (real websocket sessions)
  that join a room and chat and move; the lobby Instance Spot is cold-activated by the
  first join;
* at 30 % disconnects one client and rebinds it on another node (its player stays where
  it is);
* at 45 % stops the last node -- in process a clean stop (its players are released), with
  one process per node a SIGKILL (its players are reclaimed once its lease expired) -- and
  at 65 % starts it again (a new lifecycle); its clients rebind on the other nodes;
* at 100 % stops the clients, reads every room's chat history and prints the summary.

Invariants (exit status 1 if any fails): every chat the server accepted is in its room's
history (lost = 0), no chat is in a history twice (duplicated = 0), at least one chat was
accepted, every room ticked, the lobby was cold-activated exactly once (its moves' restores
are not activations), the live relocations committed, and no chat of a moved player (or
of a moved room's clients) was refused after its move (until the script's next node stop or disconnect: a chat
in flight on a session whose node stops is that stop's refusal, not the move's). A chat
refused while a node stopped (the client saw an error) is counted as refused, never re-sent.

Relocation: at 20 % and 80 % (when the build's ``Server`` has ``relocate``) player-1 and
every browser player (``web-*``) are moved live to another node mid-traffic,
then the busiest room (the one most scripted clients chat in) is moved live to the other
room-hosting node while its clients keep chatting; the summary lists each move (how long
``relocate()`` took, whether the target committed, and what the moved player's client saw
since: new sessions, refused chats until the next node stop or disconnect; for the room,
its clients' refused chats over the same window) -- none may be refused: a moved player
keeps its room and a moved room its members, history and ticks (``PreserveStateWith``;
its timer is the restored one, never registered twice). Every chat the moved room had
accepted is still in its history (lost = 0). A clean stop also moves the lobby and the
rooms to a live node (drain by relocation): the lobby's factory runs again there, then its
restore; "cold-activated exactly once" counts instances built minus restores. Without
``relocate`` the summary says that relocation is not shown. With one process per node the
driver asks the owner's process to move (its control channel on stdin,
:mod:`zlink_trio.demo.control`): the same moves, the same checks.
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import sys
import time
import uuid
from collections import Counter
from contextlib import AsyncExitStack
from typing import Any, TextIO

import attrs
import trio

from .._exceptions import startup_failure
from ..errors import Unavailable, ZLinkError
from ..ids import ActorId, NodeRid, SpotId
from .app import Tally
from .clients import ClientStats, ScriptedClient
from .cluster import DemoNode, ProcessNode, is_postgres, node_config, store_config
from .control import RelocationAnswer

__all__ = ["add_demo_parser", "run"]

MOVE_WAIT = 30.0
"""How long the script waits for one live move's answer."""

RELOCATION_NOTE = (
    "relocation: not shown: this build has no server.relocate, so the demo does not move "
    "rooms or players between live nodes"
)


def can_relocate() -> bool:
    """Whether this build's Server has ``relocate`` (live Actor relocation)."""
    from ..server import Server

    return callable(getattr(Server, "relocate", None))


def add_demo_parser(commands: Any) -> None:
    demo = commands.add_parser("demo", help="a multiplayer room app on a local 3-node cluster")
    demo.add_argument("--nodes", type=int, default=3, help="nodes (3)")
    demo.add_argument("--clients", type=int, default=6, help="scripted clients (6)")
    demo.add_argument("--duration", type=float, default=20.0, help="seconds of traffic (20)")
    demo.add_argument("--rooms", type=int, default=2, help="rooms (2)")
    demo.add_argument("--store", default="memory", help="memory (default) or a postgresql:// DSN")
    demo.add_argument("--web-port", type=int, help="also serve the browser client on this port")
    demo.add_argument("--seed", type=int, default=1, help="the clients' random seed (1)")


class Demo:
    def __init__(self, args: argparse.Namespace, out: TextIO) -> None:
        self.args = args
        self.out = out
        self.tally = Tally()
        self.stats = ClientStats()
        self.events: list[str] = []
        self.started = time.monotonic()
        self.rooms = [f"room-{i + 1}" for i in range(max(1, args.rooms))]
        self.schema = f"zlink_demo_{uuid.uuid4().hex[:10]}"
        store = store_config(args.store, self.schema)
        secret = secrets.token_bytes(32)
        n = args.nodes
        self.processes = is_postgres(args.store)
        self.store = store
        self.secret = secret
        self.nodes: list[Any] = [
            ProcessNode(
                i,
                f"node{i + 1}",
                args.store,
                self.schema,
                secret,
                self.tally,
                host_rooms=(n == 1 or i < n - 1),
            )
            if self.processes
            else DemoNode(
                i, f"node{i + 1}", store, secret, self.tally, host_rooms=(n == 1 or i < n - 1)
            )
            for i in range(n)
        ]
        self.clients: list[ScriptedClient] = []
        self.done = trio.Event()
        self.relocations: list[tuple[str, str, str, float, bool, int, float]] = []
        """(actor or room, from node, to node, seconds until relocate returned, committed,
        its client's session count when it moved (0 for a room), when it moved)."""
        self.room_nodes: dict[str, str] = {}
        """Which node hosts each room now (in process: from its creation and its moves)."""
        self.disruptions: list[float] = []
        """When the script stopped a node or disconnected a client (``trio.current_time()``):
        a chat refused after one of them is that event's, not an earlier move's."""
        self.relocation_errors: list[str] = []
        self.rows: Any = store if not self.processes else None
        """The Location Store the driver reads owners from (in process the nodes' own; one
        process per node: the driver's own connection to their schema)."""

    # --- output ------------------------------------------------------------------------------
    def log(self, text: str) -> None:
        stamp = f"{time.monotonic() - self.started:5.1f}s"
        self.events.append(f"{stamp} {text}")
        if not self.live:
            print(f"[{stamp}] {text}", file=self.out, flush=True)

    live = False

    def pick_url(self, start: int) -> str | None:
        for k in range(len(self.nodes)):
            node = self.nodes[(start + k) % len(self.nodes)]
            url: str | None = node.url
            if url is not None:
                return url
        return None

    def view(self) -> Any:
        from rich.console import Group
        from rich.table import Table

        table = Table(title="zlink-trio demo", title_justify="left")
        for column in ("node", "state", "STREAM", "sessions", "actors", "spots", "turns"):
            table.add_column(column)
        for node in self.nodes:
            server = node.server
            if server is None:
                state = "[green]up[/green] (own process)" if node.up else "[red]down[/red]"
                port = node.url.rsplit(":", 1)[1].rstrip("/") if node.url else "-"
                table.add_row(node.label, state, port, "-", "-", "-", "-")
                continue
            stats = server.statistics()
            table.add_row(
                node.label,
                "[green]up[/green]",
                str(server.stream.port),
                str(server.stream.statistics().sessions),
                str(stats.actors.hosted if stats.actors else 0),
                str(stats.spots.hosted if stats.spots else 0),
                str(self.tally.turns[node.label]),
            )
        s = self.stats
        counters = (
            f"chats sent {s.sent}  accepted {len(s.accepted)}  refused {sum(s.failed.values())}"
            f"  handled {sum(self.tally.handled.values())}  pushed {sum(self.tally.pushed.values())}"
            f"  received {sum(s.received.values())}  moves {s.moves}  rebinds {s.rebinds}"
        )
        rooms = "rooms: " + ", ".join(
            f"{room} on {self.room_nodes.get(room, '?')}" for room in self.rooms
        )
        moved = [f"{r[0]} {r[1]}->{r[2]} {r[3] * 1000:.0f} ms" for r in self.relocations[-4:]]
        lines = [rooms] if self.room_nodes else []
        if moved:
            lines.append("live relocations: " + ", ".join(moved))
        return Group(table, counters, *lines, *self.events[-6:])

    # --- the script --------------------------------------------------------------------------
    async def main(self) -> int:
        args = self.args
        page = None
        migrated = False
        where = "PostgreSQL, one process each" if self.processes else "in this process"
        self.log(f"starting {len(self.nodes)} nodes ({where})")
        try:
            if args.web_port is not None:  # a taken port fails before anything starts
                from .web import bind_page

                page = await bind_page(args.web_port)
            if is_postgres(args.store):  # an unreachable store too (one line, not per node)
                from ..store.postgres import migrate_schema

                await migrate_schema(args.store, self.schema)
                migrated = True
            async with AsyncExitStack() as stack, trio.open_nursery() as nursery:
                if self.processes:
                    from ..store.postgres import open_postgres_store

                    self.rows = await stack.enter_async_context(
                        open_postgres_store(
                            args.store, schema=self.schema, connections=1, migrate=False
                        )
                    )
                async with trio.open_nursery() as starting:  # one after another in process
                    starting.start_soon(self._starting)
                    async with trio.open_nursery() as each:
                        for node in self.nodes:
                            if self.processes:
                                each.start_soon(self._start, node, nursery)
                            else:
                                await self._start(node, nursery)
                    starting.cancel_scope.cancel()
                server = await self._driver(nursery)
                for room in self.rooms:
                    created = await server.spots.get_or_create(room, "room").timeout(10)
                    label = self._label_of(created.spot.node_rid)
                    if label is not None:
                        self.room_nodes[room] = label
                self.log(f"rooms {', '.join(self.rooms)} created")
                if page is not None:
                    from .web import serve_page

                    port = await nursery.start(serve_page, self, page)
                    print(f"web page: http://127.0.0.1:{port}/", file=self.out, flush=True)
                rng = random.Random(args.seed)
                clients_done = trio.Event()
                async with trio.open_nursery() as players:
                    for i in range(args.clients):
                        client = ScriptedClient(
                            index=i,
                            room=self.rooms[i % len(self.rooms)],
                            stats=self.stats,
                            log=self.log,
                            pick_url=self.pick_url,
                            rng=random.Random(rng.random()),
                        )
                        self.clients.append(client)
                        players.start_soon(client.run, clients_done)
                    self.log(f"{args.clients} clients joining")
                    await self._script(nursery)
                    clients_done.set()
                histories, ticks = await self._histories(server)
                for node in self.nodes:  # stop them all: process nodes report their counters
                    await node.stop()
                status = self._summary(histories, ticks)
                nursery.cancel_scope.cancel()
        finally:
            for listener in page or ():
                with trio.CancelScope(shield=True):
                    await listener.aclose()
            if migrated:
                from ..store.postgres import drop_schema

                with trio.CancelScope(shield=True), trio.move_on_after(10):
                    await drop_schema(args.store, self.schema)
        return status

    async def _script(self, nursery: trio.Nursery) -> None:
        duration = self.args.duration
        begin = trio.current_time()

        async def at(fraction: float) -> None:
            await trio.sleep_until(begin + fraction * duration)

        async def live_view() -> None:
            from rich.live import Live

            with Live(self.view(), console=self._console(), refresh_per_second=4) as live:
                while True:
                    live.update(self.view())
                    await trio.sleep(0.25)

        async def progress() -> None:
            while True:
                await trio.sleep(2.0)
                up = sum(n.up for n in self.nodes)
                print(
                    f"[{time.monotonic() - self.started:5.1f}s] {up}/{len(self.nodes)} nodes up, "
                    f"{self.stats.sent} chats sent, {len(self.stats.accepted)} accepted",
                    file=self.out,
                    flush=True,
                )

        async with trio.open_nursery() as side:
            if self._console().is_terminal:
                self.live = True
                side.start_soon(live_view)
            else:
                side.start_soon(progress)
            if self.clients and can_relocate():
                await at(0.2)
                await self._relocate_players()
                await self._relocate_room()
            if self.clients:
                await at(0.3)
                mover = self.clients[0]
                target = (mover.node_hint + 1) % len(self.nodes)
                self.log(f"{mover.name}: disconnecting; it rebinds on {self.nodes[target].label}")
                self.disruptions.append(trio.current_time())
                mover.disconnect(target)
            if len(self.nodes) > 1:
                victim = self.nodes[-1]
                await at(0.45)
                self.disruptions.append(trio.current_time())
                if self.processes:
                    self.log(f"{victim.label}: SIGKILL (its players are reclaimed after its lease)")
                    await victim.kill()
                else:
                    self.log(
                        f"{victim.label}: clean stop (its players are "
                        + (
                            "relocated to live nodes where possible, else "
                            if can_relocate()
                            else ""
                        )
                        + "released)"
                    )
                    await victim.stop()
                self.log(f"{victim.label}: down")
                await at(0.65)
                if self.processes:  # a process takes seconds to start: the script goes on
                    nursery.start_soon(self._start, victim, nursery)
                else:
                    await self._start(victim, nursery)
            if self.clients and can_relocate():
                await at(0.8)
                await self._relocate_players()
                await self._relocate_room()
            await at(1.0)
            side.cancel_scope.cancel()
        if self.live:
            self.live = False
            for line in self.events:
                print(line, file=self.out)

    def _console(self) -> Any:
        from rich.console import Console

        return Console(file=self.out)

    async def _relocate_players(self) -> None:
        """Move bound players live to another node mid-traffic: player-1 and every browser
        player (``web-*``), each from its owner to the next live node."""
        from ..store.api import Namespace, ObjectKey

        store = self.rows
        web = [r.key.object_id for r in await store.list_rows(Namespace.ACTOR, after=None, limit=1000)
               if r.key.object_id.startswith("web-")]  # fmt: skip
        for actor in ["player-1", *web]:
            by_rid = self._live_nodes()
            row = await store.read(ObjectKey.actor(actor))
            if row is None or row.owner.node_rid not in by_rid:
                continue
            source = by_rid[row.owner.node_rid]
            targets = [n for n in by_rid.values() if n is not source]
            if not targets:
                return
            target = targets[0]
            started = trio.current_time()
            try:
                result = await self._move(source, ActorId(actor), target)
            except ZLinkError as exc:
                self.relocation_errors.append(f"{actor}: {type(exc).__name__}: {exc}")
                self.log(f"{actor}: relocation {source.label} -> {target.label} refused: {exc}")
                continue
            pause = trio.current_time() - started
            committed = result.committed
            owner = self._client_of(actor)
            sessions = owner.sessions if owner is not None else 0
            self.relocations.append(
                (actor, source.label, target.label, pause, committed, sessions, started)
            )
            self.log(
                f"{actor}: relocated live {source.label} -> {target.label} in {pause * 1000:.0f} ms"
                f" ({result.relayed} messages relayed)"
            )

    def _live_nodes(self) -> dict[NodeRid, Any]:
        """The nodes up now, by their lifecycle's NodeRid."""
        return {n.node_rid: n for n in self.nodes if n.node_rid is not None}

    async def _move(self, source: Any, what: ActorId | SpotId, target: Any) -> RelocationAnswer:
        """``source`` moves ``what`` live to ``target``: in process its ``relocate()``, one
        process per node the request on its control channel. Its answer is awaited for
        ``MOVE_WAIT`` seconds at most.

        Raises:
            ZLinkError: the move's typed error; Unavailable: no answer in time.
        """
        with trio.move_on_after(MOVE_WAIT):
            answer: RelocationAnswer = await source.relocate(what, target.node_rid)
            return answer
        raise Unavailable(f"{source.label} did not answer within {MOVE_WAIT:.0f} s")

    def _label_of(self, node_rid: Any) -> str | None:
        node = self._live_nodes().get(node_rid)
        return None if node is None else str(node.label)

    def _busiest_room(self) -> str:
        """The room most scripted clients chat in (the first on a tie)."""
        members = Counter(c.room for c in self.clients)
        return max(self.rooms, key=lambda room: (members[room], -self.rooms.index(room)))

    async def _relocate_room(self) -> None:
        """Move the busiest room live to another room-hosting node mid-traffic (its
        clients keep chatting: what reaches it meanwhile is held and relayed; its members,
        history and ticks move with it, ``PreserveStateWith``; its timer is the restored
        one)."""
        from ..store.api import ObjectKey

        room = self._busiest_room()
        row = await self.rows.read(ObjectKey.spot(room))
        by_rid = self._live_nodes()
        if row is None or row.owner.node_rid not in by_rid:
            return
        source = by_rid[row.owner.node_rid]
        targets = [n for n in by_rid.values() if n is not source and n.host_rooms]
        if not targets:
            return
        target = targets[0]
        started = trio.current_time()
        try:
            result = await self._move(source, SpotId(room), target)
        except ZLinkError as exc:
            self.relocation_errors.append(f"{room}: {type(exc).__name__}: {exc}")
            self.log(f"{room}: relocation {source.label} -> {target.label} refused: {exc}")
            return
        pause = trio.current_time() - started
        committed = result.committed
        self.relocations.append((room, source.label, target.label, pause, committed, 0, started))
        if committed:
            self.room_nodes[room] = target.label
        self.log(
            f"{room}: relocated live {source.label} -> {target.label} in {pause * 1000:.0f} ms"
            f" ({result.relayed} messages relayed; members, history and ticks"
            " kept)"
        )

    def _relocation_rows(
        self,
    ) -> list[tuple[str, str, str, float, bool, int | None, int | None]]:
        """Each move with what its player's scripted client saw since (new sessions, refused
        chats; None for a player without one, e.g. a browser's), or for a room what its
        scripted clients saw since (refused chats; no sessions count)."""
        rows: list[tuple[str, str, str, float, bool, int | None, int | None]] = []
        for what, source, target, pause, committed, sessions, moved in self.relocations:
            until = min((d for d in self.disruptions if d > moved), default=float("inf"))
            if what in self.rooms:
                refused = sum(
                    moved <= at < until
                    for c in self.clients
                    if c.room == what
                    for at in c.refused_at
                )
                rows.append((what, source, target, pause, committed, None, refused))
                continue
            owner = self._client_of(what)
            since = None if owner is None else owner.sessions - sessions
            refused_since = (
                None if owner is None else sum(moved <= at < until for at in owner.refused_at)
            )
            rows.append((what, source, target, pause, committed, since, refused_since))
        return rows

    def _client_of(self, actor: str) -> ScriptedClient | None:
        return next((c for c in self.clients if c.name == actor), None)

    async def _start(self, node: Any, nursery: trio.Nursery) -> None:
        again = node.lifecycles > 0
        try:
            await node.start(nursery)
        except (OSError, RuntimeError) as exc:
            self.log(f"{node.label}: did not start: {exc}")
            return
        if again:
            self.log(f"{node.label}: restarted (lifecycle {node.lifecycles})")
        else:
            self.log(f"{node.label} up: STREAM {node.url}")

    async def _driver(self, nursery: trio.Nursery) -> Any:
        """The server that creates the rooms and reads them at the end: node 1 in process,
        or (one process per node) a client-role node of this process on the same store."""
        if not self.processes:
            return self.nodes[0].server
        from ..app import App
        from ..config import MeshConfig, ObjectRole
        from ..server import serve_server

        config = attrs.evolve(
            node_config("driver", self.store, self.secret),
            meshes=(MeshConfig(name="demo", object_role=ObjectRole.CLIENT),),  # type: ignore[arg-type]
            stream=None,
        )
        return await nursery.start(serve_server, config, App())

    async def _histories(
        self, server: Any
    ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, int]]:
        histories: dict[str, list[dict[str, Any]]] = {}
        ticks: dict[str, int] = {}
        for room in self.rooms:
            raw = await server.spots.request(room, "history", b"").timeout(10)
            histories[room] = json.loads(raw or b"[]")
            state = await server.spots.request(room, "state", b"").timeout(10)
            ticks[room] = json.loads(state or b"{}").get("ticks", 0)
        return histories, ticks

    async def _starting(self) -> None:
        """Liveness while the nodes start (processes on PostgreSQL take seconds)."""
        while True:
            await trio.sleep(2.0)
            up = sum(n.up for n in self.nodes)
            self.log(f"{up}/{len(self.nodes)} nodes up, waiting for the others")

    def _relocates(self) -> bool:
        """Whether this run moves players live (on a build with ``relocate``, with clients
        to move)."""
        return can_relocate() and len(self.clients) >= 2

    def _moves_rooms(self) -> bool:
        """Whether this run can move a room (two nodes at least host rooms)."""
        return sum(bool(n.host_rooms) for n in self.nodes) >= 2

    def _summary(self, histories: dict[str, list[dict[str, Any]]], ticks: dict[str, int]) -> int:
        from rich.table import Table

        in_history = Counter((line["player"], line["id"]) for h in histories.values() for line in h)
        s = self.stats
        lost = len(s.accepted - set(in_history))
        duplicated = sum(1 for count in in_history.values() if count > 1)
        handled = sum(self.tally.handled.values())
        unanswered = s.sent - len(s.accepted) - sum(s.failed.values())
        rows = self._relocation_rows()
        moved_refused = sum(r[6] or 0 for r in rows if r[0] not in self.rooms)
        room_refused = sum(r[6] or 0 for r in rows if r[0] in self.rooms)
        cold = self.tally.lobby_activations - self.tally.lobby_moves
        checks = {
            "lost = 0 (every accepted chat is in its room's history)": lost == 0,
            "duplicated = 0 (no chat in a history twice)": duplicated == 0,
            "chats were accepted": len(s.accepted) > 0,
            "every room's timer ticked": all(t > 0 for t in ticks.values()) or not self.clients,
            "the lobby was cold-activated exactly once (instances built - moves' restores)": cold
            == 1
            or not self.clients,
        }
        if self.relocations or self._relocates():  # no OK for a move this run does not make
            checks["the live relocations committed (players and a room)"] = (
                (any(r[0] in self.rooms for r in self.relocations) or not self._moves_rooms())
                and any(r[0] not in self.rooms for r in self.relocations)
                and all(r[4] for r in self.relocations)
            )
            checks[
                "a moved player's chats were not refused (from its move to the next node stop or disconnect)"
            ] = moved_refused == 0
            checks[
                "a moved room's chats were not refused (its clients', from its move to the next node stop or disconnect)"
            ] = room_refused == 0
        console = self._console()
        summary = Table(title="summary", title_justify="left")
        summary.add_column("what")
        summary.add_column("count", justify="right")
        for what, value in (
            ("chats sent", s.sent),
            ("accepted (answered with a sequence number)", len(s.accepted)),
            ("refused (an error answered; never re-sent)", sum(s.failed.values())),
            *((f"  refused: {kind}", n) for kind, n in sorted(s.failed.items())),
            ("unanswered (its session ended while waiting)", unanswered),
            ("handled (appended by a room)", handled),
            ("pushed (to bound sessions)", sum(self.tally.pushed.values())),
            ("received by clients", sum(s.received.values())),
            ("lost", lost),
            ("duplicated", duplicated),
            ("moves", s.moves),
            ("sessions", s.connects),
            ("rebinds", s.rebinds),
            ("room ticks", sum(ticks.values())),
            ("lobby activations", cold),
            ("lobby moves (restores on a move target)", self.tally.lobby_moves),
            ("room moves (restores: live and by drain)", self.tally.room_moves),
        ):
            summary.add_row(what, str(value))
        console.print(summary)
        load = Table(title="per-node load (handler turns)", title_justify="left")
        for column in ("node", "turns", "room chats", "pushes", "lifecycles", "SIGKILLed"):
            load.add_column(column)
        for node in self.nodes:
            load.add_row(
                node.label,
                str(self.tally.turns[node.label]),
                str(self.tally.handled[node.label]),
                str(self.tally.pushed[node.label]),
                str(node.lifecycles),
                str(getattr(node, "killed", 0)),
            )
        console.print(load)
        if any(getattr(node, "killed", 0) for node in self.nodes):
            console.print(
                "(a SIGKILLed lifecycle's own counters die with it: its turns and pushes are "
                "not in this table; the rooms' histories, read from the live nodes, are whole)"
            )
        if not can_relocate():
            console.print(RELOCATION_NOTE)
        else:
            moves = Table(title="relocations (live, mid-traffic)", title_justify="left")
            for column in ("moved", "from", "to", "relocate() took", "committed",
                           "its client since: new sessions", "refused chats (until a stop)"):  # fmt: skip
                moves.add_column(column)
            for actor, source, target, pause, committed, since, refused_since in rows:
                moves.add_row(
                    actor, source, target, f"{pause * 1000:.0f} ms", str(committed),
                    "-" if since is None else str(since),
                    "-" if refused_since is None else str(refused_since),
                )  # fmt: skip
            console.print(moves)
            for error in self.relocation_errors:
                console.print(f"relocation refused: {error}")
        for what, ok in checks.items():
            console.print(f"{'[green]OK[/green]  ' if ok else '[red]FAIL[/red]'} {what}")
        broken = [what for what, ok in checks.items() if not ok]
        console.print("demo: all invariants hold" if not broken else f"demo: FAILED: {broken}")
        return 0 if not broken else 1


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """The ``demo`` command."""
    out = out if out is not None else sys.stdout
    if args.nodes < 1 or args.clients < 0 or args.duration <= 0 or args.rooms < 1:
        print("zlink-trio demo: --nodes and --rooms must be >= 1, --duration > 0", file=sys.stderr)
        return 2
    if args.store != "memory" and not is_postgres(args.store):
        print("zlink-trio demo: --store is memory or a postgresql:// DSN", file=sys.stderr)
        return 2
    try:
        return trio.run(Demo(args, out).main)
    except (ZLinkError, OSError, BaseExceptionGroup) as exc:
        cause = startup_failure(exc, (ZLinkError, OSError))
        if cause is None:
            raise
        print(f"zlink-trio demo: cannot run: {cause}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("zlink-trio demo: interrupted", file=sys.stderr)
        return 130
