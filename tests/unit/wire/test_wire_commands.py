"""The command number table (DESIGN.md §6, docs/wire.md)."""

from __future__ import annotations

import pathlib
import re

from zlink_trio.wire import ALL_RECORDS, RESERVED_COMMANDS, Command

SPEC_NUMBERS = {
    20: "TERMINAL_REPLY",
    24: "ACTOR_SEND",
    36: "BOUND_SESSION_SEND",
    38: "BOUND_SESSION_BIND",
    39: "SPOT_DIRECT_ROUTE",
    42: "SESSION_RELOCATION_SEAL",
    43: "SESSION_RELOCATION_SEALED",
    44: "SESSION_RELOCATION_ROUTE",
    47: "USER_SPOT_CREATE",
    48: "USER_SPOT_CLOSE",
    51: "BOUND_SESSION_REPLACED",
}
OUR_NUMBERS = {
    100: "PEER_HELLO",
    101: "PEER_HELLO_ACK",
    102: "PEER_PING",
    103: "PEER_PONG",
    104: "PEER_GOODBYE",
    105: "PEER_HELLO_CONFIRM",
    110: "ACTOR_CREATE",
    111: "ACTOR_DESTROY",
    112: "ACTOR_JOIN",
    113: "ACTOR_JOURNAL",
    114: "ACTOR_JOURNAL_END",
    120: "RELOCATION_PREPARE",
    121: "RELOCATION_RESTORE",
    122: "RELOCATION_RELAY_READY",
    123: "RELOCATION_CUTOVER",
    124: "RELOCATION_ABORT",
    125: "RELOCATION_COMMITTED",
    130: "MESSAGE_FOLLOW_RELAY",
    140: "BOUND_SESSION_CLOSE",
}


def test_spec_numbers_are_fixed() -> None:
    for number, name in SPEC_NUMBERS.items():
        assert Command(number).name == name


def test_our_numbers_are_at_least_100() -> None:
    for number, name in OUR_NUMBERS.items():
        assert Command(number).name == name
    assert {int(c) for c in Command} == set(SPEC_NUMBERS) | set(OUR_NUMBERS)
    assert all(int(c) >= 100 for c in Command if int(c) not in SPEC_NUMBERS)


def test_45_is_reserved_and_not_a_command() -> None:
    assert {45} == RESERVED_COMMANDS
    assert 45 not in {int(c) for c in Command}


def test_one_record_class_per_command() -> None:
    assert sorted(int(cls.COMMAND) for cls in ALL_RECORDS) == sorted(int(c) for c in Command)


def test_docs_table_lists_every_command() -> None:
    doc = pathlib.Path(__file__).parents[3] / "docs" / "wire.md"
    text = doc.read_text()
    table = text[text.index("## Commands") : text.index("## Record layouts")]
    rows = dict(re.findall(r"^\| (\d+) \| `(\w+)` \|", table, re.MULTILINE))
    assert {int(k): v for k, v in rows.items()} == {
        **{int(c): c.name for c in Command},
        45: "RESERVED",
    }
