"""Peer links: connection intents, admitted connections and PeerState, per PeerAddress.

* The **intent** is owned by the descriptor watcher (the logical owner): it exists while
  the peer's descriptor is live in the Store for a mesh both nodes are in. Admission of an
  inbound connection also adds it (the acceptor just verified the descriptor is live).
* At most one **admitted connection** per address. Both nodes dial while they have an
  intent, no admitted connection and no inbound hello from that peer in progress. An
  acceptor refuses a hello from the higher NodeRid while its own dial to it is in flight
  or already admitted (the peer, by the same rule, accepts ours), so concurrent dials
  admit one connection: the one dialed by the lower NodeRid. If two get admitted anyway, the one dialed by the
  lower NodeRid wins on both sides; between two dialed by the same node the newer wins
  (the dialer keeps only its latest, so an older one is stale).
* ``ADMITTED``: a connection now. ``CONNECTING``: an intent, no connection. ``GONE``:
  neither. Waiters are woken on every transition (one Event per address, only while
  someone waits; plus one node-wide Event).
* **Dial outcomes** (the fast failure of a call whose owner is not connected): a dial
  that ends without an admission (refused, unreachable, hello failed or timed out; not a
  hello the peer declined as a duplicate of its own dial) is counted on the link with its
  time, and wakes :meth:`PeerTable.wait_attempt`, which also wakes on every transition.
  A caller that needs the peer now ends the dialer's backoff pause (``Link.kick``), so it
  learns the outcome of a dial made for it instead of waiting out the backoff.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, final

import trio

from ..store.api import NodeDescriptor
from .api import PeerAddress, PeerState
from .reasons import CloseReason

if TYPE_CHECKING:
    from .connection import Connection

__all__ = ["Link", "PeerTable"]


@final
class Link:
    """What this node knows about one peer address."""

    __slots__ = (
        "accepting",
        "address",
        "conn",
        "dialer",
        "dialing",
        "failed_at",
        "failures",
        "intent",
        "intent_since",
        "kick",
    )

    def __init__(self, address: PeerAddress) -> None:
        self.address = address
        self.intent: NodeDescriptor | None = None
        self.intent_since = 0
        """The table's intent serial when the intent was added."""
        self.conn: Connection | None = None
        self.dialer: trio.CancelScope | None = None
        """The dial loop of this intent."""
        self.dialing = False
        """A dial (connect + hello) is in flight."""
        self.accepting = 0
        """Inbound hellos from this peer past the admission check, not yet admitted."""
        self.failures = 0
        """Dials that ended without an admission (see the module docstring)."""
        self.failed_at = -math.inf
        """Trio time the last of them ended."""
        self.kick: trio.Event | None = None
        """Set by a caller that needs the peer now: the dialer's backoff pause ends."""

    @property
    def state(self) -> PeerState:
        if self.conn is not None:
            return PeerState.ADMITTED
        if self.intent is not None:
            return PeerState.CONNECTING
        return PeerState.GONE


