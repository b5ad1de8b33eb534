"""Ending incarnations whose owner can no longer act (docs/decisions.md, "Owner loss").

An authority row names its owner by fence (NodeRid, NodeGeneration, OwnerLeaseGeneration).
Once that lease is no longer current by the Store's own clock, the owner is fail-stopped
(its local admission deadline passed first, :mod:`zlink_trio.mesh.lease`) and can never
commit, serve or release the row again; a Creating row is also finished once its attempt
deadline (recorded in the row) + ``reservation_grace`` passed. Any live node may then end
the incarnation with ONE :meth:`~zlink_trio.store.api.LocationStore.reclaim` CAS fenced by
the row version and the owner fence: exactly one reclaimer wins per row, the id becomes
Missing and the capacity comes back; late frames of the old incarnation are rejected by
its ObjectGeneration, which no new incarnation reuses.

Two paths reclaim (:func:`try_reclaim`, or :func:`reclaim_row` when who won does not
matter):

* lazily, a call that resolves a row whose owner it finds dead (find, create,
  get_or_create, destroy, a message whose owner cannot be reached) reclaims it and goes
  on against the new state;
* :func:`serve_reclaim_sweep`, one bounded background task on every node with a Store:
  startup cleanup as soon as the node serves, before ``open_server`` returns (rounds back
  to back while their batch is full, bounded by ``drain_timeout``: a restarted node has
  reclaimed every expired lifecycle's rows — its own previous ones among them — once it
  is up), then one round every ``reclaim_sweep_interval``, each reclaiming at most
  ``reclaim_sweep_batch`` rows and removing the registrations of expired lifecycles that
  own no row any more.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable

import attrs
import trio

from ..config import ServerConfig
from ..errors import StoreOutcomeUnknown, Unavailable
from ..ids import NodeRid
from ..mesh.api import MeshNodeApi
from ..observe import FlowEvent, FlowTrace
from ..store.api import Applied, AuthorityRow, AuthorityState, LocationStore, ObjectKind

__all__ = [
    "Reclaim",
    "Recover",
    "SweepRound",
    "owner_dead",
    "owner_lost",
    "reclaim_row",
    "resumable",
    "serve_reclaim_sweep",
    "sweep_once",
    "try_reclaim",
]

logger = logging.getLogger("zlink_trio.objects")


def resumable(row: AuthorityRow) -> bool:
    """An Instance Spot row whose cold activation's first message has not completed (it
    holds a recovery pointer): its owner's loss is not the end of the incarnation but a
    recovery (spec 06 §4.1.1). The generic reclaim paths leave it alone; the sweep hands
    it to the Spot runtime's recovery (docs/decisions.md, "Restart: resume or abort")."""
    return row.recovery is not None and row.kind is ObjectKind.INSTANCE_SPOT


async def owner_dead(store: LocationStore, row: AuthorityRow) -> bool:
    """Whether ``row``'s owner lease is no longer current by store time (one read)."""
    return not await store.owner_live(row.owner)


async def owner_lost(store: LocationStore, row: AuthorityRow, me: NodeRid) -> bool:
    """Whether ``row`` is owned by another node than ``me`` whose lease expired (one
    Store read). A row this node owns needs none: this node admits only while its own
    lease is locally live, which is never later than the Store's expiry."""
    return row.owner.node_rid != me and await owner_dead(store, row)


class Reclaim(enum.Enum):
    """What one reclaim CAS (:func:`try_reclaim`) ended with."""

    WON = "won"
    """This call's CAS applied: the incarnation ended here (counted as RECLAIMED)."""
    MOVED = "moved"
    """The row is no longer the one given: another reclaimer, or its owner, moved it on."""
    UNKNOWN = "unknown"
    """The CAS's outcome is unknown (StoreOutcomeUnknown): it may have applied; re-read."""
    REFUSED = "refused"
    """The Store refused: the owner is live (and a Creating attempt still runs)."""


async def try_reclaim(
    store: LocationStore, row: AuthorityRow, *, grace: float, flow: FlowTrace, final: bool = False
) -> Reclaim:
    """One reclaim CAS of exactly ``row`` (its version and owner fence); a winning CAS
    is counted as :attr:`FlowEvent.RECLAIMED`. Raises Unavailable when the Store was not
    reached (nothing changed). A :func:`resumable` row is REFUSED unless ``final`` (its
    recovery decided that the incarnation ends)."""
    if resumable(row) and not final:
        await trio.lowlevel.checkpoint()
        return Reclaim.REFUSED
    try:
        result = await store.reclaim(row.key, row.store_version, row.owner, grace=grace)
    except StoreOutcomeUnknown as exc:
        logger.info("reclaim of %r has an unknown outcome (%r); re-reading", row.key, exc)
        return Reclaim.UNKNOWN
    if isinstance(result, Applied):
        flow.emit(
            FlowEvent.RECLAIMED,
            "%s %r (was %s, owner %s, object generation %s)",
            row.kind.value,
            row.key.object_id,
            row.state.value,
            row.owner.node_rid,
            row.object_generation.value,
        )
        return Reclaim.WON
    return Reclaim.MOVED if result.current != row else Reclaim.REFUSED


async def reclaim_row(
    store: LocationStore, row: AuthorityRow, *, grace: float, flow: FlowTrace
) -> bool:
    """One reclaim CAS of exactly ``row`` (:func:`try_reclaim`).

    True when the row is no longer ``row``: this node reclaimed it (counted as
    :attr:`FlowEvent.RECLAIMED`), another reclaimer or the owner moved it on, or the
    outcome is unknown (the caller re-reads). False when the Store refused because the
    owner is live and (for a Creating row) its attempt is still running."""
    return await try_reclaim(store, row, grace=grace, flow=flow) is not Reclaim.REFUSED


