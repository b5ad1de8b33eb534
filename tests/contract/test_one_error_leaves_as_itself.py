"""One error leaves ``open_server`` and ``open_cluster`` as itself, also while the
surrounding scope is being cancelled (its nursery then holds Cancelled members beside the
error; zlink_trio/_exceptions.py gives the rule), and a cancellation alone leaves as a
cancellation the surrounding scope catches."""

from __future__ import annotations

import pytest
import trio
from trio.testing import MockClock

from zlink_trio import open_server
from zlink_trio.testing import open_cluster


class Boom(Exception):
    pass


async def test_an_error_during_outer_cancellation_leaves_open_server_as_itself(
    autojump_clock: MockClock,
) -> None:
    async with open_cluster(1) as cluster:  # its store and config, a peer to talk to
        config, store = cluster.configs[0], cluster.store
        with trio.CancelScope() as outer, pytest.raises(Boom):
            async with open_server(config):
                outer.cancel()
                raise Boom
        assert not outer.cancelled_caught  # the error won over the cancellation
        assert len(await store.list_nodes()) == 1  # only the cluster's own node


async def test_an_error_during_outer_cancellation_leaves_open_cluster_as_itself(
    autojump_clock: MockClock,
) -> None:
    with trio.CancelScope() as outer, pytest.raises(Boom):
        async with open_cluster(2) as cluster:
            store = cluster.store
            outer.cancel()
            raise Boom
    assert not outer.cancelled_caught
    assert await store.list_nodes() == ()


async def test_an_outer_cancellation_alone_is_caught_by_its_scope(
    autojump_clock: MockClock,
) -> None:
    async with open_cluster(1) as cluster:
        with trio.CancelScope() as outer:
            async with open_server(cluster.configs[0]):
                outer.cancel()
                await trio.sleep_forever()
        assert outer.cancelled_caught
        assert len(await cluster.store.list_nodes()) == 1
    with trio.CancelScope() as outer:
        async with open_cluster(2) as cluster:
            outer.cancel()
            await trio.sleep_forever()
    assert outer.cancelled_caught
    assert await cluster.store.list_nodes() == ()
