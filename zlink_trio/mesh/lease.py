"""The owner lease of one node lifecycle, as this node sees it.

The Store decides expiry by store time; the node keeps a LOCAL admission deadline on the
Trio clock: the time the last successful registration/renewal was *sent* + TTL. That
deadline is never later than the Store's expiry (the Store stamped its expiry after the
request left), so the node stops admitting no later than the Store stops honouring its
fence. Renewal runs on its own task every ``owner_lease_renew_interval``; a failed renewal
(Store error) is retried at the next interval while the deadline allows.

States are a tagged union (:data:`LeaseState`): :class:`NoLease` (no mesh, nothing
registered), :class:`LeaseHeld`, :class:`LeaseExpired` (terminal for this lifecycle: the
node is fail-stopped and makes no further Store call, not even the cleanup at exit),
:class:`LeaseReleased` (a held lease removed at a graceful exit).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Final, final

import attrs
import trio

from ..errors import OwnerLeaseExpired
from ..ids import NodeRid, OwnerLeaseGeneration
from ..store.api import LocationStore

__all__ = [
    "LeaseDeadline",
    "LeaseExpired",
    "LeaseHeld",
    "LeaseKeeper",
    "LeaseReleased",
    "LeaseState",
    "NoLease",
]

logger = logging.getLogger("zlink_trio.mesh")


@attrs.frozen(slots=True)
class NoLease:
    """Nothing registered (a node without meshes, or before registration)."""


@attrs.frozen(slots=True)
class LeaseHeld:
    lease_generation: OwnerLeaseGeneration
    local_deadline: float
    """Trio time after which this node admits nothing (last renewal sent + TTL)."""
    store_expires_at: float
    """Store time of expiry, as the Store reported it."""
    last_sent: float
    """Trio time the last renewal attempt (successful or not) was sent."""


@attrs.frozen(slots=True)
class LeaseExpired:
    lease_generation: OwnerLeaseGeneration
    reason: str
    at: float
    """Trio time the node noticed."""


@attrs.frozen(slots=True)
class LeaseReleased:
    lease_generation: OwnerLeaseGeneration
    removed: bool
    """``remove_node`` removed the registration (False: it was already replaced/gone, or
    the Store call failed)."""


LeaseState = NoLease | LeaseHeld | LeaseExpired | LeaseReleased


@final
class LeaseDeadline:
    """The lease's local admission deadline as one mutable cell, for hot paths that
    compare it with a clock reading they already have (an Actor turn): ``at`` is the
    Trio time of :attr:`LeaseHeld.local_deadline` while a lease is held, ``-inf``
    before and once it is lost or released. Only :class:`LeaseKeeper` writes it."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at = -math.inf


@final
class LeaseKeeper:
    """Renews one registration until it expires or the node releases it."""

    __slots__ = (
        "_deadline",
        "_interval",
        "_now",
        "_on_expired",
        "_rid",
        "_state",
        "_store",
        "_ttl",
        "renew_failures",
        "renewals",
    )

    def __init__(
        self,
        store: LocationStore,
        rid: NodeRid,
        held: LeaseHeld,
        *,
        ttl: float,
        interval: float,
        on_expired: Callable[[LeaseExpired], None],
        deadline: LeaseDeadline | None = None,
    ) -> None:
        self._store: Final = store
        self._rid: Final = rid
        self._ttl: Final = ttl
        self._interval: Final = interval
        self._on_expired: Final = on_expired
        self._deadline: Final = LeaseDeadline() if deadline is None else deadline
        self._state: LeaseState = held
        self._deadline.at = held.local_deadline
        self._now: Final = trio.lowlevel.current_clock().current_time
        """``trio.current_time`` as one call (:meth:`check` runs once per call and
        per inbound message); made in the run it serves, like the node."""
        self.renewals = 0
        self.renew_failures = 0

    @property
    def state(self) -> LeaseState:
        return self._state

    @state.setter
    def state(self, state: LeaseState) -> None:
        self._state = state
        self._deadline.at = state.local_deadline if isinstance(state, LeaseHeld) else -math.inf

    @property
    def deadline(self) -> LeaseDeadline:
        """The local deadline cell this keeper writes."""
        return self._deadline

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            held = self.state
            if not isinstance(held, LeaseHeld):
                return
            await trio.sleep_until(min(held.last_sent + self._interval, held.local_deadline))
            now = trio.current_time()
            if now >= held.local_deadline:
                self._expire(held, "no successful renewal before the local deadline")
                return
            with trio.move_on_at(held.local_deadline) as scope:
                try:
                    lease = await self._store.renew_lease(
                        self._rid, held.lease_generation, self._ttl
                    )
                except OwnerLeaseExpired as exc:
                    self._expire(held, f"the Store refused the renewal: {exc.message}")
                    return
                except Exception:
                    self.renew_failures += 1
                    logger.exception("owner lease renewal failed; retrying")
                    if self.state is held:
                        self.state = attrs.evolve(held, last_sent=now)
                    continue
            if scope.cancelled_caught:
                self._expire(held, "the renewal did not answer before the local deadline")
                return
            if self.state is not held:  # released meanwhile
                return
            self.renewals += 1
            self.state = LeaseHeld(
                held.lease_generation,
                local_deadline=now + self._ttl,
                store_expires_at=lease.expires_at,
                last_sent=now,
            )

    def check(self) -> bool:
        """True while held and before the local deadline; expires the lease (once) when
        the deadline passed although the renewer task has not noticed yet."""
        held = self._state  # (not the property: this runs once per call)
        if type(held) is not LeaseHeld:
            return False
        if self._now() < held.local_deadline:
            return True
        self._expire(held, "no successful renewal before the local deadline")
        return False

    def release(self, removed: bool) -> None:
        state = self.state
        if isinstance(state, LeaseHeld):
            self.state = LeaseReleased(state.lease_generation, removed)

    def _expire(self, held: LeaseHeld, reason: str) -> None:
        if self.state is not held:
            return
        expired = LeaseExpired(held.lease_generation, reason, trio.current_time())
        self.state = expired
        logger.error("owner lease %s lost: %s", held.lease_generation.value, reason)
        self._on_expired(expired)
