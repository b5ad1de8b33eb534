"""Session approvals (spec 10 §3.3 EVICT, §7.7): decisions an application caches for one
session on one node — "always allow this tool in this session" — that must not outlive the
session.

They are node-local: another node's ``delete_session`` cannot reach this node's copy, so
every node discards a session's approvals when it hears that session's EVICT (release and
delete send one), and the node that releases or deletes discards its own at once. Holder
loss does not discard them (recovery is turn-scoped, §6.3 D), nor does closing an idle
handle (the session lives on).
"""

from __future__ import annotations

from typing import final

from .ids import SessionId

__all__ = ["SessionApprovals"]


@final
class SessionApprovals:
    """One session's approvals on this node, as a turn (``TurnInput.approvals``) or the
    application (``SessionRouter.approvals``) sees them."""

    def __init__(self, store: dict[SessionId, set[str]], session_id: SessionId) -> None:
        self._store = store
        self.session_id = session_id

    def grant(self, approval: str) -> None:
        if not isinstance(approval, str) or not approval:
            raise ValueError(f"an approval is a non-empty str, got {approval!r}")
        self._store.setdefault(self.session_id, set()).add(approval)

    def is_granted(self, approval: str) -> bool:
        return approval in self._store.get(self.session_id, ())

    def granted(self) -> frozenset[str]:
        return frozenset(self._store.get(self.session_id, ()))
