"""Quiescence for tests on PostgreSQL: every task blocked AND no statement in flight.

``trio.testing.wait_all_tasks_blocked`` returns while a statement is in flight on an
asyncpg bridge (its caller sleeps on the bridge's doorbell, which counts as blocked), so
a test that orders its steps with it races the database. :func:`settle` waits until every
task is blocked and no call is in flight on any bridge of the process
(:mod:`zlink_trio.store._aiobridge`), then runs each bridge's barriers (a served
PostgreSQL signal bus's LISTEN/NOTIFY round trip: every notification committed so far has
been handed to its subscribers), and repeats until one round finds nothing more to do.
Without a bridge it is exactly one ``wait_all_tasks_blocked()``.
"""

from __future__ import annotations

import trio.testing

from ..store._aiobridge import LoopThread, live_loop_threads

__all__ = ["settle"]


async def _blocked_and_idle(bridges: tuple[LoopThread, ...]) -> None:
    """Every task blocked with no call in flight, at the same moment."""
    while True:
        await trio.testing.wait_all_tasks_blocked()
        busy = [b for b in bridges if b.in_flight]
        if not busy:
            return
        for bridge in busy:
            await bridge.wait_idle()


async def settle() -> None:
    """Wait until nothing runs and nothing is in flight on any asyncpg bridge (module
    docstring). Tasks sleeping on a timer count as blocked, as for
    ``wait_all_tasks_blocked``. A system that never settles never returns: bound the call
    (``trio.fail_after``) where that can happen."""
    bridges = live_loop_threads()
    if not bridges:
        await trio.testing.wait_all_tasks_blocked()
        return
    while True:
        await _blocked_and_idle(bridges)
        before = sum(b.submitted for b in bridges)
        barriers = [barrier for b in bridges for barrier in b.barriers]
        for barrier in barriers:
            await barrier()
        await _blocked_and_idle(bridges)
        # Stable when nothing but the barriers' own statements ran meanwhile.
        if sum(b.submitted for b in bridges) - before == len(barriers):
            return
