"""DeploymentMode.DISTRIBUTED from a DSN (spec 10 §11.2): two routers of one process, each
with its own connections and listener on one PostgreSQL schema, run one session's turns one
at a time; a turn submitted on the node that does not hold the session is forwarded and
its result comes back over LISTEN/NOTIFY. Real clock, short timings, bounded."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import trio
from router_app import Opener, Registry, World, no_overlap
from router_kit import AGENT, S1

from zlink_trio.errors import ConfigurationError
from zlink_trio.router import (
    DeploymentMode,
    ExecutedLocally,
    Forwarded,
    IdempotencyKey,
    NodeId,
    SessionRouterBuilder,
    SessionRouterConfig,
    SubmitRequest,
)
from zlink_trio.router_pg import open_distributed_router, open_postgres_spis
from zlink_trio.store.postgres import drop_schema

pytestmark = pytest.mark.postgres

CONFIG = SessionRouterConfig(
    lock_lease=3.0,
    lock_extend_interval=1.0,
    idempotency_secondary_ttl=2.0,
    holder_loss_sweep_interval=1.0,
)


@pytest.fixture
async def schema(pg_dsn: str) -> AsyncIterator[str]:
    name = f"zlink_router_{uuid.uuid4().hex[:16]}"
    try:
        yield name
    finally:
        with trio.CancelScope(shield=True):
            await drop_schema(pg_dsn, name)


def _builder(world: World, registry: Registry, node: str) -> SessionRouterBuilder:
    return SessionRouterBuilder(
        node_id=NodeId(node), session_opener=Opener(world, node, registry), config=CONFIG
    )


async def test_r10_146_distributed_from_a_dsn_fails_fast_without_a_node_id(
    pg_dsn: str, schema: str, world: World, registry: Registry
) -> None:
    """R10-146 (PostgreSQL): ``apply`` sets DISTRIBUTED and all five SPI slots; the builder
    still refuses a DISTRIBUTED router without a node id, at build, before serving."""
    with trio.fail_after(20):
        async with open_postgres_spis(pg_dsn, schema=schema) as spis:
            complete = spis.apply(_builder(world, registry, "a"))
            assert complete.mode is DeploymentMode.DISTRIBUTED
            parts = complete.build()
            assert parts.node_id == NodeId("a")
            nameless = spis.apply(SessionRouterBuilder(session_opener=Opener(world, "x", registry)))
            with pytest.raises(ConfigurationError, match="node_id"):
                nameless.build()


async def test_two_routers_on_one_database_serialize_and_forward(
    pg_dsn: str, schema: str, world: World, registry: Registry
) -> None:
    """§7.1: a turn submitted to the non-holder is FORWARDED and runs on the holder after
    the running turn; the two never overlap; both callers get their result; a retry with
    the same idempotency key answers the cached result without running again."""
    world.duration = lambda _text: 0.3
    with trio.fail_after(30):
        async with (
            open_distributed_router(_builder(world, registry, "a"), pg_dsn, schema=schema) as a,
            open_distributed_router(_builder(world, registry, "b"), pg_dsn, schema=schema) as b,
        ):
            results: dict[str, str] = {}

            async def submit(router: object, text: str, key: str | None = None) -> object:
                request = SubmitRequest(
                    session_id=S1,
                    agent_ref=AGENT,
                    user_input=text,
                    idempotency_key=None if key is None else IdempotencyKey(key),
                )
                disposition = await router.submit(request)  # type: ignore[attr-defined]
                results[text] = (await disposition.result).text
                return disposition

            first = await a.submit(SubmitRequest(session_id=S1, agent_ref=AGENT, user_input="one"))
            assert isinstance(first, ExecutedLocally)
            second = await submit(b, "two", "k-two")
            assert isinstance(second, Forwarded)
            assert (await first.result).text == "a:one:0"
            assert results["two"] == "a:two:2"
            again = await b.submit(
                SubmitRequest(
                    session_id=S1,
                    agent_ref=AGENT,
                    user_input="two",
                    idempotency_key=IdempotencyKey("k-two"),
                )
            )
            assert (await again.result).text == "a:two:2"
    assert [t.text for t in world.turns] == ["one", "two"]
    assert no_overlap(world.turns)
