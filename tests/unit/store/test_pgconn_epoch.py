"""PgConnections' outage bookkeeping, driven through a fake bridge (no server): which
reconnect may end an outage and move ``recovery_epoch``."""

from __future__ import annotations

from typing import Any

import trio

from zlink_trio.store import _pgconn
from zlink_trio.store._pgconn import PgConnections


class _FakeConn:
    def is_closed(self) -> bool:
        return False


class _FakeBridge:
    """Runs the loop-side functions of _pgconn in Trio: connects succeed (after ``gate``
    when one is set), statements return "ok"."""

    def __init__(self) -> None:
        self.gate: trio.Event | None = None
        self.connecting = trio.Event()

    async def run(self, fn: Any, *args: Any) -> Any:
        if fn is _pgconn._connect_into:
            slot, _kwargs, generation = args
            if self.gate is not None:
                self.connecting.set()
                await self.gate.wait()
            slot.conn = _FakeConn()
            slot.generation = generation
            return None
        if fn is _pgconn._execute:
            return "ok"
        if fn is _pgconn._close_gracefully:
            return None
        raise AssertionError(fn)


async def test_a_reconnect_begun_before_an_outage_does_not_end_it() -> None:
    """Slot A starts reconnecting (a deliberate discard, not an outage); meanwhile another
    connection of the current generation is lost, so an outage starts. A's connect, made
    on the old generation before the server went down, must not end the outage nor move
    ``recovery_epoch``: only a connect of the current generation proves recovery."""
    bridge = _FakeBridge()
    conns = PgConnections(bridge, {}, 2, cancel_grace=1.0, retry_window=1.0)  # type: ignore[arg-type]
    await conns.open()
    slot_a, slot_b = conns._slots
    slot_a.conn = None  # discarded (e.g. after a cancellation): reconnects on next use
    bridge.gate = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conns._reconnect, slot_a)
        await bridge.connecting.wait()  # A is connecting on generation 0
        conns._lost(slot_b)  # B (generation 0) broke: the outage starts
        assert conns._outage
        bridge.gate.set()
    assert slot_a.conn is not None
    assert conns.recovery_epoch == 0
    assert conns._outage  # still down, as far as anyone knows
    # A connect of the current generation ends it, once.
    bridge.gate = None
    assert await conns.call("fetchval", "SELECT 1", (), idempotent=True) == "ok"
    assert conns.recovery_epoch == 1
    assert not conns._outage
    await conns.aclose()
