"""The short paths of wire/templates.py write exactly the bytes ``encode`` writes for the
equivalent record, build records equal to normally constructed ones, and refuse what
``encode`` refuses."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from zlink_trio.errors import ErrorKind, ProtocolError
from zlink_trio.ids import (
    ActorId,
    AuthorityOwnerGeneration,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    OwnerLeaseGeneration,
)
from zlink_trio.wire import (
    MAX_PAYLOAD_BYTES,
    ActorSend,
    CreateState,
    CreateTail,
    MessageKind,
    ReplyPayloadTail,
    TerminalReply,
    decode,
    encode,
)
from zlink_trio.wire.templates import ActorSendTemplate, encode_fast, ok_reply, ok_reply_body

SOURCE = NodeRid(bytes(range(16)))
TARGET = NodeRid(bytes(range(16, 32)))


def _template(
    actor: str = "cart-1", fences: tuple[int | None, int | None, int | None] = (5, 6, 7)
) -> ActorSendTemplate:
    object_generation, owner_generation, lease_generation = fences
    return ActorSendTemplate(
        source_rid=SOURCE,
        source_generation=NodeGeneration(11),
        target_rid=TARGET,
        target_generation=NodeGeneration(12),
        actor_id=ActorId(actor),
        route_object_generation=None
        if object_generation is None
        else ObjectGeneration(object_generation),
        expected_owner_generation=None
        if owner_generation is None
        else AuthorityOwnerGeneration(owner_generation),
        owner_lease_generation=None
        if lease_generation is None
        else OwnerLeaseGeneration(lease_generation),
    )


@given(
    actor=st.text(min_size=1, max_size=60),
    fences=st.tuples(*[st.none() | st.integers(1, 2**63 - 1)] * 3),
    correlation=st.integers(0, 2**64 - 1),
    packet=st.text(min_size=1, max_size=63),
    payload=st.binary(max_size=300),
    timeout_ms=st.none() | st.integers(0, 2**32 - 1),
    operation_id=st.integers(1, 2**128 - 1),
)
def test_actor_send_body_is_the_records_encoding(
    actor: str,
    fences: tuple[int | None, int | None, int | None],
    correlation: int,
    packet: str,
    payload: bytes,
    timeout_ms: int | None,
    operation_id: int,
) -> None:
    template = _template(actor, fences)
    kind = MessageKind.REQUEST if correlation else MessageKind.SEND
    args = (correlation, kind, packet, payload, timeout_ms, operation_id)
    record = template.record(*args)
    assert isinstance(record, ActorSend)
    assert template.body(*args) == encode(record)
    assert decode(template.body(*args)) == record


def test_actor_send_body_refuses_what_encode_refuses() -> None:
    template = _template()
    with pytest.raises(ProtocolError, match="packet_name"):
        template.body(1, MessageKind.REQUEST, "x" * 300, b"", None, 1)
    with pytest.raises(ProtocolError, match="payload"):
        template.body(1, MessageKind.REQUEST, "p", b"x" * (MAX_PAYLOAD_BYTES + 1), None, 1)
    with pytest.raises(ProtocolError, match="timeout_ms"):
        template.body(1, MessageKind.REQUEST, "p", b"", 2**32, 1)
    with pytest.raises(ProtocolError):  # a send carries no correlation
        template.body(3, MessageKind.SEND, "p", b"", None, 1)


@given(correlation=st.integers(1, 2**64 - 1), payload=st.none() | st.binary(max_size=300))
def test_ok_reply_is_a_normal_record_and_encodes_as_one(
    correlation: int, payload: bytes | None
) -> None:
    tail = None if payload is None else ReplyPayloadTail(payload=payload)
    normal = TerminalReply.ok(correlation, tail)
    fast = ok_reply(correlation, payload)
    assert fast == normal and hash(fast) == hash(normal) and repr(fast) == repr(normal)
    assert ok_reply_body(correlation, payload) == encode(normal)
    assert encode_fast(fast) == encode(normal)


def test_encode_fast_takes_every_other_record_to_encode() -> None:
    failed = TerminalReply.failed(9, ErrorKind.NOT_FOUND, "no such actor")
    assert encode_fast(failed) == encode(failed)
    created = TerminalReply.ok(
        9,
        CreateTail(
            state=CreateState.CREATED,
            object_id="a",
            object_generation=ObjectGeneration(1),
            mesh_name=MeshName("m"),
            node_rid=TARGET,
        ),
    )
    assert encode_fast(created) == encode(created)
    with pytest.raises(ProtocolError):
        ok_reply_body(0, b"")  # a reply's correlation is never 0
    with pytest.raises(ProtocolError):
        encode_fast(ok_reply(1, b"x" * (MAX_PAYLOAD_BYTES + 1)))
