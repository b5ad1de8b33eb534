"""One set of inbound relocation records (120 prepare, 121 restore, 123 cutover, 124
abort, 125 committed) for every object kind a node moves: a node registers each command
once, and this inbox hands a record to the Actor or the Spot side (docs/relocation.md).

120 names its object kind; 121, 123 and 124 go to the side holding a target attempt of
that RelocationId, 125 to the side whose move of it waits for the commit."""

from __future__ import annotations

from typing import Protocol, final

from ..ids import OperationId
from ..mesh.api import MeshNodeApi, PeerIdentity
from ..wire.commands import Command
from ..wire.enums import ObjectKind
from ..wire.relocation import (
    RelocationAbort,
    RelocationCommitted,
    RelocationCutover,
    RelocationPrepare,
    RelocationRestore,
)

__all__ = [
    "RelocationInbox",
    "RelocationSide",
    "RelocationSourceSide",
    "RelocationTargetSide",
    "relocation_side",
]


class RelocationSide(Protocol):
    """One object kind's relocation source (125) and target (120/121/123/124)."""

    def has_attempt(self, relocation_id: OperationId) -> bool:
        """Whether this side is the target of ``relocation_id`` here."""
        ...

    def awaits_commit(self, relocation_id: OperationId) -> bool:
        """Whether this side moves ``relocation_id`` away from here."""
        ...

    async def on_prepare(self, peer: PeerIdentity, record: RelocationPrepare) -> None: ...

    async def on_restore(self, peer: PeerIdentity, record: RelocationRestore) -> None: ...

    async def on_cutover(self, peer: PeerIdentity, record: RelocationCutover) -> None: ...

    async def on_abort(self, peer: PeerIdentity, record: RelocationAbort) -> None: ...

    async def on_committed(self, peer: PeerIdentity, record: RelocationCommitted) -> None: ...


class RelocationSourceSide(Protocol):
    """The source half of a :class:`RelocationSide` (an object kind's relocator)."""

    def awaits_commit(self, relocation_id: OperationId) -> bool: ...

    async def on_committed(self, peer: PeerIdentity, record: RelocationCommitted) -> None: ...


class RelocationTargetSide(Protocol):
    """The target half of a :class:`RelocationSide` (an object kind's relocation target)."""

    def has_attempt(self, relocation_id: OperationId) -> bool: ...

    async def on_prepare(self, peer: PeerIdentity, record: RelocationPrepare) -> None: ...

    async def on_restore(self, peer: PeerIdentity, record: RelocationRestore) -> None: ...

    async def on_cutover(self, peer: PeerIdentity, record: RelocationCutover) -> None: ...

    async def on_abort(self, peer: PeerIdentity, record: RelocationAbort) -> None: ...


@final
class _SplitSide:
    """A :class:`RelocationSide` made of an object kind's source (125) and target
    (120/121/123/124)."""

    __slots__ = ("_source", "_target")

    def __init__(self, source: RelocationSourceSide, target: RelocationTargetSide) -> None:
        self._source = source
        self._target = target

    def has_attempt(self, relocation_id: OperationId) -> bool:
        return self._target.has_attempt(relocation_id)

    def awaits_commit(self, relocation_id: OperationId) -> bool:
        return self._source.awaits_commit(relocation_id)

    async def on_prepare(self, peer: PeerIdentity, record: RelocationPrepare) -> None:
        await self._target.on_prepare(peer, record)

    async def on_restore(self, peer: PeerIdentity, record: RelocationRestore) -> None:
        await self._target.on_restore(peer, record)

    async def on_cutover(self, peer: PeerIdentity, record: RelocationCutover) -> None:
        await self._target.on_cutover(peer, record)

    async def on_abort(self, peer: PeerIdentity, record: RelocationAbort) -> None:
        await self._target.on_abort(peer, record)

    async def on_committed(self, peer: PeerIdentity, record: RelocationCommitted) -> None:
        await self._source.on_committed(peer, record)


def relocation_side(source: RelocationSourceSide, target: RelocationTargetSide) -> RelocationSide:
    """One object kind's side of the inbox: its relocator's 125 and its target's 120-124."""
    return _SplitSide(source, target)


@final
class RelocationInbox:
    """Registered on the node once (before it serves); the sides are attached as the
    runtimes that own them start (an absent side: its records are answered by the other
    side, which finds no attempt of theirs)."""

    def __init__(self) -> None:
        self.actors: RelocationSide | None = None
        self.spots: RelocationSide | None = None

    def register(self, node: MeshNodeApi) -> None:
        node.on(Command.RELOCATION_PREPARE, self._on_prepare)
        node.on(Command.RELOCATION_RESTORE, self._on_restore)
        node.on(Command.RELOCATION_CUTOVER, self._on_cutover)
        node.on(Command.RELOCATION_ABORT, self._on_abort)
        node.on(Command.RELOCATION_COMMITTED, self._on_committed)

    def _target(self, relocation_id: OperationId) -> RelocationSide | None:
        spots = self.spots
        if spots is not None and spots.has_attempt(relocation_id):
            return spots
        return self.actors if self.actors is not None else spots

    async def _on_prepare(self, peer: PeerIdentity, record: RelocationPrepare) -> None:
        side = self.actors if record.object_kind is ObjectKind.ACTOR else self.spots
        side = side if side is not None else (self.actors or self.spots)
        if side is not None:
            await side.on_prepare(peer, record)

    async def _on_restore(self, peer: PeerIdentity, record: RelocationRestore) -> None:
        side = self._target(record.relocation_id)
        if side is not None:
            await side.on_restore(peer, record)

    async def _on_cutover(self, peer: PeerIdentity, record: RelocationCutover) -> None:
        side = self._target(record.relocation_id)
        if side is not None:
            await side.on_cutover(peer, record)

    async def _on_abort(self, peer: PeerIdentity, record: RelocationAbort) -> None:
        side = self._target(record.relocation_id)
        if side is not None:
            await side.on_abort(peer, record)

    async def _on_committed(self, peer: PeerIdentity, record: RelocationCommitted) -> None:
        for side in (self.spots, self.actors):
            if side is not None and side.awaits_commit(record.relocation_id):
                await side.on_committed(peer, record)
                return
