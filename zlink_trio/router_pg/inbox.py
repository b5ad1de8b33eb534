"""PostgreSQL SessionInbox (spec 10 §5.6): one row per message, its envelope as JSON text.

``collect`` is one ``DELETE … RETURNING``: every message it returns is gone for every
other collector (two concurrent collects never take the same message), ordered by
(priority, deliveredAt, delivery order) like the in-memory inbox.
"""

from __future__ import annotations

from typing import final

from ..router.ids import SessionId
from ..router.inbox import InboundMessage
from ..router.primitives import from_text, to_text
from ..router.values import Priority
from ._db import RouterDatabase, text_of, utf8

__all__ = ["PostgresSessionInbox"]


@final
class PostgresSessionInbox:
    """:class:`~zlink_trio.router.spi.SessionInbox` on PostgreSQL."""

    def __init__(self, db: RouterDatabase) -> None:
        self._db = db
        q = db.q
        self._deliver = (
            f"INSERT INTO {q}.router_inbox (session_id, priority, delivered_at, body)"
            " VALUES ($1, $2, $3, $4)"
        )
        self._collect = (
            f"DELETE FROM {q}.router_inbox WHERE session_id = $1 AND priority <= $2"
            " RETURNING priority, delivered_at, seq, body"
        )
        self._pending = f"SELECT EXISTS (SELECT 1 FROM {q}.router_inbox WHERE session_id = $1)"
        self._orphans = (
            f"SELECT session_id FROM {q}.router_inbox WHERE stored_at < $1"
            " GROUP BY session_id ORDER BY min(stored_at), min(seq) LIMIT $2"
        )
        self._purge = (
            f"WITH gone AS (DELETE FROM {q}.router_inbox WHERE session_id = $1 RETURNING 1)"
            " SELECT count(*) FROM gone"
        )

    async def deliver(self, message: InboundMessage) -> None:
        text = to_text(message.to_wire())
        await self._db.call(
            "execute",
            self._deliver,
            utf8(message.session_id.value),
            int(message.priority),
            float(message.delivered_at),
            text,
            idempotent=False,  # a lost delivery may have committed: never deliver twice
        )

    async def collect(self, session_id: SessionId, up_to: Priority) -> tuple[InboundMessage, ...]:
        rows = await self._db.call(
            "fetch", self._collect, utf8(session_id.value), int(up_to), idempotent=False
        )
        taken = sorted(rows, key=lambda r: (r["priority"], r["delivered_at"], r["seq"]))
        out: list[InboundMessage] = []
        for row in taken:
            wire = from_text(row["body"])
            assert isinstance(wire, dict)
            out.append(InboundMessage.from_wire(wire))
        return tuple(out)

    async def has_pending(self, session_id: SessionId) -> bool:
        return bool(await self._db.read("fetchval", self._pending, utf8(session_id.value)))

    async def pending_sessions(
        self, delivered_before: float, limit: int = 100
    ) -> tuple[SessionId, ...]:
        """Sessions with a message stored before ``delivered_before`` (a time in this
        process's Trio clock), oldest first. The age is judged on the database clock
        (``stored_at``), since each row's ``delivered_at`` is its deliverer's own clock."""
        rows = await self._db.read(
            "fetch", self._orphans, self._db.database_time(delivered_before), limit
        )
        return tuple(SessionId(text_of(r["session_id"]) or "") for r in rows)

    async def purge(self, session_id: SessionId) -> int:
        gone = await self._db.call("fetchval", self._purge, utf8(session_id.value), idempotent=True)
        return int(gone)
