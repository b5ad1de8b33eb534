"""Sequenced peer frames: the wire frame of a peer connection (docs/wire.md, "Peer
connections").

A peer connection carries frames of a 4-byte big-endian length, then the body: an 8-byte
big-endian *sequence number* followed by the CBOR record body (the one framing of the
project: records are framed only here). Each direction of a connection numbers its frames 1, 2,
3, ... (the handshake included). TCP never loses, duplicates or reorders bytes, so a
sequence number that is not exactly the previous one + 1 means a frame was lost (the
fault plan's "drop" models exactly that) or injected: the receiver raises
:class:`SequenceGap` and closes the connection, which the runtime sees as a broken link
(``LinkLost`` for requests in flight, reconnect while the intent exists).

I/O-free: :func:`pack_frame` builds one frame, :class:`SequencedDecoder` splits a byte
stream into bodies, checking each length against its bound as soon as the 4 length bytes
are in (before any of that body is buffered) and each sequence number in the same pass.
"""

from __future__ import annotations

import struct
from typing import Final

from ..errors import ProtocolError

__all__ = ["SEQ_BYTES", "SequenceGap", "SequencedDecoder", "pack_frame", "pack_header"]

SEQ_BYTES: Final = 8
_HEADER: Final = struct.Struct(">IQ")
pack_header: Final = _HEADER.pack
"""``pack_header(len(body) + SEQ_BYTES, seq)``: length prefix and sequence number."""
_SEQ: Final = struct.Struct(">Q")
_LENGTH: Final = struct.Struct(">I")
MAX_BODY_LIMIT: Final = (1 << 32) - 1 - SEQ_BYTES


class SequenceGap(ProtocolError):
    """A frame's sequence number is not the previous one + 1 (a lost or injected frame)."""


class FrameTooLarge(ProtocolError):
    """A frame declares a body above the decoder's current bound."""

    def __init__(self, message: str, size: int) -> None:
        super().__init__(message)
        self.size = size


def pack_frame(seq: int, body: bytes) -> bytes:
    """One sequenced frame: length, sequence number, CBOR body."""
    return _HEADER.pack(len(body) + SEQ_BYTES, seq) + body


class SequencedDecoder:
    """Split a peer byte stream into record bodies, checking sequence numbers.

    ``max_body_bytes`` bounds the CBOR body (the sequence number is not counted); it may
    be raised after the handshake. A declared length above the bound is refused as soon
    as the 4 length bytes are in, before any of that body is buffered. After any error
    the decoder stays failed. At most one partial frame is held.
    """

    __slots__ = ("_limit", "_next", "_partial", "failure")

    def __init__(self, max_body_bytes: int) -> None:
        self._limit = _check_limit(max_body_bytes)
        self._next = 1
        self._partial = bytearray()
        self.failure: ProtocolError | None = None
        """Set instead of raised when a bad frame follows good ones in one feed: the
        caller handles the good bodies, then raises this."""

    @property
    def max_body_bytes(self) -> int:
        return self._limit

    @max_body_bytes.setter
    def max_body_bytes(self, value: int) -> None:
        self._limit = _check_limit(value)
        failure = self.failure
        if isinstance(failure, FrameTooLarge) and failure.size <= value + SEQ_BYTES:
            # Refused after good frames of the same read (e.g. the first frame after the
            # handshake's last one) under the old bound: parse it under the new one.
            self.failure = None

    @property
    def received(self) -> int:
        """Frames accepted so far."""
        return self._next - 1

    @property
    def buffered(self) -> int:
        return len(self._partial)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add ``data``; return the CBOR bodies it completed, in order, up to the first
        bad frame (which is left in :attr:`failure`; raised by the next call).

        Raises:
            SequenceGap: a frame's sequence number is not the expected one.
            ProtocolError: a length header out of bounds (no room for a body, or above
                ``max_body_bytes``).
        """
        if self.failure is not None:
            raise self.failure
        partial = self._partial
        if not partial and type(data) is bytes and len(data) > 12:
            # The commonest read: exactly one whole frame (a request or its reply),
            # nothing held from before. The same checks as the loop below, in its order.
            size, seq = _HEADER.unpack_from(data)
            if (
                len(data) == size + 4
                and SEQ_BYTES < size <= self._limit + SEQ_BYTES
                and seq == self._next
            ):
                self._next = seq + 1
                return [data[12:]]
        if partial:
            partial += data
            buf: bytes | bytearray | memoryview = partial
        else:
            buf = data
        end = len(buf)
        pos = 0
        expected = self._next
        limit = self._limit + SEQ_BYTES
        bodies: list[bytes] = []
        while end - pos >= 4:
            (size,) = _LENGTH.unpack_from(buf, pos)
            if not SEQ_BYTES < size <= limit:
                message = f"peer frame declares {size} bytes (limit {SEQ_BYTES + 1}..{limit})"
                self.failure = (
                    ProtocolError(message) if size <= SEQ_BYTES else FrameTooLarge(message, size)
                )
                break
            stop = pos + 4 + size
            if stop > end:
                break
            (seq,) = _SEQ.unpack_from(buf, pos + 4)
            if seq != expected:
                self.failure = SequenceGap(f"frame sequence {seq}, expected {expected}")
                break
            expected += 1
            bodies.append(bytes(buf[pos + 4 + SEQ_BYTES : stop]))
            pos = stop
        self._next = expected
        # After good bodies, a frame above the bound keeps its bytes (at most this read):
        # a bound raised before the next call (see max_body_bytes) parses them.
        if self.failure is not None and not (bodies and isinstance(self.failure, FrameTooLarge)):
            partial.clear()
            if not bodies:
                raise self.failure
            return bodies
        if partial:
            del partial[:pos]
        elif pos < end:
            partial += buf[pos:]
        return bodies

    def check_eof(self) -> None:
        """ProtocolError if the stream ended inside a frame."""
        if self._partial:
            raise ProtocolError(f"stream ended inside a frame ({len(self._partial)} bytes held)")


def _check_limit(value: int) -> int:
    if type(value) is not int or not 0 < value <= MAX_BODY_LIMIT:
        raise ValueError(f"max_body_bytes must be an int in 1..{MAX_BODY_LIMIT}")
    return value
