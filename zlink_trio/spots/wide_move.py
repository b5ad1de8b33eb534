"""The member side of a SpotWide User Spot's move (spec 06 §6.1; docs/relocation.md,
"SpotWide Spots"): what the Spot relocation asks of the Actor runtime, which moves the
members with the Actor relocation's own machinery (seal turn, session participants,
envelope, 120/121, relay, 123). The Spot relocation drives: it seals the Spot, sends the
Spot's 120, has every member reach relay-ready, then sends the Spot's 121 — the
aggregate's relay-ready — and after it the one ``change_owners`` commit on the target
covers the Spot row and every member row.

The Actor runtime implements both protocols; a node without it refuses the move
NotConfigured.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol

from ..ids import ActorId, NodeGeneration, NodeRid, OperationId, OwnerLeaseGeneration
from ..store.api import ObjectKey
from .hosted import HostedSpot

__all__ = [
    "WIDE_PARTICIPANT",
    "SpotWideMemberMoves",
    "SpotWideMembers",
    "SpotWideMembersTarget",
]

WIDE_PARTICIPANT: Final = "zlink_trio.spot.wide_members"
"""The Spot envelope entry naming each member's RelocationId (a CBOR list of
``[actor id, relocation id (16 bytes)]``): the target commits them with the Spot."""


class SpotWideMemberMoves(Protocol):
    """The members' half of one SpotWide move (source)."""

    @property
    def units(self) -> Sequence[tuple[ActorId, OperationId]]:
        """Each member and its RelocationId, fixed before anything is sealed."""
        ...

    async def reach_relay_ready(self, deadline: float) -> None:
        """Seal every member (its turn under the Spot's gate), its participants (42/43),
        capture it, 120 and 121, each accepted.

        Raises:
            ZLinkError: a member could not (the caller aborts the whole move).
        """
        ...

    async def abort(self, error: BaseException) -> None:
        """Before the aggregate's relay-ready: every member sealed so far reopens here in
        order, its participants hear the abort, the target is told (124)."""
        ...

    async def complete(self, *, draining: bool = False) -> bool:
        """After the aggregate's relay-ready: each member is unpublished, its follow route
        installed, its held work relayed, its cutover sent; True once every member's
        commit notice (125) arrived (``draining``: or its row names the target)."""
        ...


class SpotWideMembers(Protocol):
    """The source side (the Actor relocator)."""

    def plan(
        self,
        members: Sequence[ActorId],
        to: NodeRid,
        target_generation: NodeGeneration,
        lease: OwnerLeaseGeneration,
    ) -> SpotWideMemberMoves:
        """Reserve every member for the move.

        Raises:
            NotFound: a member is not hosted (Ready) here.
            InvalidOperation: a member's type is DisableRelocation.
            Unavailable: a member is moving or joining already.
        """
        ...


class SpotWideMembersTarget(Protocol):
    """The target side (the Actor relocation target)."""

    def accepted(self, relocation_ids: Sequence[OperationId], source: object) -> str | None:
        """At the Spot's 121: None when every member attempt is here, from ``source``,
        grouped with the Spot and restored ACCEPTED; otherwise why not."""
        ...

    async def cutovers(self, relocation_ids: Sequence[OperationId]) -> None:
        """Until every member's cutover (123) arrived (the caller bounds it)."""
        ...

    async def rows(
        self, relocation_ids: Sequence[OperationId]
    ) -> list[tuple[ObjectKey, int]] | None:
        """Each member row with its Store version, checked against its source fence;
        None when one no longer holds."""
        ...

    async def committed(self, relocation_ids: Sequence[OperationId], spot: HostedSpot) -> None:
        """After the aggregate commit and the Spot's publish: each member published under
        the Spot's gate (queue merge, route switch, timers, participants, 125)."""
        ...

    def discard(self, relocation_ids: Sequence[OperationId]) -> None:
        """The Spot's attempt ended without a commit: every member attempt is discarded."""
        ...
