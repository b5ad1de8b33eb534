"""Submitting one command 39 the routing component does not carry itself: a cold-activation
envelope (route kind 2) to its target, and a losing target's one forward (route kind 1 with
the original operation id) to the Ready owner.

Both follow the delivery rules (:mod:`zlink_trio.routing.deliver`): a peer without an
admitted connection is dialed now and waited for at most ``connect_timeout``; a peer that
cannot be reached before anything was sent raises :class:`TargetUnreachable` (nothing was
sent: the caller may choose another target); once sent, a message is never sent again —
its request waits for its one terminal over any later connection until the peer's
lifecycle ends (``Unavailable``) or the caller's deadline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import trio

from ..errors import DeadlineExceeded, Unavailable
from ..ids import NodeRid
from ..mesh.api import (
    LinkLost,
    MeshNodeApi,
    PeerAddress,
    PeerGone,
    PeerNotAdmitted,
    PeerState,
    PendingReply,
    connect_until,
)
from ..objects.sinks import raise_for_failure
from ..wire.enums import MessageKind
from ..wire.records import SpotDirectRoute, TerminalReply
from ..wire.tails import ReplyPayloadTail

__all__ = ["TargetUnreachable", "reply_payload", "submit", "terminal_of"]

_SEND: Final = MessageKind.SEND


class TargetUnreachable(Exception):
    """The peer could not be reached before anything was sent to it."""

    def __init__(self, node_rid: NodeRid, why: str) -> None:
        super().__init__(f"node {node_rid} cannot be reached: {why}")
        self.node_rid = node_rid
        self.why = why


async def submit(
    node: MeshNodeApi,
    peer: PeerAddress,
    build: Callable[[int], SpotDirectRoute],
    kind: MessageKind,
    *,
    deadline: float,
    connect_timeout: float,
    what: str,
) -> PendingReply | None:
    """Send ``build(correlation)`` to ``peer`` once: None for a send (admitted on the
    connection), the pending reply of a request. ``what`` names the target in errors.

    Raises:
        TargetUnreachable: nothing was sent (the peer is GONE, or its dial failed).
        Unavailable: the writer lane stayed full (nothing was sent).
    """
    refreshed = False
    while True:
        state = node.peer_state(peer)
        if state is PeerState.GONE and not refreshed:
            refreshed = True  # the descriptor came from the Store: our view may lag
            await node.refresh_peers()
            continue
        if state is PeerState.GONE:
            raise TargetUnreachable(peer.node_rid, "its lifecycle ended")
        if state is PeerState.CONNECTING:
            give_up = trio.current_time() + connect_timeout
            if deadline <= give_up:
                state = await node.connect(peer)  # the caller's own scope bounds it
            else:
                state = await connect_until(node, peer, give_up)
            if state is PeerState.CONNECTING:
                raise TargetUnreachable(peer.node_rid, "it cannot be dialed")
            continue
        try:
            if kind is _SEND:
                await node.send(peer, build(0))  # a send carries no correlation
                return None
            return await node.request_with(peer, build)
        except PeerNotAdmitted:
            await trio.lowlevel.checkpoint()
            continue
        except DeadlineExceeded:
            raise Unavailable(
                f"{what}: the connection stayed congested; the message was not sent"
            ) from None


async def terminal_of(node: MeshNodeApi, pending: PendingReply, what: str) -> TerminalReply:
    """The one terminal of a request that went out (never re-sent: after a broken
    connection its reply may still come over the next one)."""
    while True:
        try:
            terminal: TerminalReply = await pending.wait()
        except PeerGone:
            refused = node.admission_error()
            if refused is not None:
                raise refused from None
            raise Unavailable(f"{what}: its node's lifecycle ended before the reply") from None
        except LinkLost:
            continue
        return terminal


def reply_payload(terminal: TerminalReply) -> bytes | None:
    """The reply bytes of an application request's terminal; raises the error it carries."""
    raise_for_failure(terminal)
    tail = terminal.tail
    return tail.payload if isinstance(tail, ReplyPayloadTail) else None
