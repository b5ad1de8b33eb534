"""`open_stream_client` against a port that accepts TCP but never answers the websocket
upgrade (a newcomer's `zlink-trio client ws://HOST:PORT/` to the wrong port): a
DeadlineExceeded after `hello_timeout`, not a wait forever."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from zlink_trio.client import open_stream_client
from zlink_trio.errors import DeadlineExceeded


async def test_a_silent_endpoint_is_a_deadline(autojump_clock: trio.testing.MockClock) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def silent(stream: trio.SocketStream) -> None:
        async with stream:
            await trio.sleep_forever()  # reads nothing, answers nothing

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, silent, listeners)
        started = trio.current_time()
        with pytest.raises(DeadlineExceeded, match="did not answer the websocket upgrade"):
            async with open_stream_client(f"ws://127.0.0.1:{port}/", hello_timeout=3.0):
                pass  # pragma: no cover
        assert trio.current_time() - started == pytest.approx(3.0, abs=0.5)
        nursery.cancel_scope.cancel()
