"""The shortest CBOR head of an item (RFC 8949 §3), as cbor2 writes it: the one piece of
CBOR the hand-written hot-path encoders (:mod:`.templates`, :mod:`.stream`) share."""

from __future__ import annotations

import struct
from typing import Final

__all__ = ["BYTE", "BYTES_HEADS", "head"]

BYTE: Final = tuple(bytes((i,)) for i in range(256))
"""Each one-byte string, by value."""
_PACK_1: Final = struct.Struct(">BB").pack
_PACK_2: Final = struct.Struct(">BH").pack
_PACK_4: Final = struct.Struct(">BI").pack
_PACK_8: Final = struct.Struct(">BQ").pack


def head(major: int, n: int) -> bytes:
    """The shortest CBOR head of major type ``major`` (its high bits: 0x00 unsigned,
    0x40 bytes, 0x60 text) with argument ``0 <= n < 2**64``, as cbor2 writes it."""
    if n < 24:
        return BYTE[major | n]
    if n < 0x100:
        return _PACK_1(major | 24, n)
    if n < 0x1_0000:
        return _PACK_2(major | 25, n)
    if n < 0x1_0000_0000:
        return _PACK_4(major | 26, n)
    return _PACK_8(major | 27, n)


BYTES_HEADS: Final = tuple(head(0x40, n) for n in range(256))
"""The head of a byte string of each length below 256 (a hot path's lookup instead of a
:func:`head` call)."""
