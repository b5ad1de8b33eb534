"""Length-prefixed frames of real records through the one framing implementation, the
sequenced frames of :mod:`zlink_trio.mesh.frames` (moved here from the tests of the
deleted ``wire.framing.FrameDecoder``: the same behaviours, with sequence numbers)."""

from __future__ import annotations

import itertools

import attrs
import pytest
import wire_samples as s
from hypothesis import given, strategies as st

from zlink_trio.errors import ProtocolError
from zlink_trio.ids import U63_MAX, MeshName, NodeGeneration
from zlink_trio.mesh.frameio import HANDSHAKE_MAX_BODY
from zlink_trio.mesh.frames import MAX_BODY_LIMIT, SEQ_BYTES, SequencedDecoder, pack_frame
from zlink_trio.wire import HELLO_MAX_FRAME_BYTES, decode, encode

BODIES = [encode(r) for r in s.ALL_SAMPLES]
STREAM = b"".join(pack_frame(i + 1, b) for i, b in enumerate(BODIES))
HEADER = 4 + SEQ_BYTES


def test_frame_format() -> None:
    body = encode(s.ACTOR_SEND)
    framed = pack_frame(7, body)
    assert framed == (len(body) + SEQ_BYTES).to_bytes(4, "big") + (7).to_bytes(8, "big") + body


def test_whole_stream_in_one_chunk() -> None:
    decoder = SequencedDecoder(1 << 20)
    assert decoder.feed(STREAM) == BODIES
    assert decoder.buffered == 0 and decoder.received == len(BODIES)
    decoder.check_eof()


def test_byte_by_byte() -> None:
    decoder = SequencedDecoder(1 << 20)
    out: list[bytes] = []
    for i in range(len(STREAM)):
        out += decoder.feed(STREAM[i : i + 1])
        assert decoder.buffered <= HEADER + max(map(len, BODIES))
    assert out == BODIES


@given(cuts=st.lists(st.integers(0, len(STREAM)), max_size=40))
def test_any_split_yields_the_same_bodies(cuts: list[int]) -> None:
    decoder = SequencedDecoder(1 << 20)
    points = [0, *sorted(cuts), len(STREAM)]
    out: list[bytes] = []
    for start, end in itertools.pairwise(points):
        out += decoder.feed(memoryview(STREAM)[start:end])
    assert out == BODIES
    assert decoder.buffered == 0


def test_bodies_decode_to_the_records() -> None:
    bodies = SequencedDecoder(1 << 20).feed(STREAM)
    assert [decode(body) for body in bodies] == list(s.ALL_SAMPLES)


def test_oversize_length_fails_before_buffering_the_body() -> None:
    decoder = SequencedDecoder(1000)
    with pytest.raises(ProtocolError, match=f"declares {1001 + SEQ_BYTES} bytes"):
        decoder.feed((1001 + SEQ_BYTES).to_bytes(4, "big"))
    assert decoder.buffered == 0
    with pytest.raises(ProtocolError):  # stays failed
        decoder.feed(b"\x00")


def test_oversize_length_split_across_feeds() -> None:
    decoder = SequencedDecoder(1000)
    assert decoder.feed(pack_frame(1, b"\x80") + b"\xff\xff") == [b"\x80"]
    with pytest.raises(ProtocolError, match="declares 4294967295 bytes"):
        decoder.feed(b"\xff\xff" + b"\x00" * 100)
    assert decoder.buffered == 0


def test_zero_length_frame_is_rejected() -> None:
    with pytest.raises(ProtocolError, match="declares 0 bytes"):
        SequencedDecoder(1000).feed(b"\x00\x00\x00\x00")


def test_limit_at_the_boundary() -> None:
    decoder = SequencedDecoder(3)
    assert decoder.feed(pack_frame(1, b"abc")) == [b"abc"]
    with pytest.raises(ProtocolError):
        decoder.feed(pack_frame(2, b"abcd"))


def test_limit_can_change_between_feeds() -> None:
    decoder = SequencedDecoder(64)
    assert decoder.feed(pack_frame(1, b"x" * 64)) == [b"x" * 64]
    decoder.max_body_bytes = 1 << 20
    assert decoder.feed(pack_frame(2, b"y" * 1000)) == [b"y" * 1000]
    with pytest.raises(ValueError, match="max_body_bytes"):
        decoder.max_body_bytes = 0
    with pytest.raises(ValueError, match="max_body_bytes"):
        SequencedDecoder(MAX_BODY_LIMIT + 1)


def test_partial_frame_at_eof() -> None:
    decoder = SequencedDecoder(1000)
    decoder.feed(pack_frame(1, b"abc")[:2])
    with pytest.raises(ProtocolError, match="inside a frame"):
        decoder.check_eof()
    decoder = SequencedDecoder(1000)
    decoder.feed(pack_frame(1, b"abc")[:HEADER])  # a complete header, no body yet
    with pytest.raises(ProtocolError, match="inside a frame"):
        decoder.check_eof()


def test_buffer_never_exceeds_one_frame() -> None:
    decoder = SequencedDecoder(100)
    frames = b"".join(pack_frame(i + 1, b"z" * 100) for i in range(51))
    chunk = frames[: 50 * (HEADER + 100) + 60]
    assert len(decoder.feed(chunk)) == 50
    assert decoder.buffered == 60


def test_handshake_records_fit_the_hello_frame_limit() -> None:
    largest = attrs.evolve(
        s.HELLO,
        protocol_version=65535,
        mesh_name=MeshName("é" * 127 + "a"),
        node_generation=NodeGeneration(U63_MAX),
    )
    ack = attrs.evolve(s.HELLO_ACK, mesh_name=largest.mesh_name)
    for record in (largest, ack):
        assert 4 + len(encode(record)) <= HELLO_MAX_FRAME_BYTES
    decoder = SequencedDecoder(HANDSHAKE_MAX_BODY)
    bodies = decoder.feed(pack_frame(1, encode(largest)) + pack_frame(2, encode(ack)))
    assert [decode(body) for body in bodies] == [largest, ack]
