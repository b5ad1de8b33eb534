"""The demo's control channel to a node process (zlink_trio.demo.control): a relocate
request a line on stdin, answered with its id. A line the node cannot read is answered with
a typed error (BadControlRequest, kind PROTOCOL) and the node reads on; the framework's own
errors come back by kind and the driver raises them as such."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from zlink_trio.demo.control import (
    MAX_LINE,
    BadControlRequest,
    LineSplitter,
    RelocateRequest,
    RelocationAnswer,
    answer_line,
    decode_answer,
    encode_request,
    parse_request,
    serve_control,
)
from zlink_trio.errors import ErrorKind, InvalidOperation, NotFound, ProtocolError, Unavailable
from zlink_trio.ids import (
    ActorId,
    AuthorityOwnerGeneration,
    NodeRid,
    ObjectGeneration,
    OperationId,
    SpotId,
)

RID = NodeRid(bytes(range(16)))


def test_a_request_round_trips() -> None:
    line = encode_request(7, "player", "player-1", RID)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert parse_request(line[:-1]) == RelocateRequest(7, "player", ActorId("player-1"), RID)
    room = parse_request(encode_request(8, "room", "room-1", RID)[:-1])
    assert room == RelocateRequest(8, "room", SpotId("room-1"), RID)


BAD_LINES = [
    (b"relocate player player-1 to 00", None),  # not JSON
    (b"\xff\xfe", None),  # not UTF-8
    (b"[1, 2]", None),  # not an object
    (b'{"relocate": "player", "name": "p", "to": "00"}', None),  # no id
    (b'{"id": true, "relocate": "player", "name": "p", "to": "00"}', None),  # bool id
    (b'{"id": [1], "relocate": "player", "name": "p", "to": "00"}', None),
    (b'{"id": 3, "relocate": "lobby", "name": "p", "to": "00"}', 3),  # unknown kind
    (b'{"id": 4, "name": "p", "to": "00"}', 4),  # no request
    (b'{"id": "a", "relocate": "room", "name": 5, "to": "00"}', "a"),  # name not a string
    (b'{"id": 5, "relocate": "room", "name": "r"}', 5),  # no target node
    (b'{"id": 6, "relocate": "player", "name": "p", "to": "zz"}', 6),  # not hex
    (b'{"id": 7, "relocate": "player", "name": "p", "to": "0011"}', 7),  # not 16 bytes
    (json.dumps({"id": 8, "relocate": "player", "name": "", "to": RID.hex}).encode(), 8),
    (b"{" + b" " * MAX_LINE + b"}", None),  # too long
]


@pytest.mark.parametrize(("line", "request_id"), BAD_LINES)
def test_a_bad_line_is_a_typed_error_naming_its_id_when_readable(
    line: bytes, request_id: int | str | None
) -> None:
    with pytest.raises(BadControlRequest) as caught:
        parse_request(line)
    assert isinstance(caught.value, ProtocolError)
    assert caught.value.request_id == request_id


class FakeServer:
    """``Server.relocate``'s surface: records the calls, raises ``error`` if set."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.calls: list[tuple[object, NodeRid]] = []

    async def relocate(self, actor: Any, *, to: NodeRid) -> Any:
        self.calls.append((actor, to))
        if self.error is not None:
            raise self.error
        from zlink_trio.actors.relocating import RelocationResult

        return RelocationResult(
            relocation_id=OperationId.new(),
            actor_id=actor,
            object_generation=ObjectGeneration(1),
            source_rid=NodeRid(bytes(16)),
            target_rid=to,
            owner_generation=AuthorityOwnerGeneration(2),
            relayed=3,
            committed=True,
        )


async def test_a_bad_line_is_answered_typed_and_never_reaches_the_server() -> None:
    server = FakeServer()
    answer = await answer_line(server, b'{"id": 9, "relocate": "room", "name": "r", "to": "x"}')
    assert answer["event"] == "answer" and answer["id"] == 9 and answer["ok"] is False
    assert answer["error"]["type"] == "BadControlRequest"
    assert answer["error"]["kind"] == "PROTOCOL"
    assert server.calls == []


