"""Giving Creating reservations back, so none can block an object id for ever.

Every reservation (a Creating row) belongs to ONE attempt whose deadline the row records
(``attempt_expires_at``, the source operation's deadline in store time). It is driven by
the operation that made it; every end of that attempt without a Ready commit gives it
back — an ``abort_creation`` CAS on exactly the version reserved (a target that committed
first wins the CAS, and the object exists) — and nobody waits for ever on one that was
not (docs/decisions.md, "Actor runtime: failure handling" and "Bounded reservations"):

1. :func:`give_back` — inline, under a bounded shield (``drain_timeout``), by the target
   on every end of its attempt without a commit (with the terminal it sends, recorded in
   the same transaction) and by the source on every end without a terminal of its own
   reservation; an unknown outcome is settled by re-reading.
2. :class:`Reclaimer` — when the Store could not be reached within that bound, the
   give-back (with the terminal the target meant to record, if any) is retried in the
   background by a task of the owning runtime's nursery until it is settled or the
   runtime stops.
3. :func:`orphaned` — the backstop: a GetOrCreate/Create waiting on a Creating row that
   has not moved ends it by CAS when its attempt is over — past its recorded deadline +
   ``reservation_grace``, or its owner's lease is no longer current (both through the
   fenced :meth:`~zlink_trio.store.api.LocationStore.reclaim`,
   :func:`~.owner_loss.reclaim_row`) — or when the node lifecycle that made it is gone
   (nobody will drive it or give it back). The background reclaim sweep
   (:mod:`.owner_loss`) ends the first two kinds on every node, waiter or not.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Final, final

import trio

from ..errors import StoreOutcomeUnknown, Unavailable
from ..observe import FlowTrace
from ..store.api import (
    AuthorityRow,
    AuthorityState,
    LocationStore,
    NodeRecord,
    ObjectKey,
    OperationKey,
    TerminalRecord,
)
from ..wire.records import TerminalReply
from .owner_loss import reclaim_row

__all__ = ["Reclaimer", "give_back", "orphaned"]

logger = logging.getLogger("zlink_trio.objects")

RETRY_INTERVAL: Final = 1.0
"""Seconds between background give-back rounds while the Store is unreachable."""


async def _abort_once(
    store: LocationStore,
    key: ObjectKey,
    version: int,
    terminal: TerminalRecord | None,
    retain_for: float,
    *,
    check: bool,
    operation: OperationKey | None = None,
) -> None:
    """One abort CAS (after a read when ``check``: the last abort may have happened; or
    when ``operation`` is given: the row must be that operation's reservation)."""
    if check or operation is not None:
        current = await store.read(key)
        if current is None or current.store_version != version:
            return
        if operation is not None and current.operation != operation:
            return
    await store.abort_creation(key, version, terminal=terminal, retain_for=retain_for)


async def give_back(
    store: LocationStore,
    key: ObjectKey,
    version: int,
    *,
    bound: float,
    terminal: TerminalRecord | None = None,
    retain_for: float = 0.0,
    operation: OperationKey | None = None,
) -> bool:
    """Abort the reservation ``(key, version)`` if it is still exactly that row (and,
    with ``operation``, a reservation made by that operation: read first — for a version
    that came from elsewhere, e.g. a fence on the wire).

    Runs shielded for at most ``bound`` seconds (callable from a ``finally`` of a
    cancelled task). An unknown outcome is retried after a re-read. Returns True when
    settled (aborted, or the row is no longer that reservation), False when the Store
    could not be reached in time (then hand it to a :class:`Reclaimer`).
    """
    with trio.CancelScope(shield=True), trio.move_on_after(bound):
        check = False
        while True:
            try:
                await _abort_once(
                    store, key, version, terminal, retain_for, check=check, operation=operation
                )
                return True
            except StoreOutcomeUnknown as exc:
                logger.info("giving back the reservation of %r: %r; re-reading", key, exc)
                check = True
            except (Unavailable, OSError) as exc:
                logger.info("could not give back the reservation of %r: %r", key, exc)
                return False
    return False


@final
class _Pending:
    __slots__ = ("operation", "retain_for", "terminal", "version")

    def __init__(
        self,
        version: int,
        terminal: TerminalRecord | None,
        retain_for: float,
        operation: OperationKey | None,
    ) -> None:
        self.version = version
        self.terminal = terminal
        self.retain_for = retain_for
        self.operation = operation


@final
class Reclaimer:
    """Background give-backs (layer 2): one task in the owning runtime's nursery while
    any is pending. Each is one reservation, ``(key, version)``: a later reservation of
    the same id never replaces an earlier one's pending give-back (or its terminal)."""

    __slots__ = ("_nursery", "_pending", "_replies", "_running", "_store", "settled")

    def __init__(self, store: LocationStore, nursery: trio.Nursery) -> None:
        self._store = store
        self._nursery = nursery
        self._pending: dict[tuple[ObjectKey, int], _Pending] = {}
        self._replies: dict[OperationKey, TerminalReply] = {}
        self._running = False
        self.settled = 0

    def __len__(self) -> int:
        return len(self._pending)

    def later(
        self,
        key: ObjectKey,
        version: int,
        *,
        terminal: TerminalRecord | None = None,
        reply: TerminalReply | None = None,
        retain_for: float = 0.0,
        operation: OperationKey | None = None,
    ) -> None:
        """Give ``(key, version)`` back in the background (with ``terminal`` recorded in
        the same transaction; with ``operation``, only a reservation that operation
        made). ``reply``: the terminal of the operation, answered to replays of it until
        the give-back is settled (the target's attempt is over)."""
        self._pending[(key, version)] = _Pending(version, terminal, retain_for, operation)
        if terminal is not None and reply is not None:
            self._replies[terminal.key] = reply
        if not self._running:
            try:
                self._nursery.start_soon(self._run, name="zlink_trio.objects.reclaim")
            except RuntimeError:
                # The owning runtime is stopping (its nursery takes no new task): nobody
                # will retry here. The row is left to the backstop every reservation has
                # (its attempt deadline + grace, or its lifecycles ending): reclaimable by
                # any live node's sweep or waiter, never wedged.
                logger.info(
                    "the runtime is stopping: the give-back of %r is left to the reclaim backstop",
                    key,
                )
                return
            self._running = True

    def reply_for(self, operation: OperationKey) -> TerminalReply | None:
        """The terminal of ``operation`` while its give-back is pending here."""
        return self._replies.get(operation)

    def holds(self, key: ObjectKey, version: int) -> bool:
        """Whether the give-back of exactly ``(key, version)`` is pending here."""
        return (key, version) in self._pending

    async def _run(self) -> None:
        try:
            while self._pending:
                for slot, pending in list(self._pending.items()):
                    key = slot[0]
                    try:
                        await _abort_once(
                            self._store,
                            key,
                            pending.version,
                            pending.terminal,
                            pending.retain_for,
                            check=True,
                            operation=pending.operation,
                        )
                    except (Unavailable, OSError) as exc:  # StoreOutcomeUnknown included
                        logger.info("background give-back of %r: %r; retrying", key, exc)
                        continue
                    except Exception:
                        logger.exception("background give-back of %r failed", key)
                        continue
                    if self._pending.get(slot) is pending:
                        del self._pending[slot]
                    if pending.terminal is not None:
                        self._replies.pop(pending.terminal.key, None)
                    self.settled += 1
                if self._pending:
                    await trio.sleep(RETRY_INTERVAL)
        finally:
            self._running = False


def _live(nodes: Sequence[NodeRecord], row: AuthorityRow) -> tuple[bool, bool]:
    """(owner lease current, operation source lifecycle live) for ``row``."""
    owner = row.owner
    operation = row.operation
    owner_live = False
    source_live = operation is None
    for record in nodes:
        if not record.live:
            continue
        descriptor = record.descriptor
        if (
            descriptor.node_rid == owner.node_rid
            and descriptor.node_generation == owner.node_generation
            and record.lease_generation == owner.lease_generation
        ):
            owner_live = True
        if (
            operation is not None
            and descriptor.node_rid == operation.source_rid
            and descriptor.node_generation == operation.source_generation
        ):
            source_live = True
    return owner_live, source_live


async def orphaned(
    store: LocationStore, row: AuthorityRow, *, grace: float, flow: FlowTrace
) -> bool:
    """Layer 3: end the Creating ``row`` (exactly that version) if nobody can still
    finish it or give it back:

    * its owner's lease is no longer current (the owner can never commit it), or its
      attempt is over — store time is past its recorded attempt deadline + ``grace``,
      whether or not a terminal was sent: one fenced reclaim CAS
      (:func:`~.owner_loss.reclaim_row`, counted as RECLAIMED);
    * the node lifecycle that made the reservation is no longer live (nobody will drive
      it or give it back): an abort CAS.

    Returns True when the row was ended or moved on (the caller re-reads at once), False
    while its attempt may still end it (keep waiting). Two reads (the node list, store
    time) while the attempt is live."""
    if row.state is not AuthorityState.CREATING:
        return False
    owner_live, source_live = _live(await store.list_nodes(), row)
    expired = False
    if owner_live and row.attempt_expires_at is not None:
        expired = await store.now() >= row.attempt_expires_at + grace
    if not owner_live or expired:
        logger.warning(
            "reclaiming the reservation of %r (%s)",
            row.key,
            "its attempt is over" if owner_live else "its owner's lease expired",
        )
        return await reclaim_row(store, row, grace=grace, flow=flow)
    if source_live:
        return False
    logger.warning("aborting the reservation of %r: its source lifecycle is gone", row.key)
    with contextlib.suppress(StoreOutcomeUnknown):  # the next read tells
        await store.abort_creation(row.key, row.store_version)
    return True
