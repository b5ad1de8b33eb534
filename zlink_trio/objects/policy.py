"""Relocation policies: every stable type registration (Actor, User Spot, Instance Spot)
picks one, there is no default (spec 04 §6.1, spec 06 §8). ``actors/policy.py``
re-exports them under the Actor's names; Spot registrations use the same values."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import attrs

__all__ = [
    "ActorRelocationAdapter",
    "DisableRelocation",
    "PreserveStateWith",
    "RecreateOnRelocation",
    "RelocationAdapter",
    "RelocationPolicy",
    "SpotRelocationAdapter",
]

A_contra = TypeVar("A_contra", contravariant=True)


class RelocationAdapter(Protocol[A_contra]):
    """Captures an object's application state as opaque bytes and restores it on the
    target (an Actor's, or a Spot's: ``SpotRelocationAdapter``).

    The framework never interprets the bytes and manages no state-contract id.
    """

    async def capture(self, actor: A_contra) -> bytes: ...

    async def restore(self, actor: A_contra, payload: bytes) -> None: ...


ActorRelocationAdapter = RelocationAdapter
"""The adapter of an Actor type (spec 04 §6.1)."""

SpotRelocationAdapter = RelocationAdapter
"""The adapter of a Spot type (spec 06 §8; a PerActor User Spot takes none)."""


@attrs.frozen
class DisableRelocation:
    """The object never moves between nodes."""


@attrs.frozen
class RecreateOnRelocation:
    """The target re-creates the object with its factory; application state is not
    restored, framework-owned queued work and timers are."""


@attrs.frozen
class PreserveStateWith:
    """The source captures state with ``adapter`` after a normal handler end; the target
    restores it into a freshly built object."""

    adapter: RelocationAdapter[Any]


RelocationPolicy = DisableRelocation | RecreateOnRelocation | PreserveStateWith
