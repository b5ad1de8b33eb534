"""A04-14 (PerActor and Entry part): an Actor handler never touches a PerActor Spot's
state, nor any Spot's from its Entry Spot: it has no Spot object, and every change it
asks for is an explicit Spot request, run as a turn of the Spot (the Spot's own handler
count equals the changes). Two and three nodes, both stores."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).parents[1] / "actors"))

from join_kit import JoinLog, create_on, entry_id, make_join_app, spot_on

from zlink_trio import (
    App,
    JoinCompletion,
    JoinOutcome,
    PerActor,
    RecreateOnRelocation,
    SpotContext,
    on_join_complete,
    on_request,
)
from zlink_trio.testing import CountingStore, open_cluster


@attrs.define
class Tally:
    handled: list[tuple[str, bytes]] = attrs.field(factory=list)
    """(spot id, payload) of every run of the Spot's "add" handler."""
    gate: trio.Event | None = None
    entered: trio.Event = attrs.field(factory=trio.Event)
    answers: list[tuple[str, object, bytes]] = attrs.field(factory=list)
    """(actor id, its Spot object, the reply) of every Actor "ask"."""
    joins: list[JoinCompletion] = attrs.field(factory=list)
    joined: trio.Event = attrs.field(factory=trio.Event)


def make_app(log: JoinLog, tally: Tally) -> App:
    app = make_join_app(log, spots=True)

    class Counter:
        """A PerActor User Spot whose state changes only in its own handler."""

        def __init__(self, context: SpotContext) -> None:
            self.context = context
            self.total = 0

        @on_request("add")
        async def add(self, payload: bytes) -> bytes:
            tally.handled.append((self.context.spot_id.value, payload))
            if tally.gate is not None:
                tally.entered.set()
                await tally.gate.wait()
            self.total += int(payload)
            return str(self.total).encode()

    class Asker:
        def __init__(self, context: Any) -> None:
            self.context = context

        @on_request("ask")
        async def ask(self, payload: bytes) -> bytes:
            """``<spot>|<n>``: ask the Spot to add n (an explicit Spot request)."""
            spot, _, n = payload.decode().partition("|")
            reply = await self.context.spots.request(spot, "add", n.encode()).timeout(30)
            tally.answers.append((self.context.actor_id.value, self.context.spot, reply))
            return reply

        @on_request("join")
        async def join(self, payload: bytes) -> bytes:
            return str(self.context.join_spot(payload.decode()).defer().value).encode()

        @on_request("whoami")
        async def whoami(self, payload: bytes) -> bytes:
            return self.context.spot_id.value.encode()

        @on_join_complete
        async def joined(self, completion: JoinCompletion) -> None:
            tally.joins.append(completion)
            tally.joined.set()

    app.register_spot("counter", Counter, execution=PerActor(), relocation=RecreateOnRelocation())
    app.register_actor("asker", Asker, relocation=RecreateOnRelocation())
    return app


@pytest.mark.parametrize("nodes", [2, 3])
async def test_a04_14_per_actor_and_entry_members_change_spot_state_only_by_spot_calls(
    clock: object, store: CountingStore, nodes: int
) -> None:
    """A04-14 (PerActor and Entry): an Actor in its Entry Spot and an Actor that joined a
    PerActor Spot each ask the Spot (on the last node) to change its state; the Actors have
    no Spot object (``context.spot`` is None); every change is one run of the Spot's
    request handler (handler count = changes = sum); while the Spot's turn is held the
    Actor's request waits for it (it runs on the Spot's turn) but the Actor itself keeps
    running other messages (its own gate)."""
    log = JoinLog()
    tally = Tally()
    async with open_cluster(nodes, store=store, app=make_app(log, tally)) as cluster:
        await cluster.wait_all_admitted()
        servers = cluster.servers
        last = nodes - 1
        spot = await spot_on(servers[0], servers, last, "counter")
        entry_member = await create_on(servers[0], servers, 0, "in-entry", "asker")
        spot_member = await create_on(servers[0], servers, last, "in-spot", "asker")
        await servers[0].actors.request(spot_member, "join", spot.encode()).timeout(30)
        await tally.joined.wait()
        assert tally.joins[0].outcome is JoinOutcome.ACCEPTED
        assert await servers[0].actors.request(spot_member, "whoami") == spot.encode()
        assert await servers[0].actors.request(entry_member, "whoami") == (
            (await entry_id(servers[0])).value.encode()
        )
        for actor, n in ((entry_member, 1), (spot_member, 10), (entry_member, 100)):
            await servers[0].actors.request(actor, "ask", f"{spot}|{n}".encode()).timeout(30)
        assert [p for _, p in tally.handled] == [b"1", b"10", b"100"]
        assert [r for _, _, r in tally.answers] == [b"1", b"11", b"111"]
        assert all(spot_object is None for _, spot_object, _ in tally.answers)
        # the Spot's turn is held: both Actors' explicit calls wait for it, then run one
        # Spot turn each, in order
        tally.gate = trio.Event()
        async with trio.open_nursery() as nursery:

            async def ask(actor: str, n: int) -> None:
                await servers[0].actors.request(actor, "ask", f"{spot}|{n}".encode()).timeout(30)

            nursery.start_soon(ask, spot_member, 1000)
            await tally.entered.wait()
            nursery.start_soon(ask, entry_member, 10000)
            await trio.testing.wait_all_tasks_blocked()
            assert len(tally.answers) == 3 and len(tally.handled) == 4
            tally.gate.set()
        assert [p for _, p in tally.handled][3:] == [b"1000", b"10000"]
        assert [r for _, _, r in tally.answers][3:] == [b"1111", b"11111"]
