"""Resume or abort, by the exact fence, a cold activation whose owner can no longer finish
it (spec 06 §4.1.1; docs/decisions.md "Restart: resume or abort by the exact fence").

An Instance Spot row with a recovery pointer holds a first message that has not completed
(its durable activation inbox record 1). The generic owner-loss paths never delete such a
row (:func:`zlink_trio.objects.owner_loss.resumable`); the reclaim sweep hands it here
(:meth:`ActivationRecovery.recover`) on every node that hosts the Instance type in the
row's mesh, and exactly one node's CAS wins:

* Creating, the activation deadline not passed, owner dead → the dead reservation is
  aborted with its exact fence, then the envelope read back from the root (hash and size
  checked) is activated again here, as its first message (a new reservation; if another
  activation wins the id first, the message is forwarded once to it);
* Creating past its deadline (or an orphan of a live owner past deadline + grace) →
  aborted with the exact fence, the root deleted, the message dropped (counted);
* Ready, cursor 0, owner dead → ``change_owner`` to this node (same ObjectGeneration);
  the Spot is built again and its first record restored at the head of its queue before
  it is published, then handled first and completed;
* anything else with a pointer (cursor >= 1: the record is complete; Closing; a root that
  is gone) → the row is reclaimed like any dead owner's row and the root deleted.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Final, final

import trio

from ..config import ServerConfig
from ..errors import CapacityExceeded, OwnerLeaseExpired, ProtocolError, ZLinkError
from ..objects.owner_loss import Reclaim, try_reclaim
from ..observe import FlowEvent, FlowTrace
from ..store.api import Applied, AuthorityRow, AuthorityState, LocationStore, ObjectKind
from ..wire.activation import decode_activation_root
from ..wire.records import SpotDirectRoute
from .registry import SpotTypes
from .spot_kind import SpotKind

if TYPE_CHECKING:
    from ..mesh.node import MeshNode
    from .activation import Activation

__all__ = ["ActivationRecovery"]

logger = logging.getLogger("zlink_trio.spots")

_INSTANCE: Final = ObjectKind.INSTANCE_SPOT


@final
class ActivationRecovery:
    """This node's part in recovering cold activations (see the module docstring)."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        node: MeshNode,
        store: LocationStore,
        types: SpotTypes,
        activation: Activation,
        nursery: trio.Nursery,
        flow: FlowTrace,
    ) -> None:
        self._config = config
        self._node = node
        self._store = store
        self._types = types
        self._activation = activation
        self._nursery = nursery
        self._flow = flow
        self._meshes = frozenset(m.name for m in config.meshes if m.object_role.can_host)
        self.recovered = 0
        self.aborted = 0

    def hosts(self, row: AuthorityRow) -> bool:
        """Whether this node can resume ``row``'s activation (it hosts that Instance type
        in that mesh)."""
        spot_type = self._types.get(row.stable_type)
        return (
            spot_type is not None
            and spot_type.kind is SpotKind.INSTANCE
            and row.owner.mesh_name in self._meshes
        )

    async def recover(self, row: AuthorityRow) -> Reclaim:
        """Handle one listed row with a recovery pointer (the sweep's hook). WON: this node
        settled it (resumed, aborted or reclaimed); MOVED / UNKNOWN: the row is no longer
        that row; REFUSED: not this node's to handle (another type host will, or its owner
        is still live and its attempt running)."""
        if row.kind is not _INSTANCE or row.recovery is None or not self.hosts(row):
            return Reclaim.REFUSED
        if self._node.admission_error() is not None:
            return Reclaim.REFUSED
        store = self._store
        owner_dead = not await store.owner_live(row.owner)
        grace = self._config.reservation_grace
        if row.state is AuthorityState.CREATING:
            now = await store.now()
            expires = row.attempt_expires_at
            left = math.inf if expires is None else expires - now
            if owner_dead and left > 0:
                return await self._resume_creating(row, left)
            if owner_dead or (expires is not None and now >= expires + grace):
                return await self._abort(row, "its activation deadline passed")
            return Reclaim.REFUSED  # a live owner's attempt is still running
        if not owner_dead:
            return Reclaim.REFUSED
        if row.state is AuthorityState.READY and row.recovery.replay_cursor == 0:
            return await self._resume_ready(row)
        return await self._reclaim(row)

    async def _envelope(self, row: AuthorityRow) -> SpotDirectRoute | None:
        assert row.recovery is not None
        data = await self._store.read_root(row.recovery.root)  # hash and size checked
        if data is None:
            return None
        try:
            return decode_activation_root(data)
        except ProtocolError as exc:
            logger.warning("the recovery root of %r is not readable: %r", row.key.object_id, exc)
            return None

    async def _resume_creating(self, row: AuthorityRow, left: float) -> Reclaim:
        envelope = await self._envelope(row)
        if envelope is None:
            return await self._abort(row, "its recovery root is gone")
        result = await self._store.abort_creation(row.key, row.store_version)
        if not isinstance(result, Applied):
            return Reclaim.MOVED
        self.recovered += 1
        self._flow.emit(
            FlowEvent.ACTIVATION_RECOVERED,
            "instance spot %r: the activation of dead owner %s resumes here (Creating)",
            row.key.object_id,
            row.owner.node_rid,
        )
        # The message has no reply route any more (its source's request ended with the
        # dead lifecycle): it runs here as the first message of a new activation.
        self._activation.resume(envelope, trio.current_time() + left)
        return Reclaim.WON

    async def _resume_ready(self, row: AuthorityRow) -> Reclaim:
        envelope = await self._envelope(row)
        if envelope is None:
            return await self._reclaim(row)
        try:
            fence = self._node.owner_fence(row.owner.mesh_name)
            result = await self._store.change_owner(row.key, row.store_version, fence)
        except (CapacityExceeded, OwnerLeaseExpired) as exc:
            logger.info("recovery of %r left to another node: %r", row.key.object_id, exc)
            return Reclaim.REFUSED
        if not isinstance(result, Applied):
            return Reclaim.MOVED
        self.recovered += 1
        self._flow.emit(
            FlowEvent.ACTIVATION_RECOVERED,
            "instance spot %r: dead owner %s committed it; its first message runs here",
            row.key.object_id,
            row.owner.node_rid,
        )
        self._activation.rehost(result.row, envelope)
        return Reclaim.WON

    async def _abort(self, row: AuthorityRow, why: str) -> Reclaim:
        assert row.recovery is not None
        result = await self._store.abort_creation(row.key, row.store_version)
        if not isinstance(result, Applied):
            return Reclaim.MOVED
        await self._drop_root(row)
        self.aborted += 1
        self._flow.emit(
            FlowEvent.ACTIVATION_ABORTED,
            "instance spot %r (generation %s): %s; its first message is dropped",
            row.key.object_id,
            row.object_generation.value,
            why,
        )
        return Reclaim.WON

    async def _reclaim(self, row: AuthorityRow) -> Reclaim:
        outcome = await try_reclaim(
            self._store, row, grace=self._config.reservation_grace, flow=self._flow, final=True
        )
        if outcome is Reclaim.WON:
            await self._drop_root(row)
        return outcome

    async def _drop_root(self, row: AuthorityRow) -> None:
        assert row.recovery is not None
        try:
            await self._store.delete_root(row.recovery.root)
        except (ZLinkError, OSError) as exc:  # it expires with its retention
            logger.info("deleting the recovery root of %r failed: %r", row.key.object_id, exc)
