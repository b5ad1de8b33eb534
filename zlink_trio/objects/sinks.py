"""Terminal sinks: where the one terminal of a request goes.

Local and remote callers get the SAME outcome. Remotely the terminal is a command-20
``TerminalReply`` sent to the requesting peer with the request's correlation; the caller
raises the error its kind names (:func:`raise_for_failure`). Locally a create's terminal is
handed over in memory as the same record (:class:`LocalSink`), and a message's
reply skips the record altogether: a :class:`LocalReply` slot gets the reply bytes, or the
error exactly as a remote caller would rebuild it (:func:`public_error`). Either way the
first delivery wins and later ones are no-ops (terminal once).
"""

from __future__ import annotations

import logging
from typing import Protocol, TypeAlias, final

import attrs
import trio

from ..engine.oneshot import OneShot
from ..errors import ErrorKind, ProtocolError, ZLinkError, error_from_kind
from ..mesh.api import MeshNodeApi, PeerAddress
from ..store.api import Namespace, ObjectKey
from ..wire.codec import decode, encode, evolve
from ..wire.enums import TerminalResult
from ..wire.payloads import TypedPayload
from ..wire.records import TerminalReply
from ..wire.tails import CreateTail, Tail
from ..wire.templates import ok_reply

__all__ = [
    "LocalReply",
    "LocalSink",
    "RecordedTerminal",
    "RemoteSink",
    "ReplySink",
    "TerminalSink",
    "decode_recorded",
    "decode_terminal",
    "encode_terminal",
    "failure",
    "ok",
    "public_error",
    "raise_for_failure",
]

logger = logging.getLogger("zlink_trio.objects")


def failure(error: ZLinkError, tail: CreateTail | None = None) -> TerminalReply:
    """The FAILED terminal (correlation 0) carrying ``error``'s kind and message."""
    return TerminalReply.failed(0, error.kind, error.message, tail)


def _error_of(reply: TerminalReply) -> ZLinkError:
    kind = reply.failure_code if reply.failure_code is not None else ErrorKind.UNAVAILABLE
    return error_from_kind(kind, reply.failure_message or "")


def raise_for_failure(reply: TerminalReply) -> TerminalReply:
    """Return an OK terminal; raise the public error a FAILED one carries."""
    if reply.terminal_result is TerminalResult.OK:
        return reply
    raise _error_of(reply)


def public_error(error: ZLinkError) -> ZLinkError:
    """``error`` as a caller receives it through a terminal: the public class of its kind
    and its (possibly truncated) message; what a remote caller would raise."""
    return _error_of(failure(error))


class TerminalSink(Protocol):
    async def deliver(self, reply: TerminalReply) -> None:
        """Deliver the terminal (its correlation is replaced by the sink's own)."""
        ...


class ReplySink(Protocol):
    """The remote side of a request's terminal (a local request uses a
    :data:`LocalReply` slot directly, without awaiting)."""

    async def reply(self, payload: bytes | None, *, flush: bool = True) -> None:
        """The handler's reply (OK). ``flush=False``: more replies follow at once (the
        Actor's queue is not empty), let them leave together."""
        ...

    async def fail(self, error: ZLinkError) -> None:
        """A typed failure (FAILED with ``error``'s kind and message)."""
        ...


