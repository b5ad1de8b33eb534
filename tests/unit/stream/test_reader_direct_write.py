"""The reader's direct write runs in the reader's own cancel scope (stream/reader.py,
``StreamReader.write_here``): a stop of the reader during the write is deferred to its
end (a frame is never cut), ``Outbound.abort`` still cancels it."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from zlink_trio.stream.outbound import Outbound
from zlink_trio.stream.reader import StreamReader


class _Conn:
    def __init__(self) -> None:
        self.outbound = Outbound(16)
        self.released: list[StreamReader] = []

    def reader_released(self, reader: StreamReader) -> None:
        self.released.append(reader)


class _Sink:
    """A send passes schedule points; ``during(message)`` runs between them (what another
    task could do meanwhile); ``gate``: the send waits for it (a slow client)."""

    def __init__(self) -> None:
        self.sent: list[bytes | str] = []
        self.during: Any = None
        self.gate: trio.Event | None = None

    async def send_message(self, message: bytes | str) -> None:
        await trio.lowlevel.checkpoint()
        if self.during is not None:
            self.during(message)
        if self.gate is not None:
            await self.gate.wait()
        await trio.lowlevel.checkpoint()  # raises Cancelled if the stop cut the write
        self.sent.append(message)


def _reader() -> tuple[_Conn, StreamReader]:
    conn = _Conn()
    return conn, StreamReader(conn)  # type: ignore[arg-type]


async def test_a_stop_during_the_direct_write_takes_effect_after_it() -> None:
    conn, reader = _reader()
    out = conn.outbound
    sink = _Sink()
    sink.during = lambda message: reader.stop()  # the connection closes mid-frame
    cancelled_while_writing: list[bool] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(out.run, sink, name="writer")
        await trio.testing.wait_all_tasks_blocked()  # the writer parked
        with reader.scope:
            out.cork()
            out.put(b"a")
            out.put(b"b")
            assert out.writable_here
            await reader.write_here(sink)  # type: ignore[arg-type]
            cancelled_while_writing.append(reader.scope.cancel_called)
            await trio.lowlevel.checkpoint()  # the deferred stop: cancelled here
            raise AssertionError("the deferred stop did not cancel the reader")
        nursery.cancel_scope.cancel()
    assert sink.sent == [b"a", b"b"]  # both frames whole, none cut
    assert cancelled_while_writing == [True] and reader.scope.cancelled_caught
    assert not reader.writing and not reader.stop_deferred


async def test_a_stop_outside_a_write_cancels_at_once_and_abort_cancels_a_write() -> None:
    conn, reader = _reader()
    reader.stop()
    assert reader.scope.cancel_called  # not writing, not in a turn: at once

    conn, reader = _reader()
    out = conn.outbound
    sink = _Sink()
    sink.gate = trio.Event()  # the send waits for the socket
    async with trio.open_nursery() as nursery:
        nursery.start_soon(out.run, sink, name="writer")
        await trio.testing.wait_all_tasks_blocked()

        async def write() -> None:
            with reader.scope:
                out.cork()
                out.put(b"a")
                await reader.write_here(sink)  # type: ignore[arg-type]

        nursery.start_soon(write)
        await trio.testing.wait_all_tasks_blocked()
        assert conn.released == [reader]  # the send waited: the reading was handed over
        out.abort()  # the connection's tasks stop
        await trio.testing.wait_all_tasks_blocked()
        assert reader.scope.cancelled_caught and sink.sent == []
        assert not reader.writing
        nursery.cancel_scope.cancel()