@final
class PeerTable:
    __slots__ = (
        "_any_change",
        "_attempts",
        "_changes",
        "_links",
        "_on_gone",
        "admitted",
        "serial",
    )

    def __init__(self, on_gone: Callable[[PeerAddress], None] | None = None) -> None:
        self._on_gone = on_gone
        """Called when an address becomes GONE (its lifecycle ended)."""
        self.serial = 0
        """Counts intents added: a descriptor poll removes only intents added before it
        started (time cannot tell: under a mock clock everything happens at one instant)."""
        self._links: dict[PeerAddress, Link] = {}
        self.admitted: dict[PeerAddress, Connection] = {}
        """The send path's lookup: address -> admitted connection."""
        self._changes: dict[PeerAddress, trio.Event] = {}
        self._attempts: dict[PeerAddress, trio.Event] = {}
        """Woken by a failed dial or a transition of that address (``wait_attempt``)."""
        self._any_change = trio.Event()

    # --- reading -------------------------------------------------------------------------
    def state(self, address: PeerAddress) -> PeerState:
        link = self._links.get(address)
        return PeerState.GONE if link is None else link.state

    def link(self, address: PeerAddress) -> Link | None:
        return self._links.get(address)

    def ensure(self, address: PeerAddress) -> Link:
        link = self._links.get(address)
        if link is None:
            link = self._links[address] = Link(address)
        return link

    def discard_if_unused(self, link: Link) -> None:
        if (
            link.state is PeerState.GONE
            and link.dialer is None
            and not link.accepting
            and self._links.get(link.address) is link
        ):
            del self._links[link.address]

    def links(self) -> list[Link]:
        return list(self._links.values())

    def snapshot(self) -> Mapping[PeerAddress, PeerState]:
        return MappingProxyType({a: link.state for a, link in self._links.items()})

    def count(self, state: PeerState) -> int:
        return sum(1 for link in self._links.values() if link.state is state)

    async def wait_change(self, address: PeerAddress) -> PeerState:
        event = self._changes.get(address)
        if event is None:
            event = self._changes[address] = trio.Event()
        try:
            await event.wait()
        finally:
            if self._changes.get(address) is event and event.statistics().tasks_waiting == 0:
                del self._changes[address]
        return self.state(address)

    async def wait_any_change(self) -> None:
        await self._any_change.wait()

    async def wait_attempt(self, address: PeerAddress) -> PeerState:
        """Wait for the next failed dial to ``address`` or transition of its state."""
        event = self._attempts.get(address)
        if event is None:
            event = self._attempts[address] = trio.Event()
        try:
            await event.wait()
        finally:
            if self._attempts.get(address) is event and event.statistics().tasks_waiting == 0:
                del self._attempts[address]
        return self.state(address)

    # --- dial outcomes -------------------------------------------------------------------
    def want_dial(self, link: Link) -> None:
        """A caller needs ``link``'s peer now: end its dialer's backoff pause."""
        kick = link.kick
        if kick is None:
            kick = link.kick = trio.Event()
        kick.set()

    def dial_failed(self, link: Link) -> None:
        """A dial of ``link`` ended without an admission."""
        link.failures += 1
        link.failed_at = trio.current_time()
        self._wake_attempt(link.address)

    def _wake_attempt(self, address: PeerAddress) -> None:
        event = self._attempts.pop(address, None)
        if event is not None:
            event.set()

    # --- changing ------------------------------------------------------------------------
    def add_intent(self, descriptor: NodeDescriptor) -> Link:
        address = PeerAddress(descriptor.mesh_name, descriptor.node_rid)
        link = self._links.get(address)
        if link is None:
            link = self._links[address] = Link(address)
        if link.intent is None:
            before = link.state
            self.serial += 1
            link.intent = descriptor
            link.intent_since = self.serial
            self._changed(link, before)
        return link

    def remove_intent(self, address: PeerAddress) -> None:
        """Drop the intent, stop its dialer, close its connection (INTENT_REMOVED)."""
        link = self._links.get(address)
        if link is None or link.intent is None:
            return
        before = link.state
        link.intent = None
        if link.dialer is not None:
            link.dialer.cancel(reason="zlink_trio: connection intent removed")
            link.dialer = None
        if link.conn is not None:
            link.conn.close(CloseReason.INTENT_REMOVED)
            self._forget_conn(link)
        self._changed(link, before)

    def attach(self, conn: Connection) -> bool:
        """``conn`` was admitted: it becomes the address's connection unless the current
        one is preferred over it (False: the caller closes ``conn`` as a duplicate)."""
        address = conn.address
        link = self._links.get(address)
        if link is None:
            link = self._links[address] = Link(address)
        before = link.state
        old = link.conn
        if old is not None and old is not conn:
            if old.preferred and not conn.preferred:
                return False
            old.close(CloseReason.REPLACED)
        link.conn = conn
        link.failed_at = -math.inf  # a failure before this admission is no news any more
        self.admitted[address] = conn
        self._changed(link, before)
        return True

    def detach(self, conn: Connection) -> None:
        """``conn`` ended; the address keeps its intent (CONNECTING) or becomes GONE."""
        link = self._links.get(conn.address)
        if link is None or link.conn is not conn:
            return
        before = link.state
        self._forget_conn(link)
        self._changed(link, before)

    def connections(self) -> list[Connection]:
        return list(self.admitted.values())

    def _forget_conn(self, link: Link) -> None:
        link.conn = None
        self.admitted.pop(link.address, None)

    def _changed(self, link: Link, before: PeerState) -> None:
        after = link.state
        if after is PeerState.GONE and link.dialer is None and not link.accepting:
            self._links.pop(link.address, None)
        if after is before:
            return
        if after is PeerState.GONE and self._on_gone is not None:
            self._on_gone(link.address)
        self._wake_attempt(link.address)
        event = self._changes.pop(link.address, None)
        if event is not None:
            event.set()
        event, self._any_change = self._any_change, trio.Event()
        event.set()
