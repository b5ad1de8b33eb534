"""Startup resolution of handler annotations into typed handlers (actors/handlers.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import pytest

from zlink_trio.actors.handlers import TypedHandler, typed_handler
from zlink_trio.wire.payloads import TypedPayload, build_registry

if TYPE_CHECKING:
    from decimal import Decimal  # never importable at run time here: unresolvable


@attrs.frozen
class Item:
    sku: str


REGISTRY, _ = build_registry([(Item, None)])


async def bytes_handler(actor: Any, payload: bytes) -> bytes | None:
    return payload


async def typed(actor: Any, item: Item) -> Item:
    return item


async def bytes_with_unresolvable_other(actor: Any, payload: bytes, extra: Decimal = 0) -> bytes:
    return payload


async def unresolvable_payload(actor: Any, payload: Decimal) -> None:
    return None


async def unannotated(actor, payload):
    return payload


def test_bytes_handlers_stay_as_they_are() -> None:
    assert typed_handler(bytes_handler, REGISTRY) is bytes_handler
    assert typed_handler(unannotated, REGISTRY) is unannotated
    # An annotation delivery does not read may be unresolvable.
    assert typed_handler(bytes_with_unresolvable_other, REGISTRY) is bytes_with_unresolvable_other


def test_unresolvable_payload_annotation_is_a_startup_problem() -> None:
    with pytest.raises(TypeError, match="cannot resolve the annotation 'Decimal'"):
        typed_handler(unresolvable_payload, REGISTRY)


async def test_typed_handler_gets_the_object_and_wraps_its_reply() -> None:
    handler = typed_handler(typed, REGISTRY)
    assert type(handler) is TypedHandler
    codec = REGISTRY.get(Item)
    assert codec is not None
    item = Item("a")
    local = TypedPayload(codec, item)
    assert handler.accept(local) is item  # nothing encoded
    assert handler.accept(codec.encode(item)) == item
    reply = await handler(None, item)
    assert type(reply) is TypedPayload and reply.value is item
