"""The demo's browser client: one static page (``static/index.html``) and the list of
the live nodes' STREAM endpoints (``/config.json``), served over plain HTTP on Trio. The
page speaks the JSON subprotocol to a node's STREAM endpoint directly."""

from __future__ import annotations

import json
from importlib import resources
from typing import TYPE_CHECKING, Final

import trio

if TYPE_CHECKING:
    from .run import Demo

__all__ = ["bind_page", "page", "serve_page"]

MAX_REQUEST: Final = 8192
TIMEOUT: Final = 5.0


def page() -> bytes:
    return resources.files("zlink_trio.demo").joinpath("static/index.html").read_bytes()


def _response(status: str, content_type: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Cache-Control: no-store\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


async def bind_page(port: int) -> list[trio.SocketListener]:
    """The page's listeners on ``127.0.0.1:port``, bound before anything else starts (a
    taken port is an ``OSError`` that names it)."""
    try:
        return await trio.open_tcp_listeners(port, host="127.0.0.1")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise OSError(f"--web-port {port}: cannot listen on 127.0.0.1:{port}: {reason}") from exc


async def serve_page(
    demo: Demo,
    listeners: list[trio.SocketListener],
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the page on ``listeners`` (:func:`bind_page`) until cancelled;
    ``nursery.start`` returns the bound port."""
    html = page()

    async def handle(stream: trio.SocketStream) -> None:
        request = b""
        with trio.move_on_after(TIMEOUT):
            while b"\r\n\r\n" not in request and len(request) < MAX_REQUEST:
                chunk = await stream.receive_some(MAX_REQUEST)
                if not chunk:
                    break
                request += chunk
        parts = request.split(b"\r\n", 1)[0].split()
        path = parts[1].split(b"?", 1)[0] if len(parts) == 3 and parts[0] == b"GET" else None
        if path in (b"/", b"/index.html"):
            reply = _response("200 OK", "text/html; charset=utf-8", html)
        elif path == b"/config.json":
            nodes = [{"label": n.label, "url": n.url} for n in demo.nodes if n.url is not None]
            body = json.dumps({"nodes": nodes, "rooms": demo.rooms}).encode()
            reply = _response("200 OK", "application/json", body)
        else:
            reply = _response("404 Not Found", "text/plain", b"not found\n")
        try:
            with trio.move_on_after(TIMEOUT):
                await stream.send_all(reply)
        except trio.BrokenResourceError:
            pass
        finally:
            await stream.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        task_status.started(int(listeners[0].socket.getsockname()[1]))