async def test_the_servers_typed_error_is_answered_by_kind_and_raised_so_by_the_driver() -> None:
    server = FakeServer(InvalidOperation("the Actor is a member of a SpotWide User Spot"))
    answer = await answer_line(server, encode_request(1, "player", "player-1", RID)[:-1])
    assert server.calls == [(ActorId("player-1"), RID)]
    assert answer["error"] == {
        "type": "InvalidOperation",
        "kind": "INVALID_OPERATION",
        "message": "the Actor is a member of a SpotWide User Spot",
    }
    with pytest.raises(InvalidOperation, match="SpotWide"):
        decode_answer(json.loads(json.dumps(answer)))


async def test_a_move_is_answered_with_its_result() -> None:
    server = FakeServer()
    answer = await answer_line(server, encode_request(2, "player", "player-1", RID)[:-1])
    assert answer["ok"] is True and answer["id"] == 2
    assert answer["result"]["target"] == RID.hex
    assert decode_answer(json.loads(json.dumps(answer))) == RelocationAnswer(3, True)


@pytest.mark.parametrize(
    "answer",
    [
        {},
        {"ok": True},
        {"ok": True, "result": {"relayed": "3", "committed": True}},
        {"ok": False, "error": "boom"},
        {"ok": "yes", "result": {"relayed": 3, "committed": True}},
    ],
)
def test_a_malformed_answer_is_a_protocol_error(answer: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError):
        decode_answer(answer)


def test_every_error_kind_comes_back_as_its_class() -> None:
    for kind in ErrorKind:
        answer = {"ok": False, "error": {"type": "X", "kind": kind.name, "message": "m"}}
        with pytest.raises(Exception) as caught:
            decode_answer(answer)
        assert getattr(caught.value, "kind", None) is kind
    unknown = {"ok": False, "error": {"type": "X", "kind": "NOPE", "message": "m"}}
    with pytest.raises(ProtocolError):
        decode_answer(unknown)


def test_lines_split_across_chunks_and_an_overlong_line_comes_out_once_as_none() -> None:
    splitter = LineSplitter(limit=8)
    assert list(splitter.feed(b"ab")) == []
    assert list(splitter.feed(b"c\nde\n\nf")) == [b"abc", b"de", b""]
    assert list(splitter.feed(b"123456789")) == [None]  # f123456789: over the limit
    assert list(splitter.feed(b"0123456789")) == []  # still the same line
    assert list(splitter.feed(b"xyz\nok\n")) == [b"ok"]
    assert list(splitter.feed(b"123456789\nok\n")) == [None, b"ok"]


async def test_the_node_answers_every_line_in_order_and_reads_on_after_bad_ones() -> None:
    server = FakeServer(NotFound("player-1 is not hosted here"))
    send, receive = trio.testing.memory_stream_one_way_pair()
    answers: list[dict[str, Any]] = []
    lines = [
        b"garbage\n",
        b"{" + b"x" * (2 * MAX_LINE) + b"}\n",
        b"\n",  # a blank line: nothing to answer
        encode_request(1, "player", "player-1", RID),
    ]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_control, server, receive, answers.append)
        for line in lines:
            await send.send_all(line)
        await send.aclose()  # the end of stdin ends the channel, not in error
    assert [(a["id"], a["ok"], a["error"]["type"]) for a in answers] == [
        (None, False, "BadControlRequest"),
        (None, False, "BadControlRequest"),
        (1, False, "NotFound"),
    ]
    assert server.calls == [(ActorId("player-1"), RID)]


def test_an_unavailable_answer_is_unavailable() -> None:
    answer = {"ok": False, "error": {"type": "Unavailable", "kind": "UNAVAILABLE", "message": ""}}
    with pytest.raises(Unavailable):
        decode_answer(answer)
