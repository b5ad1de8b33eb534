"""Length-prefixed frames and the incremental FrameDecoder."""

from __future__ import annotations

import itertools

import attrs
import pytest
import wire_samples as s
from hypothesis import given, strategies as st

from zlink_trio.errors import ProtocolError
from zlink_trio.ids import U63_MAX, MeshName, NodeGeneration
from zlink_trio.wire import HELLO_MAX_FRAME_BYTES, FrameDecoder, encode, encode_frame, frame

BODIES = [encode(r) for r in s.ALL_SAMPLES]
STREAM = b"".join(frame(b) for b in BODIES)


def test_frame_format() -> None:
    body = encode(s.ACTOR_SEND)
    framed = encode_frame(s.ACTOR_SEND)
    assert framed == len(body).to_bytes(4, "big") + body
    with pytest.raises(ProtocolError, match="frame body of 0 bytes"):
        frame(b"")
    with pytest.raises(ProtocolError, match=r"limit 1\.\.10"):
        encode_frame(s.ACTOR_SEND, max_frame_bytes=10)


def test_whole_stream_in_one_chunk() -> None:
    decoder = FrameDecoder(1 << 20)
    assert decoder.feed(STREAM) == BODIES
    assert decoder.at_boundary and decoder.buffered == 0
    decoder.check_eof()


def test_byte_by_byte() -> None:
    decoder = FrameDecoder(1 << 20)
    out: list[bytes] = []
    for i in range(len(STREAM)):
        out += decoder.feed(STREAM[i : i + 1])
        assert decoder.buffered <= 4 + max(map(len, BODIES))
    assert out == BODIES


@given(cuts=st.lists(st.integers(0, len(STREAM)), max_size=40))
def test_any_split_yields_the_same_bodies(cuts: list[int]) -> None:
    decoder = FrameDecoder(1 << 20)
    points = [0, *sorted(cuts), len(STREAM)]
    out: list[bytes] = []
    for start, end in itertools.pairwise(points):
        out += decoder.feed(memoryview(STREAM)[start:end])
    assert out == BODIES
    assert decoder.at_boundary


def test_feed_records_decodes() -> None:
    assert FrameDecoder(1 << 20).feed_records(STREAM) == list(s.ALL_SAMPLES)


def test_oversize_length_fails_before_buffering_the_body() -> None:
    decoder = FrameDecoder(1000)
    with pytest.raises(ProtocolError, match="frame declares 1001 bytes"):
        decoder.feed((1001).to_bytes(4, "big"))
    assert decoder.buffered == 0
    with pytest.raises(ProtocolError, match="already failed"):
        decoder.feed(b"\x00")


def test_oversize_length_split_across_feeds() -> None:
    decoder = FrameDecoder(1000)
    assert decoder.feed(frame(b"\x80") + b"\xff\xff") == [b"\x80"]
    with pytest.raises(ProtocolError, match="frame declares 4294967295 bytes"):
        decoder.feed(b"\xff\xff" + b"\x00" * 100)
    assert decoder.buffered == 0


def test_zero_length_frame_is_rejected() -> None:
    with pytest.raises(ProtocolError, match="frame declares 0 bytes"):
        FrameDecoder(1000).feed(b"\x00\x00\x00\x00")


def test_limit_at_the_boundary() -> None:
    decoder = FrameDecoder(3)
    assert decoder.feed(frame(b"abc")) == [b"abc"]
    with pytest.raises(ProtocolError):
        decoder.feed(frame(b"abcd"))


def test_limit_can_change_between_feeds() -> None:
    decoder = FrameDecoder(64)
    hello = frame(b"x" * 64)
    assert decoder.feed(hello) == [b"x" * 64]
    decoder.max_frame_bytes = 1 << 20
    assert decoder.feed(frame(b"y" * 1000)) == [b"y" * 1000]
    with pytest.raises(ValueError, match="max_frame_bytes"):
        decoder.max_frame_bytes = 0
    with pytest.raises(ValueError, match="max_frame_bytes"):
        FrameDecoder(1 << 32)


def test_partial_frame_at_eof() -> None:
    decoder = FrameDecoder(1000)
    decoder.feed(frame(b"abc")[:2])
    assert not decoder.at_boundary
    with pytest.raises(ProtocolError, match="inside a frame"):
        decoder.check_eof()
    decoder = FrameDecoder(1000)
    decoder.feed(frame(b"abc")[:4])  # a complete header, no body yet
    assert decoder.buffered == 0 and not decoder.at_boundary
    with pytest.raises(ProtocolError, match="inside a frame"):
        decoder.check_eof()


def test_buffer_never_exceeds_one_frame() -> None:
    decoder = FrameDecoder(100)
    chunk = frame(b"z" * 100) * 50 + frame(b"z" * 100)[:60]
    assert len(decoder.feed(chunk)) == 50
    assert decoder.buffered == 56


def test_handshake_records_fit_the_hello_frame_limit() -> None:
    largest = attrs.evolve(
        s.HELLO,
        protocol_version=65535,
        mesh_name=MeshName("é" * 127 + "a"),
        node_generation=NodeGeneration(U63_MAX),
    )
    for record in (largest, attrs.evolve(s.HELLO_ACK, mesh_name=largest.mesh_name)):
        assert len(encode_frame(record)) <= HELLO_MAX_FRAME_BYTES
    decoder = FrameDecoder(HELLO_MAX_FRAME_BYTES)
    assert decoder.feed_records(encode_frame(largest)) == [largest]
