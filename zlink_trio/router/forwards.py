"""Callers waiting for a turn this node does not run (spec 10 §7.1 F7, §9.1, §9.2 row 3).

A :class:`Forward` is one waiting result handle, indexed by the inbound message it was
handed over as (when it was) and by its idempotency key (when it has one), so a TURN_RESULT
naming either — and a holder-loss announcement naming only the key (§6.3 D) — finds it.
"""

from __future__ import annotations

from typing import final

import trio

from .disposition import TurnFuture
from .ids import IdempotencyKey, InboundMessageId, SessionId

__all__ = ["Forward", "Forwards"]


@final
class Forward:
    """A caller waiting for a turn another node (or a later pass) runs."""

    def __init__(
        self,
        session_id: SessionId,
        message_id: InboundMessageId | None,
        key: IdempotencyKey | None,
        future: TurnFuture,
    ) -> None:
        self.session_id = session_id
        self.message_id = message_id
        """None when the call attached by key to a turn already in flight (§9.2 row 3)."""
        self.key = key
        self.future = future
        self.scope = trio.CancelScope()
        """The waiter task's scope: cancelled once the future completes."""


@final
class Forwards:
    """The node's waiting forwards, by message id and by idempotency key."""

    def __init__(self) -> None:
        self._all: dict[int, Forward] = {}
        self._by_message: dict[InboundMessageId, Forward] = {}
        self._by_key: dict[IdempotencyKey, dict[int, Forward]] = {}

    def add(self, forward: Forward) -> None:
        self._all[id(forward)] = forward
        if forward.message_id is not None:
            self._by_message[forward.message_id] = forward
        if forward.key is not None:
            self._by_key.setdefault(forward.key, {})[id(forward)] = forward

    def drop(self, forward: Forward) -> None:
        self._all.pop(id(forward), None)
        if forward.message_id is not None and self._by_message.get(forward.message_id) is forward:
            del self._by_message[forward.message_id]
        if forward.key is not None:
            waiting = self._by_key.get(forward.key)
            if waiting is not None:
                waiting.pop(id(forward), None)
                if not waiting:
                    del self._by_key[forward.key]

    def named(
        self, message_id: InboundMessageId | None, key: IdempotencyKey | None
    ) -> list[Forward]:
        """The forwards a result for ``message_id`` and/or ``key`` answers (each once)."""
        found: dict[int, Forward] = {}
        if message_id is not None and (f := self._by_message.get(message_id)) is not None:
            found[id(f)] = f
        if key is not None:
            found.update(self._by_key.get(key, {}))
        return list(found.values())

    def of_session(self, session_id: SessionId) -> list[Forward]:
        return [f for f in self._all.values() if f.session_id == session_id]

    def all(self) -> list[Forward]:
        return list(self._all.values())

    def __len__(self) -> int:
        return len(self._all)
