"""The first message of a cold activation: record 1 of the Spot's durable activation inbox
(spec 06 §4.1 steps 13–16, docs/decisions.md "Spot direct calls and Instance Spot cold
activation").

The record became durable with the reservation: the Creating row names its recovery root
(the complete envelope) with replay cursor 0. The message runs as the Spot's first turn;
:class:`FirstRecord` is the reply sink of that turn (a send gets one too, so its
completion is seen), and the turn awaits it, so the Spot runs nothing else until it
returns. On the handler's completion — a reply, or the handler's error — it:

1. makes the completion durable: a CAS of the row (same incarnation, same root) to replay
   cursor 1;
2. hands the reply (or the error) to the caller's own sink, if any: a caller never sees the
   reply of a message that a recovery would run again;
3. removes the recovery pointer with an expected-version CAS, then deletes the root
   (idempotent).

A turn that did not run the handler because this node's owner lease was lost records
nothing (the message was not handled: the recovery of another node runs it); only the
caller is told. When the Store cannot be reached in time the caller still gets its reply
and the pointer stays (a later owner loss then runs the message again on a fresh instance:
logged and counted as ``first_record_unsettled``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final, final

import trio

from ..engine.oneshot import OneShot
from ..errors import StoreOutcomeUnknown, Unavailable, ZLinkError
from ..ids import ObjectGeneration
from ..objects.sinks import LocalReply, ReplySink, public_error
from ..observe import FlowEvent, FlowTrace
from ..store.api import Applied, AuthorityRow, ContentRef, LocationStore, ObjectKey, RecoveryPointer

__all__ = ["FirstRecord", "settle_recovery"]

logger = logging.getLogger("zlink_trio.spots")

ROUNDS: Final = 4
"""CAS rounds (each after a fresh read) before a step gives up."""


async def _cas_recovery(
    store: LocationStore,
    key: ObjectKey,
    generation: ObjectGeneration,
    root: ContentRef,
    target: RecoveryPointer | None,
    row: AuthorityRow | None,
) -> tuple[bool, AuthorityRow | None]:
    """Move the recovery pointer of ``key``'s incarnation ``generation`` (naming ``root``)
    to ``target`` by expected-version CAS, re-reading after a lost one. ``(done, row)``:
    done is True once the row holds ``target`` — or no longer names this record (it moved
    on: closed, reclaimed, another incarnation): nothing is left to do. ``row``: the row as
    the last step left it (a version to CAS on next)."""
    for _ in range(ROUNDS):
        if row is None:
            row = await store.read(key)
        if (
            row is None
            or row.object_generation != generation
            or row.recovery is None
            or row.recovery.root != root
        ):
            return True, None
        if target is not None and row.recovery.replay_cursor >= target.replay_cursor:
            return True, row  # recorded already
        try:
            result = await store.set_recovery(key, row.store_version, target)
        except StoreOutcomeUnknown:
            row = None  # re-read: it may have applied
            continue
        if isinstance(result, Applied):
            return True, result.row
        row = result.current
    return False, row


async def settle_recovery(
    store: LocationStore,
    key: ObjectKey,
    generation: ObjectGeneration,
    root: ContentRef,
    row: AuthorityRow | None = None,
) -> bool:
    """Steps 1 and 3 at once for a record already handled (cursor to 1 if it is not,
    then the pointer removed and the root deleted). True when settled."""
    done, row = await _cas_recovery(store, key, generation, root, RecoveryPointer(root, 1), row)
    if not done:
        return False
    done, _ = await _cas_recovery(store, key, generation, root, None, row)
    if done:
        await store.delete_root(root)
    return done


@final
class FirstRecord:
    """The reply sink of inbox record 1 (see the module docstring); ``inner`` is the
    caller's sink (None for a send, or once the caller is unreachable)."""

    __slots__ = (
        "_bound",
        "_done",
        "_flow",
        "_generation",
        "_inner",
        "_key",
        "_lease_live",
        "_root",
        "_store",
        "settled",
    )

    def __init__(
        self,
        *,
        store: LocationStore,
        key: ObjectKey,
        root: ContentRef,
        inner: LocalReply | ReplySink | None,
        lease_live: Callable[[], bool],
        flow: FlowTrace,
        bound: float,
    ) -> None:
        self._store = store
        self._key = key
        self._root = root
        self._inner = inner
        self._lease_live = lease_live
        self._flow = flow
        self._bound = bound
        self._generation: ObjectGeneration | None = None
        self._done = False
        self.settled = trio.Event()
        """Set once the record's completion ran (recorded or given up)."""

    def bind(self, generation: ObjectGeneration) -> None:
        """The incarnation whose record this is (known once the reservation applied)."""
        self._generation = generation

    async def abandon(self, error: ZLinkError) -> None:
        """The activation ended without a Spot (its attempt failed or was rejected): the
        message never ran; the caller gets ``error``. Nothing to record (the reservation,
        and the pointer with it, was given back)."""
        if self._done:
            return
        self._done = True
        self.settled.set()
        await self._tell(error)

    async def _tell(self, error: ZLinkError) -> None:
        inner = self._inner
        if type(inner) is OneShot:
            inner.fail(public_error(error))
        elif inner is not None:
            await inner.fail(error)

    async def reply(self, payload: bytes | None, *, flush: bool = True) -> None:
        if self._done:
            return
        if await self._complete():
            inner = self._inner
            if type(inner) is OneShot:
                inner.set(payload)
            elif inner is not None:
                await inner.reply(payload, flush=flush)
        await self._finish()

    async def fail(self, error: ZLinkError) -> None:
        if self._done:
            return
        if await self._complete():
            await self._tell(error)
        await self._finish()

    async def _complete(self) -> bool:
        """Step 1. False when the handler did not run here (the lease was lost): the
        caller is told, nothing is recorded. True otherwise (recorded, or given up)."""
        if self._done:
            return False
        self._done = True
        generation = self._generation
        if not self._lease_live():
            self.settled.set()
            await self._tell(
                Unavailable("this node's owner lease was lost: the Spot no longer runs here")
            )
            return False
        if generation is None:  # never bound: no reservation of ours (cannot happen)
            return True
        with trio.move_on_after(self._bound):
            try:
                done, _ = await _cas_recovery(
                    self._store,
                    self._key,
                    generation,
                    self._root,
                    RecoveryPointer(self._root, 1),
                    None,
                )
                if done:
                    return True
            except (Unavailable, OSError) as exc:
                logger.info("recording the first message of %r: %r", self._key, exc)
        self._unsettled("its completion could not be recorded")
        return True

    async def _finish(self) -> None:
        """Step 3 (after the caller was answered)."""
        generation = self._generation
        if self.settled.is_set() or generation is None:
            self.settled.set()
            return
        try:
            with trio.move_on_after(self._bound):
                if await settle_recovery(self._store, self._key, generation, self._root):
                    return
            self._unsettled("its recovery pointer could not be removed")
        except (Unavailable, OSError) as exc:
            self._unsettled(f"its recovery pointer could not be removed ({exc!r})")
        finally:
            self.settled.set()

    def _unsettled(self, why: str) -> None:
        self._flow.emit(FlowEvent.FIRST_RECORD_UNSETTLED, "spot %r: %s", self._key.object_id, why)
        self.settled.set()
