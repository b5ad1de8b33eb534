"""Location Store contract: list_rows paging and the store clock."""

from __future__ import annotations

import pytest
from store_kit import actor, all_rows, ready, register, reserved, spot

from zlink_trio.store.api import LocationStore, Namespace, ObjectKind
from zlink_trio.testing import CountingStore, advance_store_clock


async def test_list_rows_pages_in_code_point_order(store: LocationStore) -> None:
    node = await register(store, capacity=1000)
    # code point order: uppercase < lowercase < non-ASCII; byte order of UTF-8 agrees
    ids = ["b", "B", "a", "a0", "a-", "é", "z", "Z9", "한", "\U0001f600", "~"]
    for object_id in ids:
        await reserved(store, actor(node, object_id))
    await ready(store, spot(node, "spot-only"))
    expected = sorted(ids)
    assert expected == sorted(ids, key=lambda s: s.encode("utf-8"))
    seen: list[str] = []
    after: str | None = None
    while True:
        page = await store.list_rows(Namespace.ACTOR, after=after, limit=3)
        assert len(page) <= 3
        seen.extend(r.key.object_id for r in page)
        if len(page) < 3:
            break
        after = page[-1].key.object_id
    assert seen == expected
    assert [r.key.object_id for r in await all_rows(store, Namespace.ACTOR)] == expected


async def test_list_rows_after_is_exclusive_and_needs_no_existing_key(
    store: LocationStore,
) -> None:
    node = await register(store)
    for object_id in ["a", "b", "c", "d"]:
        await reserved(store, actor(node, object_id))
    page = await store.list_rows(Namespace.ACTOR, after="b", limit=10)
    assert [r.key.object_id for r in page] == ["c", "d"]
    page = await store.list_rows(Namespace.ACTOR, after="bb", limit=1)
    assert [r.key.object_id for r in page] == ["c"]
    assert list(await store.list_rows(Namespace.ACTOR, after="d", limit=10)) == []


async def test_list_rows_keeps_namespaces_apart(store: LocationStore) -> None:
    node = await register(store)
    a = await ready(store, actor(node, "x"))
    s = await ready(store, spot(node, "x", kind=ObjectKind.INSTANCE_SPOT))
    entry = await store.read(node.entry_key())
    assert list(await store.list_rows(Namespace.ACTOR, after=None, limit=1000)) == [a]
    spots = await store.list_rows(Namespace.SPOT, after=None, limit=1000)
    assert sorted(spots, key=lambda r: r.key.object_id) == list(spots)
    assert set(spots) == {s, entry}


@pytest.mark.parametrize("limit", [0, -1, 1001])
async def test_list_rows_limit_is_bounded(store: LocationStore, limit: int) -> None:
    with pytest.raises(ValueError):
        await store.list_rows(Namespace.ACTOR, after=None, limit=limit)


async def test_list_rows_accepts_the_limit_bounds(store: LocationStore) -> None:
    assert list(await store.list_rows(Namespace.SPOT, after=None, limit=1)) == []
    assert list(await store.list_rows(Namespace.SPOT, after=None, limit=1000)) == []


async def test_advance_store_clock_moves_store_time(store: LocationStore) -> None:
    start = await store.now()
    await advance_store_clock(store, 120.0)
    later = await store.now()
    assert later - start == pytest.approx(120.0, abs=1.0)
    assert later >= start + 120.0


async def test_store_time_never_goes_backwards(store: LocationStore) -> None:
    times = [await store.now() for _ in range(5)]
    assert times == sorted(times)


async def test_advance_store_clock_through_a_counting_store(store: LocationStore) -> None:
    counting = CountingStore(store)
    start = await store.now()
    await advance_store_clock(counting, 30.0)
    assert await store.now() - start == pytest.approx(30.0, abs=1.0)
    assert counting.reads == 0
    assert counting.writes == 0
