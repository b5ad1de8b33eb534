"""Dialing: one dial loop per connection intent (a task in the node's network nursery).

A node dials while the intent exists, the peer is not admitted and no inbound hello from
it is in progress; failed dials back off exponentially (``reconnect_backoff_initial`` ..
``reconnect_backoff_max``, reset by an admission), and after an admitted connection breaks
the loop waits ``reconnect_backoff_initial`` once before redialing. Each dial (connect +
hello) is bounded by ``hello_timeout``.

A caller that needs the peer now (a message whose owner is not connected,
:meth:`~.node.MeshNode.connect`) ends a backoff pause early (``Link.kick``): the next dial
starts at once, and its outcome is the caller's answer. A dial that ends without an
admission is reported to the peer table (:meth:`~.links.PeerTable.dial_failed`), except
when the acceptor declined the hello as a duplicate of its own dial (the peer is alive:
its connection is on the way).
"""

from __future__ import annotations

import enum
import logging

import trio

from ..errors import ProtocolError
from ..store.api import NodeDescriptor
from ..wire import GoodbyeReason
from .api import PeerIdentity, PeerState
from .frameio import PeerClosed, PeerIO, close_io, open_frame_io
from .handshake import HandshakeRejected, dial_hello
from .links import Link
from .reasons import CloseReason, DropReason
from .state import TransportState
from .stats import NodePhase

__all__ = ["Dialed", "dial_loop", "dial_once"]

logger = logging.getLogger("zlink_trio.mesh")


class Dialed(enum.Enum):
    """How one dial ended."""

    ADMITTED = "admitted"
    """Admitted (and run until the connection ended)."""
    FAILED = "failed"
    """Not admitted: refused, unreachable, the hello failed or timed out."""
    DECLINED = "declined"
    """Not admitted, but the peer is alive: it declined the hello as a duplicate of its
    own dial, or this node stopped running meanwhile."""


async def _pause(link: Link, seconds: float) -> None:
    """Sleep ``seconds``, or less if a caller needs the peer now (``link.kick``)."""
    kick = link.kick
    if kick is None:
        kick = link.kick = trio.Event()
    if not kick.is_set():
        with trio.move_on_after(seconds):
            await kick.wait()
    link.kick = None


async def dial_loop(state: TransportState, link: Link, scope: trio.CancelScope) -> None:
    """Dial ``link``'s intent while it exists and the peer is not admitted (see
    :mod:`.links` for why both sides dial); back off exponentially after failures."""
    backoff = state.reconnect_backoff_initial
    links = state.links
    try:
        with scope:
            while state.phase is NodePhase.RUNNING or state.phase is NodePhase.CREATED:
                intent = link.intent
                if intent is None:
                    return
                if link.conn is not None:  # admitted (maybe dialed by the peer)
                    await links.wait_change(link.address)
                    if link.state is not PeerState.ADMITTED:  # broke: back off, redial
                        await _pause(link, state.reconnect_backoff_initial)
                    continue
                if link.accepting:  # the peer is dialing us right now
                    await _pause(link, backoff)
                    continue
                if await dial_once(state, link, intent) is Dialed.ADMITTED:
                    backoff = state.reconnect_backoff_initial
                await _pause(link, backoff)
                backoff = min(backoff * 2, state.reconnect_backoff_max)
    finally:
        if link.dialer is scope:
            link.dialer = None


async def dial_once(state: TransportState, link: Link, intent: NodeDescriptor) -> Dialed:
    """Connect, hello, run the connection until it ends. A failed dial is reported to the
    peer table as soon as it is known (:meth:`~.links.PeerTable.dial_failed`)."""
    counters = state.counters
    expected = PeerIdentity(intent.mesh_name, intent.node_rid, intent.node_generation)
    io: PeerIO | None = None
    peer: PeerIdentity | None = None
    failed = False  # ended without an admission, the peer not known to be alive
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
        if peer is None:
            failed = True
            if io is not None:
                counters.closed(CloseReason.HANDSHAKE_TIMEOUT)
    except (OSError, PeerClosed) as exc:
        failed = True
        logger.debug("dialing %s failed: %s", expected, exc)
    except HandshakeRejected as exc:
        if exc.reason is not None:
            counters.drop(exc.reason)
        counters.closed(CloseReason.HANDSHAKE_FAILED)
        failed = exc.goodbye is not GoodbyeReason.DUPLICATE_CONNECTION
        logger.info("hello to %s failed: %s", expected, exc.detail)
    except ProtocolError as exc:
        failed = True
        counters.drop(DropReason.PROTOCOL_ERROR)
        counters.closed(CloseReason.PROTOCOL_ERROR)
        logger.warning("hello to %s: %s", expected, exc)
    finally:
        link.dialing = False
        if failed:
            state.links.dial_failed(link)  # before the close: its callers learn it now
        if peer is None and io is not None:
            await close_io(io)
    if peer is None or io is None:
        return Dialed.FAILED if failed else Dialed.DECLINED
    if state.phase is not NodePhase.RUNNING:
        counters.closed(CloseReason.SHUTDOWN)
        await close_io(io)
        return Dialed.DECLINED
    counters.connections_opened += 1
    await state.connect(state, peer, io, True).run()
    return Dialed.ADMITTED
