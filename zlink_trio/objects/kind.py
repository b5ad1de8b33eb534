"""What a kind adapter supplies to the shared object layer (see the package docstring).

The generic create source and target know reservations, terminals, replay and reclaim;
everything they cannot know about one object kind comes through the two protocols here:

* :class:`SourceKind` — the caller side: the Store key of an id, the membership a
  reservation records, the result values a caller gets, and the wire command that carries
  a create to a remote target (110 for Actors; 47 for User Spots);
* :class:`TargetKind` — the owner side: whether this node can build that type at all, and
  one :class:`Staging` per attempt that builds the object and asks for its approval, then
  publishes it once the Ready commit applied (or drops it).

A create travels between them as a :class:`CreateOrder`, whatever command carried it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Generic, Protocol, TypeVar

import attrs

from ..errors import ZLinkError
from ..ids import SpotId, StableType
from ..store.api import AuthorityRow, NodeDescriptor, ObjectKey, ObjectKind, OperationKey
from ..wire.tails import CreateTail, ReservationFence

__all__ = [
    "Commit",
    "CreateOrder",
    "Decision",
    "IdT",
    "Refuse",
    "SourceKind",
    "Staging",
    "TargetKind",
    "noun",
]

IdT = TypeVar("IdT")
"""The kind's public id type (``ActorId``, ``SpotId``)."""

ResultT_co = TypeVar("ResultT_co", covariant=True)

_NOUNS: Final[Mapping[ObjectKind, str]] = {
    ObjectKind.ACTOR: "actor",
    ObjectKind.USER_SPOT: "user spot",
    ObjectKind.INSTANCE_SPOT: "instance spot",
    ObjectKind.ENTRY_SPOT: "entry spot",
}


def noun(kind: ObjectKind) -> str:
    """How error messages name an object of ``kind`` ("actor", "user spot", ...)."""
    return _NOUNS[kind]


@attrs.frozen(slots=True)
class CreateOrder(Generic[IdT]):
    """One creation attempt as the target runs it, whatever command carried it (a local
    call, 110, 47): the durable operation, the object, and the reservation fence."""

    operation: OperationKey
    object_id: IdT
    key: ObjectKey
    stable_type: StableType
    fence: ReservationFence
    timeout_ms: int


@attrs.frozen(slots=True)
class Commit:
    """The staged object was approved: commit it Ready; ``reply`` goes to the caller."""

    reply: bytes | None = None


@attrs.frozen(slots=True)
class Refuse:
    """The application refused the object: give the reservation back (state REJECTED)."""

    reply: bytes | None = None


Decision = Commit | Refuse


class SourceKind(Protocol[IdT, ResultT_co]):
    """The caller side of one object kind."""

    @property
    def kind(self) -> ObjectKind: ...

    def key(self, object_id: IdT) -> ObjectKey:
        """The Location Store key of ``object_id``."""
        ...

    def membership(self, descriptor: NodeDescriptor) -> SpotId | None:
        """The membership a reservation on ``descriptor``'s node records (an Actor's
        Entry Spot; None for Spots)."""
        ...

    def existing(self, row: AuthorityRow) -> ResultT_co:
        """The result of a GetOrCreate that found ``row`` Ready (no factory ran)."""
        ...

    def outcome(self, tail: CreateTail) -> ResultT_co:
        """The result an OK create terminal's tail names (Created, Existing, Rejected)."""
        ...

    def record(self, order: CreateOrder[IdT]) -> Any:
        """The wire command that carries ``order`` to a remote target (correlation 0)."""
        ...


class Staging(Protocol):
    """One attempt's object on the target, from the factory to publication."""

    async def stage(self, deadline: float) -> Decision:
        """Build the object and ask whether it may exist (one lifecycle turn). Raising a
        ZLinkError or any exception fails the attempt (reservation given back). Called
        inside a cancel scope of the target's that ends at ``deadline``."""
        ...

    def publish(self, committed: AuthorityRow) -> None:
        """The Ready commit applied: make the object reachable."""
        ...

    def end(self) -> None:
        """The attempt is over (published or not): release what staging held."""
        ...


class TargetKind(Protocol[IdT]):
    """The owner side of one object kind."""

    def refuse(self, order: CreateOrder[IdT], row: AuthorityRow) -> ZLinkError | None:
        """Why this node cannot build ``order``'s type at all (None: it can). Checked
        before the creation request is read."""
        ...

    def begin(
        self, order: CreateOrder[IdT], row: AuthorityRow, request: bytes | None
    ) -> Staging | ZLinkError:
        """Start staging the reserved ``row`` with its creation ``request``, or say why
        it cannot start (the attempt fails)."""
        ...
