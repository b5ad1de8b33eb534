"""The target side of a SpotWide User Spot's members moving with it (spec 06 §6.1;
docs/relocation.md, "SpotWide Spots"): the Spot relocation target
(:class:`~zlink_trio.spots.relocation_target.SpotRelocationTarget`) owns the aggregate
commit; each member's attempt is the Actor relocation target's own (120, 121 — the hidden
activation, its timers, its session bindings — and the relay, 113/114), GROUPED with the
Spot's attempt at its 120 and never committed alone: it waits until the Spot's attempt
settles it. This is what the Spot's attempt asks of those member attempts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, final

from ..errors import ZLinkError
from ..ids import OperationId
from ..spots.hosted import HostedSpot
from ..store.api import AuthorityState, ObjectKey
from ..wire.enums import RelayReadyResult
from .authority import actor_key
from .relocation_target import RelocationTarget

__all__ = ["SpotWideMembersTarget"]


@final
class SpotWideMembersTarget:
    """The spots' ``SpotWideMembersTarget`` over this node's Actor relocation target."""

    __slots__ = ("_target",)

    def __init__(self, target: RelocationTarget) -> None:
        self._target = target

    def _attempt(self, relocation_id: OperationId) -> Any:
        return self._target.attempts.get(relocation_id)

    def accepted(self, relocation_ids: Sequence[OperationId], source: object) -> str | None:
        why = self._why_not(relocation_ids, source)
        if why is not None:
            # The Spot's restore fails: no member attempt may outlive it and commit alone
            # (an ungrouped one would, by its cutover fallback).
            for relocation_id in relocation_ids:
                attempt = self._attempt(relocation_id)
                if attempt is not None and attempt.held.source == source:
                    attempt.cancel.cancel(reason="its SpotWide Spot's restore failed")
            return why
        for relocation_id in relocation_ids:
            self._attempt(relocation_id).bound.set()
        return None

    def _why_not(self, relocation_ids: Sequence[OperationId], source: object) -> str | None:
        for relocation_id in relocation_ids:
            attempt = self._attempt(relocation_id)
            if attempt is None or attempt.held.source != source:
                return f"no member move {relocation_id.value:x} prepared here"
            if attempt.group is None:
                return f"member {attempt.unit.actor_id.value!r} is not grouped with its Spot"
            answer = attempt.answer
            if answer is None or answer.result is not RelayReadyResult.ACCEPTED:
                return f"member {attempt.unit.actor_id.value!r} was not restored"
        return None

    async def cutovers(self, relocation_ids: Sequence[OperationId]) -> None:
        for relocation_id in relocation_ids:
            attempt = self._attempt(relocation_id)
            if attempt is not None:
                await attempt.cutover.wait()

    async def rows(
        self, relocation_ids: Sequence[OperationId]
    ) -> list[tuple[ObjectKey, int]] | None:
        store = self._target.store
        rows: list[tuple[ObjectKey, int]] = []
        for relocation_id in relocation_ids:
            attempt = self._attempt(relocation_id)
            if attempt is None or attempt.hosted is None:
                return None
            unit = attempt.unit
            key = actor_key(unit.actor_id)
            try:
                row = await store.read(key)
            except ZLinkError:
                return None
            if (
                row is None
                or row.state is not AuthorityState.READY
                or row.object_generation != unit.object_generation
                or row.owner_generation != unit.source_owner_generation
                or row.owner.node_rid != unit.source_rid
                or row.owner.node_generation != unit.source_generation
            ):
                return None
            rows.append((key, row.store_version))
        return rows

    async def committed(self, relocation_ids: Sequence[OperationId], spot: HostedSpot) -> None:
        for relocation_id in relocation_ids:
            attempt = self._attempt(relocation_id)
            if attempt is None:
                continue  # (bound attempts wait for this: not reached)
            attempt.group_committed = True
            try:
                await self._target.publish(attempt, gate=spot.gate, spot=spot.instance)
            finally:
                attempt.settled.set()

    def discard(self, relocation_ids: Sequence[OperationId]) -> None:
        for relocation_id in relocation_ids:
            attempt = self._attempt(relocation_id)
            if attempt is not None and not attempt.group_committed:
                attempt.bound.set()
                attempt.settled.set()  # its attempt ends uncommitted: discarded
