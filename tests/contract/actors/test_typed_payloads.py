"""Typed payloads (issue 9 item 5): frozen attrs classes as Actor payload and reply types,
through the public API only (``zlink_trio`` and ``zlink_trio.testing``), across real nodes.

Local calls hand the caller's object to the handler as it is (nothing is encoded), remote
ones carry it as CBOR; both end the same way: the handler gets an instance of its declared
class, the caller a reply of the class it stated (``reply_type``). Bytes that do not decode
as the handler's class never reach it; a missing or duplicate codec fails startup; a
payload that cannot be encoded fails at the caller before anything is sent.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import attrs
import pytest

import zlink_trio
from zlink_trio import (
    App,
    ApplicationError,
    ConfigurationError,
    Created,
    InvalidOperation,
    RecreateOnRelocation,
    on_request,
    on_send,
)
from zlink_trio.testing import CountingStore, open_cluster


@attrs.frozen
class Line:
    sku: str
    qty: int


@attrs.frozen
class AddItem:
    sku: str
    qty: int
    gift: bool = False
    note: str | None = None


@attrs.frozen
class CartTotal:
    items: int
    lines: tuple[Line, ...]
    tags: dict[str, list[int]]
    price: float | None


@attrs.frozen
class Note:
    text: str


@attrs.frozen
class Unregistered:
    value: int


PAYLOAD_CLASSES = (AddItem, CartTotal, Note, Line)


def cart_app(
    calls: list[tuple[str, object]], *, register: tuple[type, ...] = PAYLOAD_CLASSES
) -> App:
    """An app with one typed Actor type "cart"; every handler run is appended to ``calls``
    (packet, payload as the handler received it)."""

    class Cart:
        def __init__(self, context: Any) -> None:
            self.context = context
            self.lines: list[Line] = []

        @on_request("add")
        async def add(self, item: AddItem) -> CartTotal:
            calls.append(("add", item))
            self.lines.append(Line(item.sku, item.qty))
            return CartTotal(
                items=sum(line.qty for line in self.lines),
                lines=tuple(self.lines),
                tags={"qty": [line.qty for line in self.lines]},
                price=None if item.gift else 1.5,
            )

        @on_send("note")
        async def note(self, text: Note) -> None:
            calls.append(("note", text))

        @on_request("count")
        async def count(self, payload: bytes) -> bytes:
            calls.append(("count", payload))
            return str(len(calls)).encode()

        @on_request("wrong")
        async def wrong(self, item: AddItem) -> CartTotal:
            calls.append(("wrong", item))
            return Note("not a total")  # type: ignore[return-value]

        @on_request("refuse")
        async def refuse(self, item: AddItem) -> CartTotal:
            calls.append(("refuse", item))
            raise InvalidOperation(f"out of stock: {item.sku}")

        @on_request("crash")
        async def crash(self, item: AddItem) -> CartTotal:
            calls.append(("crash", item))
            raise RuntimeError("boom")

    app = App()
    app.enable_actor_dispatch()
    for cls in register:
        app.register_codec(cls)
    app.register_actor("cart", Cart, relocation=RecreateOnRelocation())
    app.register_actor("echo", Echo, relocation=RecreateOnRelocation())
    return app


class Echo:
    """A bytes Actor: shows what a typed payload travels as."""

    def __init__(self, context: Any) -> None:
        self.context = context

    @on_request("echo")
    async def echo(self, payload: bytes) -> bytes:
        return payload


def _host(cluster: Any, created: Created) -> tuple[Any, Any]:
    """(the node hosting the Actor, the other node)."""
    servers = cluster.servers
    host = next(s for s in servers if s.identity.node_rid == created.actor.node_rid)
    other = next(s for s in servers if s is not host)
    return host, other


def _failed(server: Any) -> int:
    stats = server.statistics().actors
    return sum(t.dispatch_failed for t in stats.types if t.stable_type == "cart")


async def test_typed_request_and_send_local_and_remote(clock: object, store: CountingStore) -> None:
    """A typed request and send reach the handler as its declared class, from the owner's
    node (the caller's very object: nothing encoded) and from another node (decoded); the
    reply is the stated reply class on both paths, equal on both; without a stated reply
    type both paths return the same encoded bytes."""
    calls: list[tuple[str, object]] = []
    app = cart_app(calls)
    async with open_cluster(2, store=store, app=app) as cluster:
        await cluster.wait_all_admitted()
        created = await cluster.servers[0].actors.create("cart-1", "cart").timeout(10)
        assert isinstance(created, Created)
        host, other = _host(cluster, created)

        local_item = AddItem("apple", 2)
        local = await host.actors.request("cart-1", "add", local_item).reply_type(CartTotal)
        assert isinstance(local, CartTotal)
        assert local == CartTotal(2, (Line("apple", 2),), {"qty": [2]}, 1.5)
        assert calls[-1][1] is local_item  # in-process: the caller's object, not a copy

        remote_item = AddItem("pear", 3, gift=True, note="ribbon")
        remote = await other.actors.request("cart-1", "add", remote_item).reply_type(CartTotal)
        assert isinstance(remote, CartTotal)
        assert remote == CartTotal(5, (Line("apple", 2), Line("pear", 3)), {"qty": [2, 3]}, None)
        received = calls[-1][1]
        assert isinstance(received, AddItem) and received == remote_item
        assert received is not remote_item  # it crossed the wire
        assert all(type(line) is Line for line in remote.lines)

        # Without reply_type the reply is bytes on both paths.
        local_bytes = await host.actors.request("cart-1", "add", AddItem("fig", 1))
        remote_bytes = await other.actors.request("cart-1", "add", AddItem("fig", 1))
        assert type(local_bytes) is bytes and type(remote_bytes) is bytes

        # Typed sends, local and remote, in order.
        await host.actors.send("cart-1", "note", Note("local"))
        await other.actors.send("cart-1", "note", Note("remote"))
        await other.actors.request("cart-1", "count")  # after both sends (queue order)
        notes = [payload for packet, payload in calls if packet == "note"]
        assert notes == [Note("local"), Note("remote")]
        assert all(type(n) is Note for n in notes)


async def test_local_bytes_reply_equals_remote_bytes_reply(
    clock: object, store: CountingStore
) -> None:
    """Local and remote callers that state no reply type get identical bytes for the same
    typed reply (the local object is encoded for a bytes caller)."""
    calls: list[tuple[str, object]] = []
    apps = [cart_app(calls), cart_app(calls)]
    async with open_cluster(2, store=store, app=lambda i: apps[i]) as cluster:
        await cluster.wait_all_admitted()
        created = await cluster.servers[0].actors.create("cart-a", "cart").timeout(10)
        created_b = await cluster.servers[0].actors.create("cart-b", "cart").timeout(10)
        assert isinstance(created, Created) and isinstance(created_b, Created)
        host_a, _ = _host(cluster, created)
        _, other_b = _host(cluster, created_b)
        local = await host_a.actors.request("cart-a", "add", AddItem("x", 4))
        remote = await other_b.actors.request("cart-b", "add", AddItem("x", 4))
        assert type(local) is bytes and local == remote


async def test_undecodable_payloads_never_reach_the_handler(
    clock: object, store: CountingStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Raw bytes, malformed CBOR, CBOR of another type and a missing field end a request
    to a typed handler with InvalidOperation, locally and remotely; a send of them is
    dropped, logged and counted; the handler never runs."""
    calls: list[tuple[str, object]] = []
    app = cart_app(calls)
    async with open_cluster(2, store=store, app=app) as cluster:
        await cluster.wait_all_admitted()
        created = await cluster.servers[0].actors.create("cart-2", "cart").timeout(10)
        assert isinstance(created, Created)
        host, other = _host(cluster, created)
        # What typed payloads travel as, as a bytes handler ("echo") receives them.
        note_bytes = await _as_bytes(host, Note("hi"))
        add_bytes = await _as_bytes(host, AddItem("a", 1))
        bad = [
            b"plain bytes",
            b"",
            b"\x82\x63ab",  # malformed CBOR: truncated text
            add_bytes[:-1],  # truncated typed payload
            add_bytes + b"\x00",  # trailing byte
            note_bytes,  # a Note, not an AddItem
            add_bytes.replace(b"qty", b"qtx"),  # unknown field, required one missing
        ]
        calls.clear()
        failed_before = _failed(host)
        for caller in (host, other):
            for payload in bad:
                with pytest.raises(InvalidOperation):
                    await caller.actors.request("cart-2", "add", payload).reply_type(CartTotal)
        caplog.set_level(logging.INFO, logger="zlink_trio.actors")
        caplog.clear()
        for caller in (host, other):
            for payload in (b"plain bytes", add_bytes):  # an AddItem is no Note
                await caller.actors.send("cart-2", "note", payload)
        await other.actors.request("cart-2", "count")  # queued after the sends
        assert calls == [("count", b"")]  # no typed handler ran
        assert _failed(host) - failed_before == 2 * len(bad) + 4
        dropped = [r for r in caplog.records if "'note'" in r.getMessage()]
        assert len(dropped) == 4
        assert all(r.exc_info is None and "InvalidOperation" in r.getMessage() for r in dropped)


async def _as_bytes(server: Any, value: object) -> bytes:
    """The bytes ``value`` travels as: a bytes handler of a helper Actor echoes them."""
    await server.actors.get_or_create("echo-bytes", "echo").timeout(10)
    reply = await server.actors.request("echo-bytes", "echo", value)
    assert type(reply) is bytes
    return reply


async def test_reply_of_the_wrong_type_is_a_typed_error(
    clock: object, store: CountingStore
) -> None:
    """A handler returning another class than it declared: ApplicationError; a caller
    stating another reply class than the handler's: InvalidOperation. Local and remote."""
    calls: list[tuple[str, object]] = []
    app = cart_app(calls)
    async with open_cluster(2, store=store, app=app) as cluster:
        await cluster.wait_all_admitted()
        created = await cluster.servers[0].actors.create("cart-3", "cart").timeout(10)
        assert isinstance(created, Created)
        for caller in _host(cluster, created):
            with pytest.raises(ApplicationError, match="returned Note, not CartTotal"):
                await caller.actors.request("cart-3", "wrong", AddItem("a", 1)).reply_type(
                    CartTotal
                )
            with pytest.raises(InvalidOperation, match="'CartTotal', not a 'Note'"):
                await caller.actors.request("cart-3", "add", AddItem("a", 1)).reply_type(Note)
            with pytest.raises(InvalidOperation, match="not a registered payload class"):
                caller.actors.request("cart-3", "add", AddItem("a", 1)).reply_type(Unregistered)
        assert [packet for packet, _ in calls] == ["wrong", "add", "wrong", "add"]


async def test_unencodable_payload_fails_at_the_caller(clock: object, store: CountingStore) -> None:
    """A payload whose value does not fit its declared field types, or of an unregistered
    class, is InvalidOperation at the caller before anything is sent (local and remote);
    a typed payload that encodes over the request limit fails the remote call the same."""
    calls: list[tuple[str, object]] = []
    app = cart_app(calls)
    async with open_cluster(
        2,
        store=store,
        app=app,
        config=zlink_trio.ServerConfig(max_request_bytes=256),
    ) as cluster:
        await cluster.wait_all_admitted()
        created = await cluster.servers[0].actors.create("cart-4", "cart").timeout(10)
        assert isinstance(created, Created)
        host, other = _host(cluster, created)
        for caller in (host, other):
            with pytest.raises(InvalidOperation, match=r"qty: expected int, got str"):
                caller.actors.request("cart-4", "add", AddItem("a", "1"))
            with pytest.raises(InvalidOperation, match="registered payload class"):
                caller.actors.send("cart-4", "note", Unregistered(1))
            with pytest.raises(InvalidOperation, match="registered payload class"):
                caller.actors.send("cart-4", "note", "text")
        with pytest.raises(InvalidOperation, match="encodes to"):
            await other.actors.request("cart-4", "add", AddItem("a" * 300, 1))
        assert calls == []


async def test_missing_codec_fails_startup(clock: object) -> None:
    """A handler annotated with an attrs class that has no codec, or with a type that is
    neither bytes nor a registered class, fails startup with ConfigurationError."""
    app = cart_app([], register=(CartTotal, Note, Line))  # AddItem missing
    with pytest.raises(ConfigurationError, match="AddItem has no payload codec"):
        async with open_cluster(1, app=app):
            pytest.fail("startup must fail")

    class Bad:
        def __init__(self, context: Any) -> None:
            self.context = context

        @on_request("n")
        async def n(self, payload: int) -> bytes:
            return b""

    app = App()
    app.enable_actor_dispatch()
    app.register_actor("bad", Bad, relocation=RecreateOnRelocation())
    with pytest.raises(ConfigurationError, match="neither bytes nor a registered payload"):
        async with open_cluster(1, app=app):
            pytest.fail("startup must fail")


async def test_duplicate_or_unusable_codec_fails_startup(clock: object) -> None:
    """The same class registered twice, two classes under one type name, a class that is
    not frozen attrs, or a field type no codec carries: ConfigurationError at startup."""

    @attrs.define
    class Mutable:
        x: int

    @attrs.frozen
    class HasSet:
        x: set[int]

    cases: list[tuple[list[tuple[type, str | None]], str]] = [
        ([(Note, None), (Note, None)], "registered twice"),
        ([(Note, "n"), (Line, "n")], "type name 'n' used by both"),
        ([(Mutable, None)], "not a frozen attrs class"),
        ([(HasSet, None)], "unsupported payload field type"),
    ]
    for registrations, message in cases:
        app = App()
        app.enable_actor_dispatch()
        for cls, name in registrations:
            app.register_codec(cls, name=name)
        with pytest.raises(ConfigurationError, match=message):
            async with open_cluster(1, app=app):
                pytest.fail("startup must fail")


async def test_expected_handler_errors_are_one_line_unexpected_once_with_traceback(
    clock: object, store: CountingStore, caplog: pytest.LogCaptureFixture
) -> None:
    """At the owner, an error a handler raises on purpose (a ZLinkError) is one log line
    without a traceback per request; an unexpected exception is logged with its traceback
    once per handler, then one line each. The caller gets the typed error every time."""
    calls: list[tuple[str, object]] = []
    app = cart_app(calls)
    caplog.set_level(logging.INFO, logger="zlink_trio.actors")
    async with open_cluster(2, store=store, app=app) as cluster:
        await cluster.wait_all_admitted()
        created = await cluster.servers[0].actors.create("cart-5", "cart").timeout(10)
        assert isinstance(created, Created)
        host, other = _host(cluster, created)
        caplog.clear()
        for caller in (host, other, host):
            with pytest.raises(InvalidOperation, match="out of stock: a"):
                await caller.actors.request("cart-5", "refuse", AddItem("a", 1))
            with pytest.raises(ApplicationError, match="RuntimeError: boom"):
                await caller.actors.request("cart-5", "crash", AddItem("a", 1))
    refused = [r for r in caplog.records if "'refuse'" in r.getMessage()]
    crashed = [r for r in caplog.records if "'crash'" in r.getMessage()]
    assert len(refused) == 3 and all(r.exc_info is None for r in refused)
    assert all("out of stock" in r.getMessage() for r in refused)
    assert len(crashed) == 3
    assert [r.exc_info is not None for r in crashed] == [True, False, False]


def _api_md_example() -> dict[str, Any]:
    """The "Typed payloads" example of docs/api.md, executed."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "api.md").read_text()
    section = text[text.index("### Typed payloads") :]
    code = section.split("```python", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {"__name__": "api_md_typed_payloads"}
    exec(compile(code, "docs/api.md", "exec"), namespace)
    return namespace


async def test_the_api_md_example_runs_across_two_nodes(clock: object) -> None:
    """The documented example, as written, on a two-node cluster: the commented caller
    lines hold, local and remote."""
    example = _api_md_example()
    add_item, cart_total, note = example["AddItem"], example["CartTotal"], example["Note"]
    async with open_cluster(2, app=example["app"]) as cluster:
        await cluster.wait_all_admitted()
        await cluster.servers[0].actors.create("cart-1", "cart").timeout(10)
        for qty, server in enumerate(cluster.servers, start=1):
            total = await server.actors.request("cart-1", "add", add_item("x", qty)).reply_type(
                cart_total
            )
            assert isinstance(total, cart_total)
            await server.actors.send("cart-1", "note", note("gift wrap"))
        assert total == cart_total(3)
