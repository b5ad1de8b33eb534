"""A04-01, A04-02, A04-03 (User Spot side): the payloads of an Actor that joined a
PerActor User Spot go straight to the Actor's own queue — local, remote and
Actor-to-Actor — never through the Spot's callbacks or application queue, also while the
Spot's own handler is blocked; the Spot's lifecycle queue sees only its membership
callbacks; a payload sent during a pending Join runs after the Join's completion. Two
and three nodes, both stores."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import trio

sys.path.insert(0, str(Path(__file__).parents[1] / "actors"))

from join_kit import JoinLog, create_on, make_join_app, spot_on

from zlink_trio import App, JoinOutcome, RecreateOnRelocation, on_request
from zlink_trio.testing import CountingStore, open_cluster, spot_statistics


def make_app(log: JoinLog) -> App:
    app = make_join_app(log, spots=True)

    class Forwarder:
        def __init__(self, context: Any) -> None:
            self.context = context

        @on_request("forward")
        async def forward(self, payload: bytes) -> bytes:
            """``<actor>|<data>``: an Actor-to-Actor request to ``<actor>``'s echo."""
            actor, _, data = payload.decode().partition("|")
            reply = await self.context.actors.request(actor, "echo", data.encode()).timeout(30)
            assert reply is not None
            return bytes(reply)

    app.register_actor("forwarder", Forwarder, relocation=RecreateOnRelocation())
    return app


def _lobby(server: Any) -> Any:
    stats = spot_statistics(server)
    return next(t for t in stats.types if t.stable_type == "lobby")


async def _scenario(store: CountingStore, nodes: int) -> dict[str, Any]:
    """An Actor joined a PerActor User Spot on the last node. While the Spot's own request
    handler is blocked, a local request, a request and a send from node 0 and an
    Actor-to-Actor request from node 0 are sent to the Actor; then a Join of the Actor
    back to its Entry Spot is pending (its handler blocked after ``defer()``) when a send
    arrives. What was observed, for the three tests below."""
    seen: dict[str, Any] = {}
    log = JoinLog()
    async with open_cluster(nodes, store=store, app=make_app(log)) as cluster:
        await cluster.wait_all_admitted()
        servers = cluster.servers
        first, host = servers[0], servers[-1]
        member = await create_on(first, servers, nodes - 1, "member")
        forwarder = await create_on(first, servers, 0, "fwd", "forwarder")
        lobby = await spot_on(first, servers, nodes - 1, "lobby")
        await first.actors.request(member, "join-spot", f"{lobby}|in".encode()).timeout(30)
        await log.wait_for(lambda: len(log.completions_of(member)) == 1)
        assert log.completions_of(member)[0].outcome is JoinOutcome.ACCEPTED
        before = _lobby(host)
        log.spot_gate = trio.Event()
        async with trio.open_nursery() as nursery:

            async def hold() -> None:
                assert await first.spots.request(lobby, "hold").timeout(60) == b"1"

            nursery.start_soon(hold)
            await log.spot_entered.wait()
            assert await host.actors.request(member, "echo", b"local").timeout(30) == b"local"
            assert await first.actors.request(member, "echo", b"remote").timeout(30) == b"remote"
            await first.actors.send(member, "note", b"sent")
            await log.wait_for(lambda: ("note", b"sent") in log.packets(member))
            forwarded = await first.actors.request(forwarder, "forward", f"{member}|a2a".encode())
            assert forwarded == b"a2a"
            seen["before"], seen["during"] = before, _lobby(host)
            seen["handled"] = [p for p, _ in log.packets(member)][-4:]
            log.spot_gate.set()
        # a send during a pending Join (back to the Entry Spot) runs after its completion
        log.gate = trio.Event()
        log.entered = trio.Event()
        async with trio.open_nursery() as nursery:

            async def leave() -> None:
                await first.actors.request(member, "join-block").timeout(60)

            nursery.start_soon(leave)
            await log.entered.wait()
            await first.actors.send(member, "note", b"behind")
            log.gate.set()
        await log.wait_for(lambda: ("note", b"behind") in log.packets(member))
        seen["completions"] = [i for i, t in enumerate(log.trace) if t == "complete:accepted"]
        seen["behind"] = log.trace.index("note:behind")
        seen["after"] = _lobby(host)
    return seen


@pytest.mark.parametrize("nodes", [2, 3])
async def test_a04_01_a_user_spot_members_payloads_reach_its_own_handler(
    clock: object, store: CountingStore, nodes: int
) -> None:
    """A04-01 (User Spot side): the payloads of an Actor in a PerActor User Spot — a local
    request, a request and a send from another node, an Actor-to-Actor request — all run
    the Actor's own handlers, in order; the Spot's packet and request handler counts do
    not move (its only request is its own)."""
    seen = await _scenario(store, nodes)
    assert seen["handled"] == ["echo", "echo", "note", "echo"]
    before, during = seen["before"], seen["during"]
    assert during.request_handlers == before.request_handlers
    assert during.packet_handlers == before.packet_handlers == 0


@pytest.mark.parametrize("nodes", [2, 3])
async def test_a04_02_member_payloads_never_pass_through_the_spot(
    clock: object, store: CountingStore, nodes: int
) -> None:
    """A04-02 (User Spot side): while the PerActor Spot's own handler is blocked, its
    member's payloads still run; the Spot's callback counters and lifecycle turns do not
    move and its application queue ran only its own (blocked) request."""
    seen = await _scenario(store, nodes)
    before, during = seen["before"], seen["during"]
    assert seen["handled"] == ["echo", "echo", "note", "echo"]  # all ran while blocked
    assert during.lifecycle_callbacks == before.lifecycle_callbacks
    assert during.lifecycle_turns == before.lifecycle_turns
    assert during.application_turns == before.application_turns + 1  # its own "hold"


@pytest.mark.parametrize("nodes", [2, 3])
async def test_a04_03_the_spot_lifecycle_queue_sees_only_membership_control(
    clock: object, store: CountingStore, nodes: int
) -> None:
    """A04-03 (User Spot side): over a Join, the member's traffic and its leave, the
    Spot's invocations are only the lifecycle callbacks JOIN, JOINED and LEAVE (plus its
    own request handler once); a send to the Actor while its Join is pending runs only
    after the Join's completion."""
    seen = await _scenario(store, nodes)
    after, before = seen["after"], seen["before"]
    assert {k: v for k, v in after.lifecycle_callbacks.items() if v} == {
        "join": 1,
        "joined": 1,
        "leave": 1,
    }
    assert after.request_handlers == before.request_handlers + 1
    assert after.packet_handlers == 0
    completions = seen["completions"]
    assert len(completions) == 2 and completions[1] < seen["behind"]
