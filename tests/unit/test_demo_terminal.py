"""`zlink-trio client`: what a typed line means, and the `/where` reply as a sentence (a
newcomer typing `help` or `/wehre` gets told, not a chat line sent to the room)."""

from __future__ import annotations

import pytest

from zlink_trio.demo.terminal import HELP, describe_where, parse_command


@pytest.mark.parametrize(
    ("line", "parsed"),
    [
        ("hello there", ("chat", ("hello there",))),
        ("help", ("chat", ("help",))),
        ("/help", ("help", ())),
        ("/where", ("where", ())),
        ("/quit", ("quit", ())),
        ("/join room-2", ("join", ("room-2",))),
        ("/move 1 -2", ("move", ("1", "-2"))),
    ],
)
def test_a_line_is_a_chat_or_a_command(line: str, parsed: tuple[str, tuple[str, ...]]) -> None:
    assert parse_command(line) == parsed


@pytest.mark.parametrize(
    "line", ["/wehre", "/join", "/join a b", "/move 1", "/move a b", "/help me"]
)
def test_a_mistyped_command_is_not_sent_as_chat(line: str) -> None:
    command, (message,) = parse_command(line)
    assert command == "usage" and ("usage:" in message or "/help" in message)


def test_the_help_names_every_command() -> None:
    for name in ("/where", "/join ROOM", "/move DX DY", "/help", "/quit"):
        assert name in HELP


def test_where_reads_as_a_sentence() -> None:
    state = {
        "player": "ann",
        "player_node": "node3",
        "room": {
            "room": "room-1", "room_node": "node1", "members": {"ann": [0, 0], "bo": [1, -2]},
            "ticks": 7, "chat": [], "lines": 12,
        },
    }  # fmt: skip
    assert describe_where(state) == (
        "* you (ann) are on node3; room-1 is on node1 with 2 player(s): ann (0, 0), bo (1, -2);"
        " 12 chat line(s), 7 tick(s)"
    )
    assert describe_where({"player": "ann", "player_node": "node2", "room": None}) == (
        "* you (ann) are on node2; you are in no room"
    )
