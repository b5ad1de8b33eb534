"""The "release" step of a clean stop (docs/decisions.md, "Graceful drain on a clean
stop"): give back every authority row this node lifecycle owns, BEFORE its registration
is removed, so peers see the ids Missing at once instead of after the lease.

Each row is one CAS on the version the scan read: Ready or Closing → ``release``,
Creating → ``abort_creation``; every applied one is counted as
:attr:`~zlink_trio.observe.FlowEvent.RELEASED_AT_STOP`. Entry Spot claims are left to
``remove_node``. A row that moved on meanwhile (a CAS lost, an unknown outcome) is taken
again from the next scan, for a few rounds; what is still left (a Store that keeps
failing) becomes reclaimable by any live node as soon as the registration is gone
(:mod:`.owner_loss`). Nothing is called once the lease is no longer held: an expired
lifecycle makes no Store call at all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from ..errors import StoreOutcomeUnknown, Unavailable
from ..ids import NodeGeneration, NodeRid
from ..observe import FlowEvent, FlowTrace
from ..store.api import Applied, AuthorityRow, AuthorityState, LocationStore, ObjectKind

__all__ = ["MAX_ROUNDS", "release_owned"]

logger = logging.getLogger("zlink_trio.objects")

MAX_ROUNDS: Final = 4
"""Scans at most: a row is retried from a fresh scan only when its CAS did not apply."""


async def release_owned(
    store: LocationStore,
    node_rid: NodeRid,
    node_generation: NodeGeneration,
    flow: FlowTrace,
    *,
    may_write: Callable[[], bool],
) -> int:
    """Release every authority row owned by (``node_rid``, ``node_generation``), Entry
    claims excepted; returns how many were released here. ``may_write()`` is asked before
    every Store call (False once the lease is lost). Unbounded in time: the caller bounds
    it. Store failures are logged, never raised."""
    released = 0
    unreleased = 0
    for _ in range(MAX_ROUNDS):
        if not may_write():
            return released
        try:
            owned = await store.scan_owned(node_rid)
        except (Unavailable, OSError) as exc:  # StoreOutcomeUnknown included
            logger.info("releasing the rows of this lifecycle: scan failed (%r)", exc)
            continue
        rows = [
            row
            for row in owned
            if row.kind is not ObjectKind.ENTRY_SPOT
            and row.owner.node_generation == node_generation
        ]
        if not rows:
            return released
        unreleased = 0
        for row in rows:
            if not may_write():
                return released
            if await _release(store, row, flow):
                released += 1
            else:
                unreleased += 1
    if unreleased:
        logger.warning(
            "%d rows of this lifecycle were not released at stop; they are reclaimable "
            "once its registration is removed",
            unreleased,
        )
    return released


async def _release(store: LocationStore, row: AuthorityRow, flow: FlowTrace) -> bool:
    """One CAS giving ``row`` (exactly that version) back; True when it applied."""
    try:
        if row.state is AuthorityState.CREATING:
            result = await store.abort_creation(row.key, row.store_version)
        else:
            result = await store.release(row.key, row.store_version)
    except StoreOutcomeUnknown as exc:
        logger.info("releasing %r at stop: %r; the next scan tells", row.key, exc)
        return False
    except (Unavailable, OSError) as exc:
        logger.info("releasing %r at stop failed: %r", row.key, exc)
        return False
    if not isinstance(result, Applied):
        return False  # it moved on: the next scan has its current version (if still ours)
    flow.emit(
        FlowEvent.RELEASED_AT_STOP,
        "%s %r (was %s, object generation %s)",
        row.kind.value,
        row.key.object_id,
        row.state.value,
        row.object_generation.value,
    )
    return True
