"""One control request to an object's live remote owner (destroy 111, close 48), awaited
for its one terminal: every transport failure is the documented ``Unavailable`` (never a
mesh-internal error), and nothing is ever re-sent (the outcome of a request whose link
broke is unknown; the caller decides)."""

from __future__ import annotations

from typing import Any

import trio

from ..errors import DeadlineExceeded, Unavailable
from ..mesh.api import LinkLost, MeshNodeApi, PeerAddress, PeerNotAdmitted
from ..wire.records import TerminalReply
from .sinks import raise_for_failure

__all__ = ["ask_owner"]


async def ask_owner(
    node: MeshNodeApi, owner: PeerAddress, record: Any, deadline: float, *, name: str, what: str
) -> TerminalReply:
    """Send ``record`` (a request with a ``correlation`` field) to ``owner`` and return its
    OK terminal by ``deadline`` (trio time); a FAILED one raises its public error.

    ``name`` (the object's id) and ``what`` ("destroy", "close") word the errors.

    Raises:
        Unavailable: not connected, the writer lane stayed full (nothing was sent), the
            link broke before the answer (it may have run), or no answer by ``deadline``.
        ShuttingDown: this node is closing (the link broke because of that).
    """
    with trio.move_on_at(deadline):
        try:
            pending = await node.request(owner, record)
        except PeerNotAdmitted:
            raise Unavailable(f"the owner of {name!r} is not connected now") from None
        except DeadlineExceeded:
            # The writer lane to the owner stayed full: nothing was sent.
            raise Unavailable(
                f"the connection to the owner of {name!r} stayed congested; the {what} was not sent"
            ) from None
        try:
            terminal = await pending.wait()
        except LinkLost:
            # Outcome unknown, never re-sent: forget the request (it stays registered
            # otherwise). If this node is closing, that is why: say so.
            pending.discard()
            refused = node.admission_error()
            if refused is not None:
                raise refused from None
            raise Unavailable(
                f"the link to the owner of {name!r} broke before it answered the {what} "
                "(it may have run)"
            ) from None
        return raise_for_failure(terminal)
    raise Unavailable(f"the owner of {name!r} did not answer the {what}")
