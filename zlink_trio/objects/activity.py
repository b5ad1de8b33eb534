"""Control transactions in progress on this node (creation attempts between their staging
and its end, destroys), counted so a clean stop can let them finish (docs/decisions.md,
"Graceful drain on a clean stop")."""

from __future__ import annotations

from typing import final

import trio

__all__ = ["Activity"]


@final
class Activity:
    """A count of transactions in progress and a way to wait until there are none."""

    __slots__ = ("_count", "_idle")

    def __init__(self) -> None:
        self._count = 0
        self._idle: trio.Event | None = None

    @property
    def busy(self) -> bool:
        return self._count > 0

    def begin(self) -> None:
        self._count += 1

    def end(self) -> None:
        """One :meth:`begin` ended (call it exactly once per begin, however it ended)."""
        self._count -= 1
        if self._count == 0 and self._idle is not None:
            idle, self._idle = self._idle, None
            idle.set()

    async def wait_idle(self) -> None:
        """Wait until no transaction is in progress (a checkpoint when none is)."""
        if self._count == 0:
            await trio.lowlevel.checkpoint()
            return
        if self._idle is None:
            self._idle = trio.Event()
        await self._idle.wait()
