"""Sequenced peer frames: split anywhere, numbered 1, 2, 3..., a gap or a repeat fails."""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given, strategies as st

from zlink_trio.errors import ProtocolError
from zlink_trio.mesh import frames as frames_module
from zlink_trio.mesh.frames import SEQ_BYTES, SequencedDecoder, SequenceGap, pack_frame


def stream(bodies: list[bytes], first: int = 1) -> bytes:
    return b"".join(pack_frame(first + i, body) for i, body in enumerate(bodies))


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 7, 12, 13, 64, 10_000])
def test_any_split_yields_the_same_bodies(chunk: int) -> None:
    bodies = [b"a", b"bb" * 40, b"c" * 300, b"d"]
    data = stream(bodies)
    decoder = SequencedDecoder(1024)
    out: list[bytes] = []
    for i in range(0, len(data), chunk):
        out += decoder.feed(data[i : i + chunk])
    assert out == bodies
    assert decoder.received == 4
    assert decoder.buffered == 0
    decoder.check_eof()


def test_gap_is_reported_after_the_good_frames() -> None:
    data = pack_frame(1, b"one") + pack_frame(3, b"three")
    decoder = SequencedDecoder(1024)
    assert decoder.feed(data) == [b"one"]
    assert isinstance(decoder.failure, SequenceGap)
    with pytest.raises(SequenceGap):
        decoder.feed(b"")


@pytest.mark.parametrize("seq", [0, 1, 3])
def test_repeat_or_skip_fails(seq: int) -> None:
    decoder = SequencedDecoder(1024)
    decoder.feed(pack_frame(1, b"x"))
    with pytest.raises(SequenceGap):
        decoder.feed(pack_frame(seq, b"y"))


def test_oversized_length_is_refused_before_its_body_arrives() -> None:
    decoder = SequencedDecoder(16)
    header = (17 + SEQ_BYTES).to_bytes(4, "big")
    with pytest.raises(ProtocolError):
        decoder.feed(header)
    with pytest.raises(ProtocolError):  # stays failed
        decoder.feed(pack_frame(1, b"x"))


def test_frame_without_body_is_refused() -> None:
    decoder = SequencedDecoder(16)
    with pytest.raises(ProtocolError):
        decoder.feed(SEQ_BYTES.to_bytes(4, "big") + (1).to_bytes(8, "big"))


def test_eof_inside_a_frame_is_a_protocol_error() -> None:
    decoder = SequencedDecoder(1024)
    decoder.feed(pack_frame(1, b"hello")[:-1])
    with pytest.raises(ProtocolError):
        decoder.check_eof()


def test_limit_can_be_raised_after_the_handshake() -> None:
    decoder = SequencedDecoder(4)
    decoder.max_body_bytes = 1000
    assert decoder.feed(pack_frame(1, b"x" * 1000)) == [b"x" * 1000]


def test_a_frame_above_the_bound_after_good_ones_is_parsed_once_the_bound_is_raised() -> None:
    # The handshake's last frame and the first (large) frame after it in one read.
    data = pack_frame(1, b"confirm") + pack_frame(2, b"y" * 100)
    decoder = SequencedDecoder(16)
    assert decoder.feed(data[:-10]) == [b"confirm"]
    assert decoder.failure is not None
    decoder.max_body_bytes = 1000
    assert decoder.failure is None
    assert decoder.feed(data[-10:]) == [b"y" * 100]
    assert decoder.buffered == 0


def test_a_frame_above_the_bound_after_good_ones_still_fails_without_a_raise() -> None:
    decoder = SequencedDecoder(16)
    assert decoder.feed(pack_frame(1, b"ok") + pack_frame(2, b"y" * 100)) == [b"ok"]
    decoder.max_body_bytes = 50  # not enough
    with pytest.raises(ProtocolError):
        decoder.feed(b"")


def _outcome(decoder: SequencedDecoder, data: bytes | bytearray) -> tuple[object, ...]:
    try:
        result: object = decoder.feed(data)
    except ProtocolError as exc:
        result = (type(exc), str(exc))
    failure = decoder.failure
    return (
        result,
        None if failure is None else (type(failure), str(failure)),
        decoder.received,
        decoder.buffered,
    )


@given(
    frames=st.lists(
        st.tuples(st.integers(0, 4), st.binary(max_size=40), st.integers(-1, 1)), max_size=6
    ),
    limit=st.integers(1, 40),
    cut=st.integers(0, 3),
)
def test_one_whole_frame_per_read_decodes_as_the_general_loop(
    frames: list[tuple[int, bytes, int]], limit: int, cut: int
) -> None:
    # feed() reads a lone whole frame (bytes, nothing held) without its loop: the same
    # bodies, failures, counters and held bytes as the loop (fed the same bytes as a
    # bytearray, which always takes the loop), read after read, whatever the frames are
    # (a sequence off by one, a body over the bound, none at all, a read cut short).
    fast, general = SequencedDecoder(limit), SequencedDecoder(limit)
    seq = 0
    for kind, body, skew in frames:
        seq += 1
        data = pack_frame(seq + skew, body)
        if kind == 0:
            data = data[: len(data) - cut]
        elif kind == 1:
            data += pack_frame(seq + 1, body)
            seq += 1
        assert _outcome(fast, data) == _outcome(general, bytearray(data))


def test_one_whole_frame_takes_the_short_path(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = mock.Mock(wraps=frames_module._LENGTH)
    monkeypatch.setattr(frames_module, "_LENGTH", loop)
    decoder = SequencedDecoder(1024)
    assert decoder.feed(pack_frame(1, b"one")) == [b"one"]
    assert decoder.feed(pack_frame(2, b"two")) == [b"two"]
    loop.unpack_from.assert_not_called()
    assert decoder.feed(stream([b"3", b"4"], first=3)) == [b"3", b"4"]  # two: the loop
    loop.unpack_from.assert_called()
