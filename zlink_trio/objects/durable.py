"""Replay of durable lifecycle operations (spec 04 §8.1).

A durable operation (Actor create now; User Spot create and close, join and session
bind later) carries one
OperationId for its whole life. The framework runtime that started it re-sends it under the
SAME OperationId after typed transient transport failures only — no admitted connection
(route absent), the connection breaking before the terminal arrived (a lost reply or a
handover), a congested writer lane — with no attempt limit inside its one deadline. The
target's terminal record makes every replay return the original terminal, so the sender
never guesses whether an attempt ran.

Ends:
* a terminal envelope arrives → returned, never re-sent (even a FAILED one);
* the target's lifecycle ended — its connection intent was removed and no admitted peer is
  left (``PeerState.GONE``, the MeshNode's own transition; no extra monitor here) →
  ``Unavailable`` at once;
* the deadline passes → ``Unavailable`` if no attempt was ever admitted, else
  ``DeadlineExceeded``;
* this node stops admitting (its lease was lost, or it is closing) → ``Unavailable`` /
  ``ShuttingDown`` at once (``MeshNodeApi.admission_error``);
* anything else (encode failure, protocol error) → raised at once, never replayed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import trio

from ..errors import DeadlineExceeded, Unavailable
from ..mesh.api import LinkLost, MeshNodeApi, PeerAddress, PeerNotAdmitted, PeerState
from ..wire.records import TerminalReply

__all__ = ["remaining_ms", "run_durable"]


def remaining_ms(deadline: float, now: float | None = None) -> int:
    """Whole milliseconds left until ``deadline`` (trio time), >= 1; ``now``: the clock
    read already (else it is read here).

    Rounded DOWN (after forgiving float noise below a nanosecond, so 0.2 s is 200, not
    199): the receiver fixes ``arrival + timeout_ms``, which must not fall after the
    sender's deadline -- an owner never starts work its caller has given up on."""
    left = deadline - (trio.current_time() if now is None else now)
    if left == math.inf:
        return 0xFFFF_FFFF
    if not left > 0:  # passed, -inf (an already-cancelled caller scope) or NaN
        return 1
    ms = int(left * 1000 + 1e-6)  # (int() is floor for a positive value, and cheaper)
    if ms < 1:
        return 1
    return ms if ms <= 0xFFFF_FFFF else 0xFFFF_FFFF


async def run_durable(
    node: MeshNodeApi,
    peer: PeerAddress,
    make_record: Callable[[int], Any],
    deadline: float,
    *,
    on_attempt: Callable[[], None] | None = None,
    cleanup: bool = False,
) -> TerminalReply:
    """Send ``make_record(timeout_ms)`` to ``peer`` until its terminal arrives.

    ``make_record`` must build the record with the same OperationId every time (only the
    remaining timeout changes). The operation's one deadline is owned here: wrappers pass
    theirs down and never race it with a timer of their own. ``cleanup``: the operation
    is cleanup this node owes while it stops (a session's disconnect notification, spec
    02 §10), so it is not refused because this node no longer admits new work.
    """
    admitted = False
    refreshed = False
    with trio.move_on_at(deadline):
        while True:
            refused = None if cleanup else node.admission_error()
            if refused is not None:
                # This node lost its lease or is closing: no attempt can be admitted any
                # more (and no peer view will be refreshed): end now, typed.
                await trio.lowlevel.checkpoint()
                raise refused
            state = node.peer_state(peer)
            if state is PeerState.GONE and not refreshed:
                # The target came from the Store; our view of the peers may predate it.
                refreshed = True
                await node.refresh_peers()
                continue
            if state is PeerState.GONE:
                raise Unavailable("the target node's lifecycle ended (intent removed, no peer)")
            if state is PeerState.CONNECTING:
                await node.wait_peer_change(peer)
                continue
            try:
                pending = await node.request(peer, make_record(remaining_ms(deadline)))
            except (PeerNotAdmitted, DeadlineExceeded):
                # The connection went away between the state check and the send, or the
                # writer lane stayed full for the send timeout: transient, go round again.
                await trio.lowlevel.checkpoint()
                continue
            admitted = True
            if on_attempt is not None:
                on_attempt()
            try:
                reply: TerminalReply = await pending.wait()
            except LinkLost:
                pending.discard()
                continue  # replay under the same OperationId once re-admitted
            return reply
    if admitted:
        raise DeadlineExceeded("no terminal before the operation's deadline")
    raise Unavailable("the operation was never admitted before its deadline")
