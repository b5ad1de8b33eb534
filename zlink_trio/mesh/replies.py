"""Requests in flight: correlations, waiters, and the routing of inbound replies.

A correlation is a u64 unique per node lifecycle (a counter from 1). A request is
registered under its correlation *before* it is sent; an inbound reply (20, 43, 122) is
delivered only when its correlation is registered AND it came from the node the request
went to (same NodeRid). The waiter is one task, woken directly (no Event: one request =
one small object).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, final

import trio

from ..errors import InvalidOperation
from .api import LinkLost, PeerAddress, PeerGone, PeerIdentity
from .reasons import DropReason

if TYPE_CHECKING:
    from .connection import Connection

__all__ = ["Pending", "ReplyRegistry", "step_aside"]

_U64_MAX: Final = (1 << 64) - 1


@final
class Pending:
    """A request in flight (implements :class:`~zlink_trio.mesh.api.PendingReply`)."""

    __slots__ = (
        "_conn",
        "_correlation",
        "_error",
        "_handback",
        "_lost",
        "_peer",
        "_registry",
        "_reply",
        "_task",
    )

    def __init__(
        self, registry: ReplyRegistry, correlation: int, peer: PeerIdentity, conn: Connection
    ) -> None:
        self._registry: ReplyRegistry | None = registry
        self._correlation = correlation
        self._peer = peer
        self._conn: Connection | None = conn
        self._reply: Any = None
        self._lost = False  # the connection it went out on broke; not yet reported
        self._error: BaseException | None = None  # set by expire(): raised by wait()
        self._task: trio.lowlevel.Task | None = None
        self._handback: trio.lowlevel.Task | None = None  # a reader parked until we run

    @property
    def correlation(self) -> int:
        return self._correlation

    @property
    def peer(self) -> PeerIdentity:
        return self._peer

    async def wait(self) -> Any:
        if self._reply is None and not self._lost and self._error is None:
            if self._registry is None:
                raise InvalidOperation("this request was discarded or abandoned")
            if self._task is not None:
                raise trio.BusyResourceError("another task waits for this reply")
            self._task = trio.lowlevel.current_task()

            def abort(_: object) -> trio.lowlevel.Abort:
                self._task = None
                self.discard()
                return trio.lowlevel.Abort.SUCCEEDED

            try:
                await trio.lowlevel.wait_task_rescheduled(abort)
            finally:
                reader = self._handback
                if reader is not None:
                    # The reader that woke us stepped aside until now (see step_aside):
                    # it reads on once this step of ours ends.
                    self._handback = None
                    trio.lowlevel.reschedule(reader)
        else:
            await trio.lowlevel.checkpoint()
        if self._reply is not None:
            return self._reply
        if self._error is not None:
            raise self._error
        self._lost = False
        raise LinkLost(f"the connection to {self._peer} broke before the reply")

    def discard(self) -> None:
        registry, self._registry = self._registry, None
        if registry is not None:
            registry._forget(self._correlation)
            self._settled()

    def keep_reader(self) -> None:
        """The reader handed to this request (ReplyRegistry.deliver_aside) does not step
        aside after all: before this request's task ran, nothing reschedules it."""
        self._handback = None

    def expire(self, error: BaseException) -> None:
        if self._reply is not None or self._error is not None:
            return
        self._error = error
        self.discard()
        self._wake()

    # --- driven by the registry -----------------------------------------------------------
    def _deliver(self, reply: Any) -> None:
        self._reply = reply
        self._registry = None
        self._settled()
        self._wake()

    def _link_broke(self) -> None:
        self._settled()
        self._lost = True
        self._wake()

    def _settled(self) -> None:
        """No longer in flight on the connection it went out on."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.in_flight -= 1

    def _wake(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            trio.lowlevel.reschedule(task)


@final
class ReplyRegistry:
    __slots__ = ("_last", "_waiting")

    def __init__(self) -> None:
        self._last = 0
        self._waiting: dict[int, Pending] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def register(self, peer: PeerIdentity, conn: Connection) -> Pending:
        """A new correlation, registered for a request to ``peer`` over ``conn``."""
        if self._last == _U64_MAX:  # pragma: no cover - 2**64 requests
            raise InvalidOperation("correlations of this lifecycle are exhausted")
        self._last += 1
        pending = Pending(self, self._last, peer, conn)
        conn.in_flight += 1
        self._waiting[self._last] = pending
        return pending

    def deliver(self, sender: PeerIdentity, correlation: int, reply: Any) -> DropReason | None:
        """Route an inbound reply; a DropReason when nobody may have it."""
        pending = self._waiting.get(correlation)
        if pending is None:
            return DropReason.UNKNOWN_CORRELATION
        if pending._peer is not sender and pending._peer.node_rid != sender.node_rid:
            return DropReason.REPLY_WRONG_PEER
        del self._waiting[correlation]
        pending._deliver(reply)
        return None

    def deliver_aside(
        self, sender: PeerIdentity, correlation: int, reply: Any, reader: trio.lowlevel.Task
    ) -> DropReason | Pending | None:
        """:meth:`deliver` for a connection's ``reader`` that read ``reply`` alone: when
        the reply woke its waiting task and no other request is in flight on that
        connection, the Pending, whose task reschedules ``reader`` as it resumes (the
        reader then parks in :func:`step_aside`). The woken caller then runs before the
        reader waits for the socket again, not after: its next request leaves one
        readiness registration sooner (the 1-caller round trip)."""
        pending = self._waiting.get(correlation)
        if pending is None:
            return DropReason.UNKNOWN_CORRELATION
        waiter, conn = pending._task, pending._conn  # (before the delivery clears them)
        reason = self.deliver(sender, correlation, reply)
        if reason is not None:
            return reason
        if waiter is None or conn is None or conn.in_flight:
            return None
        pending._handback = reader
        return pending

    def peer_gone(self, address: PeerAddress) -> None:
        """``address``'s lifecycle ended: every request to it learns it (PeerGone) and is
        forgotten (a reply can only come from that lifecycle, over a connection that can
        no longer exist)."""
        gone = [p for p in self._waiting.values() if p._peer.address == address]
        for pending in gone:
            pending.expire(PeerGone(f"{address.node_rid} left before the reply"))

    def connection_broke(self, conn: Connection) -> None:
        """Every request that went out on ``conn`` learns it (LinkLost on its wait)."""
        for pending in self._waiting.values():
            if pending._conn is conn:
                pending._link_broke()

    def _forget(self, correlation: int) -> None:
        self._waiting.pop(correlation, None)


async def step_aside(pending: Pending) -> None:
    """Park the calling reader until ``pending``'s woken task reschedules it (see
    :meth:`ReplyRegistry.deliver_aside`); a cancelled reader leaves at once (the task
    then has nobody to reschedule)."""

    def abort(_: object) -> trio.lowlevel.Abort:
        pending._handback = None
        return trio.lowlevel.Abort.SUCCEEDED

    await trio.lowlevel.wait_task_rescheduled(abort)
