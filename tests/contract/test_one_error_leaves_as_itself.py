"""One error leaves ``open_server`` and ``open_cluster`` as itself, also while the
surrounding scope is being cancelled (its nursery then holds Cancelled members beside the
error; zlink_trio/_exceptions.py gives the rule), and a cancellation alone leaves as a
cancellation the surrounding scope catches."""

from __future__ import annotations

import pytest
import trio
from trio.testing import MockClock

from zlink_trio import ServerConfig, open_server
from zlink_trio.store.memory import MemoryLocationStore
from zlink_trio.testing import open_cluster


class Boom(Exception):
    pass


async def test_an_error_during_outer_cancellation_leaves_open_server_as_itself(
    autojump_clock: MockClock,
) -> None:
    store = MemoryLocationStore()
    with trio.CancelScope() as outer, pytest.raises(Boom):
        async with open_server(ServerConfig(location_store=store)):
            outer.cancel()
            raise Boom
    assert not outer.cancelled_caught  # the error won over the cancellation
    assert await store.list_nodes() == ()


async def test_an_error_during_outer_cancellation_leaves_open_cluster_as_itself(
    autojump_clock: MockClock,
) -> None:
    store = MemoryLocationStore()
    with trio.CancelScope() as outer, pytest.raises(Boom):
        async with open_cluster(2, store=store):
            outer.cancel()
            raise Boom
    assert not outer.cancelled_caught
    assert await store.list_nodes() == ()


async def test_an_outer_cancellation_alone_is_caught_by_its_scope(
    autojump_clock: MockClock,
) -> None:
    store = MemoryLocationStore()
    with trio.CancelScope() as outer:
        async with open_server(ServerConfig(location_store=store)):
            outer.cancel()
            await trio.sleep_forever()
    assert outer.cancelled_caught
    with trio.CancelScope() as outer:
        async with open_cluster(2, store=store):
            outer.cancel()
            await trio.sleep_forever()
    assert outer.cancelled_caught
    assert await store.list_nodes() == ()
