"""Test instrumentation of the transport: a :class:`~.faults.FaultPlan` and a
:class:`~.tap.WireTap`, installed from outside the connection.

:class:`Instrumentation` holds the plan and the tap of one node (either may be None and
both may change at any time). :meth:`Instrumentation.install` makes a
:class:`~.state.TransportState` build every connection through it: the connection's hooks
(``write_direct``, ``write_batch``, ``deliver``) are replaced by the ones below, and the
handshake observer records into the tap. A connection made without instrumentation (the
production path) never looks at a plan or a tap.

What the plan does to outbound frames (after the writer lane, before sequence numbers and
the stream) is described in :mod:`.faults`. While no plan is installed and nothing is held
back, the instrumented hooks call the connection's own ones (direct writes included), so a
test without faults runs the production code.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING, Any, final

import trio

from ..ids import NodeRid
from .api import PeerIdentity
from .connection import Connection, _Item, _Stop
from .faults import FaultKind, FaultPlan
from .frames import SEQ_BYTES, pack_header
from .reasons import CloseReason
from .tap import WireTap

if TYPE_CHECKING:
    from .frameio import PeerIO
    from .state import TransportState

__all__ = ["Instrumentation"]


@final
class Instrumentation:
    """The fault plan and wire tap of one node's transport."""

    __slots__ = ("_rid", "plan", "tap")

    def __init__(self, plan: FaultPlan | None = None, tap: WireTap | None = None) -> None:
        self.plan = plan
        self.tap = tap
        self._rid: NodeRid | None = None

    def install(self, state: TransportState) -> None:
        """Make ``state`` (one node's) build its connections from now on, and observe its
        handshakes, through this instrumentation."""
        self._rid = state.rid
        state.connect = self._connect
        state.observe = self._observe

    def _observe(self, sent: bool, peer: PeerIdentity | None, record: object) -> None:
        tap = self.tap
        if tap is not None and self._rid is not None:
            tap._record(self._rid, sent, peer, record)

    def _connect(
        self, state: TransportState, peer: PeerIdentity, io: PeerIO, dialed: bool
    ) -> Connection:
        conn = Connection(state, peer, io, dialed=dialed)
        _Hooks(self, state, conn)
        plan = self.plan
        if plan is not None and plan._partitioned(state.rid, peer):
            conn.close_reason = CloseReason.FAULT_CUT  # closed before it is attached
        return conn


@final
class _Hooks:
    """One instrumented connection: its replaced hooks and its held-back frames."""

    __slots__ = (
        "_conn",
        "_delayed",
        "_instr",
        "_plain_batch",
        "_plain_deliver",
        "_plain_direct",
        "_reordered",
        "_rid",
        "_serial",
    )

    def __init__(self, instr: Instrumentation, state: TransportState, conn: Connection) -> None:
        self._instr = instr
        self._rid = state.rid
        self._conn = conn
        self._delayed: list[tuple[float, int, _Item]] = []
        self._serial = 0
        self._reordered: list[_Item] = []
        self._plain_direct = conn.write_direct
        self._plain_batch = conn.write_batch
        self._plain_deliver = conn.deliver
        conn.write_direct = self.write_direct
        conn.write_batch = self.write_batch
        conn.deliver = self.deliver
        conn.plain = False  # the plan and the tap see every frame's record

    def _pending(self) -> bool:
        return bool(self._delayed or self._reordered)

    async def write_direct(self, record: Any, body: bytes) -> bool:
        if self._instr.plan is not None or self._pending():
            return False  # through the lane, where the plan acts
        if not await self._plain_direct(record, body):
            return False
        tap = self._instr.tap
        if tap is not None:
            tap._record(self._rid, True, self._conn.peer, record)
        return True

    async def deliver(self, record: Any) -> None:
        tap = self._instr.tap
        if tap is not None:
            tap._record(self._rid, False, self._conn.peer, record)
        await self._plain_deliver(record)

    async def write_batch(self, batch: list[_Item]) -> None:
        plan = self._instr.plan
        if plan is None and not self._pending():
            tap = self._instr.tap
            if tap is not None:
                for record, _body in batch:
                    if record is None:
                        break
                    tap._record(self._rid, True, self._conn.peer, record)
            await self._plain_batch(batch)
            return
        try:
            await self._write_faulty(batch, plan)
        finally:
            self._conn.wake_at = self._delayed[0][0] if self._delayed else math.inf

    async def _write_faulty(self, batch: list[_Item], plan: FaultPlan | None) -> None:
        parts: list[bytes] = []
        conn = self._conn
        io = conn._io
        tap = self._instr.tap
        rid = self._rid
        frames = 0

        def emit(item: _Item) -> None:
            nonlocal frames
            record, body = item
            frames += 1
            io.sent += 1
            parts.append(pack_header(len(body) + SEQ_BYTES, io.sent))
            parts.append(body)
            if tap is not None:
                tap._record(rid, True, conn.peer, record)

        def emit_then_reordered(item: _Item) -> None:
            emit(item)
            while self._reordered:
                emit(self._reordered.pop(0))

        now = trio.current_time()
        while self._delayed and self._delayed[0][0] <= now:
            emit_then_reordered(heapq.heappop(self._delayed)[2])
        for item in batch:
            record = item[0]
            if record is None:
                if parts:
                    await conn.flush(parts, frames)
                conn.close(CloseReason.SHUTDOWN)
                raise _Stop
            if plan is not None and plan._partitioned(rid, conn.peer):
                if parts:
                    await conn.flush(parts, frames)
                conn.close(CloseReason.FAULT_CUT)
                raise _Stop
            rule = None if plan is None else plan._decide(rid, conn.peer, record.COMMAND)
            if rule is None:
                emit_then_reordered(item)
            elif rule.kind is FaultKind.DROP:
                io.sent += 1  # the number is used: the receiver will see the gap
            elif rule.kind is FaultKind.DUPLICATE:
                emit_then_reordered(item)
                emit(item)
            elif rule.kind is FaultKind.DELAY:
                self._serial += 1
                heapq.heappush(self._delayed, (now + rule.seconds, self._serial, item))
            elif rule.kind is FaultKind.REORDER:
                self._reordered.append(item)
            elif rule.kind is FaultKind.STALL:
                if parts:
                    await conn.flush(parts, frames)
                    parts, frames = [], 0
                await rule.released.wait()  # the peer "stopped reading": the lane fills
                emit_then_reordered(item)
            else:  # CUT
                if rule.deliver:
                    emit(item)
                if parts:
                    await conn.flush(parts, frames)
                conn.close(CloseReason.FAULT_CUT)
                raise _Stop
        if parts:
            await conn.flush(parts, frames)
