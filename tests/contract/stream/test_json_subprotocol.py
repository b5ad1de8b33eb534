"""The JSON subprotocol of the STREAM server (docs/stream-protocol.md, "Subprotocols"):
negotiated by websocket subprotocol, the same frames as CBOR as JSON text arrays (byte
fields base64). Two nodes (the Actor on the other node than the session), a real websocket
client speaking JSON, and a bare websocket for the literal bytes on the wire."""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio
from stream_kit import Record, bind, create, relay, stream_cluster

from zlink_trio.client import open_stream_client
from zlink_trio.wire.stream import Bound, Push


@asynccontextmanager
async def raw_ws(url: str, subprotocols: list[str] | None) -> AsyncIterator[Any]:
    from trio_websocket import wrap_client_stream

    parsed = urllib.parse.urlsplit(url)
    assert parsed.hostname is not None and parsed.port is not None
    async with trio.open_nursery() as nursery:
        stream = await trio.open_tcp_stream(parsed.hostname, parsed.port)
        try:
            yield await wrap_client_stream(
                nursery, stream, parsed.hostname, "/", subprotocols=subprotocols
            )
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()
            nursery.cancel_scope.cancel()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_a_json_client_binds_relays_and_receives_pushes(clock: object, store: object) -> None:
    rec = Record()
    async with stream_cluster(2, rec, store=store, hosts=lambda i: i == 1) as cluster:  # type: ignore[arg-type]
        session_node = cluster.servers[0]
        await create(session_node, rec, "a")
        async with open_stream_client(session_node.stream.url, b"user", codec="json") as client:
            assert client.codec.name == "json"
            await bind(client, "a")
            assert isinstance(await client.receive(), Bound)
            data = "h\u00e9llo \u2713\x00".encode()
            assert await relay(client, "a", "echo", data) == data
            assert await relay(client, "a", "push_req", b"p1") == b"pushed"
            push = await client.receive()
            assert isinstance(push, Push) and push.payload == b"p1"
            await client.ping()
        assert [h[0] for h in rec.handled_by("a")] == [1, 1]  # ran on the other node


async def test_the_wire_is_json_text_arrays(clock: object, store: object) -> None:
    rec = Record()
    async with stream_cluster(2, rec, store=store) as cluster:  # type: ignore[arg-type]
        url = cluster.servers[0].stream.url
        async with raw_ws(url, ["zlink.v1.json"]) as ws:
            assert ws.subprotocol == "zlink.v1.json"
            await ws.send_message(json.dumps([1, 1, b64(b"user")]))
            welcome = await ws.get_message()
            assert type(welcome) is str
            kind, connection_id, version = json.loads(welcome)
            assert (kind, version) == (10, 1) and len(base64.b64decode(connection_id)) == 16
            await ws.send_message(json.dumps([3, 7, "local", b64(b"hi"), None]))
            assert json.loads(await ws.get_message()) == [11, 7, b64(b"local:hi")]
            await ws.send_message(json.dumps([4, 99]))
            assert json.loads(await ws.get_message()) == [14, 99]
        # no subprotocol offered: CBOR, the default (binary frames), as before
        async with raw_ws(url, None) as ws:
            assert ws.subprotocol is None
            await ws.send_message(json.dumps([1, 1, b64(b"user")]))
            error = await ws.get_message()
            assert type(error) is bytes  # a text frame on a CBOR connection: refused


async def test_bad_json_frames_are_protocol_errors(clock: object, store: object) -> None:
    rec = Record()
    async with stream_cluster(2, rec, store=store) as cluster:  # type: ignore[arg-type]
        url = cluster.servers[0].stream.url
        for bad in (
            '{"kind": 1}',  # an object
            '[1, 1.0, "dXNlcg=="]',  # a float
            '[1, 1, "not base64!"]',
            "[1, 1]",  # a missing field
            '[1, 1, "dXNlcg=="] trailing',
            b"\x83\x01\x01\x40",  # a binary (CBOR) message on a JSON connection
        ):
            async with raw_ws(url, ["zlink.v1.json"]) as ws:
                await ws.send_message(bad)
                kind, correlation, error_kind, _message = json.loads(await ws.get_message())
                assert (kind, correlation, error_kind) == (12, 0, 11), bad  # Protocol
                closing = json.loads(await ws.get_message())
                assert closing[0] == 17 and closing[1] == 4, bad  # PROTOCOL_ERROR
