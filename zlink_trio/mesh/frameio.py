"""The byte side of one peer connection: a stream, its sequenced decoder and the outbound
sequence counter, shared by the handshake and, once admitted, the connection's reader and
writer (whatever the handshake read past its last frame stays buffered here).

:class:`PeerIO` is what the transport needs; :func:`open_frame_io` picks the
implementation for a ``trio.abc.Stream``: :class:`FrameIO` for a TCP socket stream (the
fast path below), :class:`StreamFrameIO` for any other stream (``trio.SSLStream``,
``trio.testing.memory_stream_pair``), which goes through the stream's own
``receive_some``/``send_all`` and never writes directly (:meth:`StreamFrameIO.try_write`
takes nothing, so every frame goes through the connection's writer lane).

:class:`FrameIO`'s socket is a plain ``socket.socket`` detached from the trio stream that connected
it, driven with ``trio.lowlevel.wait_readable`` / ``wait_writable``: a read or write that
the kernel completes at once costs one system call and no trip through the scheduler
(trio's socket wrapper yields after every successful call). Fairness is kept explicitly:
the reader checkpoints after :data:`YIELD_EVERY` reads in a row that did not wait, and
every write path above this class yields or parks right after writing.

:attr:`FrameIO.peer_in_this_process` tells whether the socket's other end is a socket of
this same process (both nodes in one ``trio.run``: tests, benchmarks, a demo in one
process), from the local addresses of the process's open peer sockets (an accepted socket
shares its listener's address): the connection does not self-drain there, since a peer that
shares this thread cannot work on the first frames while this side produces the rest.
"""

from __future__ import annotations

import contextlib
import socket
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol, final

import trio

from ..errors import ProtocolError
from ..wire import HELLO_MAX_FRAME_BYTES, Record, WireRecord, decode, encode
from .frames import SequencedDecoder, pack_frame

__all__ = [
    "HANDSHAKE_MAX_BODY",
    "RECEIVE_BYTES",
    "YIELD_EVERY",
    "FrameIO",
    "PeerClosed",
    "PeerIO",
    "StreamFrameIO",
    "close_io",
    "open_frame_io",
]

HANDSHAKE_MAX_BODY: Final = HELLO_MAX_FRAME_BYTES
"""Largest record body accepted before the peer is admitted (the wire's hello bound)."""
RECEIVE_BYTES: Final = 256 * 1024
YIELD_EVERY: Final = 16
"""Reads in a row that found data at once before the reader checkpoints anyway."""


_OWN_ADDRESSES: Final[Counter[Any]] = Counter()
"""The local addresses of this process's open :class:`FrameIO` sockets, with how many
sockets have each (accepted ones share their listener's)."""


class PeerClosed(Exception):
    """The stream ended (cleanly, at a frame boundary), broke, or was closed."""


class PeerIO(Protocol):
    """The framed byte side of one peer connection, as the transport uses it."""

    @property
    def decoder(self) -> SequencedDecoder: ...

    sent: int
    """Sequence number of the last frame written (or consumed by a drop)."""
    chunks: int
    """Reads that returned data (the keepalive watches it move)."""

    @property
    def closed(self) -> bool: ...

    @property
    def peer_in_this_process(self) -> bool:
        """The other end is a socket of this process (see the module)."""
        ...

    async def aclose(self) -> None:
        """Close the stream (idempotent; never raises)."""
        ...

    def take_buffered(self) -> list[bytes]: ...

    async def receive_some(self) -> list[bytes]: ...

    async def read_record(self) -> Record: ...

    def try_write(self, data: bytes | memoryview) -> int: ...

    async def write_all(self, data: bytes | memoryview) -> None: ...

    async def write_record(self, record: WireRecord) -> None: ...


def open_frame_io(stream: trio.abc.Stream) -> PeerIO:
    """The frame layer for a freshly connected or accepted stream (see the module)."""
    if type(stream) is trio.SocketStream:
        return FrameIO.from_stream(stream)
    return StreamFrameIO(stream)


async def close_io(io: PeerIO) -> None:
    """Close ``io`` even in a cancelled scope (for ``finally`` blocks)."""
    with trio.CancelScope(shield=True):
        await io.aclose()