@attrs.frozen
class SweepRound:
    """What one :func:`sweep_once` round did."""

    listed: int
    """Reclaimable rows the Store listed (at most the batch)."""
    reclaimed: int
    """Of those, the rows this node's CAS won."""
    settled: int
    """Of those, the rows no longer there as listed (won here, moved on by another
    reclaimer, or an unknown outcome): the round made progress."""
    full: bool
    """The batch was full: more reclaimable rows may be waiting."""


Recover = Callable[[AuthorityRow], Awaitable[Reclaim]]
"""The Spot runtime's recovery of one :func:`resumable` row (WON: settled here; REFUSED:
not this node's to settle)."""


async def _hosted_anywhere(store: LocationStore, row: AuthorityRow) -> bool:
    """Whether a live Object Server of the row's mesh registers its Instance type (one
    Store read): only such a node can resume it."""
    for record in await store.list_nodes(row.owner.mesh_name):
        descriptor = record.descriptor
        if (
            record.live
            and descriptor.object_role.can_host
            and row.stable_type in descriptor.instance_types
        ):
            return True
    return False


async def _settle_resumable(
    config: ServerConfig,
    store: LocationStore,
    flow: FlowTrace,
    row: AuthorityRow,
    recover: Recover | None,
) -> Reclaim:
    """A listed :func:`resumable` row: this node's recovery when it hosts the type;
    otherwise, when no live node could ever resume it, the ordinary reclaim (and its
    recovery root goes with it)."""
    outcome = Reclaim.REFUSED if recover is None else await recover(row)
    if outcome is not Reclaim.REFUSED or await _hosted_anywhere(store, row):
        return outcome
    if await store.owner_live(row.owner) and row.state is not AuthorityState.CREATING:
        return Reclaim.REFUSED  # a live owner keeps its Ready Spot; nothing to recover
    outcome = await try_reclaim(store, row, grace=config.reservation_grace, flow=flow, final=True)
    if outcome is Reclaim.WON and row.recovery is not None:
        await store.delete_root(row.recovery.root)
    return outcome


async def sweep_once(
    config: ServerConfig,
    store: LocationStore,
    flow: FlowTrace,
    node: MeshNodeApi,
    recover: Recover | None = None,
) -> SweepRound:
    """One bounded sweep round: reclaim up to ``reclaim_sweep_batch`` reclaimable rows
    (:func:`resumable` ones go to ``recover``), then remove the registrations of expired
    lifecycles that own no row any more. Stops as soon as ``node`` stops admitting (a
    fail-stopped node makes no Store call)."""
    won = settled = 0
    limit = min(config.reclaim_sweep_batch, 1000)
    rows = await store.list_reclaimable(grace=config.reservation_grace, limit=limit)
    for row in rows:
        if node.admission_error() is not None:
            return SweepRound(len(rows), won, settled, full=False)
        if resumable(row):
            outcome = await _settle_resumable(config, store, flow, row, recover)
        else:
            outcome = await try_reclaim(store, row, grace=config.reservation_grace, flow=flow)
        won += outcome is Reclaim.WON
        settled += outcome is not Reclaim.REFUSED
    done = SweepRound(len(rows), won, settled, full=len(rows) >= limit)
    for record in await store.list_nodes():
        if record.live or node.admission_error() is not None:
            continue
        descriptor = record.descriptor
        owned = await store.scan_owned(descriptor.node_rid)
        if any(r.kind is not ObjectKind.ENTRY_SPOT for r in owned):
            continue  # its rows go first (next round, if this one's batch was full)
        if await store.remove_node(
            descriptor.node_rid, descriptor.node_generation, record.lease_generation
        ):
            flow.emit(
                FlowEvent.REGISTRATION_SWEPT,
                "node %s (lease %s expired)",
                descriptor.node_rid,
                record.lease_generation.value,
            )
    return done


async def serve_reclaim_sweep(
    config: ServerConfig,
    store: LocationStore,
    flow: FlowTrace,
    node: MeshNodeApi,
    recover: Recover | None = None,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The node's background sweep (see the module docstring), started once ``node``
    serves. Startup cleanup first, before ``started``: rounds back to back while their
    batch was full and they made progress (so a restarted node has reclaimed every
    expired row once it is up, however many), bounded by ``drain_timeout``; then one round per interval until
    cancelled or until the node stops admitting. A Store failure skips the round; it
    never stops the node."""
    with trio.move_on_after(config.drain_timeout):
        while await _round(config, store, flow, node, recover):
            pass
    task_status.started()
    while node.admission_error() is None:
        await trio.sleep(config.reclaim_sweep_interval)
        await _round(config, store, flow, node, recover)


async def _round(
    config: ServerConfig,
    store: LocationStore,
    flow: FlowTrace,
    node: MeshNodeApi,
    recover: Recover | None,
) -> bool:
    """One round; True when its batch was full and it made progress (more may wait)."""
    if node.admission_error() is not None:
        return False
    try:
        done = await sweep_once(config, store, flow, node, recover)
        return done.full and done.settled > 0
    except (Unavailable, OSError) as exc:  # StoreOutcomeUnknown included
        logger.info("reclaim sweep skipped: %r", exc)
    except Exception:
        logger.exception("reclaim sweep round failed")
    return False
