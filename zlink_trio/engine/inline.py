"""Inline turns: a lane's turn run in the task that brought its item, instead of a runner.

A connection's reader that decodes a lone frame for an idle lane can run that lane's turn
itself (:meth:`Lane.run_here <zlink_trio.engine.Lane.run_here>`): the item then costs no
hand-off to a runner, no scheduler pass before the handler starts and none after it. The
task lent to the turn is its *host* (:class:`TurnHost`), which the engine tells what
happens:

* ``enter_turn()`` / ``exit_turn()`` bracket the turn;
* ``turn_suspended()`` is called the first time the turn waits for anything (its handler
  yields to the scheduler): the host's own work (reading its connection) must go on in
  another task from then on, because this one stays with the turn until it ends. A bare
  schedule point as the turn's first yield (the task runs again in the next pass, as
  after every ``checkpoint``, e.g. a burst of pushes' periodic one) is not a suspension:
  it costs the host that one pass; its next yield of any kind is;
* ``cancel_turn()`` cancels the turn when the engine halts or shuts down (what a runner's
  cancel scope does for the turns it runs).

The suspension is seen by driving the turn's coroutine one step by hand (the engine's
``coro.send(None)``, then :func:`resume_turn`): a turn that completes without waiting (the common case) costs
one ``send`` and one ``StopIteration``; one that waits is then delegated as ``await``
would, trap by trap, in the same task (a coroutine cannot change tasks: trio binds what it
waits for, and every cancel scope it enters, to the task that runs it).
"""

from __future__ import annotations

import types
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Final, Protocol

import trio

__all__ = ["SCHEDULE_POINT", "TurnHost", "resume_turn", "watch_first_block"]


class TurnHost(Protocol):
    """The task an inline turn borrows (see the module docstring)."""

    def enter_turn(self) -> None: ...

    def turn_suspended(self) -> None: ...

    def exit_turn(self) -> None: ...

    def cancel_turn(self) -> None: ...


@types.coroutine
def resume_turn(
    coro: Generator[Any, Any, None], trap: object, host: TurnHost
) -> Generator[Any, Any, None]:
    """Drive an inline turn's coroutine on from its first yield, ``trap`` (the engine
    started it by hand: ``coro.send(None)``) with ``yield from`` semantics (what the
    scheduler sends or throws goes to it; closing closes it), telling ``host``
    ``turn_suspended()`` once, before the first yield that suspends the turn: every yield
    but a bare schedule point as the first one (see the module docstring)."""
    # (a bare schedule point as the first yield is no suspension; the next yield is)
    watching = trap is _SCHEDULE_POINT
    if not watching:
        host.turn_suspended()
    while True:
        try:
            sent = yield trap
        except GeneratorExit:
            close = getattr(coro, "close", None)
            if close is not None:
                close()
            raise
        except BaseException as exc:  # Cancelled, KeyboardInterrupt: the turn decides
            try:
                trap = coro.throw(exc)
            except StopIteration:
                return
        else:
            try:
                trap = coro.send(sent)
            except StopIteration:
                return
        if watching:
            watching = False
            host.turn_suspended()


def _schedule_point_trap() -> object:
    # What a bare schedule point (``cancel_shielded_checkpoint``, the first half of every
    # ``checkpoint``) yields to trio's scheduler: the task is rescheduled at once.
    coro = trio.lowlevel.cancel_shielded_checkpoint()  # noqa: ASYNC105 (driven by hand)
    trap = coro.send(None)
    coro.close()
    return trap


SCHEDULE_POINT: Final = _schedule_point_trap()
"""The trap a bare schedule point yields (for code that drives an awaitable by hand, as
:func:`watch_first_block` does)."""
_SCHEDULE_POINT: Final = SCHEDULE_POINT


@types.coroutine
def watch_first_block(
    awaitable: Awaitable[None], first_block: Callable[[], object]
) -> Generator[Any, Any, bool]:
    """Await ``awaitable``, calling ``first_block()`` just before its first yield that really
    waits (parks the task until something reschedules it): a schedule
    point (the task runs again in the next pass, as every ``checkpoint`` does) does not
    count. For a connection's reader writing a frame itself: a send that only passes
    schedule points costs the reading one pass; one that waits for the socket hands the
    reading to another task. Returns whether it was called (the awaited code waited)."""
    coro = awaitable.__await__()
    watching = True
    sent: Any = None
    thrown: BaseException | None = None
    while True:
        try:
            trap = coro.send(sent) if thrown is None else coro.throw(thrown)
        except StopIteration:
            return not watching
        if watching and trap is not _SCHEDULE_POINT:
            watching = False
            first_block()
        sent, thrown = None, None
        try:
            sent = yield trap
        except GeneratorExit:
            close = getattr(coro, "close", None)
            if close is not None:
                close()
            raise
        except BaseException as exc:  # Cancelled, KeyboardInterrupt: the awaited code decides
            thrown = exc
