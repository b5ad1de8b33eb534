"""SubmitRequest (spec 10 §11.1) and priorities (§9.3): immutable, validated, defaults."""

from __future__ import annotations

import attrs
import pytest

from zlink_trio.router import (
    AgentRef,
    IdempotencyKey,
    ImageInput,
    LiveSessionOptions,
    OpenAttributes,
    Principal,
    Priority,
    SessionId,
    SubmitOptions,
    SubmitRequest,
    TextInput,
)

S = SessionId("s-1")
A = AgentRef("agent-x")


def test_r10_139_required_fields_and_the_string_overload() -> None:
    """R10-139: session_id, agent_ref and user_input are required; a str is TextInput; the
    request is immutable (a changed copy comes from attrs.evolve)."""
    for missing in ("session_id", "agent_ref", "user_input"):
        kwargs: dict[str, object] = {"session_id": S, "agent_ref": A, "user_input": "hi"}
        del kwargs[missing]
        with pytest.raises(TypeError, match=missing):
            SubmitRequest(**kwargs)  # type: ignore[arg-type]
    request = SubmitRequest(session_id=S, agent_ref=A, user_input="hi")
    assert request.user_input == TextInput("hi")
    image = ImageInput("image/png", b"\x89PNG")
    assert SubmitRequest(session_id=S, agent_ref=A, user_input=image).user_input is image
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        request.priority = Priority.NOW  # type: ignore[misc]
    assert attrs.evolve(request, priority=Priority.NOW).priority is Priority.NOW
    assert request.priority is Priority.NEXT
    with pytest.raises(TypeError):
        SubmitRequest(session_id="s-1", agent_ref=A, user_input="hi")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        SubmitRequest(session_id=S, agent_ref=A, user_input=42)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["a:b", ":", "a b", " ", "", "\t", "x\n"])
def test_r10_140_context_discriminator_rejects_blank_whitespace_and_colon(bad: str) -> None:
    """R10-140: the discriminator rejects empty, any whitespace and ':' (AgentRuntimeId is
    split on ':'); "ab" is accepted. Our reading of "공백": blank and whitespace both."""
    with pytest.raises(ValueError, match="context_discriminator"):
        SubmitRequest(session_id=S, agent_ref=A, user_input="hi", context_discriminator=bad)
    ok = SubmitRequest(session_id=S, agent_ref=A, user_input="hi", context_discriminator="ab")
    assert ok.context_discriminator == "ab"
    assert SubmitRequest(session_id=S, agent_ref=A, user_input="hi").context_discriminator is None


def test_r10_142_optional_field_defaults() -> None:
    """R10-142: idempotencyKey none, priority NEXT, initiator none (and empty option maps)."""
    request = SubmitRequest(session_id=S, agent_ref=A, user_input="hi")
    assert request.idempotency_key is None
    assert request.priority is Priority.NEXT
    assert request.initiator is None
    assert request.options == LiveSessionOptions()
    assert request.submit_options == SubmitOptions()
    assert request.open_attributes == OpenAttributes()
    full = SubmitRequest(
        session_id=S,
        agent_ref=A,
        user_input="hi",
        idempotency_key=IdempotencyKey("k"),
        priority=Priority.LATER,
        initiator=Principal("alice"),
        open_attributes=OpenAttributes({"tenant": "t1"}),
    )
    assert (full.idempotency_key, full.priority, full.initiator) == (
        IdempotencyKey("k"),
        Priority.LATER,
        Principal("alice"),
    )
    assert full.open_attributes.get("tenant") == "t1"


def test_r10_125_three_priorities_now_first() -> None:
    """R10-125: NOW / NEXT / LATER, ordered by ordinal with NOW first; a request defaults to
    NEXT. (The inbox carrying it unchanged: test_r10_inbox.py.)"""
    assert list(Priority) == [Priority.NOW, Priority.NEXT, Priority.LATER]
    assert sorted([Priority.LATER, Priority.NOW, Priority.NEXT]) == list(Priority)
    assert SubmitRequest(session_id=S, agent_ref=A, user_input="x").priority is Priority.NEXT


def test_option_maps_hold_primitives_only() -> None:
    """§2: option maps are plain primitives (they reach the opener; never typed objects)."""
    assert LiveSessionOptions({"b": 1, "a": "x"}).as_dict() == {"a": "x", "b": 1}
    with pytest.raises(TypeError):
        LiveSessionOptions({"a": object()})
    with pytest.raises(TypeError):
        SubmitOptions({"a": [1, 2]})
    with pytest.raises(TypeError):
        OpenAttributes({1: "x"})
