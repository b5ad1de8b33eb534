"""A one-shot result slot: the reply path of a local ask.

``trio.Event`` plus a value field would do, but an Event allocates a ParkingLot and its
``wait`` goes through it; a local ask creates one slot per request, so this one is a
three-slot object that reschedules the single waiting task directly. The first
:meth:`OneShot.set` / :meth:`OneShot.fail` wins and later ones return ``False``: the
"terminal once, the loser is a no-op" rule of the spec.
"""

from __future__ import annotations

import enum
from typing import Final, Generic, TypeVar, final

import trio

__all__ = ["OneShot"]

T = TypeVar("T")


class _Pending(enum.Enum):
    PENDING = "pending"


_PENDING: Final = _Pending.PENDING


@final
class OneShot(Generic[T]):
    """A value or an error, delivered at most once, awaited by at most one task at a time."""

    __slots__ = ("_error", "_task", "_value")

    def __init__(self) -> None:
        self._value: T | _Pending = _PENDING
        self._error: BaseException | None = None
        self._task: trio.lowlevel.Task | None = None

    @property
    def done(self) -> bool:
        return self._value is not _PENDING or self._error is not None

    def set(self, value: T) -> bool:
        """Deliver ``value``. Returns ``False`` (and changes nothing) if already done."""
        if self._value is not _PENDING or self._error is not None:
            return False
        self._value = value
        self._wake()
        return True

    def fail(self, error: BaseException) -> bool:
        """Deliver ``error`` (raised by :meth:`wait`). ``False`` if already done."""
        if self._value is not _PENDING or self._error is not None:
            return False
        self._error = error
        self._wake()
        return True

    async def wait(self) -> T:
        """Wait for the result; return the value or raise the error.

        Raises:
            trio.BusyResourceError: another task is already waiting.
        """
        if self._value is _PENDING and self._error is None:
            if self._task is not None:
                raise trio.BusyResourceError("another task is waiting for this OneShot")
            self._task = trio.lowlevel.current_task()

            def abort(_: object) -> trio.lowlevel.Abort:
                self._task = None
                return trio.lowlevel.Abort.SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort)
        else:
            await trio.lowlevel.checkpoint()
        if self._error is not None:
            raise self._error
        value = self._value
        assert value is not _PENDING
        return value

    def get_nowait(self) -> T:
        """The result, without waiting (nor a checkpoint): the value, or raise the error.

        Raises:
            trio.WouldBlock: not done yet.
        """
        if self._error is not None:
            raise self._error
        value = self._value
        if value is _PENDING:
            raise trio.WouldBlock
        return value

    def _wake(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            trio.lowlevel.reschedule(task)
