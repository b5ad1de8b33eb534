"""The base of every top-level wire record."""

from __future__ import annotations

from typing import ClassVar, NoReturn

from ..errors import ProtocolError
from .commands import Command

__all__ = ["InvalidRecord", "WireRecord", "invalid"]


class WireRecord:
    """A frozen attrs record with a command number; encoded as ``[COMMAND, fields...]``.

    Field values are checked by the codec (``encode`` raises ProtocolError naming the field)
    so ``__init__`` stays trivial; only rules that tie several fields together (a send has
    correlation 0, the metadata flag matches the frame, ...) are checked at construction,
    where they raise ProtocolError too, on both the local and the decoding path.
    """

    __slots__ = ()

    COMMAND: ClassVar[Command]


class InvalidRecord(ProtocolError):
    """A record (or nested part) whose fields break a cross-field rule. ``reason`` is the
    rule without the location prefix."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def invalid(owner: type[object], reason: str) -> NoReturn:
    """Raise :class:`InvalidRecord` for a broken cross-field rule of ``owner``."""
    command = getattr(owner, "COMMAND", None)
    where = f"command {int(command)} ({command.name})" if command is not None else owner.__name__
    raise InvalidRecord(f"{where}: {reason}", reason)
