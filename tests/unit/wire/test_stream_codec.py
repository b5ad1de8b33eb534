"""The STREAM frame codecs: every frame kind round-trips through CBOR and JSON to the same
frame; JSON is the CBOR array with byte fields as base64; the JSON decoder refuses what the
CBOR decoder refuses, and the other direction's kinds."""

from __future__ import annotations

import base64
import contextlib
import json

import pytest
from hypothesis import given, strategies as st

from zlink_trio.errors import ErrorKind, ProtocolError
from zlink_trio.ids import ActorId, ObjectGeneration
from zlink_trio.wire.stream import (
    Bound,
    CloseReason,
    Closing,
    ErrorFrame,
    Hello,
    Message,
    Ping,
    Pong,
    Push,
    Reply,
    Request,
    Send,
    Unbound,
    UnboundReason,
    Welcome,
)
from zlink_trio.wire.stream_codec import CBOR, JSON, choose_codec

CLIENT = [
    Hello(version=1, credentials=b"\x00\xffalice"),
    Send(packet="chat", payload=b"hi"),
    Request(correlation=7, packet="join", payload=b'{"room":"r"}', timeout_ms=500),
    Request(correlation=2**64 - 1, packet="x", payload=b""),
    Ping(nonce=0),
]
SERVER = [
    Welcome(connection_id=bytes(range(16)), version=1),
    Reply(correlation=7, payload=b"ok"),
    Reply(correlation=8, payload=None),
    ErrorFrame(correlation=0, kind=ErrorKind.PROTOCOL, message="bad ✓"),
    Push(actor_id=ActorId("p-1"), sequence=3, packet="chat", payload=b"\x01"),
    Pong(nonce=9),
    Bound(actor_id=ActorId("p-1"), object_generation=ObjectGeneration(5), sequence=1),
    Unbound(actor_id=ActorId("p-1"), sequence=1, reason=UnboundReason.OWNER_LOST),
    Closing(reason=CloseReason.SHUTTING_DOWN, message=""),
    Message(packet="notice", payload=b"x"),
]


@pytest.mark.parametrize("frame", CLIENT, ids=lambda f: type(f).__name__)
def test_client_frames_round_trip(frame: object) -> None:
    for codec in (CBOR, JSON):
        message = codec.encode(frame)  # type: ignore[arg-type]
        assert type(message) is (str if codec.text else bytes)
        assert codec.decode_client(message) == frame
        with pytest.raises(ProtocolError):
            codec.decode_server(message)


@pytest.mark.parametrize("frame", SERVER, ids=lambda f: type(f).__name__)
def test_server_frames_round_trip(frame: object) -> None:
    for codec in (CBOR, JSON):
        message = codec.encode(frame)  # type: ignore[arg-type]
        assert codec.decode_server(message) == frame
        with pytest.raises(ProtocolError):
            codec.decode_client(message)


def test_json_is_the_cbor_array_with_base64_bytes() -> None:
    frame = Request(correlation=3, packet="chat", payload=b"\xff\x00", timeout_ms=None)
    assert json.loads(JSON.encode(frame)) == [
        3,
        3,
        "chat",
        base64.b64encode(b"\xff\x00").decode(),
        None,
    ]


@pytest.mark.parametrize(
    "message",
    [
        "", "null", "[]", "{}", "[4]", "[4, -1]", "[4, 1.5]", "[4, true]", "[4, 1e3]",
        "[4, NaN]", "[99, 1]", "[2, \"chat\", \"***\"]", "[2, \"chat\", 5]",
        "[2, \"\", \"\"]", "[4, 1, 2]", "[4, 1] [4, 1]", "[[4, 1]]",
        "[4, 18446744073709551616]", "[" * 100000, b"\x82\x04\x01",
    ],
)  # fmt: skip
def test_json_refuses_what_is_not_exactly_one_frame(message: str | bytes) -> None:
    with pytest.raises(ProtocolError):
        JSON.decode_client(message)


def test_cbor_refuses_text_messages() -> None:
    with pytest.raises(ProtocolError):
        CBOR.decode_client(JSON.encode(Ping(nonce=1)))


@given(st.text(max_size=200))
def test_json_decoder_never_raises_anything_but_protocol_error(message: str) -> None:
    with contextlib.suppress(ProtocolError):
        JSON.decode_client(message)


def test_subprotocol_choice() -> None:
    assert choose_codec([]) == (CBOR, None)
    assert choose_codec(["zlink.v1.json"]) == (JSON, "zlink.v1.json")
    assert choose_codec(["other", "zlink.v1.cbor", "zlink.v1.json"]) == (CBOR, "zlink.v1.cbor")
    assert choose_codec(["other"]) == (CBOR, None)
