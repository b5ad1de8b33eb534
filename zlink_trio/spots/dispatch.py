"""Application messages of a hosted Spot (direct sends and requests): the queue item and
what one turn does with it -- the handler by (message kind, packet name), a typed payload
accepted (or refused before the handler runs), the reply or typed failure to the sink,
counted per Spot type. The same outcomes as an Actor's message turn."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, final

import trio

from ..engine.oneshot import OneShot
from ..errors import ApplicationError, NotFound, ShuttingDown, ZLinkError
from ..objects.handlers import TypedHandler
from ..objects.sinks import LocalReply, ReplySink, public_error
from ..observe import FlowEvent
from ..wire.enums import MessageKind
from ..wire.payloads import TypedPayload

if TYPE_CHECKING:
    from .hosted import HostedSpot

__all__ = ["SpotMessage", "fail_message", "fail_messages", "run_message"]

logger = logging.getLogger("zlink_trio.spots")


@final
class SpotMessage:
    """An application message accepted by a Spot's application queue (a direct send or
    request). ``sink`` is None for a one-way send, a :data:`LocalReply` slot for a local
    request, a :class:`ReplySink` for a remote one; ``payload`` is bytes, or a
    :class:`TypedPayload` handed over in-process; a request whose ``deadline`` (trio time)
    passed while it waited is not run."""

    __slots__ = ("deadline", "kind", "packet", "payload", "sink")

    def __init__(
        self,
        kind: MessageKind,
        packet: str,
        payload: bytes | TypedPayload,
        sink: LocalReply | ReplySink | None,
        deadline: float,
    ) -> None:
        self.kind = kind
        self.packet = packet
        self.payload = payload
        self.sink = sink
        self.deadline = deadline


async def fail_message(sink: LocalReply | ReplySink, error: ZLinkError) -> None:
    if type(sink) is OneShot:
        sink.fail(public_error(error))
    else:
        await sink.fail(error)


async def fail_messages(items: list[SpotMessage], error: ZLinkError) -> None:
    """Fail the terminal of accepted messages that will never run (a send has none)."""
    for item in items:
        if item.sink is None:
            logger.info("spot send %r not run: %r", item.packet, error)
            continue
        try:
            await fail_message(item.sink, error)
        except Exception:
            logger.exception("failing the terminal of %r", item.packet)


async def run_message(hosted: HostedSpot, item: SpotMessage) -> None:
    """One application-queue turn of ``hosted`` for ``item``: the handler by (kind,
    packet), its typed payload accepted, its reply (or typed failure) to the sink."""
    shared = hosted.shared
    counters = shared.counters
    if item.deadline <= trio.current_time():
        counters.expired += 1
        shared.flow.emit(FlowEvent.REQUEST_EXPIRED, "%r to %r", item.packet, hosted.context)
        return
    sink = item.sink
    handler = shared.spot_type.handlers.get((item.kind, item.packet))
    if handler is None:
        counters.no_handler += 1
        error = NotFound(
            f"spot type {shared.spot_type.stable_type.value!r} has no "
            f"{item.kind.name.lower()} handler for {item.packet!r}"
        )
        shared.flow.emit(FlowEvent.NO_HANDLER, "%s", error.message)
        if sink is not None:
            await fail_message(sink, error)
        return
    payload: object = item.payload
    try:
        if type(handler) is TypedHandler:
            payload = handler.accept(item.payload)
        elif type(payload) is TypedPayload:
            payload = payload.encode()  # a bytes handler gets what a remote one would
    except ZLinkError as exc:  # not the handler's type: it never sees it
        counters.handler_failures += 1
        shared.flow.emit(
            FlowEvent.PAYLOAD_UNDECODABLE,
            "%r to %r not run: %r",
            item.packet,
            hosted.context,
            exc,
        )
        if sink is not None:
            await fail_message(sink, exc)
        return
    hosted.handling = True  # its Join registration scope (members' Joins) is open
    try:
        result: object = await handler(hosted.instance, payload)
    except trio.Cancelled:
        hosted.end_handler(ok=False)
        if type(sink) is OneShot:
            sink.fail(ShuttingDown("the server stopped during the turn"))
        raise
    except ZLinkError as exc:
        hosted.end_handler(ok=False)
        counters.handler_failures += 1
        shared.flow.emit(
            FlowEvent.HANDLER_ERROR,
            "handler %r of %r raised %r",
            item.packet,
            hosted.context,
            exc,
        )
        if sink is not None:
            await fail_message(sink, exc)
        return
    except Exception as exc:
        hosted.end_handler(ok=False)
        counters.handler_failures += 1
        shared.flow.emit(
            FlowEvent.HANDLER_CRASHED,
            "handler %r of %r raised %r",
            item.packet,
            hosted.context,
            exc,
            traceback=True,
        )
        if sink is not None:
            await fail_message(sink, ApplicationError(f"{type(exc).__name__}: {exc}"))
        return
    if sink is None:
        hosted.end_handler(ok=True)
        counters.packets += 1
        return
    counters.requests += 1
    await _reply(hosted, item, sink, result)


async def _reply(
    hosted: HostedSpot, item: SpotMessage, sink: LocalReply | ReplySink, result: object
) -> None:
    """Shape (and, for a remote caller, encode) the reply, close the handler's Join
    scope (a shaping failure is a handler failure: its registrations are discarded), then
    write the reply."""
    if result is not None:
        if type(result) is TypedPayload:
            if type(sink) is not OneShot:  # in-process the reply is not encoded
                try:
                    result = result.encode()
                except ZLinkError as exc:
                    hosted.end_handler(ok=False)
                    await fail_message(sink, ApplicationError(exc.message))
                    return
        elif isinstance(result, bytearray | memoryview):
            result = bytes(result)
        elif type(result) is not bytes:
            hosted.end_handler(ok=False)
            await fail_message(
                sink,
                ApplicationError(
                    f"handler {item.packet!r} returned {type(result).__name__}, not bytes"
                ),
            )
            return
        max_reply = hosted.shared.max_reply
        if type(result) is bytes and len(result) > max_reply:
            hosted.end_handler(ok=False)
            await fail_message(
                sink, ApplicationError(f"reply of {len(result)} bytes exceeds {max_reply}")
            )
            return
    hosted.end_handler(ok=True)
    if type(sink) is OneShot:
        sink.set(result)
    else:
        assert result is None or type(result) is bytes
        lane = hosted.lane
        await sink.reply(result, flush=lane is None or lane.backlog == 0)
