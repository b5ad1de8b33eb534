"""``FrameCodec.encode_push`` (the session owner's push path, which builds no Push frame)
gives exactly what encoding the Push frame gives: the same message for every value the
frame encodes, the same ProtocolError (type and message) for every value it refuses, in
both codecs."""

from __future__ import annotations

from typing import Any, Final

import pytest
from hypothesis import given, settings, strategies as st

from zlink_trio.errors import ProtocolError
from zlink_trio.ids import MAX_ID_BYTES, ActorId
from zlink_trio.wire.fields import MAX_PAYLOAD_BYTES
from zlink_trio.wire.stream import Push
from zlink_trio.wire.stream_codec import CBOR, JSON, FrameCodec

_ACTOR_IDS = st.one_of(
    st.text(alphabet=st.characters(max_codepoint=127), min_size=1, max_size=MAX_ID_BYTES).map(
        ActorId
    ),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=60).map(
        ActorId
    ),
    st.just("not an ActorId"),  # a str where an ActorId belongs
)
_SEQUENCES: st.SearchStrategy[Any] = st.one_of(
    st.integers(min_value=-3, max_value=10),
    st.integers(min_value=(1 << 64) - 3, max_value=(1 << 64) + 3),
    st.integers(),
    st.just(True),  # a bool is not an int on the wire
    st.just(1.0),
)
_PACKETS: st.SearchStrategy[Any] = st.one_of(
    st.text(alphabet=st.characters(max_codepoint=127), max_size=MAX_ID_BYTES + 3),
    st.text(max_size=MAX_ID_BYTES + 3),  # any code point, lone surrogates included
    st.just(b"moved"),
    st.just(None),
)
_PAYLOADS: st.SearchStrategy[Any] = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([MAX_PAYLOAD_BYTES, MAX_PAYLOAD_BYTES + 1]).map(lambda n: b"x" * n),
    st.just(bytearray(b"ab")),
    st.just("text"),
)


def _outcome(call: Any) -> tuple[str, object]:
    try:
        return "ok", call()
    except ProtocolError as exc:
        return "refused", str(exc)


def _same(codec: FrameCodec, actor_id: Any, sequence: Any, packet: Any, payload: Any) -> None:
    fast = _outcome(lambda: codec.encode_push(actor_id, sequence, packet, payload))
    frame = Push(actor_id=actor_id, sequence=sequence, packet=packet, payload=payload)
    assert fast == _outcome(lambda: codec.encode(frame))


_VALID: Final = (ActorId("player-1"), 5, "moved", b"xy")
_EDGES: Final[dict[int, list[Any]]] = {
    0: [ActorId("x" * MAX_ID_BYTES), ActorId("é" * 127), ActorId("\u2603"), "player-1", None],
    1: [0, (1 << 64) - 1, 1 << 64, -1, True, 1.0, None],
    2: [
        "m",
        "m" * MAX_ID_BYTES,
        "m" * (MAX_ID_BYTES + 1),
        "",
        "é",
        "é" * 127,
        "é" * 128,
        "\ud800",
        b"moved",
        None,
    ],
    3: [
        b"",
        b"x" * MAX_PAYLOAD_BYTES,
        b"x" * (MAX_PAYLOAD_BYTES + 1),
        bytearray(b"ab"),
        memoryview(b"ab"),
        "text",
        None,
    ],
}


@pytest.mark.parametrize("codec", [CBOR, JSON], ids=["cbor", "json"])
@pytest.mark.parametrize(
    ("field", "value"), [(field, value) for field, values in _EDGES.items() for value in values]
)
def test_each_fields_edge_values_encode_as_the_frame_does(
    codec: FrameCodec, field: int, value: Any
) -> None:
    values = list(_VALID)
    values[field] = value
    _same(codec, *values)


@settings(max_examples=300)
@given(_ACTOR_IDS, _SEQUENCES, _PACKETS, _PAYLOADS)
def test_cbor_encode_push_is_the_push_frames_encoding(
    actor_id: Any, sequence: Any, packet: Any, payload: Any
) -> None:
    _same(CBOR, actor_id, sequence, packet, payload)


@given(_ACTOR_IDS, _SEQUENCES, _PACKETS, _PAYLOADS)
def test_json_encode_push_is_the_push_frames_encoding(
    actor_id: Any, sequence: Any, packet: Any, payload: Any
) -> None:
    _same(JSON, actor_id, sequence, packet, payload)


def test_the_common_push_is_encoded_without_the_frame() -> None:
    actor_id = ActorId("player-1")
    message = CBOR.encode_push(actor_id, 7, "moved", b"xy")
    assert message == CBOR.encode(
        Push(actor_id=actor_id, sequence=7, packet="moved", payload=b"xy")
    )
    assert CBOR.decode_server(message) == Push(
        actor_id=actor_id, sequence=7, packet="moved", payload=b"xy"
    )


_HEAD_SIZES: Final = (0, 1, 23, 24, 255, 256, 65535, 65536)
"""CBOR head boundaries: the argument fits the head byte (< 24), or takes 1, 2 or 4 bytes."""


@pytest.mark.parametrize("n", _HEAD_SIZES)
def test_every_cbor_head_length_is_written_as_the_frame_writes_it(n: int) -> None:
    # the sequence, the ids' and the payload's lengths at each head boundary (the hand-
    # written encoding writes each head itself)
    text = max(1, min(n, MAX_ID_BYTES))
    for sequence in (n, (1 << 32) - 1 + n, (1 << 64) - 1 - n):
        _same(CBOR, ActorId("a" * text), sequence, "p" * text, b"y" * n)
        _same(CBOR, ActorId("é" * max(1, text // 2)), sequence, "p", b"y" * n)
