"""PostgreSQL IdempotencyStore (spec 10 §6.3 D, §9.2, §14): one row per key.

The lifetimes of :mod:`zlink_trio.router.idempotency`, on the database's clock: a held
IN_FLIGHT row has no expiry and is stale once ``last_touched_at < router_now() -
secondary``; a holderless one expires at release + forward TTL, a DONE one at done +
primary TTL. Every transition is one statement (``router_idem_put``,
``router_idem_take``, or a conditional UPDATE/DELETE), so concurrent callers see one
winner. Results are stored as canonical JSON text.
"""

from __future__ import annotations

from typing import Any, final

from ..router.idempotency import (
    AlreadyDone,
    HolderAcquired,
    HolderRejected,
    IdempotencyEntry,
    IdempotencyState,
    IdempotencyTtls,
    InFlight,
    InputConflict,
    MarkDoneOutcome,
    Marked,
    MarkRejected,
    PutOutcome,
    Rejection,
    Reserved,
    StaleInFlight,
    TakeoverOutcome,
)
from ..router.ids import IdempotencyKey, ReserverId, SessionId
from ..router.primitives import JsonMap, check_json_map, from_text, to_text
from ._db import RouterDatabase, text_of, utf8

__all__ = ["PostgresIdempotencyStore"]

_COLS = (
    "key, input_hash, state, holder_id, created_at, last_touched_at, expires_at, result, session_id"
)


@final
class PostgresIdempotencyStore:
    """:class:`~zlink_trio.router.spi.IdempotencyStore` on PostgreSQL."""

    def __init__(self, db: RouterDatabase, *, ttls: IdempotencyTtls | None = None) -> None:
        self._db = db
        self._ttls = ttls if ttls is not None else IdempotencyTtls()
        q = db.q
        now = f"{q}.router_now()"
        held = "key = $1 AND state = 'IN_FLIGHT' AND holder_id = $2"
        self._put = f"SELECT p.reserved, p.now, (p.e).* FROM {q}.router_idem_put($1, $2, $3, $4) p"
        self._take = f"SELECT t.rejection, (t.e).* FROM {q}.router_idem_take($1, $2, $3, $4, $5) t"
        self._find = (
            f"SELECT {_COLS} FROM {q}.router_idempotency"
            f" WHERE key = $1 AND (expires_at IS NULL OR expires_at > {now})"
        )
        self._release = (
            f"UPDATE {q}.router_idempotency SET holder_id = NULL, expires_at = {now} + $3"
            f" WHERE {held} RETURNING true"
        )
        self._reset = f"DELETE FROM {q}.router_idempotency WHERE {held} RETURNING true"
        self._touch = (
            f"UPDATE {q}.router_idempotency SET last_touched_at = {now} WHERE {held} RETURNING true"
        )
        self._stale = (
            f"SELECT {_COLS} FROM {q}.router_idempotency"
            f" WHERE state = 'IN_FLIGHT' AND holder_id IS NOT NULL"
            f" AND last_touched_at < {now} - $1 ORDER BY last_touched_at, key LIMIT $2"
        )

    @property
    def ttls(self) -> IdempotencyTtls:
        return self._ttls

    def _entry(self, row: Any) -> IdempotencyEntry:
        holder = text_of(row["holder_id"])
        session = text_of(row["session_id"])
        expires = row["expires_at"]
        result: Any = None if row["result"] is None else from_text(row["result"])
        return IdempotencyEntry(
            key=IdempotencyKey(text_of(row["key"]) or ""),
            input_hash=str(row["input_hash"]),
            state=IdempotencyState(row["state"]),
            holder_id=None if holder is None else ReserverId(holder),
            created_at=self._db.local(float(row["created_at"])),
            last_touched_at=self._db.local(float(row["last_touched_at"])),
            expires_at=None if expires is None else self._db.local(float(expires)),
            result=result,
            session_id=None if session is None else SessionId(session),
        )

    async def put_if_absent(
        self,
        key: IdempotencyKey,
        input_hash: str,
        holder_id: ReserverId,
        *,
        session_id: SessionId | None = None,
    ) -> PutOutcome:
        row = await self._db.call(
            "fetchrow",
            self._put,
            utf8(key.value),
            str(input_hash),
            utf8(holder_id.value),
            None if session_id is None else utf8(session_id.value),
            idempotent=False,  # a lost reservation may have committed
        )
        entry = self._entry(row)
        if row["reserved"]:
            return Reserved(entry)
        stale = (
            row["state"] == "IN_FLIGHT"
            and row["holder_id"] is not None
            and float(row["last_touched_at"]) < float(row["now"]) - self._ttls.secondary
        )
        if stale:
            return StaleInFlight(entry)
        if entry.input_hash != input_hash:
            return InputConflict(entry)
        if entry.state is IdempotencyState.DONE:
            return AlreadyDone(entry)
        return InFlight(entry)

    async def find(self, key: IdempotencyKey) -> IdempotencyEntry | None:
        row = await self._db.read("fetchrow", self._find, utf8(key.value))
        return None if row is None else self._entry(row)

    async def _take_row(
        self, key: IdempotencyKey, holder_id: ReserverId, result: str | None
    ) -> tuple[Rejection | None, IdempotencyEntry | None]:
        row = await self._db.call(
            "fetchrow",
            self._take,
            utf8(key.value),
            utf8(holder_id.value),
            result is not None,
            result,
            self._ttls.primary,
            idempotent=False,
        )
        if row["rejection"] is not None:
            return Rejection(row["rejection"]), None
        return None, self._entry(row)

    async def mark_done(
        self, key: IdempotencyKey, holder_id: ReserverId, result: JsonMap
    ) -> MarkDoneOutcome:
        text = to_text(check_json_map(result, "result"))
        rejection, entry = await self._take_row(key, holder_id, text)
        if entry is None:
            assert rejection is not None
            return MarkRejected(rejection)
        return Marked(entry)

    async def acquire_holder(self, key: IdempotencyKey, holder_id: ReserverId) -> TakeoverOutcome:
        rejection, entry = await self._take_row(key, holder_id, None)
        if entry is None:
            assert rejection is not None
            return HolderRejected(rejection)
        return HolderAcquired(entry)

    async def release_holder(self, key: IdempotencyKey, holder_id: ReserverId) -> bool:
        done = await self._db.call(
            "fetchval",
            self._release,
            utf8(key.value),
            utf8(holder_id.value),
            self._ttls.forward,
            idempotent=False,
        )
        return bool(done)

    async def compare_and_reset(self, key: IdempotencyKey, expected_holder_id: ReserverId) -> bool:
        done = await self._db.call(
            "fetchval",
            self._reset,
            utf8(key.value),
            utf8(expected_holder_id.value),
            idempotent=False,  # exactly one sweeper may learn it won
        )
        return bool(done)

    async def find_stale_in_flight(self, limit: int = 100) -> tuple[IdempotencyEntry, ...]:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(f"limit must be an int >= 0, got {limit!r}")
        rows = await self._db.read("fetch", self._stale, self._ttls.secondary, limit)
        return tuple(self._entry(r) for r in rows)

    async def touch(self, key: IdempotencyKey, holder_id: ReserverId) -> bool:
        done = await self._db.call(
            "fetchval", self._touch, utf8(key.value), utf8(holder_id.value), idempotent=True
        )
        return bool(done)
