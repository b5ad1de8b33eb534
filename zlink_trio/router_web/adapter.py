"""A websocket front end for one SessionRouter (spec 10 §3.6, §9.2, §10.1): JSON text frames.

A client sends requests, each with its own ``id`` (any JSON string), on one connection:

* ``{"op": "submit", "id", "sessionId", "agentRef", "input", "idempotencyKey"?, "priority"?}``
  → ``{"id", "type": "accepted", "disposition": "EXECUTED_LOCALLY"|"FORWARDED", "turnId"}``,
  then ``{"id", "type": "result", "status": 200, "text"}``;
* ``{"op": "events", "id", "sessionId"}`` → ``{"id", "type": "event", "event": {...}}`` for
  every frame of the session (the router's EVENT payload: ``turnId``, ``type``, …), then
  ``{"id", "type": "end"}`` when the session ends on this node;
* ``{"op": "interrupt", "id", "sessionId", "turnId"?}`` and ``{"op": "release", "id",
  "sessionId"}`` → ``{"id", "type": "ok"}``.

Any failure answers ``{"id", "type": "error", "status", "kind", "message"}`` with the
router error's HTTP status (:func:`http_status`): 409 for a conflicting agent or an
idempotency conflict, 503 for a claim failure, a router shutting down, a lost holder; 400
for a malformed request (which touches nothing). Requests run concurrently; a connection's
requests end with it. Bad input never ends the connection except a non-JSON or binary
frame, which closes it cleanly (code 1003).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final, final

import trio
from trio_websocket import (
    ConnectionClosed,
    WebSocketConnection,
    WebSocketRequest,
    WebSocketServer,
    serve_websocket,
)

from ..errors import ErrorKind, ZLinkError
from ..router.events import InterruptReason
from ..router.ids import AgentRef, IdempotencyKey, SessionId, TurnId
from ..router.relay import event_to_wire
from ..router.router import SessionRouter
from ..router.values import Priority, SubmitRequest

__all__ = ["http_status", "serve_router_websocket"]

_BY_KIND: Final[dict[ErrorKind, int]] = {
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.INVALID_OPERATION: 400,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.TYPE_MISMATCH: 409,
    ErrorKind.CAPACITY_EXCEEDED: 503,
    ErrorKind.DEADLINE_EXCEEDED: 504,
    ErrorKind.SHUTTING_DOWN: 503,
}
_UNSUPPORTED_DATA: Final = 1003


def http_status(exc: BaseException) -> int:
    """The HTTP status of a router error (its own ``http_status``, else by kind; 500)."""
    status = getattr(exc, "http_status", None)
    if isinstance(status, int):
        return status
    if isinstance(exc, ZLinkError):
        return _BY_KIND.get(exc.kind, 500)
    return 500


class BadRequest(Exception):
    """A request the adapter refuses (400) before it reaches the router."""


def _text(request: dict[str, Any], field: str, *, optional: bool = False) -> str | None:
    value = request.get(field)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise BadRequest(f"{field}: expected a string")
    return value


@final
class _Connection:
    def __init__(self, router: SessionRouter, ws: WebSocketConnection) -> None:
        self._router = router
        self._ws = ws
        self._lock = trio.Lock()

    async def send(self, frame: dict[str, Any]) -> None:
        async with self._lock:
            await self._ws.send_message(json.dumps(frame, separators=(",", ":")))

    async def error(self, rid: object, exc: BaseException) -> None:
        kind = exc.kind.name if isinstance(exc, ZLinkError) else type(exc).__name__
        if isinstance(exc, BadRequest):
            status, kind = 400, "BAD_REQUEST"
        else:
            status = http_status(exc)
        code = getattr(exc, "code", None)
        frame = {"id": rid, "type": "error", "status": status, "kind": kind, "message": str(exc)}
        if code is not None and hasattr(code, "value"):
            frame["code"] = code.value
        await self.send(frame)

    async def serve(self) -> None:
        async with trio.open_nursery() as nursery:
            try:
                while True:
                    message = await self._ws.get_message()
                    try:
                        if not isinstance(message, str):
                            raise ValueError("binary frame")
                        request = json.loads(message)
                    except ValueError:
                        await self._ws.aclose(_UNSUPPORTED_DATA, "JSON text frames only")
                        return
                    nursery.start_soon(self._run, request)
            except ConnectionClosed:
                pass
            finally:
                nursery.cancel_scope.cancel()

    async def _run(self, request: object) -> None:
        rid = request.get("id") if isinstance(request, dict) else None
        try:
            if not isinstance(request, dict):
                raise BadRequest("a request is a JSON object")
            handler = self._ops.get(str(request.get("op")))
            if handler is None:
                raise BadRequest(f"unknown op {request.get('op')!r}")
            try:
                call = handler(self, rid, request)
            except (TypeError, ValueError) as exc:
                raise BadRequest(str(exc)) from exc
            await call
        except ConnectionClosed:
            return
        except Exception as exc:
            try:
                await self.error(rid, exc)
            except ConnectionClosed:
                return

    @staticmethod
    def _session(request: dict[str, Any]) -> SessionId:
        return SessionId(_text(request, "sessionId") or "")

    def _submit(self, rid: object, request: dict[str, Any]) -> Awaitable[None]:
        key = _text(request, "idempotencyKey", optional=True)
        priority = _text(request, "priority", optional=True)
        try:
            prio = Priority.NEXT if priority is None else Priority[priority]
        except KeyError as exc:
            raise BadRequest(f"unknown priority {priority!r}") from exc
        submit = SubmitRequest(
            session_id=self._session(request),
            agent_ref=AgentRef(_text(request, "agentRef") or ""),
            user_input=_text(request, "input") or "",
            idempotency_key=None if key is None else IdempotencyKey(key),
            priority=prio,
        )
        return self._do_submit(rid, submit)

    async def _do_submit(self, rid: object, submit: SubmitRequest) -> None:
        disposition = await self._router.submit(submit)
        await self.send(
            {
                "id": rid,
                "type": "accepted",
                "disposition": disposition.kind.value,
                "turnId": disposition.turn_id.value,
            }
        )
        result = await disposition.result
        await self.send({"id": rid, "type": "result", "status": 200, "text": result.text})

    def _events(self, rid: object, request: dict[str, Any]) -> Awaitable[None]:
        return self._do_events(rid, self._session(request))

    async def _do_events(self, rid: object, session_id: SessionId) -> None:
        async with self._router.events(session_id) as frames:
            await self.send({"id": rid, "type": "subscribed"})
            async for frame in frames:
                wire = event_to_wire(frame.turn_id, frame.event)
                await self.send({"id": rid, "type": "event", "event": wire})
        await self.send({"id": rid, "type": "end"})

    def _interrupt(self, rid: object, request: dict[str, Any]) -> Awaitable[None]:
        turn = _text(request, "turnId", optional=True)
        self._router.interrupt(
            self._session(request), InterruptReason.USER, None if turn is None else TurnId(turn)
        )
        return self.send({"id": rid, "type": "ok"})

    def _release(self, rid: object, request: dict[str, Any]) -> Awaitable[None]:
        return self._do_release(rid, self._session(request))

    async def _do_release(self, rid: object, session_id: SessionId) -> None:
        await self._router.release_session(session_id)
        await self.send({"id": rid, "type": "ok"})

    _ops: Final[dict[str, Callable[[_Connection, object, dict[str, Any]], Awaitable[None]]]] = {
        "submit": _submit,
        "events": _events,
        "interrupt": _interrupt,
        "release": _release,
    }


async def _handle(router: SessionRouter, request: WebSocketRequest) -> None:
    try:
        ws = await request.accept()
    except ConnectionClosed:
        return
    await _Connection(router, ws).serve()


async def serve_router_websocket(
    router: SessionRouter,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[WebSocketServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the adapter until cancelled (``await nursery.start(...)`` answers the server,
    whose ``port`` is the bound one when ``port`` was 0)."""
    await serve_websocket(
        partial(_handle, router),
        host,
        port,
        None,
        max_message_size=1 << 20,
        task_status=task_status,
    )
