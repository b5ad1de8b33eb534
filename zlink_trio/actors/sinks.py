"""Terminal sinks: where the one terminal of a request goes.

Local and remote callers get the SAME terminal value, a command-20 ``TerminalReply``:
locally it is handed over in memory (correlation 0), remotely it is sent to the requesting
peer with the request's correlation. Either way the first delivery wins and later ones are
no-ops (terminal once).
"""

from __future__ import annotations

import logging
from typing import Protocol, final

import attrs

from ..engine.oneshot import OneShot
from ..errors import ErrorKind, ProtocolError, ZLinkError, error_from_kind
from ..mesh.api import MeshNodeApi, PeerAddress
from ..wire.codec import decode, encode
from ..wire.enums import TerminalResult
from ..wire.records import TerminalReply
from ..wire.tails import CreateTail, Tail

__all__ = [
    "LocalSink",
    "RemoteSink",
    "TerminalSink",
    "decode_terminal",
    "encode_terminal",
    "failure",
    "ok",
    "raise_for_failure",
]

logger = logging.getLogger("zlink_trio.actors")


def failure(error: ZLinkError, tail: CreateTail | None = None) -> TerminalReply:
    """The FAILED terminal (correlation 0) carrying ``error``'s kind and message."""
    return TerminalReply.failed(0, error.kind, error.message, tail)


def raise_for_failure(reply: TerminalReply) -> TerminalReply:
    """Return an OK terminal; raise the public error a FAILED one carries."""
    if reply.terminal_result is TerminalResult.OK:
        return reply
    kind = reply.failure_code if reply.failure_code is not None else ErrorKind.UNAVAILABLE
    raise error_from_kind(kind, reply.failure_message or "")


class TerminalSink(Protocol):
    async def deliver(self, reply: TerminalReply) -> None:
        """Deliver the terminal (its correlation is replaced by the sink's own)."""
        ...


@final
class LocalSink:
    """In-process terminal: the caller awaits :meth:`wait`."""

    __slots__ = ("_slot",)

    def __init__(self) -> None:
        self._slot: OneShot[TerminalReply] = OneShot()

    async def deliver(self, reply: TerminalReply) -> None:
        self._slot.set(reply)

    def deliver_nowait(self, reply: TerminalReply) -> None:
        self._slot.set(reply)

    async def wait(self) -> TerminalReply:
        return await self._slot.wait()

    @property
    def done(self) -> bool:
        return self._slot.done


@final
class RemoteSink:
    """Terminal for a peer's request: one command 20 back over the mesh."""

    __slots__ = ("_correlation", "_done", "_node", "_peer")

    def __init__(self, node: MeshNodeApi, peer: PeerAddress, correlation: int) -> None:
        self._node = node
        self._peer = peer
        self._correlation = correlation
        self._done = False

    async def deliver(self, reply: TerminalReply) -> None:
        if self._done:
            return
        self._done = True
        wire_reply = TerminalReply(
            correlation=self._correlation,
            terminal_result=reply.terminal_result,
            failure_code=reply.failure_code,
            tail=reply.tail,
            failure_message=reply.failure_message,
        )
        try:
            await self._node.send(self._peer, wire_reply)
        except ZLinkError as exc:
            # The requester owns the outcome (its deadline); a lost reply is never resent
            # by the application path. Durable operations replay from the source.
            logger.info(
                "terminal for correlation %d to %r not sent: %r", self._correlation, self._peer, exc
            )


def ok(tail: Tail | None = None) -> TerminalReply:
    return TerminalReply.ok(0, tail)


_RECORDED_CORRELATION = 1
"""Terminal records hold the command-20 terminal encoded with this placeholder correlation
(the wire requires a non-zero one); every delivery re-stamps the requester's own."""


def encode_terminal(reply: TerminalReply) -> bytes:
    """The bytes a durable operation's terminal record keeps (re-encodable as-is)."""
    return encode(attrs.evolve(reply, correlation=_RECORDED_CORRELATION))


def decode_terminal(data: bytes) -> TerminalReply:
    reply = decode(data)
    if not isinstance(reply, TerminalReply):
        raise ProtocolError("a terminal record does not hold a command 20 terminal")
    return attrs.evolve(reply, correlation=0)
