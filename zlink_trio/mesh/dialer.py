"""Dialing: one dial loop per connection intent (a task in the node's network nursery).

A node dials while the intent exists, the peer is not admitted and no inbound hello from
it is in progress; failed dials back off exponentially (``reconnect_backoff_initial`` ..
``reconnect_backoff_max``, reset by an admission), and after an admitted connection breaks
the loop waits ``reconnect_backoff_initial`` once before redialing. Each dial (connect +
hello) is bounded by ``hello_timeout``.
"""

from __future__ import annotations

import logging

import trio

from ..errors import ProtocolError
from ..store.api import NodeDescriptor
from .api import PeerIdentity, PeerState
from .frameio import PeerClosed, PeerIO, close_io, open_frame_io
from .handshake import HandshakeRejected, dial_hello
from .links import Link
from .reasons import CloseReason, DropReason
from .state import TransportState
from .stats import NodePhase

__all__ = ["dial_loop", "dial_once"]

logger = logging.getLogger("zlink_trio.mesh")


async def dial_loop(state: TransportState, link: Link, scope: trio.CancelScope) -> None:
    """Dial ``link``'s intent while it exists and the peer is not admitted (see
    :mod:`.links` for why both sides dial); back off exponentially after failures."""
    backoff = state.reconnect_backoff_initial
    try:
        with scope:
            while state.phase is NodePhase.RUNNING or state.phase is NodePhase.CREATED:
                intent = link.intent
                if intent is None:
                    return
                if link.conn is not None:  # admitted (maybe dialed by the peer)
                    await state.links.wait_change(link.address)
                    if link.state is not PeerState.ADMITTED:  # broke: back off, redial
                        await trio.sleep(state.reconnect_backoff_initial)
                    continue
                if link.accepting:  # the peer is dialing us right now
                    await trio.sleep(backoff)
                    continue
                if await dial_once(state, link, intent):
                    backoff = state.reconnect_backoff_initial
                await trio.sleep(backoff)
                backoff = min(backoff * 2, state.reconnect_backoff_max)
    finally:
        if link.dialer is scope:
            link.dialer = None


async def dial_once(state: TransportState, link: Link, intent: NodeDescriptor) -> bool:
    """Connect, hello, run the connection until it ends. True if it was admitted."""
    counters = state.counters
    expected = PeerIdentity(intent.mesh_name, intent.node_rid, intent.node_generation)
    io: PeerIO | None = None
    peer: PeerIdentity | None = None
    link.dialing = True
    try:
        with trio.move_on_after(state.hello_timeout):
            try:
                stream = await trio.open_tcp_stream(intent.endpoint.host, intent.endpoint.port)
            except ValueError as exc:  # a host name the resolver refuses (UnicodeError)
                raise OSError(f"cannot dial {intent.endpoint}: {exc}") from exc
            io = open_frame_io(stream)
            peer = await dial_hello(
                io,
                secret=state.secret,
                local=state.identity,
                expected=expected,
                observe=state.observe,
            )
        if peer is None and io is not None:
            counters.closed(CloseReason.HANDSHAKE_TIMEOUT)
    except (OSError, PeerClosed) as exc:
        logger.debug("dialing %s failed: %s", expected, exc)
    except HandshakeRejected as exc:
        if exc.reason is not None:
            counters.drop(exc.reason)
        counters.closed(CloseReason.HANDSHAKE_FAILED)
        logger.info("hello to %s failed: %s", expected, exc.detail)
    except ProtocolError as exc:
        counters.drop(DropReason.PROTOCOL_ERROR)
        counters.closed(CloseReason.PROTOCOL_ERROR)
        logger.warning("hello to %s: %s", expected, exc)
    finally:
        link.dialing = False
        if peer is None and io is not None:
            await close_io(io)
    if peer is None or io is None:
        return False
    if state.phase is not NodePhase.RUNNING:
        counters.closed(CloseReason.SHUTDOWN)
        await close_io(io)
        return False
    counters.connections_opened += 1
    await state.connect(state, peer, io, True).run()
    return True
