"""Payload size limits: a local and a remote call have the same limits and the same
completion (issue 9, item 8, second defect).

The wire bounds an application payload at 1 MiB (the spec's limit). A configuration that
would let a local call carry more than a remote one can is a ConfigurationError, and a
reply over the limit ends the request with a typed error at once, locally and remotely."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from actor_kit import Recorder, client_app, make_app

from zlink_trio import (
    App,
    ApplicationError,
    ConfigurationError,
    Created,
    RecreateOnRelocation,
    ServerConfig,
    on_request,
)
from zlink_trio.testing import CountingStore, open_cluster

SECRET = b"size-limits-secret-0123456789"
MIB = 1024 * 1024


@pytest.mark.parametrize("field", ["max_request_bytes", "max_reply_bytes"])
async def test_limits_above_what_the_wire_carries_are_a_configuration_error(
    clock: object, store: CountingStore, field: str
) -> None:
    """Raised above 1 MiB, a limit worked locally and broke across nodes (a remote request
    got ProtocolError, a big reply left the caller waiting for its deadline): refused."""
    with pytest.raises(ConfigurationError, match=field):
        ServerConfig(cluster_secret=SECRET, max_frame_bytes=64 * MIB, **{field: 2 * MIB})
    ServerConfig(cluster_secret=SECRET, **{field: MIB})  # the wire's bound itself is fine


async def test_raised_limits_are_refused_before_any_node_starts(
    clock: object, store: CountingStore
) -> None:
    raised = {"max_request_bytes": 2 * MIB, "max_reply_bytes": 2 * MIB}
    with pytest.raises(ConfigurationError):
        async with open_cluster(
            2,
            store=store,
            config=lambda i: ServerConfig(
                cluster_secret=SECRET, max_frame_bytes=64 * MIB, **raised
            ),
        ):
            pass  # pragma: no cover - never reached
    assert store.count("register_node") == 0


async def test_a_frame_bound_below_the_reply_limit_is_a_configuration_error() -> None:
    """A reply that fits max_reply_bytes must fit a frame, or a local reply would
    succeed where a remote one cannot leave the owner."""
    with pytest.raises(ConfigurationError, match="max_reply_bytes"):
        ServerConfig(max_request_bytes=1024, max_frame_bytes=64 * 1024)
    ServerConfig(max_request_bytes=1024, max_reply_bytes=32 * 1024, max_frame_bytes=64 * 1024)


def _big_reply_app(rec: Recorder, size: int) -> App:
    app = make_app(rec)

    class Big:
        def __init__(self, context: object) -> None:
            self.context = context

        @on_request("big")
        async def big(self, payload: bytes) -> bytes:
            return b"r" * size

    app.register_actor("big", Big, relocation=RecreateOnRelocation())
    return app


@pytest.mark.parametrize("size", [MIB, MIB + 1])
async def test_local_and_remote_replies_complete_alike_at_the_limit(
    clock: object, store: CountingStore, size: int
) -> None:
    """A 1 MiB reply arrives locally and remotely; one byte more ends the request with
    ApplicationError at once (no wait for the deadline), locally and remotely."""
    rec = Recorder()
    apps = [_big_reply_app(rec, size), client_app()]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        owner, caller = cluster.servers
        created = await caller.actors.create("b", "big").timeout(10)
        assert isinstance(created, Created)
        assert created.actor.node_rid == owner.identity.node_rid
        for server in (owner, caller):
            start = trio.current_time()
            if size <= MIB:
                assert await server.actors.request("b", "big").timeout(30) == b"r" * size
            else:
                with pytest.raises(ApplicationError, match="exceeds"):
                    await server.actors.request("b", "big").timeout(30)
            assert trio.current_time() - start < 5
