"""Actor handler declaration: the shared machinery of :mod:`zlink_trio.objects.handlers`
(``@on_send`` / ``@on_request`` marks, typed handlers), used by Actor and Spot types alike."""

from __future__ import annotations

from ..objects.handlers import (
    HANDLER_MARK,
    HandlerKey,
    MessageKind,
    TypedHandler,
    declared_handlers,
    method_handler,
    on_request,
    on_send,
    typed_handler,
)
from ..objects.timers.handlers import declared_timers, on_timer

__all__ = [
    "HANDLER_MARK",
    "HandlerKey",
    "MessageKind",
    "TypedHandler",
    "declared_handlers",
    "declared_timers",
    "method_handler",
    "on_request",
    "on_send",
    "on_timer",
    "typed_handler",
]
