"""How a message call ends whose owner cannot be reached (docs/decisions.md, "Fast
failure and lazy reclaim").

The delivery (:mod:`zlink_trio.routing.deliver`) found the owner its route names
unreachable: no admitted connection and the dial failed (or ``connect_timeout`` passed),
or the owner's lifecycle is GONE. Nothing was sent. This policy looks at the Store once
more and decides how the call ends, for any object kind:

* the row is Missing or Creating → ``NotFound`` (messages never activate an object);
* the call took this node's Message Follow route (the object is moving away from here)
  and the row still names this node's incarnation → ``Unavailable``: the move was
  accepted but has not committed, and its target cannot be reached (docs/decisions.md,
  "Failure after acceptance": nothing goes back to the source; the row is released by
  ``relocation_timeout``, so a later call ends ``NotFound``, never wedged);
* the row names another owner or incarnation now → ``StaleRoute`` (the call is not
  redirected: it is never re-sent to a freshly resolved owner; the next call resolves
  afresh);
* the row still names that owner and the owner's lease is live by store time →
  ``Unavailable`` (a crashed owner whose lease has not run out yet, or a partition);
* the owner's lease expired → the row is reclaimed with ONE fenced CAS
  (:func:`~.owner_loss.reclaim_row`, counted as ``RECLAIMED`` by its winner) and the call
  goes on against the new state: read again, so the id is Missing (``NotFound``) unless
  someone created a new incarnation meanwhile (``StaleRoute``).
"""

from __future__ import annotations

from typing import Final, Generic, final

from ..errors import NotFound, StaleRoute, Unavailable, ZLinkError
from ..observe import FlowEvent, FlowTrace
from ..routing.route_cache import Route
from ..store.api import AuthorityRow, AuthorityState, LocationStore, ObjectKind
from .authority import Authority
from .kind import IdT, noun
from .owner_loss import owner_dead, reclaim_row, resumable

__all__ = ["OwnerUnreachable"]

MAX_ROUNDS: Final = 4
"""Reads of the row at most (a reclaim moves it on, so the next read settles the call)."""


def names_owner(row: AuthorityRow, route: Route) -> bool:
    """Whether ``row`` is still the incarnation and owner lifecycle ``route`` names."""
    owner = row.owner
    return (
        row.object_generation == route.object_generation
        and owner.node_rid == route.node_rid
        and owner.node_generation == route.node_generation
        and owner.lease_generation == route.lease_generation
        and owner.mesh_name == route.mesh_name
    )


@final
class OwnerUnreachable(Generic[IdT]):
    """The :class:`~zlink_trio.routing.deliver.Unreachable` policy of one object kind."""

    __slots__ = ("_authority", "_flow", "_grace", "_noun", "_store")

    def __init__(
        self,
        *,
        store: LocationStore,
        authority: Authority[IdT],
        kind: ObjectKind,
        grace: float,
        flow: FlowTrace,
        name: str | None = None,
    ) -> None:
        self._store = store
        self._authority = authority
        self._noun = noun(kind) if name is None else name
        self._grace = grace
        self._flow = flow

    async def verdict(
        self, key: IdT, route: Route, why: str, moved_from: Route | None = None
    ) -> ZLinkError:
        """The error the call to ``key`` ends with (see the module docstring). Store
        failures propagate (typed ``Unavailable``)."""
        name = f"{self._noun} {self._authority.key(key).object_id!r}"
        store = self._store
        for _ in range(MAX_ROUNDS):
            row = await self._authority.read(key)
            if row is None or row.state is AuthorityState.CREATING:
                return NotFound(f"{name} has no Ready authority")
            if not names_owner(row, route):
                if moved_from is not None and names_owner(row, moved_from):
                    return Unavailable(
                        f"{name} cannot be reached: its move to another node was accepted "
                        f"but has not committed, and the move's target cannot be reached ({why})"
                    )
                self._flow.emit(
                    FlowEvent.STALE_ROUTE_RESULT, "%s: %s; the Store names another owner", name, why
                )
                return StaleRoute(f"{name}: {why}, and the Store names another owner now")
            if not await owner_dead(store, row):
                return Unavailable(f"{name} cannot be reached: {why} (its owner's lease is live)")
            if resumable(row):
                # Its first message did not complete: it is resumed, not reclaimed.
                return Unavailable(
                    f"{name} cannot be reached: {why} (its owner is gone; its cold "
                    "activation is being recovered)"
                )
            if not await reclaim_row(store, row, grace=self._grace, flow=self._flow):
                return Unavailable(f"{name} cannot be reached: {why} (its owner's lease is live)")
            # Reclaimed (here or by someone else), or moved on: go on from the new state.
        return Unavailable(f"{name} cannot be reached: {why}")
