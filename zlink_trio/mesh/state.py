"""The transport's shared state: what connections, the acceptor and the dialer of one
node read and change, as one explicit object instead of the node's private fields.

A :class:`~.node.MeshNode` makes one :class:`TransportState` and hands it to every
:class:`~.connection.Connection`, to :func:`~.acceptor.serve_inbound` and to
:func:`~.dialer.dial_loop`; none of them sees the node. A unit test can make one directly
and run connections over any ``trio.abc.Stream`` (``trio.testing.memory_stream_pair``).

Test instrumentation (the fault plan and the wire tap, :mod:`.instrumented`) is installed
from outside by replacing :attr:`TransportState.connect` (the connection factory) and
:attr:`TransportState.observe` (the handshake observer): the production path has no branch
for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, final

import trio

from ..config import ServerConfig
from ..ids import MeshName, NodeRid
from ..store.api import NodeDescriptor
from .api import InboundHandler, NodeIdentity, PeerIdentity
from .handshake import Observer
from .links import PeerTable
from .replies import ReplyRegistry
from .stats import Counters, NodePhase

if TYPE_CHECKING:
    from .connection import Connection, _Reader
    from .frameio import PeerIO

__all__ = ["KEEPALIVE_INTERVAL_SHARE", "Connect", "TransportState"]

KEEPALIVE_INTERVAL_SHARE: Final = 3
"""A ping every ``hello_timeout / 3``; silence for ``hello_timeout`` closes the link."""

Connect = Callable[["TransportState", PeerIdentity, "PeerIO", bool], "Connection"]
"""``connect(state, peer, io, dialed)``: the connection for an admitted handshake."""


def _ignore(sent: bool, peer: PeerIdentity | None, record: object) -> None:
    pass


def _connection(state: TransportState, peer: PeerIdentity, io: PeerIO, dialed: bool) -> Connection:
    from .connection import Connection

    return Connection(state, peer, io, dialed=dialed)


async def _no_refresh() -> None:
    pass


@final
class TransportState:
    """One node's transport state (see the module docstring)."""

    __slots__ = (
        "connect",
        "corked",
        "counters",
        "draining",
        "handlers",
        "hello_timeout",
        "identity",
        "keepalive_interval",
        "keepalive_timeout",
        "links",
        "live",
        "max_frame_bytes",
        "meshes",
        "observe",
        "peer_left",
        "peer_send_queue",
        "peer_send_timeout",
        "phase",
        "readers",
        "reading",
        "reconnect_backoff_initial",
        "reconnect_backoff_max",
        "refresh",
        "replies",
        "secret",
        "send_streak",
    )

    def __init__(
        self,
        identity: NodeIdentity,
        meshes: frozenset[MeshName],
        *,
        secret: bytes,
        hello_timeout: float,
        peer_send_queue: int,
        peer_send_timeout: float,
        max_frame_bytes: int,
        reconnect_backoff_initial: float,
        reconnect_backoff_max: float,
    ) -> None:
        self.identity: Final = identity
        self.meshes: Final = meshes
        self.secret: Final = secret
        self.hello_timeout: Final = hello_timeout
        self.keepalive_interval: Final = hello_timeout / KEEPALIVE_INTERVAL_SHARE
        self.keepalive_timeout: Final = hello_timeout
        self.peer_send_queue: Final = peer_send_queue
        self.peer_send_timeout: Final = peer_send_timeout
        self.max_frame_bytes: Final = max_frame_bytes
        self.reconnect_backoff_initial: Final = reconnect_backoff_initial
        self.reconnect_backoff_max: Final = reconnect_backoff_max
        self.phase = NodePhase.CREATED
        """The node's phase (the node changes it; the transport reads it)."""
        self.handlers: dict[int, InboundHandler] = {}
        self.draining: set[int] = set()
        """Commands whose handler still runs while the node is CLOSING (a clean stop's
        drain must finish what it owes: the session owner's 44)."""
        self.replies: Final = ReplyRegistry()
        self.links: Final = PeerTable(on_gone=self.replies.peer_gone)
        self.counters: Final = Counters()
        self.corked = 0
        """Readers handling a burst of frames (see connection.py)."""
        self.send_streak = 0
        """Direct writes since the last yield (see connection.py)."""
        self.readers: trio.Nursery | None = None
        """Where connections start their reader tasks (the node's network nursery)."""
        self.reading: _Reader | None = None
        """The reader handling a lone frame right now, while its inbound handler runs (it
        may run the frame's turn itself: :meth:`~.node.MeshNode.reader_handoff`)."""
        self.live: Callable[[MeshName, NodeRid], NodeDescriptor | None] = lambda mesh, rid: None
        """The live descriptor of a peer (the descriptor watcher's view)."""
        self.refresh: Callable[[], Awaitable[None]] = _no_refresh
        """Re-read the descriptors now (the acceptor, on a miss)."""
        self.peer_left: Callable[[], None] = lambda: None
        """A peer said goodbye: look at the descriptors soon."""
        self.connect: Connect = _connection
        self.observe: Observer = _ignore

    @classmethod
    def for_config(
        cls, identity: NodeIdentity, meshes: frozenset[MeshName], config: ServerConfig
    ) -> TransportState:
        return cls(
            identity,
            meshes,
            secret=config.cluster_secret,
            hello_timeout=config.hello_timeout,
            peer_send_queue=config.peer_send_queue,
            peer_send_timeout=config.peer_send_timeout,
            max_frame_bytes=config.max_frame_bytes,
            reconnect_backoff_initial=config.reconnect_backoff_initial,
            reconnect_backoff_max=config.reconnect_backoff_max,
        )

    @property
    def rid(self) -> NodeRid:
        return self.identity.node_rid

    def admitting(self) -> bool:
        # The lease task flips the phase at the local deadline (it sleeps until then,
        # and a renewal in flight is cancelled at it), so the hot path reads one field.
        return self.phase is NodePhase.RUNNING
