"""The demo driver's control channel to a node process (:mod:`zlink_trio.demo.node`).

One JSON object a line on the node's stdin, one request each, answered on its stdout (a
line among its other events) with the request's id::

    -> {"id": 1, "relocate": "player", "name": "player-1", "to": "<node_rid hex>"}
    -> {"id": 2, "relocate": "room", "name": "room-1", "to": "<node_rid hex>"}
    <- {"event": "answer", "id": 1, "ok": true, "result": {"relayed": 3, "committed": true, ...}}
    <- {"event": "answer", "id": 2, "ok": false,
        "error": {"type": "Unavailable", "kind": "UNAVAILABLE", "message": "..."}}

A ``player`` is an Actor (``server.relocate("player-1", to=...)``), a ``room`` a Spot
(``server.relocate(SpotId("room-1"), to=...)``). A line the node cannot read is answered
with the error type ``BadControlRequest`` (kind ``PROTOCOL``; its id if one could be read,
else ``null``); the node goes on reading. The framework's own typed errors
(``Unavailable``, ``NotFound``, ``InvalidOperation``, ...) come back by name and kind, and
the driver raises the error class of that kind (:func:`decode_answer`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

import attrs
import trio

from ..errors import ErrorKind, ProtocolError, ZLinkError, error_from_kind
from ..ids import ActorId, NodeRid, SpotId

if TYPE_CHECKING:
    from ..actors.relocating import RelocationResult
    from ..spots.relocation import SpotRelocationResult

__all__ = [
    "MAX_LINE",
    "BadControlRequest",
    "LineSplitter",
    "RelocateRequest",
    "RelocationAnswer",
    "answer_line",
    "decode_answer",
    "encode_request",
    "parse_request",
    "serve_control",
]

MAX_LINE: Final = 4096
"""The longest control line a node reads (bytes, without its newline); a longer one is
answered BadControlRequest and skipped up to its newline."""

Kind = Literal["player", "room"]


class BadControlRequest(ProtocolError):
    """A control line the node cannot read: not JSON, not an object, a missing or
    ill-typed field, an unknown request, a bad id or NodeRid, or too long."""

    def __init__(self, message: str, request_id: int | str | None = None) -> None:
        super().__init__(message)
        self.request_id: Final = request_id


@attrs.frozen
class RelocateRequest:
    """``relocate <kind> <name> to <to>``."""

    request_id: int | str
    kind: Kind
    target: ActorId | SpotId
    to: NodeRid


@attrs.frozen
class RelocationAnswer:
    """What the driver learns of a move (a RelocationResult or SpotRelocationResult)."""

    relayed: int
    committed: bool
    members: tuple[str, ...] = ()


def encode_request(request_id: int, kind: Kind, name: str, to: NodeRid) -> bytes:
    line = {"id": request_id, "relocate": kind, "name": name, "to": to.hex}
    return json.dumps(line).encode() + b"\n"


def parse_request(line: bytes) -> RelocateRequest:
    """One control line (without its newline).

    Raises:
        BadControlRequest: anything but a well-formed relocate request.
    """
    if len(line) > MAX_LINE:
        raise BadControlRequest(f"a control line is at most {MAX_LINE} bytes")
    try:
        request = json.loads(line)
    except (UnicodeDecodeError, ValueError):  # JSONDecodeError is a ValueError
        raise BadControlRequest("not a JSON line") from None
    if not isinstance(request, dict):
        raise BadControlRequest("a request is a JSON object")
    request_id = request.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        raise BadControlRequest('"id" must be an integer or a string')
    kind, name, to = request.get("relocate"), request.get("name"), request.get("to")
    if kind not in ("player", "room"):
        raise BadControlRequest('"relocate" must be "player" or "room"', request_id)
    if not isinstance(name, str) or not isinstance(to, str):
        raise BadControlRequest('"name" and "to" must be strings', request_id)
    try:
        target: ActorId | SpotId = ActorId(name) if kind == "player" else SpotId(name)
        rid = NodeRid.from_hex(to)
    except ZLinkError as exc:  # InvalidId
        raise BadControlRequest(f"{kind} {name!r} to {to!r}: {exc}", request_id) from None
    return RelocateRequest(request_id, kind, target, rid)


class Relocates(Protocol):
    async def relocate(self, actor: Any, *, to: NodeRid) -> Any: ...


def _result(result: RelocationResult | SpotRelocationResult) -> dict[str, Any]:
    members = getattr(result, "members", ())
    return {
        "relayed": result.relayed,
        "committed": result.committed,
        "source": result.source_rid.hex,
        "target": result.target_rid.hex,
        "owner_generation": result.owner_generation.value,
        "members": [str(m) for m in members],
    }


def _error(request_id: int | str | None, exc: ZLinkError) -> dict[str, Any]:
    error = {"type": type(exc).__name__, "kind": exc.kind.name, "message": exc.message}
    return {"event": "answer", "id": request_id, "ok": False, "error": error}


async def answer_line(server: Relocates, line: bytes) -> dict[str, Any]:
    """The answer to one control line: the move's result, or its typed error."""
    try:
        request = parse_request(line)
    except BadControlRequest as exc:
        return _error(exc.request_id, exc)
    try:
        result = await server.relocate(request.target, to=request.to)
    except ZLinkError as exc:
        return _error(request.request_id, exc)
    return {"event": "answer", "id": request.request_id, "ok": True, "result": _result(result)}


@attrs.define
class LineSplitter:
    """Bytes in, lines out (without their newlines); a line longer than ``limit`` comes
    out as ``None`` once (its bytes are dropped up to its newline)."""

    limit: int = MAX_LINE
    _buffer: bytes = b""
    _skipping: bool = False

    def feed(self, chunk: bytes | bytearray) -> Iterator[bytes | None]:
        self._buffer += bytes(chunk)
        while True:
            line, newline, rest = self._buffer.partition(b"\n")
            if not newline:
                break
            self._buffer = rest
            if self._skipping:
                self._skipping = False
            else:
                yield line if len(line) <= self.limit else None
        if len(self._buffer) > self.limit:
            self._buffer = b""
            if not self._skipping:
                self._skipping = True
                yield None


async def serve_control(
    server: Relocates, stdin: trio.abc.ReceiveStream, emit: Callable[[dict[str, Any]], None]
) -> None:
    """Answer each control line of ``stdin`` in order until its end (the node lives on)."""
    splitter = LineSplitter()
    async for chunk in stdin:
        for line in splitter.feed(chunk):
            if line is None:
                emit(_error(None, BadControlRequest(f"a control line is at most {MAX_LINE} bytes")))
            elif line.strip():
                emit(await answer_line(server, line))


def decode_answer(answer: dict[str, Any]) -> RelocationAnswer:
    """The driver's side: the move's outcome, or the node's error raised as the framework
    error class of its kind (its message names the node's error type).

    Raises:
        ZLinkError: the node's typed error (ProtocolError for a malformed answer).
    """
    if answer.get("ok") is True and isinstance(answer.get("result"), dict):
        result = answer["result"]
        relayed, committed = result.get("relayed"), result.get("committed")
        if isinstance(relayed, int) and isinstance(committed, bool):
            members = tuple(str(m) for m in result.get("members", ()))
            return RelocationAnswer(relayed, committed, members)
    error = answer.get("error")
    if answer.get("ok") is False and isinstance(error, dict):
        kind = ErrorKind.__members__.get(str(error.get("kind")), ErrorKind.PROTOCOL)
        raise error_from_kind(kind, f"{error.get('type')}: {error.get('message')}")
    raise ProtocolError(f"a malformed control answer: {answer!r}")
