"""Two and three routers on shared in-memory SPIs in one process (spec 10 §3.1, §3.2, §3.5,
§7): concurrent submits to one session from every router run strictly one turn at a time,
and each turn sees the history the previous one wrote."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from router_app import Registry, Shared, World, cluster, no_overlap
from router_kit import AGENT, S1

from zlink_trio.router import AgentExecutionResult, DispositionKind, SubmitRequest
from zlink_trio.testing import settle


def _request(text: Any) -> SubmitRequest:
    return SubmitRequest(session_id=S1, agent_ref=AGENT, user_input=text)


@pytest.mark.parametrize("nodes", [2, 3])
async def test_concurrent_submits_from_every_router_serialize(
    nodes: int,
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The issue's proof: turn intervals never overlap; turn n sees the 2n entries the turns
    before it wrote; every submit's result completes."""
    world.duration = lambda _t: 7.0
    names = [f"node-{i}" for i in range(nodes)]
    results: dict[str, AgentExecutionResult] = {}
    async with cluster(shared, world, registry, names) as routers:

        async def one(i: int, text: str) -> None:
            if i >= nodes:  # the first wave races the election; later ones arrive mid-turn
                await trio.sleep(shared.s(i * 2.0))
            disposition = await routers[i % nodes].submit(_request(text))
            results[text] = await disposition.result

        async with trio.open_nursery() as nursery:
            for i in range(4 * nodes):
                nursery.start_soon(one, i, f"m{i}")
    assert len(results) == 4 * nodes
    assert len(world.turns) == 4 * nodes
    assert no_overlap(world.turns)
    ordered = sorted(world.turns, key=lambda t: t.start)
    assert [t.history_len for t in ordered] == [2 * n for n in range(4 * nodes)]
    view = await shared.records.load(S1)
    assert view is not None and len(view.transcript) == 8 * nodes


async def test_r10_04_alternating_routers_share_history_and_each_opens_once(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-04: alternate submits between two routers on shared SPIs: a node opens its handle
    at most once (the non-holder forwards and opens nothing; once the lease moves, the new
    holder opens once), turns never overlap, each turn sees the previous turn's history."""
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
        for i in range(4):
            await (await (a, b)[i % 2].submit(_request(f"t{i}"))).result
        assert world.opens == {"a": 1}
        await a.close_gracefully(0)  # a gives its lease back; b takes over
        for i in range(4, 7):
            await (await b.submit(_request(f"t{i}"))).result
    assert world.opens == {"a": 1, "b": 1}
    assert [t.node for t in world.turns] == ["a"] * 4 + ["b"] * 3
    assert no_overlap(world.turns)
    assert [t.history_len for t in world.turns] == [2 * i for i in range(7)]


async def test_r10_06_the_same_scenario_answers_alike_from_any_router(
    shared: Shared, world: World, registry: Registry, autojump_clock: trio.testing.MockClock
) -> None:
    """R10-06: a caller never sees which node ran its turn: a FORWARDED disposition's result
    completes with the AgentExecutionResult just like a local one."""
    world.duration = lambda _t: 20.0
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
        first = await a.submit(_request("first"))
        await settle()
        second = await b.submit(_request("second"))
        assert first.kind is DispositionKind.EXECUTED_LOCALLY
        assert second.kind is DispositionKind.FORWARDED
        assert (await first.result).text == "a:first:0"
        assert (await second.result).text == "a:second:2"


async def test_r10_22_multimodal_input_survives_a_cross_node_forward(
    shared: Shared,
    world: World,
    registry: Registry,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R10-22 (router side): an image, and a composite of text and image, submitted on a
    non-holder reach the holder's turn equal to what was submitted (``userInput`` text plus
    ``userInputEncoded``), through the inbox's serialized text."""
    from router_app import FakeSession

    from zlink_trio.router import CompositeInput, ImageInput, TextInput

    seen: list[object] = []
    original = FakeSession.run_turn

    async def recording(self: Any, turn: Any, listener: Any) -> Any:
        seen.append(turn.user_input)
        return await original(self, turn, listener)

    monkeypatch.setattr(FakeSession, "run_turn", recording)
    image = ImageInput("image/png", bytes(range(256)), caption="chart")
    composite = CompositeInput((TextInput("compare with"), image))
    async with cluster(shared, world, registry, ["a", "b"]) as (a, b):
        await (await a.submit(_request("bind"))).result
        for value in (image, composite):
            forwarded = await b.submit(_request(value))
            assert forwarded.kind is DispositionKind.FORWARDED
            await forwarded.result
    assert seen[1:] == [image, composite]
