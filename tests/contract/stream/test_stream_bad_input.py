"""Bad client input (issue 13, "Done means"): garbage, oversized and unknown frames, frames
in the wrong order or after the close, unknown packet names, a client that never reads.
Each gets a typed error frame or a clean close — never a crash of the server and never a
stall of another session (a second, well-behaved client keeps being served throughout)."""

from __future__ import annotations

import attrs
import cbor2
import pytest
import trio
from stream_kit import Record, connect, raw_websocket, stream_app, stream_config
from trio_websocket import ConnectionClosed

from zlink_trio import open_server
from zlink_trio.client import ConnectionLost
from zlink_trio.errors import ErrorKind
from zlink_trio.testing import FlowEvent, flow_count
from zlink_trio.wire.stream import (
    ErrorFrame,
    Hello,
    Ping,
    Pong,
    Request,
    Send,
    decode_server_frame,
    encode_frame,
)

HELLO = encode_frame(Hello(version=1, credentials=b"raw"))


async def _frames_until_close(ws: object) -> tuple[list[object], int | None]:
    frames: list[object] = []
    try:
        while True:
            frames.append(decode_server_frame(await ws.get_message()))  # type: ignore[attr-defined]
    except ConnectionClosed as exc:
        return frames, None if exc.reason is None else exc.reason.code


async def _raw_exchange(url: str, *messages: bytes | str) -> tuple[list[object], int | None]:
    """Open a raw websocket, send ``messages``, and collect what comes back until the
    server closes."""
    async with raw_websocket(url) as ws:
        for message in messages:
            await ws.send_message(message)
        with trio.fail_after(30):
            return await _frames_until_close(ws)


BAD_FRAMES = {
    "not cbor": b"\xff\xfe\x00garbage",
    "empty": b"",
    "a map": cbor2.dumps({"kind": 2}),
    "unknown kind": cbor2.dumps([99, "x"]),
    "a server kind": encode_frame(Pong(nonce=1)),
    "missing field": cbor2.dumps([2, "local"]),
    "wrong type": cbor2.dumps([2, b"local", b""]),
    "trailing bytes": encode_frame(Send(packet="local", payload=b"")) + b"\x00",
    "a tag": cbor2.dumps(cbor2.CBORTag(1, 0)),
    "a float": cbor2.dumps([4, 1.5]),
    "packet name too long": cbor2.dumps([2, "p" * 256, b""]),
    "payload over 1 MiB": cbor2.dumps([2, "local", b"x" * (1024 * 1024 + 1)]),
    "zero correlation": cbor2.dumps([3, 0, "local", b"", None]),
}


@pytest.mark.parametrize("name", list(BAD_FRAMES))
async def test_a_malformed_frame_gets_a_protocol_error_and_a_clean_close(
    autojump_clock: object, name: str
) -> None:
    """A frame that is not exactly one valid client frame (garbage, a map, an unknown or a
    server-only kind, a missing field, a wrong type, trailing bytes, a tag, a float, an
    oversized field, a zero correlation) after a valid Hello: one Error frame of kind
    Protocol, then the connection closes with code 1002; the event is counted; another
    session is served all along and no packet handler saw the bad frame."""
    rec = Record()
    async with (
        open_server(stream_config(0), stream_app(rec, 0)) as server,
        connect(server, "good") as good,
    ):
        before = flow_count(server, FlowEvent.SESSION_PROTOCOL_ERROR)
        frames, code = await _raw_exchange(server.stream.url, HELLO, BAD_FRAMES[name])
        errors = [f for f in frames if isinstance(f, ErrorFrame)]
        assert [e.kind for e in errors] == [ErrorKind.PROTOCOL]
        assert code == 1002
        assert flow_count(server, FlowEvent.SESSION_PROTOCOL_ERROR) == before + 1
        assert await good.request("local", b"fine") == b"local:fine"
        assert (0, "local") in rec.packets and len(rec.packets) == 1


@pytest.mark.parametrize(
    "first",
    [
        pytest.param(encode_frame(Send(packet="local", payload=b"")), id="no-hello"),
        pytest.param(encode_frame(Hello(version=9, credentials=b"x")), id="wrong-version"),
        pytest.param(b"\x00", id="garbage"),
        pytest.param("text", id="text-message"),
        pytest.param(cbor2.dumps([1, 1, b"x" * (64 * 1024 + 1)]), id="credentials-over-64-KiB"),
    ],
)
async def test_a_bad_first_frame_is_refused(autojump_clock: object, first: bytes | str) -> None:
    """Anything but a valid Hello first (no Hello, another protocol version, garbage, a
    text message, oversized credentials) is refused with a Protocol error frame and close
    code 1002, before any application callback."""
    rec = Record()
    async with open_server(stream_config(0), stream_app(rec, 0)) as server:
        frames, code = await _raw_exchange(server.stream.url, first)
        assert [f.kind for f in frames if isinstance(f, ErrorFrame)] == [ErrorKind.PROTOCOL]
        assert code == 1002
        assert rec.packets == []
        async with connect(server, "good") as good:
            assert await good.request("local", b"x") == b"local:x"


