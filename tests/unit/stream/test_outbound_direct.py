"""The outbound queue's direct write (stream/outbound.py): a corking reader writes what was
queued itself while the writer is parked, in the writer's order, and hands the reading
over before a send that waits; the writer writes the rest."""

from __future__ import annotations

import trio
import trio.testing

from zlink_trio.stream.outbound import Outbound


class Sink:
    """Records every message; a send waits for ``gate`` while it is set up."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | str]] = []
        self.gate: trio.Event | None = None

    async def send_message(self, message: bytes | str) -> None:
        await trio.lowlevel.checkpoint()  # a schedule point: not a wait
        if self.gate is not None:
            await self.gate.wait()
        self.sent.append((trio.lowlevel.current_task().name, message))


async def test_a_corked_reader_writes_the_queue_itself_control_first() -> None:
    out = Outbound(16)
    sink = Sink()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(out.run, sink, name="writer")
        await trio.testing.wait_all_tasks_blocked()  # the writer parked
        blocked: list[str] = []

        async def reader() -> None:
            out.cork()
            out.put(b"push-1")
            out.put_control(b"pong")
            out.put(b"push-2")
            assert out.writable_here
            await out.write_here(sink, lambda: blocked.append("blocked"))

        nursery.start_soon(reader, name="reader")
        await trio.testing.wait_all_tasks_blocked()
        assert sink.sent == [("reader", b"pong"), ("reader", b"push-1"), ("reader", b"push-2")]
        assert blocked == [] and out.pending == 0
        out.put(b"later")  # uncorked: the writer writes it
        await trio.testing.wait_all_tasks_blocked()
        assert sink.sent[-1] == ("writer", b"later")
        nursery.cancel_scope.cancel()


async def test_a_send_that_waits_hands_over_and_the_writer_writes_the_rest() -> None:
    out = Outbound(16)
    sink = Sink()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(out.run, sink, name="writer")
        await trio.testing.wait_all_tasks_blocked()
        blocked: list[str] = []
        sink.gate = trio.Event()

        async def reader() -> None:
            out.cork()
            out.put(b"a")
            out.put(b"b")
            await out.write_here(sink, lambda: blocked.append("blocked"))

        nursery.start_soon(reader, name="reader")
        await trio.testing.wait_all_tasks_blocked()
        assert blocked == ["blocked"] and sink.sent == []
        out.put(b"c")  # still corked by the waiting direct write: the writer stays parked
        await trio.testing.wait_all_tasks_blocked()
        assert out.pending == 2
        sink.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert sink.sent == [("reader", b"a"), ("writer", b"b"), ("writer", b"c")]
        nursery.cancel_scope.cancel()


async def test_no_direct_write_while_the_writer_is_busy_or_another_cork_holds() -> None:
    out = Outbound(16)
    out.cork()
    out.put(b"x")
    assert not out.writable_here  # no writer parked yet
    sink = Sink()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(out.run, sink, name="writer")
        await trio.testing.wait_all_tasks_blocked()
        assert sink.sent == [("writer", b"x")]  # a writer never waits for a cork
        out.cork()  # two corks now
        out.put(b"y")
        assert not out.writable_here
        out.uncork()
        out.uncork()
        await trio.testing.wait_all_tasks_blocked()
        assert sink.sent[-1] == ("writer", b"y")
        nursery.cancel_scope.cancel()
