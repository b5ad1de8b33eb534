"""What crosses nodes (spec 10 §2, §5.5.2, §5.6, §9.2, §9.4): plain primitives, the user
input's wire form, the envelope, the input hash, turn results, status snapshots."""

from __future__ import annotations

import json

import attrs
import pytest

from zlink_trio.router import (
    AgentExecutionResult,
    AgentRef,
    Artifact,
    ClusterSessionStatus,
    CompositeInput,
    DocumentInput,
    FailureCode,
    IdempotencyKey,
    ImageInput,
    InboundMessage,
    InboundMessageId,
    NodeId,
    Principal,
    Priority,
    SessionActivity,
    SessionId,
    SessionSignal,
    SignalKind,
    StatusProjection,
    TextInput,
    TurnFailed,
    TurnId,
    TurnSucceeded,
    decode_signal,
    encode_signal,
    input_hash,
    turn_result_from_wire,
    turn_result_to_wire,
    user_input_from_wire,
    user_input_to_wire,
)

S = SessionId("s-1")


def _json(value: object) -> object:
    return json.loads(json.dumps(value))


def test_r10_22_user_input_wire_form_reads_both_ways() -> None:
    """R10-22: text input serializes as only a ``userInput`` string; multimodal input keeps
    the text in ``userInput`` and adds ``userInputEncoded``; an old entry with only
    ``userInput`` decodes as text; multimodal input survives a JSON round trip."""
    assert user_input_to_wire(TextInput("hello")) == {"userInput": "hello"}
    image = ImageInput("image/png", b"\x00\x01\xff", caption="a cat")
    composite = CompositeInput(
        (TextInput("see"), image, DocumentInput("application/pdf", "a.pdf", b"%PDF"))
    )
    for value, text in ((image, "a cat"), (composite, "see\na cat")):
        wire = user_input_to_wire(value)
        assert wire["userInput"] == text
        assert "userInputEncoded" in wire
        back = _json(wire)
        assert isinstance(back, dict)
        assert user_input_from_wire(back) == value
    assert user_input_from_wire({"userInput": "old build"}) == TextInput("old build")


def test_r10_20_envelope_fields() -> None:
    """R10-20: the envelope carries sessionId, agentRef, userInput, priority, idempotencyKey,
    principal and deliveredAt (plus its own id), and no LiveSessionOptions/OpenAttributes."""
    fields = set(attrs.fields_dict(InboundMessage))
    assert fields == {
        "message_id",
        "session_id",
        "agent_ref",
        "user_input",
        "priority",
        "delivered_at",
        "idempotency_key",
        "initiator",
    }
    m = InboundMessage(
        message_id=InboundMessageId.new(),
        session_id=S,
        agent_ref=AgentRef("a"),
        user_input=ImageInput("image/png", b"x"),
        priority=Priority.NOW,
        delivered_at=12.5,
        idempotency_key=IdempotencyKey("k"),
        initiator=Principal("bob"),
    )
    wire = _json(m.to_wire())
    assert isinstance(wire, dict)
    assert not {k for k in wire if "ption" in k or "ttribute" in k}
    assert InboundMessage.from_wire(wire) == m


def test_r10_112_input_hash_normalization() -> None:
    """R10-112: inputs are compared by SHA-256 after normalization. Ours: NFC and LF line
    ends; whitespace and case are part of the input."""
    h = input_hash(TextInput("caf\u00e9\r\nok"))
    assert len(h) == 64
    assert input_hash(TextInput("cafe\u0301\nok")) == h  # NFD + LF: the same input
    assert input_hash(TextInput("café\nok ")) != h
    assert input_hash(TextInput("Café\nok")) != h
    image = ImageInput("image/png", b"\x00", caption="café")
    assert input_hash(image) != input_hash(TextInput("café"))  # the encoding counts
    assert input_hash(image) == input_hash(ImageInput("image/png", b"\x00", caption="café"))


def test_r10_03_cross_node_values_are_plain_primitives() -> None:
    """R10-03: signal payloads are plain JSON primitives: a typed object is refused at
    construction; decoding text gives plain dicts and lists, never typed objects."""
    with pytest.raises(TypeError):
        SessionSignal(
            kind=SignalKind.EVENT,
            session_id=S,
            origin=NodeId("n"),
            payload={"event": AgentExecutionResult("x")},
        )
    with pytest.raises(TypeError):
        SessionSignal(kind=SignalKind.EVENT, session_id=S, origin=NodeId("n"), payload={"b": b"x"})
    signal = SessionSignal(
        kind=SignalKind.EVENT,
        session_id=S,
        origin=NodeId("n"),
        payload={"frame": {"type": "text", "parts": [1, 2.5, None, True]}},
    )
    text = encode_signal(signal)
    assert json.loads(text)["payload"] == signal.payload
    decoded = decode_signal(text)
    assert decoded == signal
    assert decoded is not None and type(decoded.payload["frame"]) is dict


def test_turn_results_carry_no_artifacts_and_unknown_codes_degrade() -> None:
    """§9.4: a result over the wire has no artifacts; an unknown failure code decodes as
    FAILED with its message kept."""
    turn = TurnId.new()
    ok = TurnSucceeded(AgentExecutionResult("answer", (Artifact("f.txt", b"1"),)))
    back = _json(turn_result_to_wire(turn, ok))
    assert isinstance(back, dict)
    assert turn_result_from_wire(back) == (turn, TurnSucceeded(AgentExecutionResult("answer")))
    failed = turn_result_from_wire(
        {"turnId": turn.value, "status": "failed", "code": "NEW_CODE", "message": "m"}
    )
    assert failed == (turn, TurnFailed(FailureCode.FAILED, "m"))
    lost = TurnFailed(FailureCode.HOLDER_LOST, "x")
    back = _json(turn_result_to_wire(turn, lost))
    assert isinstance(back, dict)
    assert turn_result_from_wire(back) == (turn, lost)


def _status(origin: str, seq: int) -> ClusterSessionStatus:
    return ClusterSessionStatus(
        session_id=S, origin=NodeId(origin), seq=seq, activity=SessionActivity.RUNNING
    )


def test_r10_42_status_projection_keeps_the_newest_per_origin() -> None:
    """R10-42: another origin always wins (a holder change); the same origin only with a
    greater seq. Feeds (A,5), (A,4), (B,1), (A,2)."""
    projection = StatusProjection()
    assert projection.offer(_status("A", 5))
    assert not projection.offer(_status("A", 4))
    assert projection.get(S) == _status("A", 5)
    assert not projection.offer(_status("A", 5))
    assert projection.offer(_status("B", 1))
    assert projection.get(S) == _status("B", 1)
    assert projection.offer(_status("A", 2))
    assert projection.get(S) == _status("A", 2)
    projection.remove(S)
    assert projection.get(S) is None


def test_status_snapshot_round_trips_with_numbers_read_as_numbers() -> None:
    """§5.5.2: a JSON round trip may turn ints into floats; the snapshot reads either."""
    status = attrs.evolve(_status("A", 7), active_turn_id=TurnId("t-1"), observed_at=3.0)
    wire = status.to_wire()
    assert ClusterSessionStatus.from_wire(wire) == status
    wire["seq"] = 7.0
    wire["observedAt"] = 3
    assert ClusterSessionStatus.from_wire(wire) == status
