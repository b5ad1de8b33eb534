"""Test helpers for the session router (spec 10): a node crash without its shutdown path."""

from __future__ import annotations

from ..router import SessionRouter

__all__ = ["crash_session_router"]


def crash_session_router(router: SessionRouter) -> None:
    """Tear ``router`` down the way a crash (kill -9, OOM) does, for in-process multi-node
    tests (spec 10 §6.3 D, §10.2): every task of the router is cancelled at once and its
    shutdown path does not run — its running turns are not interrupted or announced, its
    handles are not closed, its leases are not returned (they expire), its idempotency
    reservations are neither finished nor reset, nothing is handed back to the inbox and
    nothing is published. The block serving the router (``open_session_router``) exits; it
    must run in a task of its own, since the cancellation reaches whatever runs inside it.
    """
    router._crash()
