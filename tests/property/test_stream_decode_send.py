"""The CBOR codec's client decoder reads the common Send frame without cbor2
(``decode_client_message``'s fast path): for every message it gives exactly what the
general decoder gives — the same frame, or the same ProtocolError (type and message) —
and it takes the fast path for the frame every client sends."""

from __future__ import annotations

from typing import Any, Final

import cbor2
import pytest
from hypothesis import given, settings, strategies as st

import zlink_trio.wire.stream as stream
from zlink_trio.errors import ProtocolError
from zlink_trio.ids import MAX_ID_BYTES
from zlink_trio.wire.stream import _CLIENT, Send, _decode, decode_client_message, encode_frame


def _outcome(call: Any) -> tuple[str, object, object]:
    try:
        frame = call()
    except ProtocolError as exc:
        return "refused", type(exc), str(exc)
    return "ok", type(frame), frame


def _same(message: bytes) -> None:
    fast = _outcome(lambda: decode_client_message(message))
    assert fast == _outcome(lambda: _decode(message, _CLIENT, "client"))
    if fast[0] == "ok" and type(fast[2]) is Send:
        assert type(fast[2].packet) is str and type(fast[2].payload) is bytes


_HEADS: Final = (
    (24, 0, 0),
    (0x100, 24, 1),
    (0x10000, 25, 2),
    (0x100000000, 26, 4),
    (1 << 64, 27, 8),
)
"""(the arguments below this, the head's additional information, its argument bytes)"""


def _head(major: int, n: int, longer: int = 0) -> bytes:
    """A CBOR head of ``n``: its shortest form, or ``longer`` forms longer."""
    shortest = next(i for i, (limit, _, _) in enumerate(_HEADS) if n < limit)
    _, info, width = _HEADS[min(shortest + longer, len(_HEADS) - 1)]
    if width == 0:
        return bytes([major | n])
    return bytes([major | info]) + n.to_bytes(width, "big")


_SIZES: Final = (0, 1, 23, 24, 25, 255, 256, 65535 - 10, 65536, MAX_ID_BYTES + 1)
_PACKETS: st.SearchStrategy[Any] = st.one_of(
    st.text(alphabet=st.characters(max_codepoint=127), min_size=0, max_size=30),
    st.text(max_size=30),  # non-ASCII: the general decoder's
    st.sampled_from(["s" * 23, "s" * 24, "s" * 63, "s" * 64, "s" * MAX_ID_BYTES, "é" * 12]),
)
_PAYLOADS: st.SearchStrategy[bytes] = st.one_of(
    st.binary(max_size=300),
    st.sampled_from([b"x" * n for n in _SIZES]),
)


@pytest.mark.parametrize("payload_size", _SIZES)
@pytest.mark.parametrize("packet", ["s", "step", "s" * 23, "s" * 24, "é", "s" * MAX_ID_BYTES])
def test_a_valid_send_decodes_as_the_general_decoder_decodes_it(
    packet: str, payload_size: int
) -> None:
    message = encode_frame(Send(packet=packet, payload=b"y" * payload_size))
    _same(message)
    for cut in (1, 2, 3, len(message) // 2, len(message) - 1):
        _same(message[:cut])  # truncated
    _same(message + b"\x00")  # trailing bytes
    _same(message + cbor2.dumps(b"z"))


@pytest.mark.parametrize("extra", [1, 2])
@pytest.mark.parametrize("payload_size", [0, 5, 23, 24, 255, 256, 70000])
def test_longer_than_shortest_heads_decode_as_the_general_decoder_decodes_them(
    extra: int, payload_size: int
) -> None:
    payload = b"y" * payload_size
    for packet_head in (_head(0x60, 4), _head(0x60, 4, extra)):
        for payload_head in (_head(0x40, payload_size), _head(0x40, payload_size, extra)):
            _same(b"\x83\x02" + packet_head + b"step" + payload_head + payload)


@settings(max_examples=400)
@given(_PACKETS, _PAYLOADS)
def test_any_send_decodes_as_the_general_decoder_decodes_it(packet: str, payload: bytes) -> None:
    # (built by hand: the encoder would refuse an empty or too long packet name)
    data = packet.encode("utf-8", "surrogatepass")
    _same(b"\x83\x02" + _head(0x60, len(data)) + data + _head(0x40, len(payload)) + payload)


@settings(max_examples=400)
@given(st.binary(max_size=40), st.integers(min_value=0, max_value=80), st.binary(max_size=4))
def test_any_bytes_decode_as_the_general_decoder_decodes_them(
    tail: bytes, flip: int, noise: bytes
) -> None:
    _same(b"\x83\x02" + tail)
    base = bytearray(encode_frame(Send(packet="step", payload=b"y" * 30)))
    if flip < len(base):
        base[flip] ^= noise[0] if noise else 0xFF
    _same(bytes(base))
    _same(bytes(base) + noise)
    _same(b"\x83" + tail)


def test_the_common_send_is_read_without_the_general_decoder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    frames = [Send(packet="step", payload=b"x" * n) for n in (0, 23, 64, 300, 65000)]
    frames.append(Send(packet="p" * 23, payload=b""))
    messages = [encode_frame(frame) for frame in frames]

    def general(*_: Any) -> Any:
        raise AssertionError("the general decoder was used")

    monkeypatch.setattr(stream, "_decode", general)
    assert [decode_client_message(message) for message in messages] == frames
