"""Giving Creating reservations back, so none can block an object id for ever.

A reservation (a Creating row) is driven by the operation that made it; when that
operation ends without a terminal (deadline, the caller's cancellation, a Store answer that
never came) it gives the reservation back: an ``abort_creation`` CAS on exactly the
version it reserved (a target that committed first wins the CAS, and the object exists).

Three layers make that hold (docs/decisions.md, "Actor runtime: failure handling"):

1. :func:`give_back` — inline, under a bounded shield (``drain_timeout``), on ANY exit
   of the operation without a terminal, cancellation included; an unknown outcome is
   settled by re-reading.
2. :class:`Reclaimer` — when the Store could not be reached within that bound, the
   give-back (with the terminal the target meant to record, if any) is retried in the
   background by a task of the owning runtime's nursery until it is settled or the
   runtime stops.
3. :func:`orphaned` — the backstop for a process that died (or was fail-stopped) in
   between: a GetOrCreate/Create waiting on a Creating row that has not moved checks the
   lifecycles the row depends on — the operation's source node lifecycle and the owner's
   lease — and aborts the row by CAS when either is no longer live.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Final, final

import trio

from ..errors import StoreOutcomeUnknown, Unavailable
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
) -> None:
    """One abort CAS (after a read when ``check``: the last abort may have happened)."""
    if check:
        current = await store.read(key)
        if current is None or current.store_version != version:
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
) -> bool:
    """Abort the reservation ``(key, version)`` if it is still exactly that row.

    Runs shielded for at most ``bound`` seconds (callable from a ``finally`` of a
    cancelled task). An unknown outcome is retried after a re-read. Returns True when
    settled (aborted, or the row is no longer that reservation), False when the Store
    could not be reached in time (then hand it to a :class:`Reclaimer`).
    """
    with trio.CancelScope(shield=True), trio.move_on_after(bound):
        check = False
        while True:
            try:
                await _abort_once(store, key, version, terminal, retain_for, check=check)
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
    __slots__ = ("retain_for", "terminal", "version")

    def __init__(self, version: int, terminal: TerminalRecord | None, retain_for: float) -> None:
        self.version = version
        self.terminal = terminal
        self.retain_for = retain_for


@final
class Reclaimer:
    """Background give-backs (layer 2): one task in the owning runtime's nursery while
    any is pending."""

    __slots__ = ("_nursery", "_pending", "_replies", "_running", "_store", "settled")

    def __init__(self, store: LocationStore, nursery: trio.Nursery) -> None:
        self._store = store
        self._nursery = nursery
        self._pending: dict[ObjectKey, _Pending] = {}
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
    ) -> None:
        """Give ``(key, version)`` back in the background (with ``terminal`` recorded in
        the same transaction). ``reply``: the terminal of the operation, answered to
        replays of it until the give-back is settled (the target's attempt is over)."""
        self._pending[key] = _Pending(version, terminal, retain_for)
        if terminal is not None and reply is not None:
            self._replies[terminal.key] = reply
        if not self._running:
            self._running = True
            self._nursery.start_soon(self._run, name="zlink_trio.objects.reclaim")

    def reply_for(self, operation: OperationKey) -> TerminalReply | None:
        """The terminal of ``operation`` while its give-back is pending here."""
        return self._replies.get(operation)

    async def _run(self) -> None:
        try:
            while self._pending:
                for key, pending in list(self._pending.items()):
                    try:
                        await _abort_once(
                            self._store,
                            key,
                            pending.version,
                            pending.terminal,
                            pending.retain_for,
                            check=True,
                        )
                    except (Unavailable, OSError) as exc:  # StoreOutcomeUnknown included
                        logger.info("background give-back of %r: %r; retrying", key, exc)
                        continue
                    except Exception:
                        logger.exception("background give-back of %r failed", key)
                        continue
                    if self._pending.get(key) is pending:
                        del self._pending[key]
                    if pending.terminal is not None:
                        self._replies.pop(pending.terminal.key, None)
                    self.settled += 1
                if self._pending:
                    await trio.sleep(RETRY_INTERVAL)
        finally:
            self._running = False


def _live(nodes: Sequence[NodeRecord], row: AuthorityRow) -> tuple[bool, bool]:
    """(owner lease live, operation source lifecycle live) for ``row``."""
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


async def orphaned(store: LocationStore, row: AuthorityRow) -> bool:
    """Layer 3: abort the Creating ``row`` (exactly that version) if the lifecycle that
    must drive it is gone: its owner's lease is no longer live (the owner can never
    commit it) or the node lifecycle that made the reservation is no longer live (nobody
    will drive it or give it back). Returns True when the row was aborted or moved on (the
    caller re-reads at once), False when its lifecycles are alive (keep waiting)."""
    if row.state is not AuthorityState.CREATING:
        return False
    owner_live, source_live = _live(await store.list_nodes(), row)
    if owner_live and source_live:
        return False
    logger.warning(
        "aborting the orphaned reservation of %r (owner lease live: %s, source live: %s)",
        row.key,
        owner_live,
        source_live,
    )
    with contextlib.suppress(StoreOutcomeUnknown):  # the next read tells
        await store.abort_creation(row.key, row.store_version)
    return True
