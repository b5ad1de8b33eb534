"""Submit-once fluent calls (spec 04 §6.2): options may be set once, the terminal submit
runs once; doing either twice raises InvalidOperation. ``await call`` is ``await
call.submit()``: the one end-to-end deadline is fixed at that moment, as
``min(submit time + timeout, trio.current_effective_deadline())`` -- the caller's cancel
scopes bound every call, and that deadline is what travels to a remote owner.

A call is a small slotted object holding its arguments (no closure); ``__await__`` runs
the operation's coroutine directly, without an extra coroutine frame.
"""

from __future__ import annotations

import math
from collections.abc import Coroutine, Generator
from typing import Any, Final, Generic, Self, TypeVar

import trio

from ..errors import InvalidArgument, InvalidOperation
from ..routing.deadline import call_deadline, caller_deadline, yield_to_caller
from ..wire.payloads import PayloadRegistry, TypedPayload

__all__ = ["FluentCall", "call_deadline", "check_timeout", "message_payload", "yield_to_caller"]

R = TypeVar("R")

_OPTIONS: Final = {
    "in_mesh": 1,
    "request": 2,
    "timeout": 4,
    "operation_id": 8,
    "reply_type": 16,
    "instance": 32,
}
"""The bit of each fluent option in a call's option mask."""


def check_timeout(seconds: float) -> float:
    """A finite, positive timeout in seconds, rounded UP to whole milliseconds.

    Raises InvalidArgument (a ValueError) for anything else: 0 or below, NaN, infinity
    (use the caller's own cancel scope for "no timeout of the call's own"), a bool or a
    non-number."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidArgument(f"timeout must be a number of seconds, got {seconds!r}")
    if math.isnan(seconds) or seconds <= 0:
        raise InvalidArgument(f"timeout must be > 0 seconds, got {seconds!r}")
    if math.isinf(seconds):
        raise InvalidArgument(f"timeout must be a finite number of seconds, got {seconds!r}")
    return math.ceil(seconds * 1000) / 1000


class FluentCall(Generic[R]):
    """Base of the fluent calls: option bookkeeping and the one submit. Subclasses hold
    their arguments and implement :meth:`_run`."""

    __slots__ = ("_options", "_submitted", "_timeout")

    def __init__(self, default_timeout: float) -> None:
        self._timeout = default_timeout
        self._options = 0
        self._submitted = False

    def _option(self, name: str) -> int:
        """Check that ``name`` may be set now; return its bit, which the caller adds to
        ``_options`` once the value was accepted (a refused value sets nothing)."""
        if self._submitted:
            raise InvalidOperation(f"{name}() after submit")
        bit = _OPTIONS[name]
        if self._options & bit:
            raise InvalidOperation(f"{name}() set twice")
        return bit

    def timeout(self, seconds: float) -> Self:
        """The operation's one end-to-end deadline, counted from submit (the caller's
        cancel scopes can only shorten it). InvalidArgument unless finite and > 0."""
        bit = self._option("timeout")
        self._timeout = check_timeout(seconds)
        self._options |= bit
        return self

    def _begin(self) -> Coroutine[Any, Any, R]:
        """Mark the call submitted (once), fix its deadline -- now + timeout, or the
        caller's effective deadline (its enclosing cancel scopes) if that is not later --
        and return the operation bounded by it."""
        if self._submitted:
            raise InvalidOperation("the call was already submitted")
        self._submitted = True
        own = trio.current_time() + self._timeout
        callers = caller_deadline()
        if callers <= own:
            return yield_to_caller(self._run(callers), callers)
        return self._run(own)

    def _run(self, deadline: float) -> Coroutine[Any, Any, R]:
        """The operation, bounded by ``deadline`` (trio time)."""
        raise NotImplementedError

    def submit(self) -> Coroutine[Any, Any, R]:
        """Run the call (once): ``await call.submit()``. The deadline is fixed now: submit
        time + timeout, bounded by the caller's effective deadline. (The operation's own
        coroutine, returned without a coroutine frame of its own around it.)"""
        return self._begin()

    def __await__(self) -> Generator[Any, None, R]:
        return self._begin().__await__()


def message_payload(
    payload: object, payloads: PayloadRegistry, max_request: int
) -> bytes | TypedPayload:
    """A message's payload as a call carries it: bytes (at most ``max_request``), or a
    :class:`TypedPayload` of a registered payload class whose values were checked against
    its field types (an unencodable value fails here, locally and remotely alike).

    Raises:
        InvalidOperation: neither bytes nor a registered class; bytes over the limit; a
            value that does not fit its declared field types.
    """
    if type(payload) is not bytes:
        if not isinstance(payload, bytearray | memoryview):
            codec = payloads.of(payload)
            if codec is None:
                raise InvalidOperation(
                    "payload must be bytes or an instance of a registered payload "
                    f"class, got {type(payload).__name__}"
                )
            codec.check(payload)
            return TypedPayload(codec, payload)
        payload = bytes(payload)
    if len(payload) > max_request:
        raise InvalidOperation(f"payload of {len(payload)} bytes exceeds {max_request}")
    return payload
