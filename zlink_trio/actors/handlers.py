"""Handler declaration: ``@on_send("packet")`` / ``@on_request("packet")`` on Actor methods.

Handlers are selected by (actor stable type, message kind, packet name); one key registered
twice is a startup configuration error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import attrs

from ..ids import StableType, check_text_id
from ..wire.enums import MessageKind

__all__ = ["HandlerKey", "MessageKind", "on_request", "on_send"]

HANDLER_MARK: Final = "__zlink_handler__"

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


@attrs.frozen
class HandlerKey:
    stable_type: StableType
    kind: MessageKind
    packet: str


def _mark(kind: MessageKind, packet: str) -> Callable[[F], F]:
    check_text_id(packet, "packet name")

    def decorate(fn: F) -> F:
        marks: list[tuple[MessageKind, str]] = list(getattr(fn, HANDLER_MARK, ()))
        marks.append((kind, packet))
        setattr(fn, HANDLER_MARK, tuple(marks))
        return fn

    return decorate


def on_send(packet: str) -> Callable[[F], F]:
    """Mark ``async def handler(self, payload: bytes) -> None`` for one-way sends."""
    return _mark(MessageKind.SEND, packet)


def on_request(packet: str) -> Callable[[F], F]:
    """Mark ``async def handler(self, payload: bytes) -> bytes | None`` for requests."""
    return _mark(MessageKind.REQUEST, packet)


def declared_handlers(cls: type) -> list[tuple[MessageKind, str, str]]:
    """(kind, packet, attribute name) of every marked method of ``cls`` (MRO order)."""
    found: list[tuple[MessageKind, str, str]] = []
    seen: set[str] = set()
    for klass in cls.__mro__:
        for name, value in vars(klass).items():
            if name in seen:
                continue
            seen.add(name)
            for kind, packet in getattr(value, HANDLER_MARK, ()):
                found.append((kind, packet, name))
    return found
