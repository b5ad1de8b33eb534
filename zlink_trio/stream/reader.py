"""The reader task of a STREAM connection, and the host of the inline Actor turns it runs.

A ``route_packet`` frame for a bound Actor hosted here whose lane is idle (nothing queued,
no turn running, no other lane waiting for a runner) runs as that Actor's next turn IN this
task (:meth:`Lane.run_here <zlink_trio.engine.Lane.run_here>`): no hand-off to an engine
runner, no scheduler pass to start the turn and none after it. The reader is then the
turn's :class:`~zlink_trio.engine.TurnHost`:

* a turn that completes without waiting (the common case: its pushes and replies are
  queued for the writer, never awaited) simply returns, and the reader reads on;
* a turn that waits hands the reading over: :meth:`turn_suspended` starts a new reader at
  once (keep-alive and control frames are never held behind the Actor's work, spec 02 §5),
  and this task only finishes the turn (``released``), then ends;
* closing the connection never cancels a reader that runs a turn (the turn belongs to the
  Actor, not to the connection): it finishes, and whatever it pushes or replies to the
  closed connection is dropped; only the engine halting cancels it (:meth:`cancel_turn`,
  as a runner's scope would be);
* the readers are tasks of the connection's reader nursery, which outlives the rest of the
  connection (writer, reply tasks, timers): the connection task ends once the last turn
  its readers were running ended.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import trio
from trio_websocket import WebSocketConnection

if TYPE_CHECKING:
    from .connection import Connection

__all__ = ["StreamReader"]


@final
class StreamReader:
    """The state of one reader task of a connection (see the module docstring); the
    task's loop is ``Connection._read``."""

    __slots__ = ("conn", "corked", "in_turn", "released", "scope", "stop_deferred", "writing")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.scope = trio.CancelScope()
        self.in_turn = False
        """Running an inline turn now (closing the connection does not cancel it)."""
        self.released = False
        """A turn it ran waited (or a frame it wrote): another reader reads from then on."""
        self.corked = False
        """It holds a cork of the connection's outbound queue (.outbound: direct write)."""
        self.writing = False
        """Writing queued frames itself (:meth:`write_here`): a stop waits for its end."""
        self.stop_deferred = False
        """:meth:`stop` came while :attr:`writing`: it takes effect once the write ended."""

    def stop(self) -> None:
        """The connection closes: stop reading at once, unless running a turn (which
        finishes; the reader then sees the close and ends)."""
        if self.writing:
            self.stop_deferred = True  # (never half a frame on the wire)
        elif not self.in_turn:
            self.scope.cancel(reason="zlink_trio STREAM connection closing")

    async def write_here(self, ws: WebSocketConnection) -> None:
        """Write what the connection queued while this reader corked it (the writer is
        idle: .outbound direct write), in this reader's own scope: a stop of the reader
        meanwhile is deferred to the end of the write (a frame is never cut in the
        middle), only :meth:`Outbound.abort <.outbound.Outbound.abort>` cancels it. No
        cancel scope is entered per write. (``Connection._read`` inlines this.)"""
        self.writing = True
        try:
            await self.conn.outbound.write_here(ws, self.release, self.scope)
        finally:
            self.write_ended()

    def write_ended(self) -> None:
        """The end of a :meth:`write_here`: a stop that came meanwhile takes effect."""
        self.writing = False
        if self.stop_deferred:
            self.stop_deferred = False
            if not self.in_turn:
                self.scope.cancel(reason="zlink_trio STREAM connection closing")

    # --- TurnHost ---------------------------------------------------------------------------
    def enter_turn(self) -> None:
        self.in_turn = True

    def turn_suspended(self) -> None:
        self.uncork()  # (what the turn queues from now on goes to the writer)
        self.release()

    def release(self) -> None:
        """Hand the reading to a new reader (this task is about to wait)."""
        self.released = True
        self.conn.reader_released(self)

    def uncork(self) -> None:
        if self.corked:
            self.corked = False
            self.conn.outbound.uncork()

    def exit_turn(self) -> None:
        self.in_turn = False

    def cancel_turn(self) -> None:
        self.scope.cancel(reason="zlink_trio engine halted")
