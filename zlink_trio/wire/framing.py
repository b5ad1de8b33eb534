"""Frames: a 4-byte big-endian body length, then the CBOR body (docs/wire.md).

:class:`FrameDecoder` is the incremental, I/O-free splitter a transport feeds with whatever
the socket returned. It rejects a declared length above its limit as soon as the 4 header
bytes are in, before buffering any of that body, and never holds more than one partial
frame (at most ``4 + max_frame_bytes`` bytes).
"""

from __future__ import annotations

from typing import Final

from ..errors import ProtocolError
from .base import WireRecord
from .codec import decode, encode
from .records import Record

__all__ = ["HEADER_BYTES", "MAX_FRAME_LIMIT", "FrameDecoder", "encode_frame", "frame"]

HEADER_BYTES: Final = 4
MAX_FRAME_LIMIT: Final = (1 << 32) - 1
"""Largest body a 4-byte length can declare."""


def frame(body: bytes, *, max_frame_bytes: int = MAX_FRAME_LIMIT) -> bytes:
    """``body`` with its length prefix.

    Raises:
        ProtocolError: the body is empty or longer than ``max_frame_bytes``.
    """
    size = len(body)
    if not 0 < size <= max_frame_bytes:
        raise ProtocolError(f"frame body of {size} bytes (limit 1..{max_frame_bytes})")
    return size.to_bytes(HEADER_BYTES, "big") + body


def encode_frame(record: WireRecord, *, max_frame_bytes: int = MAX_FRAME_LIMIT) -> bytes:
    """Encode ``record`` and prefix its length (ProtocolError as :func:`encode`, or when
    the body exceeds ``max_frame_bytes``)."""
    return frame(encode(record), max_frame_bytes=max_frame_bytes)


def _check_limit(value: int) -> int:
    if type(value) is not int or not 0 < value <= MAX_FRAME_LIMIT:
        raise ValueError(f"max_frame_bytes must be an int in 1..{MAX_FRAME_LIMIT}")
    return value


class FrameDecoder:
    """Split a byte stream into frame bodies.

    ``max_frame_bytes`` may be changed between feeds (e.g. a small limit until the peer's
    hello is verified, then ``ServerConfig.max_frame_bytes``). After a framing error the
    decoder stays failed: the stream has lost its frame boundaries.
    """

    __slots__ = ("_buffer", "_failed", "_max", "_need")

    def __init__(self, max_frame_bytes: int) -> None:
        self._max = _check_limit(max_frame_bytes)
        self._buffer = bytearray()
        self._need: int | None = None  # body length of the frame in progress
        self._failed = False

    @property
    def max_frame_bytes(self) -> int:
        return self._max

    @max_frame_bytes.setter
    def max_frame_bytes(self, value: int) -> None:
        self._max = _check_limit(value)

    @property
    def buffered(self) -> int:
        """Bytes held for the frame in progress (header or body)."""
        return len(self._buffer)

    @property
    def at_boundary(self) -> bool:
        """True when no partial frame is held (a clean place for the stream to end)."""
        return self._need is None and not self._buffer

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add ``data``; return the bodies of the frames it completed, in order.

        Raises:
            ProtocolError: a header declares 0 bytes or more than ``max_frame_bytes``
                (raised before any of that body is buffered), or the decoder failed before.
        """
        if self._failed:
            raise ProtocolError("frame stream already failed")
        bodies: list[bytes] = []
        view = memoryview(data).cast("B")
        buffer = self._buffer
        while view:
            need = self._need
            if need is None:
                take = HEADER_BYTES - len(buffer)
                if not buffer and len(view) >= HEADER_BYTES:
                    need = int.from_bytes(view[:HEADER_BYTES], "big")
                    view = view[HEADER_BYTES:]
                else:
                    buffer += view[:take]
                    view = view[take:]
                    if len(buffer) < HEADER_BYTES:
                        break
                    need = int.from_bytes(buffer, "big")
                    buffer.clear()
                if not 0 < need <= self._max:
                    self._failed = True
                    raise ProtocolError(
                        f"frame declares {need} bytes (limit 1..{self._max}); stream dropped"
                    )
                self._need = need
            if not buffer and len(view) >= need:
                bodies.append(bytes(view[:need]))
                view = view[need:]
                self._need = None
                continue
            take = need - len(buffer)
            buffer += view[:take]
            view = view[take:]
            if len(buffer) == need:
                bodies.append(bytes(buffer))
                buffer.clear()
                self._need = None
        return bodies

    def feed_records(self, data: bytes | bytearray | memoryview) -> list[Record]:
        """:meth:`feed`, then :func:`decode` every body. A bad body raises ProtocolError
        and the records of this call are lost; a transport that wants to count and skip
        one bad record uses ``feed`` and ``decode`` itself."""
        return [decode(body) for body in self.feed(data)]

    def check_eof(self) -> None:
        """Call when the stream ended: ProtocolError if it stopped inside a frame."""
        if not self.at_boundary:
            raise ProtocolError(f"stream ended inside a frame ({self.buffered} bytes held)")
