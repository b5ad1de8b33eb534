"""The source side of a SpotWide User Spot's members moving with it (spec 06 §6.1;
docs/relocation.md, "SpotWide Spots"): the Spot relocation
(:class:`~zlink_trio.spots.relocation.SpotRelocator`) drives, this moves each member with
the Actor relocation's own steps (:class:`~.relocating.ActorRelocator`): the seal turn
(under the Spot's gate), the participants (the session side, 42/43), the capture, 120,
121; on an abort before the aggregate's relay-ready each member reopens here in order and
its sessions hear the abort (44); after it each member is unpublished, its follow route
installed, its held work relayed (113/114) and its cutover sent (123), and its commit
notice (125) awaited. The target commits them all with the Spot in one
``change_owners``.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, final

import trio

from ..errors import DeadlineExceeded, NotFound, Unavailable, ZLinkError
from ..ids import ActorId, NodeGeneration, NodeRid, OperationId, OwnerLeaseGeneration
from ..mesh.api import PeerAddress
from ..objects.relocation import (
    ActorRelocationParticipant,
    RelocationUnit,
    refuse_unless_relocatable,
)
from .hosted import READY, HostedActor

if TYPE_CHECKING:
    from .relocating import ActorRelocator

__all__ = ["MemberMoves"]

logger = logging.getLogger("zlink_trio.relocation")


@final
class _Member:
    __slots__ = ("accepted", "hosted", "sealed", "started", "unit")

    def __init__(self, hosted: HostedActor, unit: RelocationUnit) -> None:
        self.hosted = hosted
        self.unit = unit
        self.sealed: list[ActorRelocationParticipant] = []
        self.started = False
        """Its seal turn was asked for (an abort reopens it)."""
        self.accepted = False


@final
class MemberMoves:
    """The members' half of one SpotWide move (the spots' ``SpotWideMemberMoves``)."""

    def __init__(
        self,
        relocator: ActorRelocator,
        members: Sequence[ActorId],
        to: NodeRid,
        target_generation: NodeGeneration,
        lease: OwnerLeaseGeneration,
    ) -> None:
        """Reserve every member (see ``SpotWideMembers.plan``); nothing is reserved on a
        refusal."""
        me = relocator.node.identity
        host = relocator.host
        chosen: list[_Member] = []
        for actor_id in members:
            hosted = host.get(actor_id)
            if actor_id in relocator.in_flight:
                raise Unavailable(f"member {actor_id.value!r} is moving")
            if hosted is None or hosted.state is not READY or hosted.context.spot is None:
                raise NotFound(f"member {actor_id.value!r} is not hosted (Ready) here")
            refuse_unless_relocatable(
                hosted.actor_type.relocation,
                "actor",
                hosted.actor_type.stable_type,
                to=to,
                me=me.node_rid,
            )
            if hosted.join is not None:
                raise Unavailable(f"member {actor_id.value!r} is joining")
            unit = RelocationUnit(
                relocation_id=OperationId(secrets.randbits(128) or 1),
                actor_id=actor_id,
                object_generation=hosted.generation,
                mesh_name=hosted.mesh_name,
                source_rid=me.node_rid,
                source_generation=me.node_generation,
                source_owner_generation=hosted.owner_generation,
                target_rid=to,
                target_generation=target_generation,
            )
            chosen.append(_Member(hosted, unit))
        for member in chosen:
            relocator.in_flight[member.unit.actor_id] = member.unit.relocation_id
            relocator.commits[member.unit.relocation_id] = trio.Event()
        self._relocator = relocator
        self._members = chosen
        self._lease = lease
        self._done = False

    @property
    def units(self) -> Sequence[tuple[ActorId, OperationId]]:
        return [(m.unit.actor_id, m.unit.relocation_id) for m in self._members]

    async def reach_relay_ready(self, deadline: float) -> None:
        relocator = self._relocator
        for member in self._members:
            policy = member.hosted.actor_type.relocation
            member.started = True
            with trio.move_on_at(deadline):
                member.accepted = await relocator.to_relay_ready(
                    member.hosted, member.unit, policy, member.sealed, deadline
                )
            if not member.accepted:
                raise DeadlineExceeded(
                    f"member {member.unit.actor_id.value!r} did not reach relay-ready in time"
                )

    async def abort(self, error: BaseException) -> None:
        relocator = self._relocator
        kind = error if isinstance(error, ZLinkError) else Unavailable("the move was cancelled")
        with trio.CancelScope(shield=True):
            for member in self._members:
                # Every member that got as far as its seal reopens and its target is told
                # (its attempt there is grouped with the Spot's and waits for it).
                if member.started:
                    await relocator.abort(
                        member.hosted, member.unit, member.sealed, kind, reopen=True
                    )
        self._release()

    async def complete(self, *, draining: bool = False) -> bool:
        results: list[bool] = []
        try:
            async with trio.open_nursery() as nursery:
                for member in self._members:
                    nursery.start_soon(self._complete_one, member, nursery, results, draining)
        finally:
            self._release()
        return len(results) == len(self._members) and all(results)

    async def _complete_one(
        self, member: _Member, nursery: trio.Nursery, results: list[bool], draining: bool
    ) -> None:
        unit = member.unit
        peer = PeerAddress(unit.mesh_name, unit.target_rid)
        try:
            result = await self._relocator.after_accepted(
                member.hosted, unit, peer, member.sealed, self._lease, nursery, draining
            )
        except ZLinkError as exc:
            logger.info("member %r of a SpotWide move: %r", unit.actor_id.value, exc)
            results.append(False)
            return
        results.append(result.committed)

    def _release(self) -> None:
        if self._done:
            return
        self._done = True
        for member in self._members:
            self._relocator.in_flight.pop(member.unit.actor_id, None)
            self._relocator.commits.pop(member.unit.relocation_id, None)
