"""The demo's "a moved player's chats were not refused" counts a move's own refusals: from
the move to the script's next node stop or disconnect. A chat in flight on a session whose
node then stops cleanly is refused (Unavailable: the session is closing); that refusal is the
stop's, and failed the invariant for a move made long before it (seen in the browser test)."""

from __future__ import annotations

import io
import random

from zlink_trio.cli import build_parser
from zlink_trio.demo.clients import ClientStats, ScriptedClient
from zlink_trio.demo.run import Demo


def demo_with_one_client() -> tuple[Demo, ScriptedClient]:
    demo = Demo(build_parser().parse_args(["demo"]), io.StringIO())
    client = ScriptedClient(
        index=1, room="room-1", stats=ClientStats(), log=demo.log, pick_url=lambda i: None,
        rng=random.Random(1), name="player-1",
    )  # fmt: skip
    demo.clients.append(client)
    return demo, client


def refused_column(demo: Demo) -> list[int | None]:
    return [row[6] for row in demo._relocation_rows()]


def test_a_refusal_after_the_next_node_stop_is_not_the_moves() -> None:
    demo, client = demo_with_one_client()
    demo.relocations.append(("player-1", "node3", "node1", 0.003, True, 1, 6.0))
    demo.disruptions.append(13.6)  # node3: clean stop
    client.refused_at.append(13.7)  # its session was on node3
    assert refused_column(demo) == [0]


def test_a_refusal_between_the_move_and_the_next_stop_counts() -> None:
    demo, client = demo_with_one_client()
    demo.disruptions.append(2.0)  # before the move: irrelevant
    demo.relocations.append(("player-1", "node3", "node1", 0.003, True, 1, 6.0))
    demo.relocations.append(("player-1", "node1", "node2", 0.002, True, 1, 24.0))
    demo.disruptions.append(13.6)
    client.refused_at += [6.5, 25.0]  # one after each move, before any later stop
    assert refused_column(demo) == [1, 1]


def test_a_moved_rooms_row_counts_its_clients_refusals_until_the_next_stop() -> None:
    """A room's move counts the refusals of the clients chatting in that room (not of
    another room's), from the move to the next disruption; it has no sessions count."""
    demo, client = demo_with_one_client()
    other = ScriptedClient(
        index=2, room="room-2", stats=ClientStats(), log=demo.log, pick_url=lambda i: None,
        rng=random.Random(2), name="player-2",
    )  # fmt: skip
    demo.clients.append(other)
    demo.relocations.append(("room-1", "node1", "node2", 0.001, True, 0, 6.0))
    demo.disruptions.append(13.6)
    client.refused_at += [5.0, 7.0, 14.0]  # before, during (counted), after the stop
    other.refused_at.append(7.0)  # room-2's client: not this move's
    assert demo._relocation_rows() == [("room-1", "node1", "node2", 0.001, True, None, 1)]
