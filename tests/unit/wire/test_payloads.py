"""The payload codec of registered attrs classes (zlink_trio/wire/payloads.py): the
encoded layout, round trips of every supported field type, strict decoding and the
registry's startup problems."""

from __future__ import annotations

import math

import attrs
import cbor2
import pytest

from zlink_trio.errors import InvalidOperation
from zlink_trio.wire.payloads import (
    PayloadRegistry,
    TypedPayload,
    build_registry,
    codec_for_class,
    reply_value,
    value_as,
)


@attrs.frozen
class Inner:
    name: str
    weight: float


@attrs.frozen
class Everything:
    i: int
    f: float
    s: str
    b: bytes
    flag: bool
    nothing: None
    maybe: int | None
    items: list[Inner]
    seq: tuple[int, ...]
    pair: tuple[str, int]
    by_name: dict[str, Inner]
    by_id: dict[int, list[str]]
    inner: Inner
    optional_inner: Inner | None = None


@attrs.frozen
class Tree:
    label: str
    children: tuple[Tree, ...] = ()


SAMPLE = Everything(
    i=-(2**40),
    f=0.25,
    s="ü",
    b=b"\x00\xff",
    flag=True,
    nothing=None,
    maybe=None,
    items=[Inner("a", 1.0), Inner("b", -2.5)],
    seq=(1, 2, 3),
    pair=("x", 9),
    by_name={"k": Inner("k", math.inf)},
    by_id={7: ["s"], -1: []},
    inner=Inner("i", 0.0),
    optional_inner=Inner("o", 3.0),
)


def test_round_trip_of_every_supported_field_type() -> None:
    codec = codec_for_class(Everything)
    data = codec.encode(SAMPLE)
    back = codec.decode(data)
    assert back == SAMPLE
    assert type(back.seq) is tuple and type(back.items) is list
    assert all(type(x) is Inner for x in back.items)


def test_layout_is_type_name_then_a_map_of_fields() -> None:
    codec = codec_for_class(Inner, "shop.Inner")
    assert cbor2.loads(codec.encode(Inner("n", 1.5))) == [
        "shop.Inner",
        {"name": "n", "weight": 1.5},
    ]


def test_recursive_classes_and_int_for_float() -> None:
    codec = codec_for_class(Tree)
    tree = Tree("root", (Tree("a"), Tree("b", (Tree("c"),))))
    assert codec.decode(codec.encode(tree)) == tree
    inner = codec_for_class(Inner)
    assert inner.decode(cbor2.dumps(["Inner", {"name": "n", "weight": 2}])) == Inner("n", 2.0)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "not valid CBOR"),
        (b"\xff", "not valid CBOR"),
        (cbor2.dumps(["Inner", {"name": "n", "weight": 1.0}]) + b"\x00", "exactly one CBOR item"),
        (cbor2.dumps(["Other", {"name": "n", "weight": 1.0}]), "is a 'Other', not a 'Inner'"),
        (cbor2.dumps({"name": "n"}), "not a typed payload"),
        (cbor2.dumps(["Inner", {"name": "n"}]), "missing field"),
        (cbor2.dumps(["Inner", {"name": "n", "weight": 1.0, "x": 1}]), "unknown field"),
        (cbor2.dumps(["Inner", {"name": 1, "weight": 1.0}]), "name: expected str, got int"),
        (cbor2.dumps(["Inner", {"name": "n", "weight": True}]), "expected float, got bool"),
        (cbor2.dumps(cbor2.CBORTag(1, 0)), "not valid CBOR"),
        (cbor2.dumps(["Inner", [1, 2]]), "expected a map"),
    ],
)
def test_strict_decoding(data: bytes, match: str) -> None:
    codec = codec_for_class(Inner)
    with pytest.raises(InvalidOperation, match=match):
        codec.decode(data)


def test_values_that_do_not_fit_fail_to_encode_naming_the_field() -> None:
    codec = codec_for_class(Everything)
    bad = attrs.evolve(SAMPLE, items=[Inner("a", "heavy")])  # type: ignore[arg-type]
    with pytest.raises(InvalidOperation, match=r"items\[0\]\.weight: expected float, got str"):
        codec.check(bad)
    with pytest.raises(InvalidOperation, match="pair: expected 2 items, got 1"):
        codec.encode(attrs.evolve(SAMPLE, pair=("x",)))  # type: ignore[arg-type]
    with pytest.raises(InvalidOperation, match="flag: expected bool, got int"):
        codec.encode(attrs.evolve(SAMPLE, flag=1))  # type: ignore[arg-type]
    with pytest.raises(InvalidOperation, match=r"i: int out of the CBOR integer range"):
        codec.encode(attrs.evolve(SAMPLE, i=2**64))
    assert codec.decode(codec.encode(attrs.evolve(SAMPLE, i=-(2**64)))).i == -(2**64)
    with pytest.raises(InvalidOperation, match="expected Everything, got Inner"):
        codec.encode(Inner("a", 1.0))


def test_registry_problems() -> None:
    @attrs.define
    class Mutable:
        x: int

    @attrs.frozen
    class Loose:
        x: object

    @attrs.frozen
    class Unions:
        x: int | str

    @attrs.frozen
    class Keys:
        x: dict[float, int]

    registry, problems = build_registry(
        [
            (Inner, None),
            (Inner, None),
            (Tree, "Inner"),
            (Mutable, None),
            (Loose, None),
            (Unions, None),
            (Keys, None),
            (42, None),
        ]
    )
    assert Inner in registry and len(registry) == 1
    text = "\n".join(problems)
    assert len(problems) == 7
    for expected in (
        "Inner registered twice",
        "type name 'Inner' used by both",
        "not a frozen attrs class",
        "unsupported payload field type",
        "only X | None unions",
        "dict keys must be str or int",
        "is not a class",
    ):
        assert expected in text


def test_local_values_and_replies() -> None:
    registry, _ = build_registry([(Inner, None), (Tree, None)])
    inner, tree = registry.get(Inner), registry.get(Tree)
    assert inner is not None and tree is not None
    value = Inner("n", 1.0)
    local = TypedPayload(inner, value)
    assert value_as(local, inner) is value  # handed over as it is
    assert value_as(local.encode(), inner) == value
    with pytest.raises(InvalidOperation, match="is a 'Inner', not a 'Tree'"):
        value_as(local, tree)
    with pytest.raises(InvalidOperation, match="is a 'Inner', not a 'Tree'"):
        value_as(local.encode(), tree)
    assert reply_value(local, None) == local.encode()  # a bytes caller gets the bytes
    assert reply_value(b"raw", None) == b"raw"
    assert reply_value(None, None) is None
    assert reply_value(local, inner) is value
    with pytest.raises(InvalidOperation, match="no reply"):
        reply_value(None, inner)
    assert PayloadRegistry().of(value) is None
