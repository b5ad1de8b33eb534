"""Dialing: one dial loop per connection intent (a task in the node's network nursery).

A node dials while the intent exists, the peer is not admitted and no inbound hello from
it is in progress; failed dials back off exponentially (``reconnect_backoff_initial`` ..
``reconnect_backoff_max``, reset by an admission), and after an admitted connection breaks
the loop waits ``reconnect_backoff_initial`` once before redialing. Each dial (connect +
hello) is bounded by ``hello_timeout``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from ..errors import ProtocolError
from ..store.api import NodeDescriptor
from .api import PeerIdentity, PeerState
from .connection import Connection
from .frameio import FrameIO, PeerClosed
from .handshake import HandshakeRejected, dial_hello
from .links import Link
from .reasons import CloseReason, DropReason
from .stats import NodePhase

if TYPE_CHECKING:
    from .node import MeshNode

__all__ = ["dial_loop", "dial_once"]

logger = logging.getLogger("zlink_trio.mesh")


async def dial_loop(node: MeshNode, link: Link, scope: trio.CancelScope) -> None:
    """Dial ``link``'s intent while it exists and the peer is not admitted (see
    :mod:`.links` for why both sides dial); back off exponentially after failures."""
    config = node.config
    backoff = config.reconnect_backoff_initial
    try:
        with scope:
            while node._phase is NodePhase.RUNNING or node._phase is NodePhase.CREATED:
                intent = link.intent
                if intent is None:
                    return
                if link.conn is not None:  # admitted (maybe dialed by the peer)
                    await node._links.wait_change(link.address)
                    if link.state is not PeerState.ADMITTED:  # broke: back off, redial
                        await trio.sleep(config.reconnect_backoff_initial)
                    continue
                if link.accepting:  # the peer is dialing us right now
                    await trio.sleep(backoff)
                    continue
                if await dial_once(node, link, intent):
                    backoff = config.reconnect_backoff_initial
                await trio.sleep(backoff)
                backoff = min(backoff * 2, config.reconnect_backoff_max)
    finally:
        if link.dialer is scope:
            link.dialer = None


async def dial_once(node: MeshNode, link: Link, intent: NodeDescriptor) -> bool:
    """Connect, hello, run the connection until it ends. True if it was admitted."""
    config = node.config
    expected = PeerIdentity(intent.mesh_name, intent.node_rid, intent.node_generation)
    io: FrameIO | None = None
    peer: PeerIdentity | None = None
    link.dialing = True
    try:
        with trio.move_on_after(config.hello_timeout):
            try:
                stream = await trio.open_tcp_stream(intent.endpoint.host, intent.endpoint.port)
            except ValueError as exc:  # a host name the resolver refuses (UnicodeError)
                raise OSError(f"cannot dial {intent.endpoint}: {exc}") from exc
            io = FrameIO.from_stream(stream)
            peer = await dial_hello(
                io,
                secret=config.cluster_secret,
                local=node._identity,
                expected=expected,
                observe=node._observe_handshake,
            )
        if peer is None and io is not None:
            node._counters.closed(CloseReason.HANDSHAKE_TIMEOUT)
    except (OSError, PeerClosed) as exc:
        logger.debug("dialing %s failed: %s", expected, exc)
    except HandshakeRejected as exc:
        if exc.reason is not None:
            node._counters.drop(exc.reason)
        node._counters.closed(CloseReason.HANDSHAKE_FAILED)
        logger.info("hello to %s failed: %s", expected, exc.detail)
    except ProtocolError as exc:
        node._counters.drop(DropReason.PROTOCOL_ERROR)
        node._counters.closed(CloseReason.PROTOCOL_ERROR)
        logger.warning("hello to %s: %s", expected, exc)
    finally:
        link.dialing = False
        if peer is None and io is not None:
            io.close()
    if peer is None or io is None:
        return False
    if node._phase is not NodePhase.RUNNING:
        node._counters.closed(CloseReason.SHUTDOWN)
        io.close()
        return False
    node._counters.connections_opened += 1
    await Connection(node, peer, io, dialed=True).run()
    return True