LocalReply: TypeAlias = OneShot[bytes | TypedPayload | None]
"""A local request's terminal slot: ``set(reply)`` (a typed reply is handed over as it
is, not encoded), or ``fail(public_error(error))``."""


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

    def fail(self, error: BaseException) -> None:
        """End the wait with ``error`` (no terminal: the attempt never finished)."""
        self._slot.fail(error)

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
        await self._send(
            TerminalReply(
                correlation=self._correlation,
                terminal_result=reply.terminal_result,
                failure_code=reply.failure_code,
                tail=reply.tail,
                failure_message=reply.failure_message,
            )
        )

    async def reply(self, payload: bytes | None, *, flush: bool = True) -> None:
        if self._done:
            return
        # (:meth:`_send` inlined: the hottest terminal, one coroutine less.)
        self._done = True
        try:
            await self._node.send(self._peer, ok_reply(self._correlation, payload), flush=flush)
        except (ProtocolError, trio.WouldBlock, ZLinkError) as exc:
            await self._not_sent(exc, flush=flush, wait=True)

    async def fail(self, error: ZLinkError) -> None:
        if self._done:
            return
        await self._send(TerminalReply.failed(self._correlation, error.kind, error.message))

    async def fail_nowait(self, error: ZLinkError) -> None:
        """Like :meth:`fail`, but never waits for space in the connection's writer lane
        (for a connection's reader): a full lane loses the terminal, and the requester
        ends at its deadline, as with a frame lost on the wire."""
        if self._done:
            return
        reply = TerminalReply.failed(self._correlation, error.kind, error.message)
        await self._send(reply, wait=False)

    async def _send(
        self, wire_reply: TerminalReply, *, flush: bool = True, wait: bool = True
    ) -> None:
        self._done = True
        try:
            await self._node.send(self._peer, wire_reply, flush=flush, wait=wait)
        except (ProtocolError, trio.WouldBlock, ZLinkError) as exc:
            await self._not_sent(exc, flush=flush, wait=wait)

    async def _not_sent(self, exc: Exception, *, flush: bool, wait: bool) -> None:
        """The terminal did not leave (``exc``, what the send raised)."""
        try:
            if isinstance(exc, ProtocolError):
                # The terminal cannot leave (too big, cannot encode; nothing was queued):
                # a typed failure instead, so the requester never waits for its deadline.
                refused = TerminalReply.failed(
                    self._correlation, ErrorKind.APPLICATION, f"the reply cannot be sent: {exc}"
                )
                await self._node.send(self._peer, refused, flush=flush, wait=wait)
                return
            raise exc
        except trio.WouldBlock:
            logger.info(
                "terminal for correlation %d to %r not sent: the writer lane is full",
                self._correlation,
                self._peer,
            )
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


_SUBJECT_MARK = 0x00
"""First byte of a terminal record that names its subject (a CBOR array, the body of a
command-20 terminal, never starts with 0x00): mark, namespace tag, u16 length of the
UTF-8 object id, the id, then the command-20 body."""
_NAMESPACE_TAGS: dict[Namespace, int] = {Namespace.ACTOR: 1, Namespace.SPOT: 2}
_TAG_NAMESPACES = {tag: namespace for namespace, tag in _NAMESPACE_TAGS.items()}


@attrs.frozen(slots=True)
class RecordedTerminal:
    """A terminal record's content: the terminal and the object its operation was for
    (None for a record that names none: a Join's, or one written before subjects were
    recorded)."""

    reply: TerminalReply
    subject: ObjectKey | None


def encode_terminal(reply: TerminalReply, subject: ObjectKey | None = None) -> bytes:
    """The bytes a durable operation's terminal record keeps: the command-20 terminal,
    prefixed by the object it is about when ``subject`` is given (a create's), so an
    OperationId re-used for an object of another kind or id is never answered with it."""
    body = encode(evolve(reply, correlation=_RECORDED_CORRELATION))
    if subject is None:
        return body
    name = subject.object_id.encode()
    head = bytes((_SUBJECT_MARK, _NAMESPACE_TAGS[subject.namespace]))
    return head + len(name).to_bytes(2, "big") + name + body


def decode_recorded(data: bytes) -> RecordedTerminal:
    """A terminal record's terminal and subject (ProtocolError for a malformed one)."""
    subject: ObjectKey | None = None
    if data[:1] == bytes((_SUBJECT_MARK,)):
        namespace = _TAG_NAMESPACES.get(data[1]) if len(data) > 1 else None
        size = int.from_bytes(data[2:4], "big")
        if namespace is None or len(data) < 4 + size:
            raise ProtocolError("a terminal record names a malformed subject")
        try:
            subject = ObjectKey(namespace, data[4 : 4 + size].decode())
        except (UnicodeDecodeError, ZLinkError):
            raise ProtocolError("a terminal record names a malformed subject") from None
        data = data[4 + size :]
    reply = decode(data)
    if not isinstance(reply, TerminalReply):
        raise ProtocolError("a terminal record does not hold a command 20 terminal")
    return RecordedTerminal(evolve(reply, correlation=0), subject)


def decode_terminal(data: bytes) -> TerminalReply:
    return decode_recorded(data).reply