def _take_buffered(decoder: SequencedDecoder, bodies: deque[bytes]) -> list[bytes]:
    if decoder.buffered and decoder.failure is None:
        with contextlib.suppress(ProtocolError):
            bodies.extend(decoder.feed(b""))
    taken = list(bodies)
    bodies.clear()
    return taken


@final
class FrameIO:
    __slots__ = (
        "_bodies",
        "_drained",
        "_name",
        "_streak",
        "chunks",
        "closed",
        "decoder",
        "sent",
        "sock",
    )

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
        self._drained = False
        """The last read took less than it asked for: the socket was empty then."""
        self._bodies: deque[bytes] = deque()
        try:
            self._name: Any = sock.getsockname()
        except OSError:
            self._name = None
        else:
            _OWN_ADDRESSES[self._name] += 1

    @property
    def peer_in_this_process(self) -> bool:
        try:
            return self.sock.getpeername() in _OWN_ADDRESSES
        except OSError:
            return False

    @classmethod
    def from_stream(cls, stream: trio.SocketStream) -> FrameIO:
        """Take over the socket of a freshly connected or accepted trio stream."""
        return cls(socket.socket(fileno=stream.socket.detach()))

    def close(self) -> None:
        """Close the socket (idempotent); tasks waiting on it get PeerClosed."""
        if not self.closed:
            self.closed = True
            name = self._name
            if name is not None:
                left = _OWN_ADDRESSES[name] - 1
                if left:
                    _OWN_ADDRESSES[name] = left
                else:
                    del _OWN_ADDRESSES[name]
            trio.lowlevel.notify_closing(self.sock)
            self.sock.close()

    async def aclose(self) -> None:
        self.close()

    # --- reading -------------------------------------------------------------------------
    def take_buffered(self) -> list[bytes]:
        """Bodies decoded but not yet consumed (the reader handles them first), with
        those complete in the decoder's buffer that a bound raised since admits (a
        protocol error found there stays in ``decoder.failure``: the next read raises it)."""
        return _take_buffered(self.decoder, self._bodies)

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
        if self._drained:
            # The last read emptied the socket: wait for data before reading again, rather
            # than make a read that comes back empty (EAGAIN) first.
            self._streak = 0
            await self._wait(trio.lowlevel.wait_readable)
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
        self._drained = len(data) < RECEIVE_BYTES
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


@final
class StreamFrameIO:
    """:class:`PeerIO` over any ``trio.abc.Stream`` (see the module docstring)."""

    __slots__ = ("_bodies", "_closed", "chunks", "decoder", "sent", "stream")

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream: Final = stream
        self.decoder: Final = SequencedDecoder(HANDSHAKE_MAX_BODY)
        self.sent = 0
        self.chunks = 0
        self._closed = False
        self._bodies: deque[bytes] = deque()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def peer_in_this_process(self) -> bool:
        """Not known (any stream); it never matters: such a connection does not
        self-drain (:meth:`try_write` takes nothing)."""
        return False

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await trio.aclose_forcefully(self.stream)

    def take_buffered(self) -> list[bytes]:
        return _take_buffered(self.decoder, self._bodies)

    async def receive_some(self) -> list[bytes]:
        """As :meth:`FrameIO.receive_some`."""
        failure = self.decoder.failure
        if failure is not None:
            raise failure
        if self._closed:
            raise PeerClosed("closed")
        try:
            data = await self.stream.receive_some(RECEIVE_BYTES)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise PeerClosed(str(exc) or "closed") from None
        if not data:
            self.decoder.check_eof()
            raise PeerClosed("end of stream")
        self.chunks += 1
        return self.decoder.feed(data)

    async def read_record(self) -> Record:
        while not self._bodies:
            self._bodies.extend(await self.receive_some())
        return decode(self._bodies.popleft())

    def try_write(self, data: bytes | memoryview) -> int:
        """Takes nothing (a stream has no non-blocking write): the frame goes to the
        writer lane. PeerClosed if closed."""
        if self._closed:
            raise PeerClosed("closed")
        return 0

    async def write_all(self, data: bytes | memoryview) -> None:
        if self._closed:
            raise PeerClosed("closed")
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise PeerClosed(str(exc) or "closed") from None

    async def write_record(self, record: WireRecord) -> None:
        self.sent += 1
        await self.write_all(pack_frame(self.sent, encode(record)))
