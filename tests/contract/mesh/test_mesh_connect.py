"""``MeshNodeApi.connect``: a caller that needs a CONNECTING peer now gets the outcome of
a dial made for it (the dialer's backoff pause is cut short), CONNECTING meaning "cannot
be reached now"; a dial that failed a moment ago is that answer at once (no dial storm);
ADMITTED and GONE are returned as they are (docs/decisions.md, "Fast failure and lazy
reclaim")."""

from __future__ import annotations

import trio
import trio.testing
from mesh_kit import actor_send, address, fast
from trio.testing import MockClock

from zlink_trio.mesh.api import PeerState
from zlink_trio.testing import FaultPlan, node_of, open_cluster
from zlink_trio.wire import Command

BACKOFF = 5.0
"""The dialers' backoff (shorter than the 10 s lease): a redial without a caller waits this
long."""


async def test_connect_dials_now_and_reports_a_refused_dial(autojump_clock: MockClock) -> None:
    """Node 1 crashes; node 0's dialer then pauses 5 s between dials. ``connect`` dials at
    once and answers CONNECTING the same instant (the dial is refused); a second call
    while that failure is fresh (younger than ``reconnect_backoff_initial``) reuses it
    without dialing; ``connect`` to an admitted peer is ADMITTED at once, and to a peer
    whose lifecycle ended GONE."""
    config = fast(reconnect_backoff_initial=BACKOFF, reconnect_backoff_max=BACKOFF)
    with trio.fail_after(120):
        async with open_cluster(3, config=config) as c:
            await c.wait_all_admitted()
            a, b, other = c.servers
            node = node_of(a)
            assert await node.connect(address(other)) is PeerState.ADMITTED
            await c.kill(1)
            while node.peer_state(address(b)) is PeerState.ADMITTED:
                await node.wait_peer_change(address(b))
            await trio.testing.wait_all_tasks_blocked()  # the dialer pauses (5 s)
            start = trio.current_time()
            assert await node.connect(address(b)) is PeerState.CONNECTING
            assert trio.current_time() == start
            # Something listens at the dead node's port now and counts the dials: the
            # next call reuses the failure of a moment ago instead of dialing again.
            endpoint = b.endpoint
            assert endpoint is not None
            listeners = await trio.open_tcp_listeners(endpoint.port, host="127.0.0.1")
            dialed = trio.Event()

            async def count(stream: trio.SocketStream) -> None:
                dialed.set()
                await stream.aclose()

            async with trio.open_nursery() as nursery:
                await nursery.start(trio.serve_listeners, count, listeners)
                assert await node.connect(address(b)) is PeerState.CONNECTING
                assert trio.current_time() == start
                await trio.testing.wait_all_tasks_blocked()
                assert not dialed.is_set()
                await dialed.wait()  # the dialer's own redial, after its pause: it counts
                assert trio.current_time() >= start + BACKOFF
                nursery.cancel_scope.cancel()
            await c.stop(2)
            while node.peer_state(address(other)) is not PeerState.GONE:
                await node.wait_peer_change(address(other))
            assert await node.connect(address(other)) is PeerState.GONE


async def test_connect_to_a_peer_that_only_blipped_is_admitted(autojump_clock: MockClock) -> None:
    """The connection to a live peer is cut (a blip): both dialers would wait their 5 s
    pause before redialing. ``connect`` redials at once and answers ADMITTED."""
    plan = FaultPlan()
    config = fast(reconnect_backoff_initial=BACKOFF, reconnect_backoff_max=BACKOFF)
    with trio.fail_after(120):
        async with open_cluster(2, config=config, fault_plan=plan) as c:
            await c.wait_all_admitted()
            a, b = c.servers
            node = node_of(a)
            plan.cut(command=Command.ACTOR_SEND)
            await node.send(address(b), actor_send(a, b, request=False))
            while node.peer_state(address(b)) is PeerState.ADMITTED:
                await node.wait_peer_change(address(b))
            plan.clear()
            start = trio.current_time()
            assert await node.connect(address(b)) is PeerState.ADMITTED
            assert trio.current_time() == start
