"""A relayed request's terminal, back to its original caller: a Join's journal and a
relocation's relay (an Actor's or a Spot's) send what the old owner held to the new one
and answer the held requests through here."""

from __future__ import annotations

import trio

from ..engine.oneshot import OneShot
from ..errors import Unavailable, ZLinkError
from ..mesh.api import LinkLost, PeerGone, PendingReply
from ..wire.records import TerminalReply
from ..wire.tails import ReplyPayloadTail
from .sinks import LocalReply, ReplySink, public_error, raise_for_failure

__all__ = ["fail_terminal", "relay_reply_to"]


async def fail_terminal(sink: LocalReply | ReplySink, error: ZLinkError) -> None:
    """Fail one terminal (a local slot gets the public form of ``error``)."""
    if type(sink) is OneShot:
        sink.fail(public_error(error))
    else:
        await sink.fail(error)


async def relay_reply_to(
    sink: LocalReply | ReplySink, deadline: float, pending: PendingReply, gone: str
) -> None:
    """Wait (until ``deadline``) for the relayed request's reply and give it to ``sink``;
    no reply (the new owner gone or silent) fails it Unavailable(``gone``)."""
    reply: TerminalReply | None = None
    with trio.move_on_at(deadline):
        while True:
            try:
                reply = await pending.wait()
                break
            except PeerGone:
                break
            except LinkLost:
                continue  # a reply may still come over a new connection
    if reply is None:
        pending.discard()
        await fail_terminal(sink, Unavailable(gone))
        return
    try:
        raise_for_failure(reply)
    except ZLinkError as exc:
        await fail_terminal(sink, exc)
        return
    tail = reply.tail
    payload = tail.payload if isinstance(tail, ReplyPayloadTail) else None
    if type(sink) is OneShot:
        sink.set(payload)
    else:
        await sink.reply(payload)
