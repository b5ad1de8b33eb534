from __future__ import annotations

import json

import pytest

from zlink_trio import ActorId, ObjectGeneration, OperationId, SpotId, StableType
from zlink_trio.errors import ConfigurationError
from zlink_trio.ids import (
    AuthorityOwnerGeneration,
    InvalidId,
    MeshName,
    NodeGeneration,
    NodeRid,
    OwnerLeaseGeneration,
    is_reserved_entry_spot_id,
    new_entry_spot_id,
    new_user_spot_id,
)


@pytest.mark.parametrize("cls", [ActorId, SpotId, StableType])
def test_text_id_bounds(cls: type[ActorId]) -> None:
    assert cls.parse("a" * 255).value == "a" * 255
    assert cls.parse("é" * 127).value == "é" * 127  # 254 bytes
    for bad in ["", "a" * 256, "é" * 128, b"\xff\xfe", "\ud800", 5]:
        with pytest.raises(InvalidId):
            cls.parse(bad)


def test_invalid_id_is_a_typed_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        ActorId("")
    with pytest.raises(ValueError):
        ActorId("x" * 300)


def test_ids_are_case_sensitive_and_not_normalized() -> None:
    assert ActorId("Player") != ActorId("player")
    nfc, nfd = "\u00e9", "e\u0301"
    assert ActorId(nfc) != ActorId(nfd)
    assert ActorId.parse(b"caf\xc3\xa9") == ActorId("café")


def test_entry_spot_shape() -> None:
    sid = new_entry_spot_id("node-a")
    assert is_reserved_entry_spot_id(sid.value)
    assert sid.is_reserved_entry_shape
    assert sid != new_entry_spot_id("node-a")
    assert not is_reserved_entry_spot_id(sid.value.upper())
    assert not is_reserved_entry_spot_id("-entry-" + sid.value.split("-entry-")[1])
    assert not is_reserved_entry_spot_id(new_user_spot_id().value)
    long = new_entry_spot_id("p" * 400)
    assert len(long.value.encode()) <= 255 and long.is_reserved_entry_shape


def test_generation_json_and_bounds() -> None:
    gen = ObjectGeneration((1 << 63) - 1)
    assert json.dumps(gen.to_json()) == '"9223372036854775807"'
    assert ObjectGeneration.from_json("42") == ObjectGeneration(42)
    for bad in [0, -1, 1 << 63, True, 1.0]:
        with pytest.raises(InvalidId):
            ObjectGeneration(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidId):
        ObjectGeneration.from_json(42)


def test_operation_id_and_rid() -> None:
    op = OperationId.new()
    assert OperationId.from_bytes(op.to_bytes()) == op
    with pytest.raises(InvalidId):
        OperationId(0)
    rid = NodeRid.new()
    assert NodeRid.from_hex(rid.hex) == rid
    with pytest.raises(InvalidId):
        NodeRid(b"short")


TEXT_IDS = [(ActorId, "ActorId"), (SpotId, "SpotId"), (StableType, "stable type")]


@pytest.mark.parametrize(("cls", "what"), [*TEXT_IDS, (MeshName, "MeshName")])
def test_text_ids_share_one_base_but_stay_distinct(cls: type[ActorId], what: str) -> None:
    """One base gives every text id the same parse/str/order; each stays its own type."""
    a, b = cls("a"), cls.parse(b"b")
    assert type(b) is cls and cls.parse(a) is a
    assert str(a) == "a" and a < b and sorted([b, a]) == [a, b]
    assert hash(cls("a")) == hash(a) and cls("a") == a
    with pytest.raises(InvalidId, match=f"^{what}: empty$"):
        cls("")
    with pytest.raises(InvalidId, match=f"^{what}: expected str"):
        cls.parse(3)
    for other, _ in TEXT_IDS:
        if other is not cls:
            assert a != other("a")
            with pytest.raises(TypeError):
                _ = a < other("b")  # type: ignore[operator]


@pytest.mark.parametrize(
    "cls", [ObjectGeneration, AuthorityOwnerGeneration, NodeGeneration, OwnerLeaseGeneration]
)
def test_generations_share_one_base_but_stay_distinct(cls: type[NodeGeneration]) -> None:
    assert cls(1) < cls(2) and cls(2) == cls(2)
    assert cls(1) != (NodeGeneration(1) if cls is not NodeGeneration else ObjectGeneration(1))
    with pytest.raises(InvalidId, match=f"^{cls.__name__} must be an int in 1..2\\*\\*63-1"):
        cls(0)
