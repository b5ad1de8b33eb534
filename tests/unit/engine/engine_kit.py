"""Shared by the engine tests: a recording handler that can hold chosen items."""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from contextlib import contextmanager

import trio


class Recorder:
    """A lane handler that records every item and can block on chosen ones.

    ``hold(item)`` makes the turn of ``item`` wait until the returned event is set;
    ``entered(item)`` is set when that turn starts. ``active``/``peak`` count turns in
    progress across every lane that shares this recorder.
    """

    def __init__(self) -> None:
        self.seen: list[Hashable] = []
        self._holds: dict[Hashable, trio.Event] = {}
        self._entered: dict[Hashable, trio.Event] = {}
        self.active = 0
        self.peak = 0

    def hold(self, item: Hashable) -> trio.Event:
        release = self._holds[item] = trio.Event()
        self._entered[item] = trio.Event()
        return release

    async def wait_entered(self, item: Hashable) -> None:
        await self._entered[item].wait()

    @contextmanager
    def _turn(self) -> Iterator[None]:
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            yield
        finally:
            self.active -= 1

    async def __call__(self, item: Hashable) -> None:
        with self._turn():
            self.seen.append(item)
            release = self._holds.get(item)
            if release is not None:
                self._entered[item].set()
                await release.wait()
            await trio.lowlevel.checkpoint()  # a turn that yields, like real handlers
