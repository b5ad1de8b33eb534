"""The relocation load test of issue 14: a client streams numbered messages to its bound
Actor while the Actor moves back and forth between three nodes 20 times (spec 02 §8,
spec 04 §6.1). Every message is handled exactly once and in order, every push arrives,
the websocket never reconnects, the ObjectGeneration never changes and the
AuthorityOwnerGeneration rises by one per move."""

from __future__ import annotations

import attrs
import pytest
import trio
from reloc_kit import moves_cluster, relocate
from stream_kit import Record, bind, connect, create

from zlink_trio.testing import CountingStore, TapDirection, WireTap
from zlink_trio.wire.commands import Command
from zlink_trio.wire.stream import Push

MOVES = 20
TAIL = 50
"""Messages streamed after the last move."""


@pytest.mark.parametrize("moves_count", [MOVES])
async def test_a_stream_survives_20_moves_between_three_nodes(
    clock: object, store: CountingStore, moves_count: int
) -> None:
    """B02-21 under load (20 moves, three hosting nodes, session owner on a fourth)."""
    rec = Record()
    tap = WireTap()
    with trio.fail_after(300):
        async with moves_cluster(rec, store, tap=tap, nodes=4) as moves:
            ref = await create(moves.cluster.servers[0], rec, "a")
            owner = moves.session_rid()
            async with connect(moves.session_node, "user") as client:
                connection_id = client.connection_id
                generation = await bind(client, "a")
                pushes: list[int] = []
                sent = 0
                done_moving = trio.Event()
                results = []

                async def stream() -> None:
                    nonlocal sent
                    while not done_moving.is_set():
                        await client.send("relay", f"a|push|{sent}".encode())
                        sent += 1
                        if sent % 8 == 0:
                            await client.request("local", b"")  # paces the stream
                    for _ in range(TAIL):
                        await client.send("relay", f"a|push|{sent}".encode())
                        sent += 1
                    streamed.set()  # ``sent`` is final from here on

                streamed = trio.Event()
                pushed = trio.Event()

                async def read() -> None:
                    while True:
                        event = await client.receive()
                        if isinstance(event, Push):
                            assert event.sequence == generation
                            pushes.append(int(event.payload))
                            if streamed.is_set() and len(pushes) >= sent:
                                pushed.set()

                async def move() -> None:
                    current = ref
                    for k in range(moves_count):
                        target = moves.other(current)
                        result = await relocate(moves, current, target)
                        results.append(result)
                        # the move is committed once its 44 reached the session owner
                        await tap.wait_for(
                            node=owner,
                            direction=TapDirection.RECEIVED,
                            command=Command.SESSION_RELOCATION_ROUTE,
                            count=k + 1,
                        )
                        rid = moves.cluster.servers[target].identity.node_rid
                        current = attrs.evolve(current, node_rid=rid)
                    done_moving.set()

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(read)
                    async with trio.open_nursery() as work:
                        work.start_soon(stream)
                        work.start_soon(move)
                    await rec.wait_until(lambda: len(rec.handled_by("a", "push")) >= sent)
                    if len(pushes) < sent:
                        await pushed.wait()
                    nursery.cancel_scope.cancel()
                handled = [int(h[3]) for h in rec.handled_by("a", "push")]
                assert handled == list(range(sent))
                assert pushes == list(range(sent))
                assert len(results) == moves_count
                assert {r.object_generation for r in results} == {ref.object_generation}
                generations = [r.owner_generation.value for r in results]
                assert generations == list(range(generations[0], generations[0] + moves_count))
                assert len({h[0] for h in rec.handled_by("a", "push")}) == 3
                assert client.closed is None and client.connection_id == connection_id
                assert rec.disconnects == []
                assert sent > moves_count * 2
