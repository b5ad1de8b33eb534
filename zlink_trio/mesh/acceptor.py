"""Accepting: the listener's handler (a task per accepted connection in the node's
network nursery) and the admission check of a proven hello."""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

import trio

from ..errors import ProtocolError
from .api import PeerIdentity
from .connection import Connection
from .frameio import FrameIO
from .handshake import HandshakeRejected, accept_hello
from .links import Link
from .reasons import CloseReason, DropReason

if TYPE_CHECKING:
    from .node import MeshNode

__all__ = ["check_hello", "classify", "serve_inbound"]

logger = logging.getLogger("zlink_trio.mesh")


async def serve_inbound(node: MeshNode, stream: trio.SocketStream) -> None:
    """One accepted connection: the hello (bounded by ``hello_timeout``), then the
    connection until it ends."""
    config = node.config
    io = FrameIO.from_stream(stream)
    admitted: PeerIdentity | None = None
    claimed: list[Link] = []  # the link whose ``accepting`` this hello holds
    try:
        with trio.move_on_after(config.hello_timeout) as scope:
            admitted = await accept_hello(
                io,
                secret=config.cluster_secret,
                local=node._identity,
                meshes=node._meshes,
                check=functools.partial(check_hello, node, claimed),
                observe=node._observe_handshake,
            )
        if scope.cancelled_caught:
            node._counters.closed(CloseReason.HANDSHAKE_TIMEOUT)
    except HandshakeRejected as exc:
        if exc.reason is not None:
            node._counters.drop(exc.reason)
        node._counters.closed(CloseReason.HANDSHAKE_FAILED)
        logger.info("refused a hello: %s", exc.detail)
    except ProtocolError as exc:
        node._counters.drop(DropReason.PROTOCOL_ERROR)
        node._counters.closed(CloseReason.PROTOCOL_ERROR)
        logger.info("refused a hello: %s", exc)
    finally:
        if admitted is None:
            _release_accepting(node, claimed)
            io.close()
    if admitted is None:
        return
    if not node._admitting_now():
        _release_accepting(node, claimed)
        node._counters.closed(CloseReason.SHUTDOWN)
        io.close()
        return
    assert node._watcher is not None
    descriptor = node._watcher.live(admitted.mesh_name, admitted.node_rid)
    if descriptor is not None:
        node._links.add_intent(descriptor)
    node._counters.connections_opened += 1
    conn = Connection(node, admitted, io, dialed=False)
    _release_accepting(node, claimed)  # attached by conn.run() before its first await
    await conn.run()


def _release_accepting(node: MeshNode, claimed: list[Link]) -> None:
    for link in claimed:
        link.accepting -= 1
        node._links.discard_if_unused(link)
    claimed.clear()


async def check_hello(node: MeshNode, claimed: list[Link], peer: PeerIdentity) -> DropReason | None:
    """Admission of a proven hello: admitting, not this node, a live descriptor (refreshed
    once on a miss), no duplicate of a preferred connection."""
    if not node._admitting_now():
        return DropReason.NOT_ADMITTING
    if peer.node_rid == node._rid:
        return DropReason.UNKNOWN_PEER
    reason = classify(node, peer)
    if reason is not None:
        assert node._watcher is not None
        await node._watcher.refresh()
        reason = classify(node, peer)
        if reason is not None:
            return reason
    link = node._links.ensure(peer.address)
    if node._rid.value < peer.node_rid.value and (
        link.dialing or (link.conn is not None and link.conn.preferred)
    ):
        # The connection dialed by the lower NodeRid (this node) is the one both
        # sides keep: one is on its way, or already admitted.
        node._links.discard_if_unused(link)
        return DropReason.DUPLICATE_CONNECTION
    link.accepting += 1
    claimed.append(link)
    return None


def classify(node: MeshNode, peer: PeerIdentity) -> DropReason | None:
    assert node._watcher is not None
    descriptor = node._watcher.live(peer.mesh_name, peer.node_rid)
    if descriptor is None:
        return DropReason.UNKNOWN_PEER
    if descriptor.node_generation != peer.node_generation:
        return DropReason.STALE_GENERATION
    return None
