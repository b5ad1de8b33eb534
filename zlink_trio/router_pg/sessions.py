"""PostgreSQL SessionLeaseStore and SessionRecordStore (spec 10 §5.3, §7.3, §7.4).

Leases: one row per session; an acquisition is one upsert that replaces only an expired
row, with a token from a database sequence (so a later acquisition always has a larger
token). Records: one row per session with its fence and its transcript (one canonical JSON
text per entry); a write whose token is below the fence raises FencingRejected (ZL101).
Expiry is the database's: live means ``router_now() < expires_at``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, final

from ..router.ids import AgentRef, NodeId, SessionId, TurnId
from ..router.primitives import from_text, to_text
from ..router.records import (
    LeaseGranted,
    LeaseHeld,
    LeaseOutcome,
    SessionLease,
    SessionRecordView,
    TranscriptEntry,
)
from ._db import RouterDatabase, text_of, utf8

__all__ = ["PostgresSessionLeaseStore", "PostgresSessionRecordStore"]


def _check_ttl(ttl: float) -> float:
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < 1e15:
        raise ValueError(f"ttl must be > 0, got {ttl!r}")
    return float(ttl)


@final
class PostgresSessionLeaseStore:
    """:class:`~zlink_trio.router.spi.SessionLeaseStore` on PostgreSQL."""

    def __init__(self, db: RouterDatabase) -> None:
        self._db = db
        q = db.q
        self._acquire = (
            f"SELECT granted, holder_id, fencing_token, expires_at"
            f" FROM {q}.router_try_acquire($1, $2, $3)"
        )
        live = f"expires_at > {q}.router_now()"
        self._renew = (
            f"UPDATE {q}.router_leases SET expires_at = {q}.router_now() + $3"
            f" WHERE session_id = $1 AND fencing_token = $2 AND {live} RETURNING expires_at"
        )
        self._release = (
            f"DELETE FROM {q}.router_leases"
            f" WHERE session_id = $1 AND fencing_token = $2 AND {live} RETURNING true"
        )
        self._current = (
            f"SELECT holder_id, fencing_token, expires_at FROM {q}.router_leases"
            f" WHERE session_id = $1 AND {live}"
        )

    def _lease(self, session_id: SessionId, row: Any) -> SessionLease:
        return SessionLease(
            session_id=session_id,
            holder_id=NodeId(text_of(row["holder_id"]) or ""),
            fencing_token=int(row["fencing_token"]),
            expires_at=self._db.local(float(row["expires_at"])),
        )

    async def try_acquire(
        self, session_id: SessionId, holder_id: NodeId, ttl: float
    ) -> LeaseOutcome:
        step = _check_ttl(ttl)
        # Not idempotent: a lost acquisition may have granted (the TTL frees it).
        row = await self._db.call(
            "fetchrow",
            self._acquire,
            utf8(session_id.value),
            utf8(holder_id.value),
            step,
            idempotent=False,
        )
        lease = self._lease(session_id, row)
        if row["granted"]:
            return LeaseGranted(lease)
        return LeaseHeld(lease.holder_id, lease.expires_at)

    async def renew(self, lease: SessionLease, ttl: float) -> SessionLease | None:
        step = _check_ttl(ttl)
        expires = await self._db.call(
            "fetchval",
            self._renew,
            utf8(lease.session_id.value),
            lease.fencing_token,
            step,
            idempotent=True,
        )
        if expires is None:
            return None
        return SessionLease(
            session_id=lease.session_id,
            holder_id=lease.holder_id,
            fencing_token=lease.fencing_token,
            expires_at=self._db.local(float(expires)),
        )

    async def release(self, lease: SessionLease) -> bool:
        done = await self._db.call(
            "fetchval",
            self._release,
            utf8(lease.session_id.value),
            lease.fencing_token,
            idempotent=True,
        )
        return bool(done)

    async def current(self, session_id: SessionId) -> SessionLease | None:
        row = await self._db.read("fetchrow", self._current, utf8(session_id.value))
        return None if row is None else self._lease(session_id, row)


def _entry_text(entry: TranscriptEntry) -> str:
    return to_text(
        {
            "role": entry.role,
            "text": entry.text,
            "turnId": None if entry.turn_id is None else entry.turn_id.value,
        }
    )


def _entry(text: str) -> TranscriptEntry:
    raw: Any = from_text(text)
    turn = raw.get("turnId")
    return TranscriptEntry(
        str(raw["role"]), str(raw["text"]), None if turn is None else TurnId(str(turn))
    )


@final
class PostgresSessionRecordStore:
    """:class:`~zlink_trio.router.spi.SessionRecordStore` on PostgreSQL."""

    def __init__(self, db: RouterDatabase) -> None:
        self._db = db
        q = db.q
        cols = "session_id, agent_ref, fence, transcript"
        self._load = f"SELECT {cols} FROM {q}.router_records WHERE session_id = $1"
        self._provision = f"SELECT {cols} FROM {q}.router_provision($1, $2, $3)"
        self._append = f"SELECT {cols} FROM {q}.router_append($1, $2, $3)"
        self._delete = f"SELECT {q}.router_delete($1, $2)"

    @staticmethod
    def _view(session_id: SessionId, row: Any) -> SessionRecordView:
        return SessionRecordView(
            session_id=session_id,
            agent_ref=AgentRef(text_of(row["agent_ref"]) or ""),
            transcript=tuple(_entry(t) for t in row["transcript"]),
            fence=int(row["fence"]),
        )

    async def load(self, session_id: SessionId) -> SessionRecordView | None:
        row = await self._db.read("fetchrow", self._load, utf8(session_id.value))
        return None if row is None else self._view(session_id, row)

    async def provision(
        self, session_id: SessionId, agent_ref: AgentRef, fencing_token: int
    ) -> SessionRecordView:
        row = await self._db.call(
            "fetchrow",
            self._provision,
            utf8(session_id.value),
            utf8(agent_ref.value),
            int(fencing_token),
            idempotent=True,  # the same provision twice leaves the same row
        )
        return self._view(session_id, row)

    async def append(
        self, session_id: SessionId, entries: Sequence[TranscriptEntry], fencing_token: int
    ) -> SessionRecordView:
        texts = [_entry_text(e) for e in entries]
        row = await self._db.call(
            "fetchrow",
            self._append,
            utf8(session_id.value),
            texts,
            int(fencing_token),
            idempotent=False,  # a lost append may have committed: never append twice
        )
        return self._view(session_id, row)

    async def delete(self, session_id: SessionId, fencing_token: int) -> bool:
        done = await self._db.call(
            "fetchval", self._delete, utf8(session_id.value), int(fencing_token), idempotent=True
        )
        return bool(done)
