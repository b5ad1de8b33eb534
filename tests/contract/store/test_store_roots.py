"""Location Store contract: the Relocation Store's immutable, content-addressed roots."""

from __future__ import annotations

import hashlib

import pytest

from zlink_trio.store.api import ContentRef, LocationStore
from zlink_trio.testing import advance_store_clock


async def test_put_root_is_content_addressed_and_idempotent(store: LocationStore) -> None:
    data = b"state \x00\xff" * 100
    ref = await store.put_root(data)
    assert ref == ContentRef(hashlib.sha256(data).digest(), len(data))
    assert await store.put_root(data) == ref
    assert await store.read_root(ref) == data
    empty = await store.put_root(b"")
    assert await store.read_root(empty) == b""


async def test_read_root_checks_hash_and_size(store: LocationStore) -> None:
    data = b"recovery root"
    ref = await store.put_root(data)
    assert await store.read_root(ContentRef(ref.sha256, ref.size + 1)) is None
    assert await store.read_root(ContentRef(ref.sha256, ref.size - 1)) is None
    assert await store.read_root(ContentRef(hashlib.sha256(b"other").digest(), ref.size)) is None
    assert await store.read_root(ContentRef.of(b"never stored")) is None
    assert await store.read_root(ref) == data


async def test_delete_root_is_idempotent(store: LocationStore) -> None:
    ref = await store.put_root(b"bytes")
    assert await store.delete_root(ref)
    assert await store.read_root(ref) is None
    assert not await store.delete_root(ref)
    assert not await store.delete_root(ContentRef.of(b"never stored"))
    assert await store.put_root(b"bytes") == ref  # can be stored again
    assert await store.read_root(ref) == b"bytes"


async def test_root_retention_expires(store: LocationStore) -> None:
    ref = await store.put_root(b"envelope", retain_for=60)
    await advance_store_clock(store, 59)
    assert await store.read_root(ref) == b"envelope"
    await advance_store_clock(store, 2)
    assert await store.read_root(ref) is None
    assert not await store.delete_root(ref)  # nothing live to delete


async def test_second_put_keeps_the_longer_retention(store: LocationStore) -> None:
    long_then_short = await store.put_root(b"a", retain_for=100)
    await store.put_root(b"a", retain_for=10)
    short_then_long = await store.put_root(b"b", retain_for=10)
    await store.put_root(b"b", retain_for=100)
    timed_then_forever = await store.put_root(b"c", retain_for=10)
    await store.put_root(b"c")
    forever_then_timed = await store.put_root(b"d")
    await store.put_root(b"d", retain_for=10)
    await advance_store_clock(store, 50)
    for ref in (long_then_short, short_then_long, timed_then_forever, forever_then_timed):
        assert await store.read_root(ref) is not None
    await advance_store_clock(store, 100)
    assert await store.read_root(long_then_short) is None
    assert await store.read_root(short_then_long) is None
    assert await store.read_root(timed_then_forever) == b"c"
    assert await store.read_root(forever_then_timed) == b"d"


async def test_expired_root_can_be_stored_again(store: LocationStore) -> None:
    ref = await store.put_root(b"x", retain_for=5)
    await advance_store_clock(store, 6)
    assert await store.read_root(ref) is None
    assert await store.put_root(b"x", retain_for=5) == ref
    assert await store.read_root(ref) == b"x"


async def test_negative_root_retention_is_rejected(store: LocationStore) -> None:
    with pytest.raises(ValueError):
        await store.put_root(b"x", retain_for=-1)
    assert await store.read_root(ContentRef.of(b"x")) is None
