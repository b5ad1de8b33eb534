"""Execution gates: at most one lane per gate runs a turn at a time.

By default every lane is its own gate (no object is allocated for it). A shared
:class:`Gate`, made with :meth:`Engine.new_gate <zlink_trio.engine.Engine.new_gate>`, makes a
group of lanes mutually exclusive: a SpotWide Spot's lane and its member Actors' lanes share
one, so only one of them runs a turn at a time, while lanes with their own gates run
concurrently.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, final

from ._construct import NoPublicConstructor

if TYPE_CHECKING:
    from .lane import Lane

__all__ = ["Gate"]


@final
class Gate(metaclass=NoPublicConstructor):
    """A shared execution gate. Create it with ``Engine.new_gate()``.

    The engine owns the bookkeeping: ``_holder`` is the lane running a batch under this
    gate, ``_waiting`` the ready lanes that found it busy, in the order they did.
    """

    __slots__ = ("_holder", "_owner", "_waiting")

    def __init__(self, owner: object) -> None:
        self._owner = owner
        self._holder: Lane[Any, Any] | None = None
        self._waiting: deque[Lane[Any, Any]] = deque()

    @property
    def busy(self) -> bool:
        """Whether a lane is running a batch of turns under this gate now."""
        return self._holder is not None

    def in_turn(self) -> bool:
        """Whether the calling task runs a turn of the lane holding this gate now (then
        waiting for another turn under the gate would wait for ever)."""
        holder = self._holder
        return holder is not None and holder.in_turn()

    @property
    def waiting(self) -> int:
        """How many ready lanes wait for this gate."""
        return len(self._waiting)

    def __repr__(self) -> str:
        return f"<Gate busy={self.busy} waiting={self.waiting}>"
