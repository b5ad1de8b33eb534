"""zlink_trio.testing's CountingStore covers the whole protocol, and the clock helper."""

from __future__ import annotations

import inspect

import pytest
from store_kit import actor, register, reserved

from zlink_trio.errors import OwnerLeaseExpired
from zlink_trio.store.api import LocationStore, ObjectKey
from zlink_trio.store.memory import MemoryLocationStore
from zlink_trio.testing import (
    STORE_READ_METHODS,
    STORE_WRITE_METHODS,
    CountingStore,
    advance_store_clock,
)


def _protocol_methods() -> set[str]:
    return {
        name
        for name, member in vars(LocationStore).items()
        if not name.startswith("_") and inspect.iscoroutinefunction(member)
    }


def test_every_protocol_method_is_a_read_or_a_write() -> None:
    assert not STORE_READ_METHODS & STORE_WRITE_METHODS
    assert _protocol_methods() == STORE_READ_METHODS | STORE_WRITE_METHODS


def test_counting_store_delegates_every_protocol_method() -> None:
    for name in _protocol_methods():
        mine = inspect.signature(getattr(CountingStore, name))
        theirs = inspect.signature(getattr(LocationStore, name))
        assert mine == theirs, name


async def test_counting_store_counts_failed_calls_too() -> None:
    inner = MemoryLocationStore()
    counting = CountingStore(inner)
    node = await register(inner)
    await advance_store_clock(inner, 60)
    with pytest.raises(OwnerLeaseExpired):
        await counting.reserve(actor(node, "p"))
    assert counting.writes == 1
    assert counting.count("reserve") == 1
    assert counting.count("release") == 0


async def test_counting_store_sees_only_its_own_calls() -> None:
    inner = MemoryLocationStore()
    counting = CountingStore(inner)
    node = await register(inner)
    row = await reserved(inner, actor(node, "p"))
    assert (counting.reads, counting.writes) == (0, 0)
    assert await counting.read(ObjectKey.actor("p")) == row
    assert counting.inner is inner
    calls = counting.calls
    await counting.read(row.key)
    assert calls == {"read": 1}  # a snapshot, not a live view


async def test_advance_store_clock_needs_the_hook() -> None:
    class NoHook:
        pass

    with pytest.raises(TypeError):
        await advance_store_clock(NoHook(), 1)  # type: ignore[arg-type]
