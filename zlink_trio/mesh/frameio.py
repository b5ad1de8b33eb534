"""The byte side of one peer connection: a non-blocking socket, its sequenced decoder and
the outbound sequence counter, shared by the handshake and, once admitted, the
connection's reader and writer (whatever the handshake read past its last frame stays
buffered here).

The socket is a plain ``socket.socket`` detached from the trio stream that connected
it, driven with ``trio.lowlevel.wait_readable`` / ``wait_writable``: a read or write that
the kernel completes at once costs one system call and no trip through the scheduler
(trio's socket wrapper yields after every successful call). Fairness is kept explicitly:
the reader checkpoints after :data:`YIELD_EVERY` reads in a row that did not wait, and
every write path above this class yields or parks right after writing.
"""

from __future__ import annotations

import contextlib
import socket
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final, final

import trio

from ..errors import ProtocolError
from ..wire import HELLO_MAX_FRAME_BYTES, Record, WireRecord, decode, encode
from .frames import SequencedDecoder, pack_frame

__all__ = ["HANDSHAKE_MAX_BODY", "RECEIVE_BYTES", "YIELD_EVERY", "FrameIO", "PeerClosed"]

HANDSHAKE_MAX_BODY: Final = HELLO_MAX_FRAME_BYTES
"""Largest record body accepted before the peer is admitted (the wire's hello bound)."""
RECEIVE_BYTES: Final = 256 * 1024
YIELD_EVERY: Final = 16
"""Reads in a row that found data at once before the reader checkpoints anyway."""


class PeerClosed(Exception):
    """The stream ended (cleanly, at a frame boundary), broke, or was closed."""


@final
class FrameIO:
    __slots__ = ("_bodies", "_streak", "chunks", "closed", "decoder", "sent", "sock")

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock: Final = sock
        self.decoder: Final = SequencedDecoder(HANDSHAKE_MAX_BODY)
        self.sent = 0
        """Sequence number of the last frame written (or consumed by a drop)."""
        self.chunks = 0
        """Reads that returned data (the keepalive watches it move)."""
        self.closed = False
        self._streak = 0
        self._bodies: deque[bytes] = deque()

    @classmethod
    def from_stream(cls, stream: trio.SocketStream) -> FrameIO:
        """Take over the socket of a freshly connected or accepted trio stream."""
        return cls(socket.socket(fileno=stream.socket.detach()))

    def close(self) -> None:
        """Close the socket (idempotent); tasks waiting on it get PeerClosed."""
        if not self.closed:
            self.closed = True
            trio.lowlevel.notify_closing(self.sock)
            self.sock.close()

    # --- reading -------------------------------------------------------------------------
    def take_buffered(self) -> list[bytes]:
        """Bodies decoded but not yet consumed (the reader handles them first), with
        those complete in the decoder's buffer that a bound raised since admits (a
        protocol error found there stays in ``decoder.failure``: the next read raises it)."""
        decoder = self.decoder
        if decoder.buffered and decoder.failure is None:
            with contextlib.suppress(ProtocolError):
                self._bodies.extend(decoder.feed(b""))
        bodies = list(self._bodies)
        self._bodies.clear()
        return bodies

    async def receive_some(self) -> list[bytes]:
        """Read once (waiting for data if there is none); return the bodies completed.

        Raises:
            PeerClosed: end of stream at a frame boundary, a broken or closed socket.
            ProtocolError: framing or sequence error, or end of stream inside a frame.
        """
        failure = self.decoder.failure
        if failure is not None:
            raise failure
        sock = self.sock
        while True:
            try:
                data = sock.recv(RECEIVE_BYTES)
            except BlockingIOError:
                self._streak = 0
                await self._wait(trio.lowlevel.wait_readable)
                continue
            except OSError as exc:
                raise PeerClosed(str(exc)) from None
            break
        if not data:
            self.decoder.check_eof()
            raise PeerClosed("end of stream")
        self.chunks += 1
        self._streak += 1
        if self._streak >= YIELD_EVERY:
            self._streak = 0
            await trio.lowlevel.checkpoint()
        return self.decoder.feed(data)

    async def read_record(self) -> Record:
        """The next record (handshake use). Raises as :meth:`receive_some` and
        ProtocolError for an undecodable body."""
        while not self._bodies:
            self._bodies.extend(await self.receive_some())
        return decode(self._bodies.popleft())

    # --- writing -------------------------------------------------------------------------
    def try_write(self, data: bytes | memoryview) -> int:
        """Write what the kernel takes now, without waiting; 0 if it takes nothing.

        Raises:
            PeerClosed: the socket is broken or closed.
        """
        if self.closed:
            raise PeerClosed("closed")
        try:
            return self.sock.send(data)
        except BlockingIOError:
            return 0
        except OSError as exc:
            raise PeerClosed(str(exc)) from None

    async def write_all(self, data: bytes | memoryview) -> None:
        """Write everything, waiting for room as needed (cancellable while waiting:
        cancelling a partial write leaves the stream unusable; callers close it)."""
        view = memoryview(data)
        while view:
            written = self.try_write(view)
            if written:
                view = view[written:]
            else:
                await self._wait(trio.lowlevel.wait_writable)

    async def write_record(self, record: WireRecord) -> None:
        """Write one record now (handshake use, before the writer lane exists)."""
        self.sent += 1
        await self.write_all(pack_frame(self.sent, encode(record)))

    async def _wait(self, wait: Callable[[socket.socket], Awaitable[None]]) -> None:
        try:
            await wait(self.sock)
        except (trio.ClosedResourceError, trio.BusyResourceError, OSError) as exc:
            raise PeerClosed(str(exc) or "closed") from None