async def test_text_messages_and_a_second_hello_close_the_session(autojump_clock: object) -> None:
    """A text message, or a second Hello, inside an established session is a protocol
    error: error frame, close 1002."""
    rec = Record()
    async with open_server(stream_config(0), stream_app(rec, 0)) as server:
        for bad in ("text", HELLO):
            frames, code = await _raw_exchange(server.stream.url, HELLO, bad)
            assert any(isinstance(f, ErrorFrame) and f.kind is ErrorKind.PROTOCOL for f in frames)
            assert code == 1002


async def test_an_oversized_message_closes_with_1009(autojump_clock: object) -> None:
    """A websocket message larger than StreamConfig.max_message_bytes closes the
    connection with code 1009 before anything decodes it; other sessions go on."""
    rec = Record()
    config = stream_config(0)
    async with open_server(config, stream_app(rec, 0)) as server:
        limit = config.stream.max_message_bytes  # type: ignore[union-attr]
        async with connect(server, "good") as good:
            _frames, code = await _raw_exchange(server.stream.url, HELLO, b"x" * (limit + 1))
            assert code == 1009
            assert await good.request("local", b"x") == b"local:x"


async def test_a_silent_client_is_closed_at_the_hello_timeout(autojump_clock: object) -> None:
    """A connection that never sends its Hello is closed at StreamConfig.hello_timeout
    (MockClock: exactly 10 s)."""
    rec = Record()
    async with (
        open_server(stream_config(0), stream_app(rec, 0)) as server,
        raw_websocket(server.stream.url) as ws,
    ):
        start = trio.current_time()
        _frames, code = await _frames_until_close(ws)
        assert trio.current_time() - start == pytest.approx(10.0)
        assert code == 1002


async def test_frames_after_the_close_reach_nothing(autojump_clock: object) -> None:
    """After the server closed a session (a protocol error), what the client still tries
    to send fails on its side (ConnectionLost) and runs nothing on the server."""
    rec = Record()
    async with open_server(stream_config(0), stream_app(rec, 0)) as server:
        async with connect(server, "user") as client:
            await client.send_raw(b"\xff")
            await client.wait_closed()
            with pytest.raises(ConnectionLost):
                await client.send("local", b"late")
            with pytest.raises(ConnectionLost):
                await client.request("local", b"late")
        assert rec.packets == []


async def test_a_client_that_never_reads_is_closed_without_stalling_others(
    autojump_clock: object,
) -> None:
    """A client that sends requests but never reads its answers fills its own outbound
    queue; the server closes it as a slow consumer (no frame is lost for anyone else,
    nobody waits for it): a second client's pings and requests are answered throughout."""
    rec = Record()
    config = stream_config(0, outbound_queue=8)
    big = b"y" * (512 * 1024)
    async with open_server(config, stream_app(rec, 0)) as server, connect(server, "good") as good:
        async with raw_websocket(server.stream.url, message_queue_size=1) as slow:
            await slow.send_message(HELLO)
            closed = False
            for i in range(400):
                try:
                    await slow.send_message(
                        encode_frame(Request(correlation=i + 1, packet="local", payload=big))
                    )
                except ConnectionClosed:
                    closed = True
                    break
                if i % 20 == 0:
                    with trio.fail_after(5):
                        await good.ping()
                        assert await good.request("local", b"x") == b"local:x"
                if server.stream.statistics().sessions == 1:
                    closed = True
                    break
            assert closed
        assert server.stream.statistics().sessions == 1
        assert await good.request("local", b"after") == b"local:after"


async def test_the_session_survives_a_handler_that_crashes(autojump_clock: object) -> None:
    """A packet handler that raises answers its request with an Application error (and a
    send with an error frame); the session and the server go on."""
    rec = Record()
    app = stream_app(rec, 0)

    @app.on_packet("boom")
    async def boom(packet: object, payload: bytes) -> None:
        raise RuntimeError("boom")

    async with open_server(stream_config(0), app) as server, connect(server, "user") as client:
        from zlink_trio import ApplicationError

        with pytest.raises(ApplicationError):
            await client.request("boom")
        await client.send("boom")
        event = await client.receive()
        assert isinstance(event, ErrorFrame) and event.kind is ErrorKind.APPLICATION
        await client.ping()
        assert await client.request("local", b"ok") == b"local:ok"


def test_the_bad_frames_are_really_refused_by_the_codec() -> None:
    """(Self-check of this module's inputs: none of them decodes as a client frame.)"""
    from zlink_trio import ProtocolError
    from zlink_trio.wire.stream import decode_client_frame

    for name, data in BAD_FRAMES.items():
        with pytest.raises(ProtocolError):
            decode_client_frame(data)
        assert name
    assert attrs.has(Ping)
