"""The metrics and health HTTP endpoint of one node (a minimal HTTP/1.1 server on Trio).

Every connection is one request: ``GET /metrics`` or ``GET /health``; anything else is 404,
a malformed or slow request is closed. The Store latency probe runs beside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import attrs
import trio
from prometheus_client import CONTENT_TYPE_LATEST, Histogram, generate_latest

from ..mesh.lease import LeaseHeld
from .collector import new_registry

if TYPE_CHECKING:
    from ..server import Server

__all__ = ["MetricsEndpoint", "serve_metrics"]

MAX_REQUEST: Final = 8192
REQUEST_TIMEOUT: Final = 5.0


@attrs.frozen
class MetricsEndpoint:
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"


def healthy(server: Server) -> bool:
    node = server.statistics().node
    return node.admitting and isinstance(node.lease, LeaseHeld)


async def _probe(server: Server, latency: Histogram, interval: float) -> None:
    from ..server import runtime_of

    store = runtime_of(server).store
    if store is None:
        return
    while True:
        started = trio.current_time()
        try:
            with trio.fail_after(max(interval, 1.0)):
                await store.now()
        except Exception:  # an outage is visible as a gap (and the node's own lease metrics)
            pass
        else:
            latency.observe(trio.current_time() - started)
        await trio.sleep(interval)


def _response(status: str, content_type: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


async def serve_metrics(
    server: Server,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    probe_interval: float = 1.0,
    listeners: list[trio.SocketListener] | None = None,
    task_status: trio.TaskStatus[MetricsEndpoint] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``/metrics`` and ``/health`` of ``server`` on ``host:port`` until cancelled;
    started with ``nursery.start``, which returns the bound :class:`MetricsEndpoint`.
    ``listeners`` already bound (``trio.open_tcp_listeners``) are used instead of binding
    ``host:port`` (so a caller can report a taken port before anything else starts)."""
    registry, latency = new_registry(server)

    async def handle(stream: trio.SocketStream) -> None:
        request = b""
        with trio.move_on_after(REQUEST_TIMEOUT):
            while b"\r\n\r\n" not in request and len(request) < MAX_REQUEST:
                chunk = await stream.receive_some(MAX_REQUEST)
                if not chunk:
                    break
                request += chunk
        parts = request.split(b"\r\n", 1)[0].split()
        if len(parts) != 3 or parts[0] != b"GET":
            reply = _response("400 Bad Request", "text/plain", b"bad request\n")
        elif parts[1] == b"/metrics":
            reply = _response("200 OK", CONTENT_TYPE_LATEST, generate_latest(registry))
        elif parts[1] == b"/health":
            ok = healthy(server)
            reply = _response(
                "200 OK" if ok else "503 Service Unavailable",
                "text/plain",
                b"ok\n" if ok else b"not running\n",
            )
        else:
            reply = _response("404 Not Found", "text/plain", b"not found\n")
        try:
            with trio.move_on_after(REQUEST_TIMEOUT):
                await stream.send_all(reply)
        except trio.BrokenResourceError:
            pass
        finally:
            await stream.aclose()

    async with trio.open_nursery() as nursery:
        if listeners is None:
            listeners = await trio.open_tcp_listeners(port, host=host)
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        bound = listeners[0].socket.getsockname()
        nursery.start_soon(_probe, server, latency, probe_interval)
        task_status.started(MetricsEndpoint(str(bound[0]), int(bound[1])))
