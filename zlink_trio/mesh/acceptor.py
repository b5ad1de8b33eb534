"""Accepting: the listener's handler (a task per accepted connection in the node's
network nursery) and the admission check of a proven hello."""

from __future__ import annotations

import functools
import logging

import trio

from ..errors import ProtocolError
from .api import PeerIdentity
from .frameio import close_io, open_frame_io
from .handshake import HandshakeRejected, accept_hello
from .links import Link
from .reasons import CloseReason, DropReason
from .state import TransportState

__all__ = ["check_hello", "classify", "serve_inbound"]

logger = logging.getLogger("zlink_trio.mesh")


async def serve_inbound(state: TransportState, stream: trio.abc.Stream) -> None:
    """One accepted connection (any ``trio.abc.Stream``): the hello (bounded by
    ``hello_timeout``), then the connection until it ends."""
    io = open_frame_io(stream)
    counters = state.counters
    admitted: PeerIdentity | None = None
    claimed: list[Link] = []  # the link whose ``accepting`` this hello holds
    try:
        with trio.move_on_after(state.hello_timeout) as scope:
            admitted = await accept_hello(
                io,
                secret=state.secret,
                local=state.identity,
                meshes=state.meshes,
                check=functools.partial(check_hello, state, claimed),
                observe=state.observe,
            )
        if scope.cancelled_caught:
            counters.closed(CloseReason.HANDSHAKE_TIMEOUT)
    except HandshakeRejected as exc:
        if exc.reason is not None:
            counters.drop(exc.reason)
        counters.closed(CloseReason.HANDSHAKE_FAILED)
        logger.info("refused a hello: %s", exc.detail)
    except ProtocolError as exc:
        counters.drop(DropReason.PROTOCOL_ERROR)
        counters.closed(CloseReason.PROTOCOL_ERROR)
        logger.info("refused a hello: %s", exc)
    finally:
        if admitted is None:
            _release_accepting(state, claimed)
            await close_io(io)
    if admitted is None:
        return
    if not state.admitting():
        _release_accepting(state, claimed)
        counters.closed(CloseReason.SHUTDOWN)
        await close_io(io)
        return
    descriptor = state.live(admitted.mesh_name, admitted.node_rid)
    if descriptor is not None:
        state.links.add_intent(descriptor)
    counters.connections_opened += 1
    conn = state.connect(state, admitted, io, False)
    _release_accepting(state, claimed)  # attached by conn.run() before its first await
    await conn.run()


def _release_accepting(state: TransportState, claimed: list[Link]) -> None:
    for link in claimed:
        link.accepting -= 1
        state.links.discard_if_unused(link)
    claimed.clear()


async def check_hello(
    state: TransportState, claimed: list[Link], peer: PeerIdentity
) -> DropReason | None:
    """Admission of a proven hello: admitting, not this node, a live descriptor (refreshed
    once on a miss), no duplicate of a preferred connection."""
    if not state.admitting():
        return DropReason.NOT_ADMITTING
    if peer.node_rid == state.rid:
        return DropReason.UNKNOWN_PEER
    reason = classify(state, peer)
    if reason is not None:
        await state.refresh()
        reason = classify(state, peer)
        if reason is not None:
            return reason
    link = state.links.ensure(peer.address)
    if state.rid.value < peer.node_rid.value and (
        link.dialing or (link.conn is not None and link.conn.preferred)
    ):
        # The connection dialed by the lower NodeRid (this node) is the one both
        # sides keep: one is on its way, or already admitted.
        state.links.discard_if_unused(link)
        return DropReason.DUPLICATE_CONNECTION
    link.accepting += 1
    claimed.append(link)
    return None


def classify(state: TransportState, peer: PeerIdentity) -> DropReason | None:
    descriptor = state.live(peer.mesh_name, peer.node_rid)
    if descriptor is None:
        return DropReason.UNKNOWN_PEER
    if descriptor.node_generation != peer.node_generation:
        return DropReason.STALE_GENERATION
    return None
