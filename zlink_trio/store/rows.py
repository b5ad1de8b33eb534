"""A changed copy of an :class:`~zlink_trio.store.api.AuthorityRow`, built fast.

``attrs.evolve`` introspects the class's fields on every call; the stores make one changed
row per mutation, so this builds the copy with one plain constructor call instead (the
same row ``attrs.evolve`` would build: AuthorityRow has no validators or converters).
"""

from __future__ import annotations

from typing import Any, Final, final

from .api import AuthorityRow

__all__ = ["evolve_row"]


@final
class _Keep:
    __slots__ = ()


_KEEP: Final[Any] = _Keep()


def evolve_row(
    row: AuthorityRow,
    *,
    state: Any = _KEEP,
    store_version: Any = _KEEP,
    owner_generation: Any = _KEEP,
    owner: Any = _KEEP,
    membership: Any = _KEEP,
    pending_content: Any = _KEEP,
    operation: Any = _KEEP,
    recovery: Any = _KEEP,
    relocation: Any = _KEEP,
    attempt_expires_at: Any = _KEEP,
) -> AuthorityRow:
    """``attrs.evolve(row, **changes)`` for the fields a mutation can change (key, kind,
    stable type and ObjectGeneration never change in place)."""
    return AuthorityRow(
        key=row.key,
        kind=row.kind,
        stable_type=row.stable_type,
        state=row.state if state is _KEEP else state,
        store_version=row.store_version if store_version is _KEEP else store_version,
        object_generation=row.object_generation,
        owner_generation=row.owner_generation if owner_generation is _KEEP else owner_generation,
        owner=row.owner if owner is _KEEP else owner,
        membership=row.membership if membership is _KEEP else membership,
        pending_content=row.pending_content if pending_content is _KEEP else pending_content,
        operation=row.operation if operation is _KEEP else operation,
        recovery=row.recovery if recovery is _KEEP else recovery,
        relocation=row.relocation if relocation is _KEEP else relocation,
        attempt_expires_at=row.attempt_expires_at
        if attempt_expires_at is _KEEP
        else attempt_expires_at,
    )
