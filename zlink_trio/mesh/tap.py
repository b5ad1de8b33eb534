"""A wire tap for contract tests: every record a node sends or receives on its peer
connections, in order, with the peer and direction ("exactly one command 38 on the
wire").

Install one on nodes (``open_cluster(tap=...)`` or ``zlink_trio.testing.instrument``);
it records through :mod:`.instrumented`, from outside the connection: a node without
instrumentation pays nothing for it. *Sent* means written to the socket (a dropped frame is not sent; a duplicated one is
sent twice); *received* means decoded at ingress, before admission checks (so refused
records show up too). Handshake records are included.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, final

import attrs
import trio

from ..ids import NodeRid
from .api import PeerIdentity

__all__ = ["TapDirection", "TapEvent", "WireTap"]


class TapDirection(enum.Enum):
    SENT = "sent"
    RECEIVED = "received"


@attrs.frozen(slots=True)
class TapEvent:
    node: NodeRid
    """The node that sent or received the record."""
    direction: TapDirection
    peer: PeerIdentity | None
    """The other side (claimed identity during a handshake; None before the hello)."""
    command: int
    record: Any
    time: float


@attrs.frozen(slots=True)
class _Filter:
    node: NodeRid | None
    direction: TapDirection | None
    command: int | None
    peer: NodeRid | None

    def __call__(self, event: TapEvent) -> bool:
        return (
            (self.node is None or event.node == self.node)
            and (self.direction is None or event.direction is self.direction)
            and (self.command is None or event.command == self.command)
            and (self.peer is None or (event.peer is not None and event.peer.node_rid == self.peer))
        )


@final
class WireTap:
    """Records of every node it is installed on (filter by ``node``)."""

    def __init__(self) -> None:
        self._events: list[TapEvent] = []
        self._waiters: list[tuple[Callable[[], bool], trio.Event]] = []

    @property
    def events(self) -> tuple[TapEvent, ...]:
        return tuple(self._events)

    def select(
        self,
        *,
        node: NodeRid | None = None,
        direction: TapDirection | None = None,
        command: int | None = None,
        peer: NodeRid | None = None,
    ) -> list[TapEvent]:
        keep = _Filter(node, direction, None if command is None else int(command), peer)
        return [e for e in self._events if keep(e)]

    def count(
        self,
        *,
        node: NodeRid | None = None,
        direction: TapDirection | None = None,
        command: int | None = None,
        peer: NodeRid | None = None,
    ) -> int:
        return len(self.select(node=node, direction=direction, command=command, peer=peer))

    def clear(self) -> None:
        self._events.clear()

    async def wait_for(
        self,
        *,
        count: int = 1,
        node: NodeRid | None = None,
        direction: TapDirection | None = None,
        command: int | None = None,
        peer: NodeRid | None = None,
    ) -> list[TapEvent]:
        """Wait until at least ``count`` matching events were recorded; return them."""

        def enough() -> bool:
            return self.count(node=node, direction=direction, command=command, peer=peer) >= count

        while not enough():
            event = trio.Event()
            self._waiters.append((enough, event))
            try:
                await event.wait()
            finally:
                if (enough, event) in self._waiters:
                    self._waiters.remove((enough, event))
        await trio.lowlevel.checkpoint()
        return self.select(node=node, direction=direction, command=command, peer=peer)

    # --- used by the transport -------------------------------------------------------------
    def _record(self, node: NodeRid, sent: bool, peer: PeerIdentity | None, record: Any) -> None:
        direction = TapDirection.SENT if sent else TapDirection.RECEIVED
        self._events.append(
            TapEvent(node, direction, peer, int(record.COMMAND), record, trio.current_time())
        )
        if self._waiters:
            for enough, event in list(self._waiters):
                if enough():
                    event.set()
