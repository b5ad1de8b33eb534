"""Typed payloads at the edges of what CBOR carries (found by an adversarial review of
issue 9): a local and a remote call must end the same way, at once, with a typed error —
never a raw Python exception at the caller, never a caller left waiting for its deadline."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio

from zlink_trio import (
    App,
    ApplicationError,
    ConfigurationError,
    Created,
    InvalidOperation,
    RecreateOnRelocation,
    on_request,
)
from zlink_trio.testing import CountingStore, open_cluster


@attrs.frozen
class Text:
    s: str


@attrs.frozen
class Chain:
    child: Chain | None = None


@attrs.frozen
class Measure:
    value: float


class Edges:
    def __init__(self, context: Any) -> None:
        self.context = context
        self.runs = 0

    @on_request("echo")
    async def echo(self, text: Text) -> Text:
        self.runs += 1
        return text

    @on_request("raw")
    async def raw(self, payload: bytes) -> bytes:
        self.runs += 1
        return payload

    @on_request("bad-reply")
    async def bad_reply(self, payload: bytes) -> Text:
        self.runs += 1
        return Text("\udcff")  # a str no UTF-8 (so no CBOR text) can carry

    @on_request("depth")
    async def depth(self, chain: Chain) -> bytes:
        self.runs += 1
        n, link = 0, chain
        while link is not None:
            n, link = n + 1, link.child
        return b"%d" % n

    @on_request("measure")
    async def measure(self, m: Measure) -> Measure:
        self.runs += 1
        return m


def _app(host: bool) -> App:
    app = App()
    app.enable_actor_dispatch()
    for cls in (Text, Chain, Measure):
        app.register_codec(cls)
    if host:
        app.register_actor("edges", Edges, relocation=RecreateOnRelocation())
    return app


def _chain(n: int) -> Chain:
    link: Chain | None = None
    for _ in range(n):
        link = Chain(link)
    assert link is not None
    return link


@asynccontextmanager
async def _edges(store: CountingStore, actor_id: str) -> AsyncIterator[tuple[Any, Any]]:
    """Two nodes, the ``edges`` Actor ``actor_id`` hosted on the second: (local, remote)
    callers of it."""
    apps = [_app(False), _app(True)]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        remote, local = cluster.servers
        created = await local.actors.create(actor_id, "edges").timeout(10)
        assert isinstance(created, Created)
        yield local, remote


async def test_text_that_cbor_cannot_carry_is_a_typed_error_at_once_local_and_remote(
    clock: object, store: CountingStore
) -> None:
    async with _edges(store, "e-1") as (local, remote):
        for caller in (local, remote):
            with trio.fail_after(5):  # well inside the calls' own 30 s: no waiting
                with pytest.raises(InvalidOperation, match="not valid Unicode"):
                    await caller.actors.request("e-1", "echo", Text("\ud800")).reply_type(Text)
                with pytest.raises(InvalidOperation, match="not valid Unicode"):
                    await caller.actors.request("e-1", "raw", Text("\ud800"))
                with pytest.raises(InvalidOperation, match="not valid Unicode"):
                    await caller.actors.send("e-1", "raw", Text("\ud800"))
                # The handler's own reply cannot be encoded: the caller is told, typed.
                with pytest.raises(ApplicationError):
                    await caller.actors.request("e-1", "bad-reply", b"").reply_type(Text)
                with pytest.raises(ApplicationError):
                    await caller.actors.request("e-1", "bad-reply", b"")
        # Valid text still round-trips both ways.
        for caller in (local, remote):
            reply = await caller.actors.request("e-1", "echo", Text("é\x00✓")).reply_type(Text)
            assert reply == Text("é\x00✓")


async def test_nesting_bound_is_the_same_for_local_and_remote_callers(
    clock: object, store: CountingStore
) -> None:
    async with _edges(store, "e-2") as (local, remote):
        deepest = None
        for depth in range(20, 40):
            outcomes = []
            for caller in (local, remote):
                try:
                    outcomes.append(await caller.actors.request("e-2", "depth", _chain(depth)))
                except InvalidOperation as exc:
                    assert "nested deeper" in exc.message
                    outcomes.append("refused")
            assert outcomes[0] == outcomes[1], (depth, outcomes)
            if outcomes[0] != "refused":
                deepest = depth
        assert deepest is not None and 20 <= deepest < 39
        for caller in (local, remote):  # far too deep: a typed error, no RecursionError
            with pytest.raises(InvalidOperation, match="nested deeper"):
                await caller.actors.request("e-2", "depth", _chain(3000))


async def test_an_int_in_a_float_field_arrives_as_the_same_value_local_and_remote(
    clock: object, store: CountingStore
) -> None:
    async with _edges(store, "e-3") as (local, remote):
        replies = [
            await caller.actors.request("e-3", "measure", Measure(3)).reply_type(Measure)
            for caller in (local, remote)
        ]
        assert replies == [Measure(3), Measure(3)]
        assert [type(r.value) for r in replies] == [int, int]
        replies = [
            await caller.actors.request("e-3", "measure", Measure(2.5)).reply_type(Measure)
            for caller in (local, remote)
        ]
        assert [type(r.value) for r in replies] == [float, float]


async def test_a_plain_def_handler_fails_startup(clock: object) -> None:
    class Sync:
        def __init__(self, context: Any) -> None:
            self.context = context

        @on_request("get")  # type: ignore[arg-type]
        def get(self, payload: bytes) -> bytes:
            return payload

    app = App()
    app.enable_actor_dispatch()
    app.register_actor("sync", Sync, relocation=RecreateOnRelocation())
    with pytest.raises(ConfigurationError, match="must be an async def"):
        async with open_cluster(1, app=app):
            pytest.fail("startup must fail")
