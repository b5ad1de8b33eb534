"""``RecordingStore``: a Location Store that keeps the history of the mutations made
through it, so a test can check afterwards what the Store saw and when (e.g. that no two
Ready owners of one id ever coexisted, that every turn of a fenced node happened before
its rows were reclaimed).

Wrap the store the nodes of interest use; each mutation (a write method, see
``STORE_WRITE_METHODS``; with ``reads=True`` every read too) that returns or raises
becomes one :class:`StoreCall`, stamped with the Trio time it returned at (an aggregate
``change_owners`` becomes one per row it names, all with that time).
:meth:`RecordingStore.wait_for` waits (event-driven) until the history satisfies a
condition.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Final, TypeVar, final

import attrs
import trio

from ..ids import NodeRid
from ..store.api import (
    Applied,
    AuthorityRow,
    Conflict,
    LocationStore,
    ObjectKey,
    OwnerFence,
)
from .store import STORE_READ_METHODS, STORE_WRITE_METHODS
from .wrapper import StoreWrapper

__all__ = ["RecordingStore", "StoreCall"]

T = TypeVar("T")


@attrs.frozen
class StoreCall:
    """One recorded call (a mutation, or a read with ``reads=True``), as the Store
    answered it."""

    at: float
    """Trio time the call returned (or raised) at: after the Store applied it, if it did."""
    method: str
    key: ObjectKey | None
    """The authority row it targets (None for node, terminal and root methods)."""
    applied: bool | None
    """True: applied (a CAS won, ``remove_node`` removed, a registration or renewal
    made); False: refused (a lost CAS, ``remove_node`` matched nothing); None: it raised
    (its outcome is unknown to the caller). Reads: True when they returned."""
    owner: OwnerFence | None
    """The owner of the row it produced (applied row results), the fence it was given
    (``reclaim``), or the owner of the row last produced through this store for ``key``
    (``release``, ``abort_creation``); None when unknown or not a row."""
    node_rid: NodeRid | None = None
    """The node of a node method (``register_node``, ``renew_lease``, ``remove_node``)."""
    row: AuthorityRow | None = None
    """The row it produced (applied mutations returning a row) or showed (``read``)."""
    error: str | None = None
    """``repr`` of what it raised."""


@final
class RecordingStore(StoreWrapper):
    """A :class:`~zlink_trio.store.api.LocationStore` delegating to ``inner`` that keeps
    every mutation made through it, and every read too with ``reads=True`` (see the
    module docstring)."""

    def __init__(self, inner: LocationStore, *, reads: bool = False) -> None:
        super().__init__(inner)
        self._reads = reads
        self._history: Final[list[StoreCall]] = []
        self._last_owner: dict[ObjectKey, OwnerFence] = {}
        self._changed = trio.Event()

    @property
    def history(self) -> Sequence[StoreCall]:
        """Every recorded call so far, in the order they returned (a copy)."""
        return tuple(self._history)

    def mutations(self, key: ObjectKey) -> tuple[StoreCall, ...]:
        """The recorded calls of ``key``'s authority row so far."""
        return tuple(m for m in self._history if m.key == key)

    async def wait_for(self, condition: Callable[[Sequence[StoreCall]], bool]) -> None:
        """Wait until ``condition(history)`` holds (checked after every recorded call;
        callers bound the wait with their own deadline)."""
        while not condition(self._history):
            await self._changed.wait()
        await trio.lowlevel.checkpoint()

    async def _around(self, method: str, call: Callable[[], Awaitable[T]], *args: object) -> T:
        if method not in STORE_WRITE_METHODS and not (self._reads and method in STORE_READ_METHODS):
            return await call()
        if method == "change_owners":
            return await self._around_rows(call, args)
        key = args[0] if args and isinstance(args[0], ObjectKey) else None
        rid = args[0] if args and isinstance(args[0], NodeRid) else None
        try:
            result = await call()
        except BaseException as exc:
            at = trio.current_time()
            self._add(StoreCall(at, method, key, None, None, rid, None, repr(exc)))
            raise
        applied: bool
        row: AuthorityRow | None = None
        owner: OwnerFence | None = None
        if isinstance(result, Applied):
            applied = True
            if isinstance(result.row, AuthorityRow):
                row = result.row
                owner = row.owner
        elif method not in STORE_WRITE_METHODS:
            applied = True  # a read (of a row: the row it showed)
            if isinstance(result, AuthorityRow):
                row = result
                owner = row.owner
        elif isinstance(result, bool):
            applied = result
        elif isinstance(result, Conflict):
            applied = False
        else:
            applied = True  # a registration, renewal, terminal or root
        if method == "reclaim":
            fence = args[2]
            assert isinstance(fence, OwnerFence)
            owner = fence
        elif key is not None and owner is None:
            owner = self._last_owner.get(key)
        if key is not None and applied and method in STORE_WRITE_METHODS:
            if row is not None:
                self._last_owner[key] = row.owner
            else:
                self._last_owner.pop(key, None)
        self._add(StoreCall(trio.current_time(), method, key, applied, owner, rid, row))
        return result

    async def _around_rows(
        self,
        call: Callable[[], Awaitable[T]],
        args: tuple[object, ...],
    ) -> T:
        """``change_owners``: one :class:`StoreCall` per row it names, all stamped with
        the same time (the rows changed, or did not, in one commit)."""
        changes = args[0]
        assert isinstance(changes, Sequence)
        keys = [key for key, _ in changes]
        try:
            result = await call()
        except BaseException as exc:
            at = trio.current_time()
            for key in keys:
                self._add(StoreCall(at, "change_owners", key, None, None, None, None, repr(exc)))
            raise
        at = trio.current_time()
        if isinstance(result, Applied):
            for row in result.row:
                self._last_owner[row.key] = row.owner
            calls = [
                StoreCall(at, "change_owners", r.key, True, r.owner, None, r) for r in result.row
            ]
        else:
            calls = [
                StoreCall(at, "change_owners", key, False, self._last_owner.get(key))
                for key in keys
            ]
        for recorded in calls:
            self._add(recorded)
        return result

    def _add(self, mutation: StoreCall) -> None:
        self._history.append(mutation)
        changed, self._changed = self._changed, trio.Event()
        changed.set()
